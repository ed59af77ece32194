#!/usr/bin/env python3
"""The sidecar hop against the library engine, in one run on one fleet (run by bench/hop.sh).

Starts two sidecars (the release binary: TCP and a Unix socket; their busy-polling windows
$BUSY_POLL_US and $BUSY_POLL_AFTER_ANSWER_US µs when set) on the fleet in $REDLEASE__MASTERS,
then for each round:
a loopback round-trip probe (`redis-benchmark -t ping -c 1` against one master), and the
sequential, 16-client parallel and 16x4 contended workloads of `redlease load`, taking turns
between the engine (`--masters`) and the sidecar (`--sidecar`, over TCP and over a Unix
socket). The sidecar's CPU time per acquire+release cycle comes from /proc/PID/stat around
each of its workloads; the masters' CPU time and reads per cycle (also with the engine held to
the sidecar's 16-client throughput), and how much of the time the sidecar's thread ran, waited for a CPU (its schedstat) and was preempted (its involuntary
context switches), around the 16-client workload.
Prints the medians of the rounds as markdown, a placement probe (a
trivial round trip to a sidecar and to a master, from the server's CPU and from the other
one), and the criteria of the hop (sequential p50 gap, 16-client and contended ratios).
"""
import contextlib
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BIN = "target/release/redlease"
ROUNDS = int(os.environ.get("ROUNDS", "3"))
DURATION = os.environ.get("DURATION", "4s")
SEQ_OPS = os.environ.get("SEQ_OPS", "4000")
# Threads of `redlease load`'s runtime (its --worker-threads: 1, or 0 for one per CPU).
LOAD_THREADS = os.environ.get("LOAD_THREADS", "1")
# The sidecars' nice value (e.g. -10: the larger CPU share a container's own CPU request gives a
# sidecar beside its app; needs root). Empty: the same priority as everything else.
SIDECAR_NICE = os.environ.get("SIDECAR_NICE", "")
# One CPU for the load generator and the sidecars (e.g. 0: `taskset -c 0`), the masters left
# where the kernel puts them: the hop without a wake-up across CPUs. Empty: no pinning.
PIN_CPU = os.environ.get("PIN_CPU", "")
PIN = ["taskset", "-c", PIN_CPU] if PIN_CPU else []
# The sidecars' `runtime.busy_poll_us` (e.g. 0: off). Empty: the default (100 µs while a
# request waits on the masters).
BUSY_POLL_US = os.environ.get("BUSY_POLL_US", "")
# The sidecars' `runtime.busy_poll_after_answer_us` (e.g. 0: off). Empty: the default (100 µs
# after an answer, while the app's next request tends to come within it).
BUSY_POLL_AFTER_ANSWER_US = os.environ.get("BUSY_POLL_AFTER_ANSWER_US", "")
REQUEST_WINDOW = "REDLEASE__RUNTIME__BUSY_POLL_US"
AFTER_ANSWER_WINDOW = "REDLEASE__RUNTIME__BUSY_POLL_AFTER_ANSWER_US"
# The busy polling of the placement probe's sidecars and of the CPU-at-rates sidecars.
POLLING = {
    "off": {REQUEST_WINDOW: "0", AFTER_ANSWER_WINDOW: "0"},
    "only while requests wait": {AFTER_ANSWER_WINDOW: "0"},
    "as shipped": {},
}
WARMUP = 20
# The engine in the 16-client workload, held (`--rate`) to the TCP sidecar's throughput.
AT_SIDECAR_RATE = "engine at the sidecar's rate (open loop)"
CLIENTS = 16
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    return sum(cpu_split(pid))


def cpu_split(pid):
    """CPU seconds of `pid` so far: (user, kernel)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def ctx_switches(pid):
    """Context switches of every thread of `pid`: (all, involuntary), the involuntary ones
    being preemptions (the thread was runnable and another took its CPU)."""
    voluntary = involuntary = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    voluntary += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    involuntary += int(line.split()[1])
    return voluntary + involuntary, involuntary


def scheduled_seconds(pid):
    """Time every thread of `pid` spent running and waiting runnable for a CPU
    (`/proc/PID/task/TID/schedstat`), in seconds."""
    running = waiting = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            ran, waited = f.read().split()[:2]
        running += int(ran)
        waiting += int(waited)
    return running / 1e9, waiting / 1e9


def masters_work(pids):
    """CPU seconds, read system calls (`/proc/PID/io` syscr) and kernel CPU seconds of the
    masters, summed."""
    split = [cpu_split(pid) for pid in pids]
    reads = 0
    for pid in pids:
        with open(f"/proc/{pid}/io") as f:
            reads += next(int(line.split()[1]) for line in f if line.startswith("syscr:"))
    return sum(map(sum, split)), reads, sum(kernel for _, kernel in split)


def ping_p50_us(url):
    host, port = re.match(r"redis://([^:/]+):(\d+)", url).groups()
    out = subprocess.run(
        ["redis-benchmark", "-h", host, "-p", port, "-t", "ping", "-c", "1", "-n", "20000",
         "-P", "1", "--precision", "3"],
        capture_output=True, text=True, check=True).stdout
    # "50.000% <= 0.039 milliseconds" (the PING_MBULK block is the second).
    values = re.findall(r"50\.000% <= ([0-9.]+) milliseconds", out)
    return float(values[-1]) * 1000


def round_trip_us(address, message, end, cpu, n=3000):
    """p50 of `n` request/answer round trips on one keep-alive socket (the answer complete once
    it holds `end`), from this process pinned to `cpu`."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        conn = socket.create_connection(address)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            conn.sendall(message)
            answer = conn.recv(65536)
            while end not in answer:
                answer += conn.recv(65536)
            times.append(time.perf_counter_ns() - start)
        conn.close()
    finally:
        os.sched_setaffinity(0, before)
    return statistics.median(times) / 1000


def listener_pid(port):
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    return int(re.search(r"pid=(\d+)", out).group(1))


def placement_probe(masters):
    """A trivial HTTP round trip to a sidecar pinned to CPU 0 (`GET /livez`), and a Redis PING
    to a master pinned there, each from CPU 0 and from CPU 1: what a hop costs with and without
    a wake-up across CPUs on this machine, apart from what the sidecar does per request. The
    sidecar is probed with each busy polling of POLLING."""
    host, master_port = re.match(r"redis://([^:/]+):(\d+)", masters.split(",")[0]).groups()
    master = listener_pid(master_port)
    master_cpus = os.sched_getaffinity(master)
    os.sched_setaffinity(master, {0})
    results = {}
    try:
        ping = ((host, int(master_port)), b"*1\r\n$4\r\nPING\r\n", b"PONG\r\n")
        for cpu in (0, 1):
            results[("ping", cpu)] = round_trip_us(*ping, cpu)
        for polling, settings in POLLING.items():
            with sidecar_on_tcp(["taskset", "-c", "0"], settings) as (_, port):
                http = (("127.0.0.1", port), b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                        b"}")
                for cpu in (0, 1):
                    results[(polling, cpu)] = round_trip_us(*http, cpu)
    finally:
        os.sched_setaffinity(master, master_cpus)
    return results


@contextlib.contextmanager
def sidecar_on_tcp(prefix, settings):
    """A `redlease serve` on a free loopback port, started behind `prefix` (e.g. taskset) with
    the `REDLEASE__*` variables `settings`: its process and port, stopped on leaving."""
    port = free_port()
    env = dict(os.environ, **settings)
    proc = subprocess.Popen([*prefix, BIN, "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        yield proc, port
    finally:
        proc.terminate()
        proc.wait()


def run_load(args):
    """Runs `redlease load ... --json`: its report."""
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


def wait_for_port(port, sock=None):
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            if sock is None or os.path.exists(sock):
                break
        except OSError:
            pass
        time.sleep(0.1)
    time.sleep(0.5)


def load(target, workload, duration=None, warmup=WARMUP, threads=None):
    """Runs `redlease load` on `target` (`--masters …` or `--sidecar …`, and any other options
    of its own): its report, with the load process's CPU per cycle (`load_cpu_us`) and the
    cycles it ran, warm-up included (`cycles`). `duration`, `warmup` and `threads` default to
    the script's settings."""
    args = [*PIN, BIN, "load", *target, "--workload", workload, "--json", "--warmup", str(warmup),
            "--worker-threads", threads or LOAD_THREADS]
    if workload == "sequential":
        args += ["--ops", SEQ_OPS]
    else:
        args += ["--clients", str(CLIENTS), "--duration", duration or DURATION]
    if workload == "contention":
        args += ["--resources", "4", "--hold-ms", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = run_load(args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report["cycles"] = report["ops"] + report["errors"] + warmup * report["clients"]
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report["load_cpu_us"] = used / report["cycles"] * 1e6
    report["load_kernel_us"] = (after.ru_stime - before.ru_stime) / report["cycles"] * 1e6
    return report


def load_on_masters(target, workload, master_pids, **settings):
    """`load`, with the masters' CPU (µs) and reads per cycle around it in its report."""
    before = masters_work(master_pids)
    report = load(target, workload, **settings)
    after = masters_work(master_pids)
    report["masters_cpu_us"] = (after[0] - before[0]) / report["cycles"] * 1e6
    report["masters_reads"] = (after[1] - before[1]) / report["cycles"]
    report["masters_kernel_us"] = (after[2] - before[2]) / report["cycles"] * 1e6
    return report


RATES = [int(r) for r in os.environ.get("RATES", "100,1000,3000").split(",") if r]


def cpu_at_rates(masters):
    """The price of busy polling: a sidecar's CPU at steady open-loop rates (4 clients), with
    each busy polling of POLLING, each on a fresh sidecar."""
    rows = []
    for polling, settings in POLLING.items():
        with sidecar_on_tcp(PIN, settings) as (sidecar, port):
            for rate in RATES:
                before = cpu_seconds(sidecar.pid)
                args = [*PIN, BIN, "load", "--sidecar", f"http://127.0.0.1:{port}", "--workload",
                        "parallel", "--clients", "4", "--rate", str(rate), "--duration",
                        DURATION, "--json", "--warmup", "0"]
                started = time.monotonic()
                report = run_load(args)
                wall = time.monotonic() - started
                used = cpu_seconds(sidecar.pid) - before
                rows.append((rate, polling, used / wall * 100, used / report["ops"] * 1e6))
    return rows


def main():
    masters = os.environ["REDLEASE__MASTERS"]
    port = free_port()
    sock = os.path.join(tempfile.mkdtemp(prefix="redlease-hop."), "api.sock")
    env = dict(os.environ)
    if BUSY_POLL_US:
        env[REQUEST_WINDOW] = BUSY_POLL_US
    if BUSY_POLL_AFTER_ANSWER_US:
        env[AFTER_ANSWER_WINDOW] = BUSY_POLL_AFTER_ANSWER_US
    nice = ["nice", "-n", SIDECAR_NICE] if SIDECAR_NICE else []
    nice = PIN + nice
    sidecars = {
        "sidecar": subprocess.Popen([*nice, BIN, "serve", "--listen", f"127.0.0.1:{port}"],
                                    env=env, stderr=subprocess.DEVNULL),
        "sidecar-unix": subprocess.Popen([*nice, BIN, "serve", "--listen", f"unix:{sock}"],
                                         env=env, stderr=subprocess.DEVNULL),
    }
    targets = {
        "engine": ["--masters", masters],
        "sidecar": ["--sidecar", f"http://127.0.0.1:{port}"],
        "sidecar-unix": ["--sidecar", f"unix:{sock}"],
    }
    master_pids = [listener_pid(re.match(r"redis://[^:/]+:(\d+)", url).group(1))
                   for url in masters.split(",")]
    try:
        wait_for_port(port, sock)
        runs = {}  # (target, workload) -> [report]
        pings = []
        for _ in range(ROUNDS):
            pings.append(ping_p50_us(masters.split(",")[0]))
            for workload in ("sequential", "parallel", "contention"):
                for name, target in targets.items():
                    proc = sidecars.get(name)
                    before = (cpu_seconds(proc.pid), ctx_switches(proc.pid)) if proc else None
                    sched_before = scheduled_seconds(proc.pid) if proc else None
                    started = time.monotonic()
                    report = load_on_masters(target, workload, master_pids)
                    wall = time.monotonic() - started
                    cycles = report["cycles"]
                    if proc:
                        used = cpu_seconds(proc.pid) - before[0]
                        report["sidecar_cpu_us"] = used / cycles * 1e6
                        switches = ctx_switches(proc.pid)
                        report["sidecar_switches"] = (switches[0] - before[1][0]) / cycles
                        report["sidecar_preempted"] = (switches[1] - before[1][1]) / cycles
                        ran, waited = scheduled_seconds(proc.pid)
                        report["sidecar_running"] = (ran - sched_before[0]) / wall * 100
                        report["sidecar_waiting"] = (waited - sched_before[1]) / wall * 100
                    runs.setdefault((name, workload), []).append(report)
                if workload == "parallel":
                    # The engine held to the TCP sidecar's throughput of this round: what the
                    # masters' work per cycle owes to the rate rather than to the sidecar.
                    rate = str(round(runs[("sidecar", "parallel")][-1]["ops_per_s"]))
                    report = load_on_masters([*targets["engine"], "--rate", rate], workload,
                                             master_pids)
                    runs.setdefault((AT_SIDECAR_RATE, workload), []).append(report)
    finally:
        for proc in sidecars.values():
            proc.terminate()
            proc.wait()

    placement = placement_probe(masters) if os.cpu_count() >= 2 else None
    rates = cpu_at_rates(masters)
    med = lambda xs: statistics.median(xs)
    ping = med(pings)
    print(f"Loopback round trip (`redis-benchmark -t ping -c 1`, p50, median of {ROUNDS}): "
          f"{ping:.0f} µs; `redlease load --worker-threads {LOAD_THREADS}`"
          + (f"; sidecars at nice {SIDECAR_NICE}" if SIDECAR_NICE else "")
          + (f"; sidecars' `runtime.busy_poll_us` {BUSY_POLL_US}" if BUSY_POLL_US else "")
          + (f"; sidecars' `runtime.busy_poll_after_answer_us` {BUSY_POLL_AFTER_ANSWER_US}"
             if BUSY_POLL_AFTER_ANSWER_US else "")
          + (f"; load generator and sidecars on CPU {PIN_CPU}" if PIN_CPU else ""))
    print()
    print("| workload | target | ops/s | p50 µs | p99 µs | p99.9 µs | errors "
          "| load process CPU µs/cycle | sidecar CPU µs/cycle "
          "| sidecar context switches/cycle |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (name, workload), reports in runs.items():
        cpu = [r["sidecar_cpu_us"] for r in reports if "sidecar_cpu_us" in r]
        sw = [r["sidecar_switches"] for r in reports if "sidecar_switches" in r]
        sidecar = f"{med(cpu):.0f} | {med(sw):.1f}" if cpu else " | "
        print(f"| {workload} | {name} | {med([r['ops_per_s'] for r in reports]):.0f} "
              f"| {med([r['p50_us'] for r in reports]):.0f} "
              f"| {med([r['p99_us'] for r in reports]):.0f} "
              f"| {med([r['p999_us'] for r in reports]):.0f} "
              f"| {sum(r['errors'] for r in reports)} "
              f"| {med([r['load_cpu_us'] for r in reports]):.0f} | {sidecar} |")
    failed = [(name, workload, r["errors"], r.get("first_error", "?"))
              for (name, workload), reports in runs.items() for r in reports if r["errors"]]
    for name, workload, errors, why in failed:
        print(f"\n{errors} failed cycle(s), {workload} through {name}; the first: {why}")
    print()
    print("The masters' work and the sidecar's one thread under 16 clients (medians; reads are "
          "`/proc/PID/io` syscr of all masters, each a batch of commands; running and waiting "
          "for a CPU from `/proc/PID/task/*/schedstat`, % of the wall time; preempted: its "
          "involuntary context switches):")
    print()
    print("| target | masters' CPU µs/cycle | masters' reads/cycle | sidecar running % "
          "| sidecar waiting for a CPU % | sidecar preempted/cycle |")
    print("|---|---|---|---|---|---|")
    for name in [*targets, AT_SIDECAR_RATE]:
        reports = runs[(name, "parallel")]
        sched = (f"{med([r['sidecar_running'] for r in reports]):.0f} | "
                 f"{med([r['sidecar_waiting'] for r in reports]):.0f} | "
                 f"{med([r['sidecar_preempted'] for r in reports]):.2f}"
                 if name in sidecars else " | | ")
        print(f"| {name} | {med([r['masters_cpu_us'] for r in reports]):.1f} "
              f"| {med([r['masters_reads'] for r in reports]):.2f} | {sched} |")
    print()
    if placement:
        print("Placement probe (p50 of 3000 round trips on one socket, the server on CPU 0):")
        print()
        print("| round trip | from CPU 0 | from CPU 1 |")
        print("|---|---|---|")
        for polling in POLLING:
            print(f"| `GET /livez` to a sidecar, busy polling {polling} "
                  f"| {placement[(polling, 0)]:.1f} | {placement[(polling, 1)]:.1f} |")
        print(f"| Redis `PING` to a master | {placement[('ping', 0)]:.1f} "
              f"| {placement[('ping', 1)]:.1f} |")
        print()
    print("Sidecar CPU at steady rates (`redlease load --workload parallel --clients 4 --rate R`, "
          f"{DURATION} each, one run):")
    print()
    print("| cycles/s | busy polling | sidecar CPU, % of a core | sidecar CPU µs/cycle |")
    print("|---|---|---|---|")
    for rate, polling, share, per_cycle in rates:
        print(f"| {rate} | {polling} | {share:.1f} | {per_cycle:.0f} |")
    print()
    get = lambda name, workload, key: med([r[key] for r in runs[(name, workload)]])
    for name in ("sidecar", "sidecar-unix"):
        gap = get(name, "sequential", "p50_us") - get("engine", "sequential", "p50_us")
        bound = 2 * (ping + 20)
        par = get(name, "parallel", "ops_per_s") / get("engine", "parallel", "ops_per_s")
        tail = get(name, "contention", "p999_us") / get("engine", "contention", "p999_us")
        print(f"- {name}: sequential p50 gap {gap:.0f} µs (bound 2 × (RTT + 20 µs) = {bound:.0f} µs, "
              f"{'met' if gap <= bound else 'NOT met'}); 16-client throughput {par:.2f}× the "
              f"engine's ({'met' if par >= 0.6 else 'NOT met'}: ≥ 0.6×); contended p99.9 "
              f"{tail:.2f}× the engine's ({'met' if tail <= 1.5 else 'NOT met'}: ≤ 1.5×)")


if __name__ == "__main__":
    sys.exit(main())

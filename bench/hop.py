#!/usr/bin/env python3
"""The sidecar hop against the library engine, in one run on one fleet (run by bench/hop.sh).

Starts two sidecars (the release binary: TCP and a Unix socket) on the fleet in
$REDLEASE__MASTERS, then for each round:
a loopback round-trip probe (`redis-benchmark -t ping -c 1` against one master), and the
sequential, 16-client parallel and 16x4 contended workloads of `redlease load`, taking turns
between the engine (`--masters`) and the sidecar (`--sidecar`, over TCP and over a Unix
socket). The sidecar's CPU time per acquire+release cycle comes from /proc/PID/stat around
each of its workloads. Prints the medians of the rounds as markdown and the criteria of the
hop (sequential p50 gap, 16-client and contended ratios).
"""
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
WARMUP = 20
CLIENTS = 16
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def ctx_switches(pid):
    """Voluntary + involuntary context switches of every thread of `pid`."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def ping_p50_us(url):
    host, port = re.match(r"redis://([^:/]+):(\d+)", url).groups()
    out = subprocess.run(
        ["redis-benchmark", "-h", host, "-p", port, "-t", "ping", "-c", "1", "-n", "20000",
         "-P", "1", "--precision", "3"],
        capture_output=True, text=True, check=True).stdout
    # "50.000% <= 0.039 milliseconds" (the PING_MBULK block is the second).
    values = re.findall(r"50\.000% <= ([0-9.]+) milliseconds", out)
    return float(values[-1]) * 1000


def load(target, workload):
    args = [BIN, "load", *target, "--workload", workload, "--json", "--warmup", str(WARMUP),
            "--worker-threads", LOAD_THREADS]
    if workload == "sequential":
        args += ["--ops", SEQ_OPS]
    else:
        args += ["--clients", str(CLIENTS), "--duration", DURATION]
    if workload == "contention":
        args += ["--resources", "4", "--hold-ms", "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    cycles = report["ops"] + report["errors"] + WARMUP * report["clients"]
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report["load_cpu_us"] = used / cycles * 1e6
    return report


def main():
    masters = os.environ["REDLEASE__MASTERS"]
    port = free_port()
    sock = os.path.join(tempfile.mkdtemp(prefix="redlease-hop."), "api.sock")
    env = dict(os.environ)
    sidecars = {
        "sidecar": subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}"], env=env,
                                    stderr=subprocess.DEVNULL),
        "sidecar-unix": subprocess.Popen([BIN, "serve", "--listen", f"unix:{sock}"], env=env,
                                         stderr=subprocess.DEVNULL),
    }
    targets = {
        "engine": ["--masters", masters],
        "sidecar": ["--sidecar", f"http://127.0.0.1:{port}"],
        "sidecar-unix": ["--sidecar", f"unix:{sock}"],
    }
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                if os.path.exists(sock):
                    break
            except OSError:
                pass
            time.sleep(0.1)
        time.sleep(0.5)
        runs = {}  # (target, workload) -> [report]
        pings = []
        for _ in range(ROUNDS):
            pings.append(ping_p50_us(masters.split(",")[0]))
            for workload in ("sequential", "parallel", "contention"):
                for name, target in targets.items():
                    proc = sidecars.get(name)
                    before = (cpu_seconds(proc.pid), ctx_switches(proc.pid)) if proc else None
                    report = load(target, workload)
                    if proc:
                        cycles = report["ops"] + report["errors"] + WARMUP * report["clients"]
                        used = cpu_seconds(proc.pid) - before[0]
                        report["sidecar_cpu_us"] = used / cycles * 1e6
                        report["sidecar_switches"] = (ctx_switches(proc.pid) - before[1]) / cycles
                    runs.setdefault((name, workload), []).append(report)
    finally:
        for proc in sidecars.values():
            proc.terminate()
            proc.wait()

    med = lambda xs: statistics.median(xs)
    ping = med(pings)
    print(f"Loopback round trip (`redis-benchmark -t ping -c 1`, p50, median of {ROUNDS}): "
          f"{ping:.0f} µs; `redlease load --worker-threads {LOAD_THREADS}`")
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

#!/usr/bin/env python3
"""The sidecar's two listeners against each other, in one run on one fleet (run by
bench/transports.sh).

Starts a sidecar on TCP and one on a Unix socket on the fleet in $REDLEASE__MASTERS, then for
each of $ROUNDS rounds (default 5), taking turns with the library engine (each round starting
one target further on), runs `redlease load --workload parallel --clients 16` (a thread per
CPU) twice: held to a steady $RATE cycles/s (default 6000, below what each target reaches:
the rate reached is printed) for $DURATION (default 4s), for the CPU each process spends per
cycle at the same rate, and how much of it in the kernel (the sidecar's from /proc, the load
process's from getrusage, the masters' from /proc), and unbounded for 3 s, for the cycles a
second each target reaches.
Prints the medians and every round's figures.
"""
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hop  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "5"))
RATE = os.environ.get("RATE", "6000")
DURATION = os.environ.get("DURATION", "4s")


def measure(target, sidecar, master_pids, duration, extra=()):
    """One load on `target` for `duration`: its report with the CPU per cycle of the sidecar
    (if any), of the load process and of the masters, and the kernel's part of each."""
    before = hop.cpu_split(sidecar.pid) if sidecar else (0.0, 0.0)
    report = hop.load_on_masters([*target, *extra], "parallel", master_pids,
                                 duration=duration, warmup=0, threads="0")
    after = hop.cpu_split(sidecar.pid) if sidecar else (0.0, 0.0)
    per_cycle = 1e6 / report["cycles"]
    report["cpu_us"] = {
        "sidecar": (sum(after) - sum(before)) * per_cycle,
        "load": report["load_cpu_us"],
        "masters": report["masters_cpu_us"],
    }
    report["kernel_us"] = {
        "sidecar": (after[1] - before[1]) * per_cycle,
        "load": report["load_kernel_us"],
        "masters": report["masters_kernel_us"],
    }
    return report


def main():
    masters = os.environ["REDLEASE__MASTERS"]
    master_pids = [hop.listener_pid(re.match(r"redis://[^:/]+:(\d+)", url).group(1))
                   for url in masters.split(",")]
    port = hop.free_port()
    sock_dir = tempfile.mkdtemp(prefix="redlease-transports.")
    sock = os.path.join(sock_dir, "api.sock")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, sock_dir, ignore_errors=True)
        tcp = subprocess.Popen([hop.BIN, "serve", "--listen", f"127.0.0.1:{port}"],
                               stderr=subprocess.DEVNULL)
        unix = subprocess.Popen([hop.BIN, "serve", "--listen", f"unix:{sock}"],
                                stderr=subprocess.DEVNULL)
        for proc in (tcp, unix):
            stack.callback(proc.wait)
            stack.callback(proc.terminate)
        hop.wait_for_port(port, sock)
        targets = {
            "engine": (["--masters", masters], None),
            "sidecar (TCP)": (["--sidecar", f"http://127.0.0.1:{port}"], tcp),
            "sidecar (Unix socket)": (["--sidecar", f"unix:{sock}"], unix),
        }
        for target, sidecar in targets.values():
            measure(target, sidecar, master_pids, "1s")
        steady = {name: [] for name in targets}
        unbounded = {name: [] for name in targets}
        order = list(targets)
        for round_ in range(ROUNDS):
            turn = order[round_ % len(order):] + order[:round_ % len(order)]
            for name in turn:
                target, sidecar = targets[name]
                steady[name].append(measure(target, sidecar, master_pids, DURATION,
                                            ["--rate", RATE]))
                unbounded[name].append(measure(target, sidecar, master_pids, "3s")["ops_per_s"])
                time.sleep(0.2)
    med = statistics.median
    print(f"16 clients, a thread per CPU, {ROUNDS} rounds taking turns; medians, then each "
          f"round's figures\n")
    print(f"| target | cycles/s, unbounded | cycles/s held to {RATE} | CPU µs per cycle held: "
          f"sidecar | load process | masters | all |")
    print("|---|---|---|---|---|---|---|")
    for name in targets:
        cpu = [report["cpu_us"] for report in steady[name]]
        total = [c["sidecar"] + c["load"] + c["masters"] for c in cpu]
        sidecar = f"{med([c['sidecar'] for c in cpu]):.1f}" if targets[name][1] else ""
        reached = med([report["ops_per_s"] for report in steady[name]])
        print(f"| {name} | {med(unbounded[name]):.0f} | {reached:.0f} | {sidecar} "
              f"| {med([c['load'] for c in cpu]):.1f} | {med([c['masters'] for c in cpu]):.1f} "
              f"| {med(total):.1f} |")
    print()
    print(f"Of which in the kernel (system time), µs per cycle held to {RATE}:")
    print()
    print("| target | sidecar | load process | masters | all |")
    print("|---|---|---|---|---|")
    for name in targets:
        kernel = [report["kernel_us"] for report in steady[name]]
        total = [k["sidecar"] + k["load"] + k["masters"] for k in kernel]
        sidecar = f"{med([k['sidecar'] for k in kernel]):.1f}" if targets[name][1] else ""
        print(f"| {name} | {sidecar} | {med([k['load'] for k in kernel]):.1f} "
              f"| {med([k['masters'] for k in kernel]):.1f} | {med(total):.1f} |")
    print()
    for name in targets:
        cpu = [report["cpu_us"] for report in steady[name]]
        print(f"- {name}: unbounded {[round(x) for x in unbounded[name]]} cycles/s; all CPU "
              f"per cycle at {RATE}/s "
              f"{[round(c['sidecar'] + c['load'] + c['masters']) for c in cpu]} µs")
    engine = med(unbounded["engine"])
    for name in ("sidecar (TCP)", "sidecar (Unix socket)"):
        print(f"- {name}: {med(unbounded[name]) / engine:.2f}× the engine's cycles/s")


if __name__ == "__main__":
    main()

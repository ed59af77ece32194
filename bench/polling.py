#!/usr/bin/env python3
"""Busy polling against latency, in one run on one fleet (run by bench/polling.sh).

Starts one sidecar (TCP) for each busy polling of hop.POLLING (off, only while requests wait,
as shipped) on the fleet in $REDLEASE__MASTERS, then for each of $ROUNDS rounds (default 15)
runs the sequential workload of `redlease load` ($SEQ_OPS acquire+release cycles, default
4000) against the library engine and against each sidecar, taking turns (each round starting
one target further on). Prints, per target,
the median p50 and throughput of the rounds, the sidecar's CPU per cycle (/proc), and what
each sidecar's `sidecar_busy_poll_*_total` counters say of its windows.
"""
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hop  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "15"))


def counters(port):
    """The sidecar's busy-polling counters, as {series: value}."""
    text = subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/metrics"],
                          capture_output=True, text=True, check=True).stdout
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("sidecar_busy_poll_")}


def main():
    masters = os.environ["REDLEASE__MASTERS"]
    runs = {}
    with hop.contextlib.ExitStack() as stack:
        sidecars = {name: stack.enter_context(hop.sidecar_on_tcp(hop.PIN, settings))
                    for name, settings in hop.POLLING.items()}
        targets = {"engine": (None, ["--masters", masters])}
        targets.update({name: (proc, ["--sidecar", f"http://127.0.0.1:{port}"])
                        for name, (proc, port) in sidecars.items()})
        order = list(targets)
        for round_ in range(ROUNDS):
            # Each round starts one target further on, so that no target always runs first.
            shift = round_ % len(order)
            for name in order[shift:] + order[:shift]:
                proc, target = targets[name]
                before = hop.cpu_seconds(proc.pid) if proc else 0
                report = hop.load(target, "sequential")
                cycles = report["cycles"]
                if proc:
                    report["sidecar_cpu_us"] = (hop.cpu_seconds(proc.pid) - before) / cycles * 1e6
                runs.setdefault(name, []).append(report)
        polled = {name: counters(port) for name, (_, port) in sidecars.items()}

    med = statistics.median
    engine_p50 = med([r["p50_us"] for r in runs["engine"]])
    print(f"Sequential acquire+release cycles, {ROUNDS} rounds taking turns (medians):")
    print()
    print("| target | p50 µs | p50 − engine's µs | cycles/s | sidecar CPU µs/cycle |")
    print("|---|---|---|---|---|")
    for name, reports in runs.items():
        p50 = med([r["p50_us"] for r in reports])
        cpu = [r["sidecar_cpu_us"] for r in reports if "sidecar_cpu_us" in r]
        label = name if name == "engine" else f"sidecar, busy polling {name}"
        print(f"| {label} | {p50:.0f} | {p50 - engine_p50:.0f} "
              f"| {med([r['ops_per_s'] for r in reports]):.0f} "
              f"| {f'{med(cpu):.0f}' if cpu else ''} |")
    print()
    for name, series in polled.items():
        shown = ", ".join(f"{key.removeprefix('sidecar_busy_poll_')} {value:g}"
                          for key, value in series.items() if value)
        print(f"- busy polling {name}: {shown or 'no polling counted'}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Per-stage CPU breakdown of a `perf record -g` profile (run by bench/profile.sh).

Reads `perf script` output on stdin. Each sample is given to one stage: walking its stack
from the leaf to the root, the first frame that matches a stage's pattern decides, and a
sample whose leaf is in the kernel is counted under the kernel column of that stage (a
system call, a page fault or the scheduler running on its behalf). Prints, per stage, the
share of samples and µs of CPU per acquire+release cycle (given the process's CPU time per
cycle as the first argument).
"""
import re
import sys
from collections import Counter

# (stage, pattern on the symbol), leafmost match wins; order breaks ties within one frame.
STAGES = [
    ("page faults on fresh memory", r"asm_exc_page_fault"),
    ("allocator (mimalloc)", r"^_?mi_|^mi_|malloc|^free$|__rust_dealloc|__rust_alloc"),
    ("metrics (OpenTelemetry)", r"opentelemetry|redlease_engine::metrics|redlease_sidecar::metrics"),
    ("logs (tracing)", r"^tracing::(?!instrument)|tracing_core|tracing_subscriber"),
    ("JSON (serde_json)", r"serde_json|serde::"),
    ("engine: lock connections (write, read, decode)", r"redlease_engine::fleet::wire|redis_protocol|redlease_engine::resp"),
    ("engine: fan-out, quorum, release follow-up", r"redlease_engine::"),
    ("lease manager (track, release task, watch)", r"redlease_sidecar::lease|redlease_sidecar::batch"),
    ("handlers and guard", r"redlease_sidecar::api|redlease_sidecar::server::connection::ConnService|Guard::admit"),
    ("busy polling (its turns, the CPU offered to other threads)", r"redlease_sidecar::server::busy_poll"),
    ("HTTP server (hyper, the fast lane)", r"hyper::proto|hyper::server|redlease_sidecar::server"),
    ("routing and middleware (axum, tower)", r"^axum|^tower|tower_http|matchit"),
    ("HTTP client (reqwest, hyper client)", r"reqwest|hyper_util::client|hyper::client|redlease_client::|redlease_testkit::http"),
    ("load tester", r"redlease::loadtest|hdrhistogram"),
    ("async runtime (tokio: scheduling, timers, I/O driver, wake-ups)", r"^tokio::|^mio::|futures_util|futures_unordered|epoll_wait|^(do_|__x64_sys_)?futex|^tokio_util"),
]
COMPILED = [(name, re.compile(p)) for name, p in STAGES]


def samples(lines):
    frames = []
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = []
        elif line[0] in " \t":
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                sym, _, dso = parts[1].rpartition(" (")
                frames.append((sym.split("+0x")[0], dso.rstrip(")")))
    if frames:
        yield frames


RUNTIME = STAGES[-1][0]
PAGE_FAULT = re.compile(r"asm_exc_page_fault")
WAITING = re.compile(r"epoll_wait|Parker|park_internal|park_timeout|::park$|futex_wait")


def classify(frames):
    """A user-space sample goes to its leafmost matching frame's stage. A kernel sample goes
    to page faults, to the runtime's waiting (epoll, park), or else to the stage of the code
    that made the system call (the runtime's own I/O plumbing is looked through)."""
    kernel = frames[0][1].startswith("[kernel")
    syms = [sym for sym, _dso in frames]
    if kernel:
        if any(PAGE_FAULT.search(sym) for sym in syms):
            return STAGES[0][0], True
        user = [sym for sym, dso in frames if not dso.startswith("[kernel")]
        if any(WAITING.search(sym) for sym in user[:8]):
            return RUNTIME, True
        syms = user
    for sym in syms:
        for name, pattern in COMPILED:
            if kernel and name == RUNTIME:
                continue
            if pattern.search(sym):
                return name, kernel
    return (RUNTIME if kernel else "other"), kernel


def main():
    cpu_per_cycle = float(sys.argv[1]) if len(sys.argv) > 1 else None
    counts = Counter()
    kernel_counts = Counter()
    total = 0
    for frames in samples(sys.stdin):
        stage, kernel = classify(frames)
        counts[stage] += 1
        kernel_counts[stage] += kernel
        total += 1
    order = [name for name, _ in STAGES] + ["other"]
    print("| stage | share | of which kernel | µs/cycle |")
    print("|---|---|---|---|")
    for name in order:
        if not counts[name]:
            continue
        share = counts[name] / total
        us = f"{share * cpu_per_cycle:.1f}" if cpu_per_cycle else ""
        print(f"| {name} | {share:.1%} | {kernel_counts[name] / counts[name]:.0%} | {us} |")
    print(f"| all ({total} samples) | 100% | {sum(kernel_counts.values()) / total:.0%} "
          f"| {f'{cpu_per_cycle:.1f}' if cpu_per_cycle else ''} |")


if __name__ == "__main__":
    main()

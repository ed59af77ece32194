#!/usr/bin/env bash
# Runs the standard load workloads against 5 local masters, through the library engine and
# through a sidecar over HTTP (plus 10,000 renewed leases on the sidecar, and the fault
# workload on its own local fleet), and writes markdown tables to target/bench-results.md (and stdout).
# The raw-quorum baseline comes from `cargo bench --bench sequential` in the same run.
#   bench/run.sh            # default durations
#   DURATION=5s bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo build --release --locked --quiet
DURATION="${DURATION:-10s}"
export DURATION
out="$(mktemp -d -t redlease-bench.XXXXXX)"
trap 'rm -rf "$out"' EXIT

export RENEWAL_OUT="$out/renewal.json"
MASTERS=5 scripts/fleet.sh bash -c '
  set -euo pipefail
  bin=target/release/redlease
  port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])")
  $bin serve --listen 127.0.0.1:$port 2>/dev/null &
  sidecar=$!
  trap "kill $sidecar 2>/dev/null || true" EXIT
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
  for target in "--masters $REDLEASE__MASTERS" "--sidecar http://127.0.0.1:$port"; do
    $bin load $target --workload sequential --ops 5000 --json
    $bin load $target --workload parallel --clients 16 --duration $DURATION --json
    $bin load $target --workload contention --clients 16 --resources 4 --hold-ms 1 \
      --duration $DURATION --json
  done
  $bin load --sidecar http://127.0.0.1:$port --workload renewal --leases 10000 --ttl-ms 10000 \
    --duration 20s --json > "$RENEWAL_OUT"
' > "$out/load.jsonl"
target/release/redlease load --local-fleet 5 --workload fault --clients 16 --duration 9s --json > "$out/fault.json"
cargo bench --bench sequential 2>/dev/null \
  | grep -E "^(engine|sidecar|raw|p50 ratio|parallel|throughput ratio)" > "$out/baseline.txt"

python3 - "$out/load.jsonl" "$out/baseline.txt" "$out/renewal.json" "$out/fault.json" \
  <<'PY' | tee target/bench-results.md
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
rows += [json.loads(line) for line in open(sys.argv[4]) if line.startswith("{")]
print("| workload | target | clients | ops/s | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs "
      "| errors | retries |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['workload']} | {r['target']} | {r['clients']} | {r['ops_per_s']:.0f} "
          f"| {r['p50_us']} | {r['p90_us']} | {r['p99_us']} | {r['p999_us']} | {r['max_us']} "
          f"| {r['errors']} | {r['contention_retries']} |")
print()
for r in rows:
    if "fault" in r:
        f = r["fault"]
        print(f"Fault run: {f['before_ops_per_s']:.0f} ops/s before; "
              f"master 0 killed at {f['killed_at_s']:.1f} s: "
              f"{f['after_kill']['ops_per_s']:.0f} ops/s, "
              f"lowest 100 ms window {f['after_kill']['min_ops_per_s']:.0f}/s, "
              f"{f['after_kill']['errors']} errors, {f['after_kill']['degraded_s']:.1f} s below 90%; "
              f"restarted at {f['restarted_at_s']:.1f} s: "
              f"{f['after_restart']['ops_per_s']:.0f} ops/s, "
              f"lowest window {f['after_restart']['min_ops_per_s']:.0f}/s, "
              f"{f['after_restart']['errors']} errors, {f['after_restart']['degraded_s']:.1f} s below 90%.")
        print()
renewal = [json.loads(line) for line in open(sys.argv[3]) if line.startswith("{")]
print("| renewal | leases | ttl ms | renewals/s | p50 µs | p99 µs | failures | lost | held at end "
      "| sidecar CPU % of a core | RSS first → max MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in renewal:
    mib = lambda b: b / 1048576
    print(f"| sidecar | {r['leases']} | {r['ttl_ms']} | {r['ops_per_s']:.0f} | {r['p50_us']} "
          f"| {r['p99_us']} | {r['renewal_failures']} | {r['leases_lost']} | {r['held_at_end']} "
          f"| {r['cpu_percent']:.1f} | {mib(r['rss_first_bytes']):.1f} → {mib(r['rss_max_bytes']):.1f} |")
print()
print("Sequential acquire+release and 16-client throughput, same machine (`cargo bench --bench sequential`):")
print()
print("```")
print(open(sys.argv[2]).read().rstrip())
print("```")
PY

#!/usr/bin/env bash
# Two builds of redlease compared on the 16-client workload, taking turns on one fleet of 5
# local masters: each round runs, for each build, a fresh `serve` of that build driven by
# one load generator (the first build's, so the client's cost is the same for both), then
# that build's engine (`load --masters`). Prints each round and the medians: the sidecar's
# cycles/s, the engine's, their ratio, and the sidecar's CPU per cycle (from /proc). On a
# noisy VM, compare builds this way rather than across runs of the other scripts.
#   bench/builds.sh OLD_BINARY NEW_BINARY
#   ROUNDS=8 DURATION=3s RATE=6000 bench/builds.sh old new   # RATE: held, for CPU per cycle
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/two_builds.sh
take_two_builds bench/builds.sh "$@"
export ROUNDS="${ROUNDS:-6}" DURATION="${DURATION:-3s}" RATE="${RATE:-}"
MASTERS=5 scripts/fleet.sh bash -c '
  set -euo pipefail
  args=(--workload parallel --clients 16 --duration "$DURATION" --json)
  [ -n "$RATE" ] && args+=(--rate "$RATE")
  . bench/two_builds.sh
  one() {
    local bin=$1 name=$2 round=$3 port before
    port=$(free_port)
    start_sidecar "$bin" "$port"
    "$OLD" load --sidecar "http://127.0.0.1:$port" --workload parallel --clients 16 --duration 1s >/dev/null
    before=$(cpu_ticks "$SIDECAR")
    "$OLD" load --sidecar "http://127.0.0.1:$port" "${args[@]}" > "$OUT/sidecar-$name-$round.json"
    stop_sidecar "$before" "$name" "$round"
    "$bin" load --masters "$REDLEASE__MASTERS" "${args[@]}" > "$OUT/engine-$name-$round.json"
  }
  take_turns one
'
python3 - "$OUT" "$ROUNDS" "$DURATION" <<'EOF'
import json, statistics, sys
out, rounds, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3].rstrip("s"))
hz = 100  # USER_HZ: /proc's ticks
print("| build | round | sidecar cycles/s | engine cycles/s | ratio | sidecar CPU µs/cycle |")
print("|---|---|---|---|---|---|")
medians = {}
for name in ("old", "new"):
    rows = []
    for r in range(1, rounds + 1):
        sidecar = json.load(open(f"{out}/sidecar-{name}-{r}.json"))["ops_per_s"]
        engine = json.load(open(f"{out}/engine-{name}-{r}.json"))["ops_per_s"]
        ticks = int(open(f"{out}/ticks-{name}-{r}").read())
        cpu = ticks / hz / (sidecar * duration) * 1e6
        rows.append((sidecar, engine, sidecar / engine, cpu))
        print(f"| {name} | {r} | {sidecar:.0f} | {engine:.0f} | {sidecar / engine:.3f} | {cpu:.1f} |")
    medians[name] = [statistics.median(column) for column in zip(*rows)]
for name, (sidecar, engine, ratio, cpu) in medians.items():
    print(f"| {name} | median | {sidecar:.0f} | {engine:.0f} | {ratio:.3f} | {cpu:.1f} |")
EOF

#!/usr/bin/env bash
# Two builds' clients compared on the 16-client workload: their load generators (`redlease
# load --sidecar`, which goes through `redlease-client`) take turns against a fresh sidecar of
# the second build each round, on one fleet of 5 local masters, with a thread per CPU. Prints
# each round and the medians: cycles/s, the client's CPU per cycle (the load process's, from
# its rusage) and the sidecar's (from /proc). On a noisy VM, compare clients this way rather
# than across runs of the other scripts.
#   bench/clients.sh OLD_BINARY NEW_BINARY
#   ROUNDS=8 DURATION=3s WORKLOAD=sequential bench/clients.sh old new
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/two_builds.sh
take_two_builds bench/clients.sh "$@"
export ROUNDS="${ROUNDS:-6}" DURATION="${DURATION:-3s}" WORKLOAD="${WORKLOAD:-parallel}"
MASTERS=5 scripts/fleet.sh bash -c '
  set -euo pipefail
  . bench/two_builds.sh
  one() {
    local bin=$1 name=$2 round=$3 port before
    port=$(free_port)
    start_sidecar "$NEW" "$port"
    "$bin" load --sidecar "http://127.0.0.1:$port" --workload "$WORKLOAD" --clients 16 --duration 1s >/dev/null
    before=$(cpu_ticks "$SIDECAR")
    # The load process run as a child of Python, for its CPU time (rusage).
    python3 -c "import resource, subprocess, sys
subprocess.run(sys.argv[3:], check=True, stdout=open(sys.argv[2], \"w\"))
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], \"w\").write(f\"{r.ru_utime} {r.ru_stime}\")" \
      "$OUT/rusage-$name-$round" "$OUT/load-$name-$round.json" "$bin" load \
      --sidecar "http://127.0.0.1:$port" --workload "$WORKLOAD" --clients 16 \
      --duration "$DURATION" --worker-threads 0 --json
    stop_sidecar "$before" "$name" "$round"
  }
  take_turns one
'
python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
hz = 100  # USER_HZ: /proc's ticks
print("| client | round | cycles/s | p50 µs | client CPU µs/cycle | sidecar CPU µs/cycle |")
print("|---|---|---|---|---|---|")
medians = {}
for name in ("old", "new"):
    rows = []
    for r in range(1, rounds + 1):
        load = json.load(open(f"{out}/load-{name}-{r}.json"))
        user, system = map(float, open(f"{out}/rusage-{name}-{r}").read().split())
        ticks = int(open(f"{out}/ticks-{name}-{r}").read())
        ops = load["ops"]
        row = (load["ops_per_s"], load["p50_us"], (user + system) / ops * 1e6, ticks / hz / ops * 1e6)
        rows.append(row)
        print(f"| {name} | {r} | {row[0]:.0f} | {row[1]} | {row[2]:.1f} | {row[3]:.1f} |")
    medians[name] = [statistics.median(column) for column in zip(*rows)]
for name, (ops, p50, client, sidecar) in medians.items():
    print(f"| {name} | median | {ops:.0f} | {p50:.0f} | {client:.1f} | {sidecar:.1f} |")
EOF

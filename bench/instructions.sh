#!/usr/bin/env bash
# Instructions per sequential acquire+release cycle under callgrind, for each process of the
# hop: the library engine (the load generator on the masters), the sidecar (busy polling off:
# its spins would count) and the client (the load generator on the sidecar). Each count is
# the difference between runs of OPS and 3 × OPS cycles, divided by 2 × OPS, so start-up is
# left out. Unlike time on a shared VM, the counts repeat within about 1% from run to run:
# the yardstick for a change of the code on the request's path. Needs valgrind (Debian's
# package, installed here when missing).
#   bench/instructions.sh
#   OPS=2000 bench/instructions.sh
#   BIN=/tmp/redlease-old bench/instructions.sh   # another build, to compare within one evening
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq >/dev/null
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi
mkdir -p target/instructions
export OUT="$PWD/target/instructions" OPS="${OPS:-1000}" BIN="${BIN:-$PWD/target/release/redlease}"
MASTERS=5 scripts/fleet.sh bash -c '
  set -euo pipefail
  bin=$BIN
  grind() { valgrind --tool=callgrind --callgrind-out-file="$OUT/$1" "${@:2}" >/dev/null 2>&1; }
  total() { grep -m1 "^summary:\|^totals:" "$OUT/$1" | cut -d" " -f2; }
  per_cycle() { echo $(( ($(total "$2") - $(total "$1")) / (2 * OPS) )); }
  for n in $OPS $((3 * OPS)); do
    grind "engine.$n" "$bin" load --masters "$REDLEASE__MASTERS" --workload sequential \
      --ops "$n" --warmup 0 --worker-threads 0
  done
  port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])")
  servers=()
  trap '"'"'kill "${servers[@]}" 2>/dev/null || true'"'"' EXIT
  "$bin" serve --listen "127.0.0.1:$port" 2>/dev/null &
  sidecar=$!
  servers+=("$sidecar")
  for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  for n in $OPS $((3 * OPS)); do
    grind "client.$n" "$bin" load --sidecar "http://127.0.0.1:$port" --workload sequential \
      --ops "$n" --warmup 0 --worker-threads 0
  done
  kill "$sidecar"; wait "$sidecar" 2>/dev/null || true
  for n in $OPS $((3 * OPS)); do
    REDLEASE__RUNTIME__BUSY_POLL_US=0 REDLEASE__RUNTIME__BUSY_POLL_AFTER_ANSWER_US=0 \
      valgrind --tool=callgrind --callgrind-out-file="$OUT/sidecar.$n" \
      "$bin" serve --listen "127.0.0.1:$port" >/dev/null 2>&1 &
    grinding=$!
    servers+=("$grinding")
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
    "$bin" load --sidecar "http://127.0.0.1:$port" --workload sequential --ops "$n" \
      --warmup 0 --worker-threads 0 >/dev/null
    kill -INT "$grinding"; wait "$grinding" || true
  done
  echo "| process | instructions per sequential acquire+release cycle |"
  echo "|---|---|"
  echo "| library engine (load generator on the masters) | $(per_cycle engine.$OPS engine.$((3 * OPS))) |"
  echo "| sidecar (busy polling off) | $(per_cycle sidecar.$OPS sidecar.$((3 * OPS))) |"
  echo "| client (load generator on the sidecar) | $(per_cycle client.$OPS client.$((3 * OPS))) |"
'

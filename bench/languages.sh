#!/usr/bin/env bash
# The sidecar's instructions per cycle (callgrind, busy polling off) when apps in other
# languages drive it: Node's fetch, Python's httpx and requests (the versions pinned in
# scripts/python/requirements.txt), each one keep-alive connection doing acquire and release;
# and requests with a keepalive and a read of the lease in each cycle. Each count is the
# difference between runs of OPS and 3 × OPS cycles, over 2 × OPS, as in
# bench/instructions.sh. Needs valgrind and Node (Debian's packages, installed when missing).
#   bench/languages.sh
#   BIN=/tmp/redlease-old OPS=500 bench/languages.sh
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
if [ ${#missing[@]} -gt 0 ]; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  "${as_root[@]}" apt-get update -qq >/dev/null
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
scripts/python-tools.sh >/dev/null
mkdir -p target/languages
export OUT="$PWD/target/languages" OPS="${OPS:-300}" BIN="${BIN:-$PWD/target/release/redlease}"
export PYTHON="${CARGO_TARGET_DIR:-$PWD/target}/python/bin/python" DRIVERS="$PWD/bench/languages"
MASTERS=5 scripts/fleet.sh bash -c '
  set -euo pipefail
  . bench/two_builds.sh
  total() { grep -m1 "^summary:\|^totals:" "$OUT/$1" | cut -d" " -f2; }
  drive() {
    case $1 in
      node) node "$DRIVERS/cycle.mjs" "$2" "$3" ;;
      *) "$PYTHON" "$DRIVERS/cycle.py" "$1" "$2" "$3" ;;
    esac
  }
  echo "| client | sidecar instructions per cycle |"
  echo "|---|---|"
  for client in node httpx requests requests-keepalive; do
    for n in $OPS $((3 * OPS)); do
      port=$(free_port)
      REDLEASE__RUNTIME__BUSY_POLL_US=0 REDLEASE__RUNTIME__BUSY_POLL_AFTER_ANSWER_US=0 \
        valgrind --tool=callgrind --callgrind-out-file="$OUT/$client.$n" \
        "$BIN" serve --listen "127.0.0.1:$port" >/dev/null 2>&1 &
      grinding=$!
      for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
      drive "$client" "http://127.0.0.1:$port" "$n"
      kill -INT "$grinding"; wait "$grinding" || true
    done
    echo "| $client | $(( ($(total "$client.$((3 * OPS))") - $(total "$client.$OPS")) / (2 * OPS) )) |"
  done
'

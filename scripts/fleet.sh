#!/usr/bin/env bash
# Starts a local fleet of independent masters (redis-server on free loopback ports, in a temp
# dir), points redlease at it through REDLEASE__MASTERS, and runs either the given command or
# a short demo of the `redlease lock` CLI. Every master is stopped on exit.
#
#   scripts/fleet.sh                 # demo: acquire, contend, extend, release
#   scripts/fleet.sh bash            # a shell with REDLEASE__MASTERS set; exit to stop the fleet
#   MASTERS=3 scripts/fleet.sh ...   # another fleet size (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo build --release --locked --quiet
export PATH="$PWD/target/release:$PATH"

n="${MASTERS:-5}"
dir="$(mktemp -d -t redlease-dev.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

urls=()
for i in $(seq 1 "$n"); do
  port="$(free_port)"
  mkdir -p "$dir/m$i"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$dir/m$i" --logfile "$dir/m$i/redis.log" &
  pids+=("$!")
  urls+=("redis://127.0.0.1:$port")
done
for url in "${urls[@]}"; do
  port="${url##*:}"
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
done
REDLEASE__MASTERS="$(IFS=,; echo "${urls[*]}")"
export REDLEASE__MASTERS
echo "fleet of $n masters; for the CLI:" >&2
echo "export REDLEASE__MASTERS=$REDLEASE__MASTERS" >&2

if [ "$#" -gt 0 ]; then
  "$@"
  exit $?
fi

show() { echo "\$ $*" >&2; set +e; "$@"; echo "  (exit $?)" >&2; set -e; }
lease="$(redlease lock acquire nightly-billing --owner demo --ttl-ms 10000)"
echo "\$ redlease lock acquire nightly-billing --owner demo --ttl-ms 10000" >&2
echo "$lease"
id="$(echo "$lease" | python3 -c 'import json, sys; print(json.load(sys.stdin)["lease_id"])')"
show redlease lock acquire nightly-billing --owner someone-else
show redlease lock extend nightly-billing --lease "$id" --ttl-ms 20000
show redlease lock release nightly-billing --lease "$id"
show redlease lock release nightly-billing --lease "$id"

# Sourced by the scripts that compare two builds (bench/builds.sh, bench/clients.sh): takes
# the two binaries named on their command line, exports them as OLD and NEW (absolute paths),
# and OUT, a directory for the rounds' results, removed on exit.
#   take_two_builds "bench/NAME.sh" "$@"
take_two_builds() {
  local script=$1
  shift
  if [ $# -ne 2 ]; then
    echo "usage: $script OLD_BINARY NEW_BINARY" >&2
    exit 64
  fi
  export OLD NEW OUT
  OLD=$(realpath "$1")
  NEW=$(realpath "$2")
  OUT=$(mktemp -d)
  trap 'rm -rf "$OUT"' EXIT
}

# Within the fleet (sourced again by the command `scripts/fleet.sh` runs):

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A process's CPU time so far, in ticks of /proc (USER_HZ).
cpu_ticks() {
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# Starts `BIN serve` on PORT in the background, its pid in SIDECAR, and waits until it is ready.
start_sidecar() {
  "$1" serve --listen "127.0.0.1:$2" 2>/dev/null &
  SIDECAR=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$2/readyz" >/dev/null && break
    sleep 0.05
  done
}

# Stops the sidecar of `start_sidecar` and writes the CPU ticks it spent since BEFORE (from
# `cpu_ticks`) to $OUT/ticks-NAME-ROUND.
stop_sidecar() {
  local after
  after=$(cpu_ticks "$SIDECAR")
  kill "$SIDECAR"
  wait "$SIDECAR" 2>/dev/null || true
  echo "$((after - $1))" > "$OUT/ticks-$2-$3"
}

# Runs `FN BINARY NAME ROUND` for both builds each of ROUNDS rounds, the first build first
# in odd rounds and second in even ones.
take_turns() {
  local round
  for round in $(seq 1 "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
      "$1" "$OLD" old "$round"
      "$1" "$NEW" new "$round"
    else
      "$1" "$NEW" new "$round"
      "$1" "$OLD" old "$round"
    fi
  done
}

#!/usr/bin/env bash
# Where the sidecar's CPU goes: `perf record -g` of a `redlease serve` process (and of the load
# generator) under the sequential and 16-client workloads on 5 local masters, broken into
# stages by bench/stages.py; then allocations and context switches per acquire+release cycle
# (`perf stat` on uprobes of mimalloc's entry points) of the sidecar, of the load generator
# driving it, and of the load generator driving the engine. Needs perf (Debian's linux-perf,
# installed here when missing) and root or perf_event_paranoid <= 1.
#   bench/profile.sh            # profiles in target/profile/
#   BIN=/tmp/redlease-old bench/profile.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v perf >/dev/null 2>&1; then
  as_root=()
  [ "$(id -u)" -eq 0 ] || as_root=(sudo)
  "${as_root[@]}" apt-get install -y -qq --no-install-recommends linux-perf >/dev/null
fi
mkdir -p target/profile
export PROFILE_DIR="$PWD/target/profile" BIN="${BIN:-$PWD/target/release/redlease}"
MASTERS=5 scripts/fleet.sh bash -c '
  set -euo pipefail
  bin=$BIN
  out=$PROFILE_DIR
  port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])")
  $bin serve --listen 127.0.0.1:$port 2>/dev/null &
  sidecar=$!
  trap "kill $sidecar 2>/dev/null || true" EXIT
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:$port/readyz >/dev/null && break; sleep 0.1; done
  $bin load --sidecar http://127.0.0.1:$port --workload parallel --clients 16 --duration 2s >/dev/null
  for wl in sequential parallel; do
    if [ "$wl" = sequential ]; then args="--ops 12000"; else args="--clients 16 --duration 5s"; fi
    $bin load --sidecar http://127.0.0.1:$port --workload $wl $args --json > $out/load-$wl.json &
    load=$!
    sleep 1
    perf record -q -F 1999 -g --call-graph dwarf,16384 -p $sidecar -o $out/sidecar-$wl.data -- sleep 3 2>/dev/null
    wait $load
    perf script -i $out/sidecar-$wl.data 2>/dev/null > $out/sidecar-$wl.txt
    samples=$(grep -c cpu-clock $out/sidecar-$wl.txt)
    cpu=$(python3 -c "import json; r = json.load(open(\"$out/load-$wl.json\")); print($samples / 1999 / 3 / r[\"ops_per_s\"] * 1e6)")
    echo "## sidecar, $wl (CPU per cycle under perf: ${cpu%.*} µs)"
    python3 bench/stages.py "$cpu" < $out/sidecar-$wl.txt
    echo
  done
  probes=""
  for f in mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do
    perf probe -q -x "$bin" --add "hop_$f=$f" 2>/dev/null || true
    probes="$probes,probe_redlease:hop_$f"
  done
  events="${probes#,},context-switches"
  per_cycle() { grep -v "^#" "$1" | grep -v "^$" | awk -F, "{printf \"  %s: %.1f per cycle\\n\", \$3, \$1 / 4000}"; }
  perf stat -x, -e "$events" -p $sidecar -o $out/stat-sidecar.csv &
  stat=$!
  sleep 0.5
  perf stat -x, -e "$events" -o $out/stat-client.csv -- \
    $bin load --sidecar http://127.0.0.1:$port --workload sequential --ops 4000 --warmup 0 >/dev/null
  sleep 0.3
  kill -INT $stat; wait $stat || true
  perf stat -x, -e "$events" -o $out/stat-engine.csv -- \
    $bin load --masters $REDLEASE__MASTERS --workload sequential --ops 4000 --warmup 0 >/dev/null
  for p in sidecar client engine; do echo "$p:"; per_cycle $out/stat-$p.csv; done
  perf probe -q --del "probe_redlease:hop_*" 2>/dev/null || true
'

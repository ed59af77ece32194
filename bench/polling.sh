#!/usr/bin/env bash
# Busy polling against latency: sequential acquire+release cycles through sidecars with
# busy polling off, only while requests wait, and as shipped, against the library engine,
# taking turns for ROUNDS rounds (default 15) on 5 local masters.
#   bench/polling.sh
#   ROUNDS=25 SEQ_OPS=2000 bench/polling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MASTERS=5 scripts/fleet.sh python3 bench/polling.py

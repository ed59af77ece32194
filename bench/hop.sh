#!/usr/bin/env bash
# The sidecar hop against the library engine, in one run on 5 local masters: medians of
# ROUNDS (default 3) rounds of the sequential, 16-client and 16x4 contended workloads,
# alternating targets, a loopback round-trip probe, and the sidecar's CPU per cycle.
#   bench/hop.sh
#   ROUNDS=5 DURATION=5s bench/hop.sh
#   LOAD_THREADS=0 bench/hop.sh   # the load generator on one thread per CPU (default: one)
#   SIDECAR_NICE=-10 bench/hop.sh # the sidecars at nice -10 (a container's own CPU share; root)
#   BUSY_POLL_US=0 BUSY_POLL_AFTER_ANSWER_US=0 bench/hop.sh  # the sidecars' busy polling off
#   BUSY_POLL_AFTER_ANSWER_US=0 bench/hop.sh  # polling only while requests wait on the masters
set -euo pipefail
cd "$(dirname "$0")/.."
MASTERS=5 scripts/fleet.sh python3 bench/hop.py

#!/usr/bin/env bash
# The sidecar over TCP against the sidecar over a Unix socket, and the library engine, with
# 16 clients on 5 local masters, taking turns for ROUNDS rounds (default 5): cycles a second
# unbounded, and each process's CPU per cycle (and the kernel's part of it) held to a steady
# RATE (default 6000 cycles/s, below what each target reaches; the rate reached is printed).
#   bench/transports.sh
#   ROUNDS=8 RATE=4000 bench/transports.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MASTERS=5 scripts/fleet.sh python3 bench/transports.py

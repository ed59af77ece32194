#!/usr/bin/env bash
# The README's run command: installs redis-server if needed, builds redlease, and runs the
# sidecar on a throwaway fleet of local masters (`redlease dev`), printing its URL and a curl
# example. Ctrl-C stops the sidecar and every master. Extra arguments go to `redlease dev`
# (e.g. --count 3, --listen 127.0.0.1:7700).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo build --release --locked --quiet
exec target/release/redlease dev "$@"

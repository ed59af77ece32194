#!/usr/bin/env bash
# Installs what the tests and the dev fleet need (Debian's redis-server) when it is missing.
# Runs apt-get as root, or through sudo when available.
set -euo pipefail

if command -v "${REDIS_SERVER_BIN:-redis-server}" >/dev/null 2>&1; then
  exit 0
fi
echo "installing redis-server with apt-get" >&2
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "redis-server is missing and neither root nor sudo is available" >&2; exit 1; }
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends redis-server >/dev/null
# Debian's package may start a system redis on 6379; the tests never use it (they pick free ports).
command -v redis-server >/dev/null

#!/usr/bin/env bash
# Installs what the tests and the dev fleet need when it is missing: Debian's redis-server
# (the masters, built with TLS), prometheus (promtool checks the /metrics exposition and the
# compose stack's Prometheus config), docker-compose (it parses docker-compose.yml without a
# Docker engine), openssl (the TLS tests make their certificates with it) and, when no python3
# 3.11+ with venv is there, Debian's python3 and python3-venv. Runs apt-get as root, or through
# sudo when available. Then scripts/python-tools.sh: the tests' pinned Python tools
# (schemathesis, openapi-python-client, pytest) in target/python.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v "${REDIS_SERVER_BIN:-redis-server}" >/dev/null 2>&1 || missing+=(redis-server)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
python3 -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 ||
  missing+=(python3 python3-venv)
if [ "${#missing[@]}" -eq 0 ]; then
  exec scripts/python-tools.sh
fi
echo "installing ${missing[*]} with apt-get" >&2
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "${missing[*]} missing and neither root nor sudo is available" >&2
    exit 1
  }
  as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's packages may start a system redis on 6379 and a prometheus on 9090; the tests never
# use them (they pick free ports).
command -v redis-server >/dev/null
exec scripts/python-tools.sh

#!/usr/bin/env bash
# Creates the Python tools' virtual environment the tests use (schemathesis checks the sidecar
# against its OpenAPI document; openapi-python-client generates a Python client from it;
# pytest runs that client's test), with the exact versions and hashes of
# scripts/python/requirements.txt (pip install --require-hashes).
#
# Where: $CARGO_TARGET_DIR/python, by default target/python: under target/ it is never
# committed, and `cargo clean` removes it with the rest of the build. Idempotent: a venv whose
# stamp holds the hash of the requirements and of the interpreter's version is left as it is
# (nothing is downloaded). Needs CPython 3.11 or newer with venv (Debian 12: python3,
# python3-venv; scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=scripts/python/requirements.txt
target=${CARGO_TARGET_DIR:-target}
venv=${REDLEASE_PYTHON_VENV:-$target/python}
python=${PYTHON:-python3}

"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "python-tools: $python is $("$python" --version 2>&1); 3.11 or newer is needed" >&2
  exit 1
}
want="$(sha256sum "$requirements" | cut -d' ' -f1) $("$python" --version 2>&1)"
stamp="$venv/.requirements.sha256"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

echo "python-tools: installing $requirements into $venv" >&2
start=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --require-hashes --only-binary=:all: -r "$requirements"
"$venv/bin/schemathesis" --version >/dev/null
"$venv/bin/openapi-python-client" --version >/dev/null
echo "$want" >"$stamp"
echo "python-tools: done in $(($(date +%s) - start)) s, $(du -sh "$venv" | cut -f1)" >&2

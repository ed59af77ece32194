#!/usr/bin/env bash
# The README's test command: installs what the tests need, then format check, lints, tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
cargo test --locked "$@"

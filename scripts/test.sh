#!/usr/bin/env bash
# The README's test command: installs what the tests need, then format check, lints (the
# engine alone included), tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo test --locked --workspace "$@"

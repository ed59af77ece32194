#!/usr/bin/env bash
# The README's test command: installs what the tests need, then format check, lints, the
# API docs, tests (every crate's, the examples built, the integration binary).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings
# Every library crate's public items documented, every doc link resolved.
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --no-deps
cargo test --locked --workspace "$@"
# Tests whose judgement depends on the masters answering within a millisecond, ignored in the
# parallel run above: alone, one at a time.
cargo test --locked -p redlease --test it -- --ignored --test-threads=1 cli::busy_poll::

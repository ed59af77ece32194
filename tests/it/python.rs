//! The sidecar seen from Python, with the pinned tools of `scripts/python-tools.sh`: a real
//! `redlease serve` with a bearer token on real masters, checked by schemathesis against its
//! own OpenAPI document, and driven by a Python client generated from `docs/openapi.json`.
//! The tools live in the venv `target/python`; without it the tests fail and say to run
//! `scripts/install-deps.sh` (they never skip).

mod client;
mod document;
mod schemathesis;
mod serve;
mod venv;

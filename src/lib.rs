//! redlease: the binary's crate — the command line (`cli`) and the load tester (`loadtest`) —
//! on the workspace's library crates:
//!
//! - `redlease-engine`: Redlock over N independent masters, with fencing tokens (re-exported
//!   here at the root, as the tests and benches name it);
//! - `redlease-sidecar`: the lease table, the HTTP API and its server, the settings, the
//!   Prometheus exporter (`config` and `server` re-exported here);
//! - `redlease-client`: the sidecar's Rust client (re-exported as `client`);
//! - `redlease-dev`: the one `redis-server` launcher and local fleets, for `redlease dev`,
//!   `redlease load --local-fleet`, the tests and the benches.
//!
//! # Layout
//!
//! 1. `cli`: the `redlease` command line (the binary in `main.rs` only calls it).
//! 2. `loadtest` (`redlease load`: workloads, reports, plots) and `shutdown` (the process's
//!    signals: SIGTERM and SIGINT stop it, SIGHUP reads the API token again).
//!
//! The crates below it are layered by the compiler: the engine knows nothing of the sidecar,
//! the client nothing of either, `redlease-dev` nothing of any. The tests' and benches'
//! support (`redlease-testkit`) is a dev-dependency only.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod cli;
pub mod loadtest;
mod shutdown;

pub use redlease_client as client;
pub use redlease_engine::*;
pub use redlease_sidecar::{config, server};

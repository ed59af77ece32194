//! redlease: a Redlock coordinator over N independent Redis masters, with fencing tokens.
//!
//! # Layout
//!
//! - [`keys`]: key and channel names, and validation of resource names and owners.
//! - [`lease_id`]: the 128-bit random lease id and the value stored in the lock key.
//! - [`rtt`]: a pure sliding-window RTT estimator (takes `now`).
//! - [`fleet`]: the N masters, each with its lock connection ([`fleet::wire`]) and a fred
//!   client for its preparation, a per-node timeout, RTT record and a circuit breaker
//!   ([`fleet::health`]).
//! - [`resp`]: RESP2 encoding of lock commands and parsing of their replies, on
//!   `redis-protocol`'s decoder with our own size and depth limits.
//! - [`scripts`]: what each master is sent: the acquisition's plain commands (`SET NX PX` and
//!   `INCR`) and the Lua scripts of `lua/`, loaded with `include_str!` and called with EVALSHA.
//! - [`redlock`]: the engine: acquire, extend and release fanned out to all masters, with the
//!   pure quorum and validity arithmetic in [`redlock::quorum`].
//! - [`fencing`]: fencing-token computation and the raise plan.
//! - [`wakeup`]: blocking acquisition: per-resource FIFO queues woken by release messages
//!   (channels subscribed only while someone waits).
//! - [`ttl`]: the adaptive TTL and the renewal schedule (pure).
//! - [`lease`]: the sidecar's lease table: auto-renewal, app liveness, shadow escalation.
//! - [`api`], [`server`], [`shutdown`]: the HTTP API, the sidecar process, graceful shutdown.
//! - [`config`]: settings from defaults, TOML, `REDLEASE__…` variables and flags.
//! - [`metrics`]: every instrument, exported for Prometheus.
//! - [`loadtest`]: `redlease load`, workloads and reports; [`dev`]: local `redis-server`
//!   processes ([`dev::RedisServer`], which the tests and benches use too) and a local fleet.
//! - [`cli`]: the `redlease` command line (the binary in `main.rs` only calls it).
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease::{AcquireOutcome, EngineOptions, Fleet, FleetOptions, Redlock};
//!
//! async fn close_the_books(masters: &[String]) -> Result<(), redlease::Error> {
//!     let fleet = Fleet::connect(masters, &FleetOptions::default()).await?;
//!     let _probe = fleet.spawn_probe(Duration::from_millis(500)); // RTT, breakers, rejoins
//!     let engine = Redlock::new(fleet, EngineOptions::default());
//!     match engine.acquire("nightly-billing", "worker-7", Duration::from_secs(10)).await? {
//!         AcquireOutcome::Acquired(lease) => {
//!             // act only while lease.is_valid(now); pass lease.fencing_token along
//!             engine.release(&lease.resource, lease.id).await?;
//!         }
//!         AcquireOutcome::Contended(_) => { /* held by someone else */ }
//!         AcquireOutcome::NoQuorum(refusal) => { /* refusal.votes says what each master did */ }
//!     }
//!     engine.settle(Duration::from_secs(2)).await; // before exiting: let in-flight releases finish
//!     Ok(())
//! }
//! ```
//!
//! Expected outcomes ("held by someone else", "no quorum") are values
//! ([`redlock::AcquireOutcome`]); `Err` means bad input or broken infrastructure.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod api;
pub mod cli;
pub mod config;
pub mod dev;
pub mod fencing;
pub mod fleet;
pub mod keys;
pub mod lease;
pub mod lease_id;
pub mod loadtest;
pub mod metrics;
pub mod redlock;
pub mod resp;
pub mod rtt;
pub mod scripts;
pub mod server;
pub mod shutdown;
pub mod ttl;
pub mod wakeup;

pub use fleet::{Fleet, FleetOptions};
pub use lease_id::LeaseId;
pub use redlock::{AcquireOutcome, EngineOptions, ExtendOutcome, Lease, Redlock, ReleaseOutcome};

/// Errors of the library: invalid input or configuration. Infrastructure trouble on single
/// masters is reported per node inside the outcomes, never as an `Err` of the whole call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid resource: {0}")]
    InvalidResource(&'static str),
    #[error("invalid owner: {0}")]
    InvalidOwner(&'static str),
    #[error("invalid ttl: {0}")]
    InvalidTtl(String),
    #[error("invalid lease id: expected 32 lowercase hex digits")]
    InvalidLeaseId,
    #[error("invalid master url {url}: {reason}")]
    InvalidMaster { url: String, reason: String },
    #[error("no masters configured")]
    NoMasters,
    #[error(
        "masters {url} and {other} are one redis server: a quorum must count distinct servers"
    )]
    DuplicateMaster { url: String, other: String },
}

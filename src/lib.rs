//! redlease: a Redlock coordinator over N independent Redis masters, with fencing tokens.
//!
//! The library is the engine: [`Fleet`] (the masters and their connections), [`Redlock`]
//! (acquire, extend, release with quorum, validity and fencing), [`Wakeups`] (release messages
//! for blocking acquisitions), their options, outcomes and [`Error`]. The sidecar, the command
//! line, the load tester, local fleets and the sidecar's Rust client sit behind the Cargo
//! features `sidecar`, `cli`, `loadtest`, `dev` and `client` (all on by default);
//! `default-features = false` builds the engine alone.
//!
//! # Layout
//!
//! Layers from top to bottom; a module imports only from the layers below it.
//!
//! 1. `cli`: the `redlease` command line (the binary in `main.rs` only calls it). Feature `cli`.
//! 2. `loadtest` (`redlease load`: workloads, reports, plots; feature `loadtest`), `server`
//!    (the sidecar process and its HTTP/1.1 server on TCP or a Unix socket: accept loop,
//!    connection cap, deadlines on slow clients; feature `sidecar`) and `shutdown` (the
//!    process's signals: SIGTERM and SIGINT stop it, SIGHUP reads the API token again; feature
//!    `cli`).
//! 3. `api`: the HTTP API, the checks before routing (`api::guard`), the JSON body reader and
//!    its problem+json errors. Feature `sidecar`.
//! 4. `config`: settings from defaults, TOML, `REDLEASE__…` variables and flags, turned into
//!    each component's options. Feature `sidecar`.
//! 5. `lease`: the sidecar's lease table: auto-renewal, the adaptive TTL (`lease::ttl`), app
//!    liveness, shadow escalation, releases until confirmed. Feature `sidecar`.
//! 6. `redlock`: the engine: acquire, extend, shadow and release fanned out to all masters; the
//!    pure quorum and validity arithmetic (`redlock::quorum`), fencing (`redlock::fencing`),
//!    release retries and the one blocking acquire (`redlock::wait`).
//! 7. `wakeup`: per-resource FIFO queues of blocking acquisitions, woken by release messages.
//! 8. `fleet`: the N masters: each with its lock connection (`fleet::wire`), a fred client for
//!    preparation, RTT (`fleet::rtt`), a breaker (`fleet::health`), restart quarantine and
//!    membership; TLS (`fleet::tls`), credentials and the start-up's permission check; the
//!    quorum size.
//! 9. `scripts`: what each master is sent: the acquisition's plain commands and the Lua of `lua/`.
//! 10. Leaves: `resp` (RESP2 encoding and parsing), `metrics` (every instrument), `keys` (key
//!     names, resource and owner validation), `lease_id`, `error`, `sockdiag` (how far a local
//!     connection's peer has read, asked of the kernel; feature `sidecar`); and, beside the
//!     rest, `dev` (the one `redis-server` launcher and local fleets, for `redlease dev`, the
//!     tests and the benches; feature `dev`) and `client` (a Rust client of the sidecar's HTTP
//!     API, which uses nothing of the engine; feature `client`).
//!
//! Items inside modules are `pub` where another module uses them; the crate's API is what this
//! file exports. A unit test (`layers.rs`) holds every module to this order.
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
//! Expected outcomes ("held by someone else", "no quorum") are values ([`AcquireOutcome`]);
//! `Err` means bad input or broken infrastructure.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod error;
mod fleet;
mod keys;
mod lease_id;
mod metrics;
mod redlock;
mod resp;
mod scripts;
mod wakeup;

#[cfg(test)]
mod layers;

#[cfg(feature = "sidecar")]
mod api;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "sidecar")]
pub mod config;
#[cfg(feature = "dev")]
pub mod dev;
#[cfg(feature = "sidecar")]
mod lease;
#[cfg(feature = "loadtest")]
pub mod loadtest;
#[cfg(feature = "sidecar")]
pub mod server;
#[cfg(feature = "cli")]
mod shutdown;
#[cfg(feature = "sidecar")]
mod sockdiag;

pub use error::Error;
pub use fleet::mark::{FleetMark, Membership};
pub use fleet::quarantine::Loss;
pub use fleet::{
    Birth, BirthRule, CallError, Credentials, Exclusion, Fleet, FleetOptions, Password, ProbeGuard,
    TlsOptions, DEFAULT_LONGEST_TTL, DEFAULT_PROBE_PERIOD,
};
pub use keys::Keyspace;
pub use lease_id::LeaseId;
pub use redlock::force::audit::MAX_AUDIT_LIMIT;
pub use redlock::inventory::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
pub use redlock::quorum::{DriftPolicy, NodeTimeoutPolicy};
pub use redlock::{
    AcquireOutcome, AuditRecord, EngineOptions, ExtendOutcome, Extension, ForceOptions,
    ForceRelease, ForceVerdict, ForcedMaster, Holding, Lease, LockPage, LockView, MasterAnswer,
    MasterView, NodeVote, QuorumHolder, Redlock, Refusal, ReleaseOutcome, RemovedHolder, Renewal,
    Shortfall,
};
pub use wakeup::Wakeups;

/// Internal modules, reachable for the crate's own tests and benches (feature `internals`):
/// not a stable API.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::fleet::{wire, Deadline, Node};
    pub use crate::metrics::process;

    pub mod resp {
        pub use crate::resp::*;
    }
    pub mod scripts {
        pub use crate::scripts::*;
    }
}

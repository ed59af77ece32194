//! redlease-engine: Redlock over N independent Redis masters, with fencing tokens.
//!
//! [`Fleet`] (the masters and their connections), [`Redlock`] (acquire, extend, release with
//! quorum, validity and fencing; the inventory and the audited force release), [`Wakeups`]
//! (release and revocation messages for blocking acquisitions and holders), their options,
//! outcomes and [`Error`]. Nothing here knows of HTTP, configuration files or a command line:
//! the sidecar (`redlease-sidecar`) and the binary (`redlease`) are built on this crate.
//!
//! Metrics are recorded through the OpenTelemetry API only (see [`metrics`]): an app that
//! embeds the engine installs its own meter provider with
//! `opentelemetry::global::set_meter_provider` before it connects a fleet, and routes them
//! wherever it likes; without one they are dropped.
//!
//! # Layout
//!
//! Layers from top to bottom; a module uses only the layers below it.
//!
//! 1. `redlock`: acquire, extend, shadow and release fanned out to all masters; the pure
//!    quorum and validity arithmetic (`redlock::quorum`), fencing (`redlock::fencing`),
//!    release retries, the one blocking acquire (`redlock::wait`), the inventory and force
//!    release (`redlock::inventory`, `redlock::force`), counting semaphores
//!    (`redlock::semaphore`) and leader election with its observers (`redlock::election`).
//! 2. `wakeup`: per-resource FIFO queues of blocking acquisitions, woken by release messages,
//!    and the revocations force releases announce.
//! 3. `fleet`: the N masters: each with its lock connection (`fleet::wire`), a fred client for
//!    preparation, RTT (`fleet::rtt`), a breaker (`fleet::health`), restart quarantine and
//!    membership; TLS (`fleet::tls`), credentials and the start-up's permission check.
//! 4. `scripts`: what each master is sent: the acquisition's plain commands and the Lua of
//!    `lua/`.
//! 5. Leaves: `resp` (RESP2 encoding and parsing), `metrics` (the engine's instruments), `keys`
//!    (key names, resource and owner validation), `lease_id`, `error`, `backoff` (the one
//!    doubling backoff, for whatever is retried after a failure), `wall_clock` (instants as
//!    RFC 3339 UTC, for operators).
//!
//! # Example
//!
//! `examples/close_the_books.rs` takes a lock, acts under it and releases it.
//!
//! Expected outcomes ("held by someone else", "no quorum") are values ([`AcquireOutcome`]);
//! `Err` means bad input or broken infrastructure.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(unreachable_pub, missing_docs)]

pub mod backoff;
pub mod error;
pub mod fleet;
pub mod keys;
pub mod lease_id;
pub mod metrics;
pub mod redlock;
pub mod resp;
pub mod scripts;
pub mod wakeup;
pub mod wall_clock;

pub use backoff::Backoff;
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
    ForceRelease, ForceVerdict, ForcedMaster, Holding, Leader, Leadership, Lease, LockPage,
    LockView, MasterAccount, MasterAnswer, MasterView, NodeVote, Observer, ProclaimOutcome,
    QuorumHolder, Redlock, Refusal, Release, ReleaseOutcome, RemovedHolder, Renewal, Shortfall,
};
pub use wakeup::Wakeups;

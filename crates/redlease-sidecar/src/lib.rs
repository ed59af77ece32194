//! redlease-sidecar: leases for apps in any language over HTTP on loopback, taken on the
//! redlease engine (`redlease-engine`): the lease table with auto-renewal and shadow
//! escalation, the HTTP API, its server, the settings, and the Prometheus exporter.
//!
//! # Layout
//!
//! Layers from top to bottom; a module uses only the layers below it (and the engine).
//!
//! 1. `server`: the sidecar process ([`server::Sidecar`]) and its HTTP/1.1 server on TCP or a
//!    Unix socket: accept loop, connection cap, deadlines on slow clients.
//! 2. `api`: the HTTP API, the checks before routing (`api::guard`), the JSON body reader and
//!    its problem+json errors, the event stream, and the API's OpenAPI document
//!    (`api::openapi`, generated from the handlers and the answers' types).
//! 3. `config`: settings from defaults, TOML, `REDLEASE__…` variables and flags, turned into
//!    each component's options.
//! 4. `lease`: the lease table: auto-renewal, the adaptive TTL (`lease::ttl`), app liveness
//!    (`lease::reading`), shadow escalation, revocations, releases until confirmed; and a
//!    lease held by this very process (`lease::holder`, for `lock run` on the masters).
//! 5. `batch`: the renewals that fall due together, one script call per master.
//! 6. Leaves: `metrics` (the exporter and the sidecar's instruments), `process` (CPU and
//!    memory from `/proc`), `sockdiag` (how far a local connection's peer has read, asked of
//!    the kernel).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(unreachable_pub, missing_docs)]

mod api;
mod batch;
pub mod config;
mod lease;
pub mod metrics;
pub mod process;
pub mod server;
mod sockdiag;

// The engine's modules and items, under the paths this crate's files name them by.
use redlease_engine::{fleet, keys, redlock, wakeup};
use redlease_engine::{AuditRecord, ForceOptions, ForceRelease, ForceVerdict, LockPage, LockView};
use redlease_engine::{Credentials, Error, Fleet, FleetOptions, LeaseId, Password, Redlock};
use redlease_engine::{EngineOptions, TlsOptions};
use redlease_engine::{MasterAnswer, MasterView};

pub use api::auth::ApiToken;
pub use api::inventory::{audit_json, force_release_json, lock_json, page_json};
pub use api::inventory::{AuditJson, ForceReleaseJson, LockJson, PageJson};
pub use api::openapi::{document as openapi_document, openapi_json};
pub use api::scrape::MetricsToken;
pub use api::ApiOptions;
pub use lease::holder::{Following, LetGo};
pub use lease::state::{LeaseEvent, LeaseState, LeaseView};
pub use lease::ttl::{RenewalSchedule, TtlPolicy};
pub use lease::{AcquireKind, AcquireRequest, Acquired, LeaseManager, LeasePolicy};
pub use lease::{HoldRelease, Reentry, Revocations, NEVER_IDLE};

//! The sidecar's HTTP/JSON API (v1) on loopback:
//!
//! - `POST /v1/locks/{resource}/acquire`, `GET /v1/leases/{id}`, `POST /v1/leases/{id}/renew`,
//!   `POST /v1/leases/{id}/keepalive`, `POST /v1/leases/{id}/reenter` (see [`reentry`]),
//!   `DELETE /v1/leases/{id}` (a lease, or one re-entry hold by its id),
//!   `GET /v1/leases/{id}/events` (Server-Sent Events)
//! - `POST /v1/elections/{resource}/campaign`, `POST /v1/leases/{id}/proclaim`,
//!   `GET /v1/elections/{resource}`, `GET /v1/elections/{resource}/observe` (Server-Sent
//!   Events): leader election (see [`elections`])
//! - `GET /v1/locks/{resource}`, `GET /v1/locks?prefix=&limit=&after=`,
//!   `POST /v1/locks/{resource}/force-release` (the inventory, see [`inventory`])
//! - `GET /v1/fleet`, `GET /livez`, `GET /readyz`, `GET /metrics` (Prometheus text)
//! - `GET /v1/openapi.json`: the OpenAPI 3.1 document of all of these ([`openapi`])
//!
//! The metrics listener (`metrics.listen`) serves only `GET /metrics`, on the same state,
//! behind its own token ([`scrape`]).
//!
//! Errors are `application/problem+json` with a stable `reason` (see [`error`]). Before the
//! router, the server puts every request through the [`guard`] (head and target size, `Host`,
//! encodings, a declared body length over 64 KiB, the bearer token of [`auth`]), limits its
//! body to 64 KiB as it is read, and gives every request but an event stream its timeout
//! (408): checks made once per request there rather than as the router's layers, which box
//! and clone a service per request. JSON bodies are read by [`body`] (in time). Event
//! streams are capped, and so are blocking acquisitions (`http.max_waiters`: their refusal
//! closes the connection).

mod answers;
pub(crate) mod auth;
mod body;
mod elections;
pub(crate) mod error;
pub(crate) mod events;
pub(crate) mod guard;
mod handlers;
mod hot;
pub(crate) mod inventory;
pub(crate) mod openapi;
mod reentry;
mod requests;
mod rwlocks;
pub(crate) mod scrape;
mod semaphores;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{delete, get, post};
use axum::Router;
use tokio::sync::Semaphore;

use crate::config::HttpSettings;
use crate::fleet::Fleet;
use crate::lease::LeaseManager;
use crate::redlock::Redlock;

pub(crate) use hot::{answer_read, hot_route_of, segment_between, Api, HotRequest};

/// Largest request body accepted.
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024;
/// Request timeout beyond the longest blocking wait a caller may ask for.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// How the API treats its clients, from the `http.*` settings and the listener.
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// Names a `Host` may carry besides IP literals and `localhost`; `None`: no `Host` check.
    pub allowed_hosts: Option<Arc<[String]>>,
    /// Event streams open at once.
    pub max_event_streams: usize,
    /// Blocking acquisitions in progress at once.
    pub max_waiters: usize,
    /// Time a request body has to arrive once its head was read.
    pub body_timeout: Duration,
}

impl ApiOptions {
    /// The options of a listener: TCP checks `Host`, a Unix socket does not.
    pub fn new(http: &HttpSettings, unix: bool) -> Self {
        Self {
            allowed_hosts: (!unix).then(|| http.allowed_hosts.clone().into()),
            max_event_streams: http.max_event_streams,
            max_waiters: http.max_waiters,
            body_timeout: http.header_read_timeout,
        }
    }
}

/// What every handler reaches. One `Arc`: axum clones the state for every request.
#[derive(Clone)]
pub(crate) struct AppState(Arc<SharedState>);

/// The state's parts.
pub(crate) struct SharedState {
    /// The leases this sidecar holds.
    pub manager: Arc<LeaseManager>,
    /// The engine, for the inventory and force releases.
    pub engine: Arc<Redlock>,
    /// The masters, for `/v1/fleet` and `/readyz`.
    pub fleet: Arc<Fleet>,
    /// Permits of open event streams (`http.max_event_streams`).
    pub streams: Arc<Semaphore>,
    /// Permits of blocking acquisitions in progress (`http.max_waiters`).
    pub waiters: Arc<Semaphore>,
    /// `http.max_waiters`.
    pub max_waiters: usize,
    /// Time a request body has to arrive.
    pub body_timeout: Duration,
}

/// How long a request other than an event stream may take: the longest blocking wait a
/// caller may ask for, and a margin.
pub(crate) fn request_timeout(manager: &LeaseManager) -> Duration {
    manager.policy().max_wait.saturating_add(TIMEOUT_MARGIN)
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

impl AppState {
    /// The state of the API's handlers (shared by the metrics listener's).
    pub(crate) fn new(
        manager: Arc<LeaseManager>,
        engine: Arc<Redlock>,
        options: ApiOptions,
    ) -> Self {
        let fleet = Arc::clone(engine.fleet());
        Self(Arc::new(SharedState {
            manager,
            engine,
            fleet,
            streams: Arc::new(Semaphore::new(options.max_event_streams)),
            waiters: Arc::new(Semaphore::new(options.max_waiters)),
            max_waiters: options.max_waiters,
            body_timeout: options.body_timeout,
        }))
    }
}

/// The API router; the server puts requests through [`guard::Guard`] first.
pub(crate) fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/locks/{resource}/acquire", post(handlers::acquire))
        .route(
            "/v1/semaphores/{resource}/acquire",
            post(semaphores::acquire),
        )
        .route("/v1/semaphores/{resource}", get(inventory::show_semaphore))
        .route("/v1/rwlocks/{resource}/acquire", post(rwlocks::acquire))
        .route("/v1/leases/{id}/downgrade", post(rwlocks::downgrade))
        .route(
            "/v1/elections/{resource}/campaign",
            post(elections::campaign),
        )
        .route("/v1/elections/{resource}", get(elections::show))
        .route("/v1/elections/{resource}/observe", get(elections::observe))
        .route("/v1/locks", get(inventory::list))
        .route("/v1/locks/{resource}", get(inventory::show))
        .route(
            "/v1/locks/{resource}/force-release",
            post(inventory::force_release),
        )
        .route("/v1/leases/{id}", get(handlers::get_lease))
        .route("/v1/leases/{id}", delete(handlers::release))
        .route("/v1/leases/{id}/renew", post(handlers::renew))
        .route("/v1/leases/{id}/keepalive", post(handlers::keepalive))
        .route("/v1/leases/{id}/reenter", post(reentry::reenter))
        .route("/v1/leases/{id}/proclaim", post(elections::proclaim))
        .route("/v1/fleet", get(handlers::fleet))
        .route("/livez", get(handlers::livez))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .route("/v1/leases/{id}/events", get(events::events))
        .route("/v1/openapi.json", get(openapi::openapi))
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .fallback(handlers::not_found)
        .with_state(state)
}

//! The sidecar's HTTP/JSON API (v1) on loopback:
//!
//! - `POST /v1/locks/{resource}/acquire`, `GET /v1/leases/{id}`, `POST /v1/leases/{id}/renew`,
//!   `POST /v1/leases/{id}/keepalive`, `DELETE /v1/leases/{id}`,
//!   `GET /v1/leases/{id}/events` (Server-Sent Events)
//! - `GET /v1/locks/{resource}`, `GET /v1/locks?prefix=&limit=&after=`,
//!   `POST /v1/locks/{resource}/force-release` (the inventory, see [`inventory`])
//! - `GET /v1/fleet`, `GET /livez`, `GET /readyz`, `GET /metrics` (Prometheus text)
//!
//! Errors are `application/problem+json` with a stable `reason` (see [`error`]). Bodies over
//! 64 KiB are refused. Every route but the event stream has a request timeout.

pub mod auth;
pub mod error;
mod handlers;
pub mod inventory;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;
use tower_http::timeout::TimeoutLayer;

use self::auth::ApiToken;
use crate::fleet::Fleet;
use crate::lease::LeaseManager;
use crate::redlock::Redlock;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Request timeout beyond the longest blocking wait a caller may ask for.
const TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// What every handler reaches.
#[derive(Clone)]
pub struct AppState {
    /// The leases this sidecar holds.
    pub manager: Arc<LeaseManager>,
    /// The engine, for the inventory and force releases.
    pub engine: Arc<Redlock>,
    /// The masters, for `/v1/fleet` and `/readyz`.
    pub fleet: Arc<Fleet>,
}

/// The API router (tests call it directly or serve it on port 0).
pub fn app(manager: Arc<LeaseManager>, engine: Arc<Redlock>, token: Arc<ApiToken>) -> Router {
    let timeout = manager.policy().max_wait + TIMEOUT_MARGIN;
    let fleet = Arc::clone(engine.fleet());
    let state = AppState {
        manager,
        engine,
        fleet,
    };
    let bounded = Router::new()
        .route("/v1/locks/{resource}/acquire", post(handlers::acquire))
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
        .route("/v1/fleet", get(handlers::fleet))
        .route("/livez", get(handlers::livez))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ));
    let streams = Router::new().route("/v1/leases/{id}/events", get(handlers::events));
    bounded
        .merge(streams)
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn_with_state(
            token,
            auth::require_token,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

//! One function per route: parse and check the request, call the lease manager, shape the
//! answer. No lock logic lives here.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::Stream;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::error::{problem, problem_body, ApiError};
use super::AppState;
use crate::keys::validate_resource;
use crate::lease::{AcquireRequest, Acquired, LeaseEvent, LeaseState, RenewError, Watch};
use crate::LeaseId;

/// Body of `POST /v1/locks/{resource}/acquire`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireBody {
    owner: Option<String>,
    ttl_ms: Option<u64>,
    wait_ms: Option<u64>,
    auto_renew: Option<bool>,
    idle_timeout_ms: Option<u64>,
}

/// Body of `POST /v1/leases/{id}/renew` (may be empty).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    ttl_ms: Option<u64>,
}

pub async fn acquire(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<Json<AcquireBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Path(resource) =
        resource.map_err(|e| ApiError::bad_request("invalid_resource", e.body_text()))?;
    validate_resource(&resource)?;
    let Json(body) = body.map_err(body_error)?;
    let request = acquire_request(&state, resource, body)?;
    Ok(match state.manager.acquire(request).await? {
        Acquired::Granted(view) => Json(view).into_response(),
        Acquired::Held => refused(
            StatusCode::CONFLICT,
            "held",
            "the lock is held by another lease",
        ),
        Acquired::NoQuorum => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_quorum",
            "too few masters answered to grant the lock",
        ),
        Acquired::Closing => refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the sidecar is shutting down",
        ),
    })
}

pub async fn get_lease(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let view = state
        .manager
        .get(lease_id(id)?)
        .ok_or_else(ApiError::unknown_lease)?;
    Ok(Json(view).into_response())
}

pub async fn renew(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let body: RenewBody = optional_json(&body)?;
    let ttl = body.ttl_ms.map(Duration::from_millis);
    match state.manager.renew(id, ttl).await {
        Ok(view) => Ok(Json(view).into_response()),
        Err(error) => Err(renew_error(error)),
    }
}

pub async fn keepalive(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    match state.manager.keepalive(lease_id(id)?) {
        Ok(view) => Ok(Json(view).into_response()),
        Err(error) => Err(renew_error(error)),
    }
}

/// `released: true` exactly once per lease, to the request that saw a quorum of masters
/// confirm the release; 503 `no_quorum` (state `releasing`) while too few answered: the
/// release keeps trying in the background.
pub async fn release(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let answer = state.manager.release(id, "released").await;
    let answer = answer.ok_or_else(ApiError::unknown_lease)?;
    if answer.view.state == LeaseState::Releasing {
        let detail = "too few masters confirmed the release; it keeps trying";
        return Ok(problem_with(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_quorum",
            detail,
            json!({"released": false, "state": answer.view.state}),
        ));
    }
    let body = json!({"released": answer.released, "state": answer.view.state});
    Ok(Json(body).into_response())
}

fn renew_error(error: RenewError) -> ApiError {
    match error {
        RenewError::Unknown => ApiError::unknown_lease(),
        RenewError::Gone(view) => {
            let detail = format!("the lease is {:?}", view.state).to_lowercase();
            ApiError::new(StatusCode::GONE, "lease_lost", detail)
        }
        RenewError::NoQuorum => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_quorum",
            "too few masters answered the renewal; it is retried automatically",
        ),
        RenewError::Invalid(error) => error.into(),
    }
}

/// Server-Sent Events of one lease; ends after `lost` or `released`.
pub async fn events(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let watch = state
        .manager
        .watch(lease_id(id)?)
        .ok_or_else(ApiError::unknown_lease)?;
    Ok(Sse::new(event_stream(watch)).keep_alive(KeepAlive::default()))
}

pub async fn fleet(State(state): State<AppState>) -> Json<serde_json::Value> {
    let fleet = &state.fleet;
    let now = Instant::now();
    let micros = |d: Option<Duration>| d.map(|d| d.as_micros() as u64);
    let masters: Vec<_> = fleet
        .nodes()
        .iter()
        .map(|node| {
            json!({
                "url": node.url(),
                "up": node.is_up(),
                "quarantined": node.is_quarantined(now),
                "rtt_p50_us": micros(node.rtt_quantile(0.5, now)),
                "rtt_p99_us": micros(node.rtt_quantile(0.99, now)),
            })
        })
        .collect();
    let adaptive_ttl_ms = state.manager.adaptive_ttl().as_millis() as u64;
    Json(json!({"masters": masters, "quorum": fleet.quorum(), "adaptive_ttl_ms": adaptive_ttl_ms}))
}

/// Prometheus text exposition of every metric (see `crate::metrics`).
pub async fn metrics(State(state): State<AppState>) -> Response {
    state.manager.record_gauges();
    let content_type = [(
        header::CONTENT_TYPE,
        "text/plain; version=0.0.4; charset=utf-8",
    )];
    (content_type, crate::metrics::render()).into_response()
}

pub async fn livez() -> Json<serde_json::Value> {
    Json(json!({"live": true}))
}

/// 200 only while a quorum of masters takes lock writes.
pub async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    let fleet = &state.fleet;
    let up = fleet.nodes().iter().filter(|n| n.is_up()).count();
    if up < fleet.quorum() {
        let detail = format!(
            "{up} of {} masters up; {} needed",
            fleet.len(),
            fleet.quorum()
        );
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_quorum",
            detail,
        ));
    }
    Ok(Json(json!({"ready": true, "masters_up": up})).into_response())
}

pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

fn acquire_request(
    state: &AppState,
    resource: String,
    body: AcquireBody,
) -> Result<AcquireRequest, ApiError> {
    let owner = body
        .owner
        .ok_or_else(|| ApiError::bad_request("invalid_owner", "owner is required"))?;
    let max_wait = state.manager.policy().max_wait;
    let wait = Duration::from_millis(body.wait_ms.unwrap_or(0));
    if wait > max_wait {
        let detail = format!("wait_ms must be at most {}", max_wait.as_millis());
        return Err(ApiError::bad_request("invalid_wait", detail));
    }
    let max_idle = state.manager.policy().max_idle_timeout;
    let idle = body.idle_timeout_ms.map(Duration::from_millis);
    if idle.is_some_and(|idle| idle.is_zero() || idle > max_idle) {
        let detail = format!(
            "idle_timeout_ms must be between 1 and {}",
            max_idle.as_millis()
        );
        return Err(ApiError::bad_request("invalid_idle_timeout", detail));
    }
    Ok(AcquireRequest {
        resource,
        owner,
        ttl: body.ttl_ms.map(Duration::from_millis),
        wait,
        auto_renew: body.auto_renew.unwrap_or(true),
        idle_timeout: idle,
    })
}

fn lease_id(id: Result<Path<String>, PathRejection>) -> Result<LeaseId, ApiError> {
    let Path(id) = id.map_err(|_| ApiError::unknown_lease())?;
    id.parse().map_err(|_| ApiError::unknown_lease())
}

fn optional_json<T: Default + serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request("invalid_body", e.to_string()))
}

pub(super) fn body_error(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let reason = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "body_too_large"
    } else {
        "invalid_body"
    };
    ApiError::new(status, reason, rejection.body_text())
}

/// 409/503 of an acquisition: problem+json that also says `acquired: false`.
fn refused(status: StatusCode, reason: &'static str, detail: &str) -> Response {
    problem_with(status, reason, detail, json!({"acquired": false}))
}

/// A problem+json answer with the fields of `extra` (an object) added.
fn problem_with(
    status: StatusCode,
    reason: &'static str,
    detail: &str,
    extra: serde_json::Value,
) -> Response {
    let mut body = problem_body(status, reason, detail);
    if let (Some(body), serde_json::Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    problem(status, body)
}

/// The lease's events as SSE; a lease that already ended gives its last state and closes.
fn event_stream(watch: Watch) -> impl Stream<Item = Result<Event, Infallible>> {
    let Watch {
        view,
        events,
        guard,
    } = watch;
    let ended = view.state.is_terminal().then(|| LeaseEvent {
        event: if view.state == LeaseState::Lost {
            "lost"
        } else {
            "released"
        },
        lease: view,
    });
    futures_util::stream::unfold(
        (events, guard, ended, false),
        |(mut events, guard, ended, done)| async move {
            if done {
                return None;
            }
            if let Some(event) = ended {
                return Some((Ok(sse(&event)), (events, guard, None, true)));
            }
            loop {
                match events.recv().await {
                    Ok(event) => {
                        let last = event.lease.state.is_terminal();
                        return Some((Ok(sse(&event)), (events, guard, None, last)));
                    }
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                }
            }
        },
    )
}

fn sse(event: &LeaseEvent) -> Event {
    let data = serde_json::to_string(&event.lease).unwrap_or_default();
    Event::default().event(event.event).data(data)
}

//! One function per route: parse and check the request, call the lease manager, shape the
//! answer. No lock logic lives here.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::answers::{
    lease_answer, AcquireRefusal, FleetAnswer, FleetMaster, Json, Live, Ready, ReleaseRefusal,
    Released,
};
use super::body::{JsonBody, OptionalJsonBody};
use super::error::{problem_with, ApiError};
use super::reentry;
use super::requests::{AcquireBody, LeaseIdParam, LeaseOrHoldIdParam, RenewBody};
use super::AppState;
use crate::fleet::Exclusion;
use crate::keys::validate_resource;
use crate::lease::reentry::MAX_HOLDS;
use crate::lease::{AcquireKind, AcquireRequest, Acquired, LeaseState, LeaseView, RenewError};
use crate::metrics::METRICS;
use crate::LeaseId;

/// `Retry-After` (seconds) of a blocking acquisition refused over `http.max_waiters`.
const RETRY_WAITERS: &str = "1";

/// Acquire a lock: a lease on the resource, granted by a quorum of masters.
#[utoipa::path(
    post,
    path = "/v1/locks/{resource}/acquire",
    operation_id = "acquireLock",
    tag = "leases",
    params(("resource" = String, Path,
        description = "1–512 bytes of UTF-8 (percent-decoded), no control or format characters")),
    request_body(content = AcquireBody, content_type = "application/json"),
    responses((status = 200, description = "The lease granted", body = LeaseView)),
)]
pub(super) async fn acquire(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<AcquireBody>, ApiError>,
) -> Result<Response, ApiError> {
    let resource = resource_path(resource)?;
    let JsonBody(body) = body?;
    let request = acquire_request(&state, resource, body, AcquireKind::Lock)?;
    answer_acquisition(&state, request).await
}

/// Takes the lease `request` asks for and answers with it, or with why not.
pub(super) async fn answer_acquisition(
    state: &AppState,
    request: AcquireRequest,
) -> Result<Response, ApiError> {
    let held = match (request.kind, &request.campaign) {
        (_, Some(_)) => "another leader holds the election",
        (AcquireKind::Lock, None) => "the lock is held by another lease",
        (AcquireKind::Permit(permits), None) if permits.count > 1 => {
            "fewer slots of the semaphore are free than the permits asked for"
        }
        (AcquireKind::Permit(_), None) => "every slot of the semaphore is held by another lease",
        (AcquireKind::Read { .. }, None) => "a writer holds the lock, or one is waiting for it",
        (AcquireKind::Write, None) => "the lock is held by another lease's writer or readers",
    };
    let _waiting = match waiting_permit(state, &request) {
        Ok(permit) => permit,
        Err(TooManyWaiters) => return Ok(too_many_waiters(state.max_waiters)),
    };
    let acquired = match state.manager.acquire(request).await {
        Err(error @ crate::Error::SemaphoreLimit { .. }) => {
            let detail = error.to_string();
            return Ok(refused(StatusCode::CONFLICT, "limit_mismatch", &detail));
        }
        acquired => acquired?,
    };
    Ok(match acquired {
        Acquired::Granted(view) => lease_answer(&view),
        Acquired::Held => refused(StatusCode::CONFLICT, "held", held),
        Acquired::Dequeued => refused(
            StatusCode::CONFLICT,
            "dequeued",
            "this fair waiter's heartbeats came too late and it was taken out of the queue",
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

/// `http.max_waiters` blocking acquisitions are in progress.
struct TooManyWaiters;

/// A blocking acquisition's place among `http.max_waiters` (none without a wait).
fn waiting_permit(
    state: &AppState,
    request: &AcquireRequest,
) -> Result<Option<OwnedSemaphorePermit>, TooManyWaiters> {
    if request.wait.is_zero() {
        return Ok(None);
    }
    let permit = Arc::clone(&state.waiters).try_acquire_owned();
    permit.map(Some).map_err(|_| TooManyWaiters)
}

/// 429 `too_many_waiters` with `Retry-After`, closing the connection, so that refused waiters
/// keep no connection the holders may need.
fn too_many_waiters(max_waiters: usize) -> Response {
    METRICS.waiters_refused.add(1, &[]);
    let detail = format!(
        "{max_waiters} blocking acquisitions are waiting already (http.max_waiters); retry later"
    );
    let mut answer = refused(StatusCode::TOO_MANY_REQUESTS, "too_many_waiters", &detail);
    let headers = answer.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_WAITERS));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// The lease with its current state.
#[utoipa::path(
    get,
    path = "/v1/leases/{id}",
    operation_id = "getLease",
    tag = "leases",
    params(LeaseIdParam),
    responses((status = 200, description = "The lease", body = LeaseView)),
)]
pub(super) async fn get_lease(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    lease_of(&state, lease_id(id)?)
}

/// Lease `id`, as [`get_lease`] answers it.
pub(super) fn lease_of(state: &AppState, id: LeaseId) -> Result<Response, ApiError> {
    let view = state.manager.get(id).ok_or_else(ApiError::unknown_lease)?;
    Ok(lease_answer(&view))
}

/// Renew the lease now, optionally with a new TTL (a sign of life).
#[utoipa::path(
    post,
    path = "/v1/leases/{id}/renew",
    operation_id = "renewLease",
    tag = "leases",
    params(LeaseIdParam),
    request_body(content = RenewBody, content_type = "application/json",
        description = "Optional: an empty body, with any content type or none, keeps the TTL"),
    responses((status = 200, description = "The lease renewed", body = LeaseView)),
)]
pub(super) async fn renew(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    body: Result<OptionalJsonBody<RenewBody>, ApiError>,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let OptionalJsonBody(body) = body?;
    let ttl = body.ttl_ms.get("ttl_ms", "invalid_ttl")?;
    match state.manager.renew(id, ttl).await {
        Ok(view) => Ok(lease_answer(&view)),
        Err(error) => Err(renew_error(error)),
    }
}

/// A sign of life from the app (no event stream needed).
#[utoipa::path(
    post,
    path = "/v1/leases/{id}/keepalive",
    operation_id = "keepaliveLease",
    tag = "leases",
    params(LeaseIdParam),
    responses((status = 200, description = "The lease", body = LeaseView)),
)]
pub(super) async fn keepalive(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    kept_alive(&state, lease_id(id)?)
}

/// The keepalive of lease `id`, as [`keepalive`] answers it.
pub(super) fn kept_alive(state: &AppState, id: LeaseId) -> Result<Response, ApiError> {
    match state.manager.keepalive(id) {
        Ok(view) => Ok(lease_answer(&view)),
        Err(error) => Err(renew_error(error)),
    }
}

/// Release the lease, or one re-entry hold of it.
///
/// A lease id: the lease is marked `releasing` at once and released on the masters by a task
/// of its own, which closes every hold of it; `released: true` exactly once per lease, to the
/// request that saw a quorum of masters confirm the release; 503 `no_quorum` (state
/// `releasing`) while too few answered: the release keeps trying in the background.
///
/// A hold id (`hold_id` of a re-entry): that one hold is released, and nothing else — no
/// master is written to, and the lease stays held. `released: true` once per hold; a retry
/// answers `released: false` again while the lease is kept readable.
#[utoipa::path(
    delete,
    path = "/v1/leases/{id}",
    operation_id = "releaseLease",
    tag = "leases",
    params(LeaseOrHoldIdParam),
    responses((status = 200, description = "Released on a quorum, or ended already; or the hold released", body = Released)),
)]
pub(super) async fn release(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    release_lease_or_hold(&state, lease_id(id)?).await
}

/// The release of lease (or hold) `id`, as [`release`] answers it.
pub(super) async fn release_lease_or_hold(
    state: &AppState,
    id: LeaseId,
) -> Result<Response, ApiError> {
    let Some(answer) = state.manager.release(id, "released").await else {
        return reentry::release_hold(state, id);
    };
    if answer.state == LeaseState::Releasing {
        let detail = "too few masters confirmed the release; it keeps trying";
        let extra = ReleaseRefusal {
            released: false,
            state: answer.state,
        };
        let status = StatusCode::SERVICE_UNAVAILABLE;
        return Ok(problem_with(status, "no_quorum", detail, extra));
    }
    let body = Released {
        hold_id: None,
        holds: None,
        reason: answer.reason,
        released: answer.released,
        state: answer.state,
    };
    Ok(Json(body).into_response())
}

/// The refusal of a renewal, keepalive or re-entry.
pub(super) fn renew_error(error: RenewError) -> ApiError {
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
        RenewError::TooManyHolds => {
            let detail = format!(
                "{MAX_HOLDS} re-entry holds are open on the lease; release one (DELETE its hold_id) first"
            );
            ApiError::new(StatusCode::CONFLICT, "too_many_holds", detail)
        }
        RenewError::NotACampaign => not_a_campaign(),
        RenewError::Invalid(error) => error.into(),
    }
}

/// 409 of a proclamation on a lease that is no election's.
pub(super) fn not_a_campaign() -> ApiError {
    let detail = "the lease is no election's: only a campaign's lease proclaims";
    ApiError::new(StatusCode::CONFLICT, "not_a_campaign", detail)
}

/// Every master's standing, the quorum and the fleet.
#[utoipa::path(
    get,
    path = "/v1/fleet",
    operation_id = "getFleet",
    tag = "health",
    responses((status = 200, description = "The fleet", body = FleetAnswer)),
)]
pub(super) async fn fleet(State(state): State<AppState>) -> Json<FleetAnswer> {
    let fleet = &state.fleet;
    let now = Instant::now();
    let micros = |d: Option<Duration>| d.map(|d| d.as_micros() as u64);
    let masters: Vec<_> = fleet
        .nodes()
        .iter()
        .map(|node| {
            let exclusion: Option<Exclusion> = node.exclusion();
            FleetMaster {
                excluded: exclusion.as_ref().map(Exclusion::reason),
                quarantined: node.is_quarantined(now),
                rtt_p50_us: micros(node.rtt_quantile(0.5, now)),
                rtt_p99_us: micros(node.rtt_quantile(0.99, now)),
                up: node.is_up(),
                url: node.url().to_string(),
                why: exclusion.as_ref().map(ToString::to_string),
            }
        })
        .collect();
    let adaptive_ttl_ms = state.manager.adaptive_ttl().as_millis() as u64;
    let birth = fleet.birth();
    Json(FleetAnswer {
        adaptive_ttl_ms,
        fleet: birth.map(|b| b.fleet),
        masters,
        quarantine_ms: fleet.quarantine().as_millis() as u64,
        quorum: fleet.quorum(),
    })
}

/// Prometheus text exposition of every metric.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "health",
    description = "Prometheus text exposition (`text/plain; version=0.0.4; charset=utf-8`). \
        Needs the token when `auth.token_file` is set, unless `auth.metrics_open`; also served \
        alone on the metrics listener (`metrics.listen`), behind `metrics.token_file`.",
    responses((status = 200, description = "Every metric", content_type = "text/plain",
        body = String)),
)]
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    state.manager.record_gauges();
    let waiting = state.max_waiters - state.waiters.available_permits();
    METRICS.waiting_acquisitions.record(waiting as u64, &[]);
    let content_type = [(
        header::CONTENT_TYPE,
        "text/plain; version=0.0.4; charset=utf-8",
    )];
    (content_type, crate::metrics::render()).into_response()
}

/// Liveness: 200 while the process runs (no token needed).
#[utoipa::path(
    get,
    path = "/livez",
    operation_id = "livez",
    tag = "health",
    responses((status = 200, description = "Alive", body = Live)),
)]
pub(super) async fn livez() -> Json<Live> {
    Json(Live { live: true })
}

/// Readiness: 200 only while a quorum of masters takes lock writes (no token needed).
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "health",
    responses((status = 200, description = "A quorum of masters takes lock writes", body = Ready)),
)]
pub(super) async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
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
    let ready = Ready {
        masters_up: up,
        ready: true,
    };
    Ok(Json(ready).into_response())
}

pub(super) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

/// A known path with another method (axum adds the `Allow` header).
pub(super) async fn method_not_allowed(method: Method) -> ApiError {
    let detail = format!("this route does not take {method}");
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", detail)
}

pub(super) fn acquire_request(
    state: &AppState,
    resource: String,
    body: AcquireBody,
    kind: AcquireKind,
) -> Result<AcquireRequest, ApiError> {
    let owner = body
        .owner
        .ok_or_else(|| ApiError::bad_request("invalid_owner", "owner is required"))?;
    let ttl = body.ttl_ms.get("ttl_ms", "invalid_ttl")?;
    let wait = body.wait_ms.get("wait_ms", "invalid_wait")?;
    let idle = body
        .idle_timeout_ms
        .get("idle_timeout_ms", "invalid_idle_timeout")?;
    let max_wait = state.manager.policy().max_wait;
    let wait = wait.unwrap_or(Duration::ZERO);
    if wait > max_wait {
        let detail = format!("wait_ms must be at most {}", max_wait.as_millis());
        return Err(ApiError::bad_request("invalid_wait", detail));
    }
    let max_idle = state.manager.policy().max_idle_timeout;
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
        ttl,
        wait,
        auto_renew: body.auto_renew.unwrap_or(true),
        idle_timeout: idle,
        kind,
        campaign: None,
        fair: body.fair.unwrap_or(false),
    })
}

/// A route's `{resource}`: percent-decoded, and a valid resource name (else 400
/// `invalid_resource`).
pub(super) fn resource_path(
    resource: Result<Path<String>, PathRejection>,
) -> Result<String, ApiError> {
    let Path(resource) =
        resource.map_err(|e| ApiError::bad_request("invalid_resource", e.body_text()))?;
    validate_resource(&resource)?;
    Ok(resource)
}

pub(super) fn lease_id(id: Result<Path<String>, PathRejection>) -> Result<LeaseId, ApiError> {
    let Path(id) = id.map_err(|_| ApiError::unknown_lease())?;
    id.parse().map_err(|_| ApiError::unknown_lease())
}

/// 409/503 of an acquisition: problem+json that also says `acquired: false`.
fn refused(status: StatusCode, reason: &'static str, detail: &str) -> Response {
    let extra = AcquireRefusal { acquired: false };
    problem_with(status, reason, detail, extra)
}

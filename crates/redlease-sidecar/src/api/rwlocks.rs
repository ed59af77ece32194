//! The read-write lock routes: a reader's or the writer's lease on a resource's read-write
//! lock (managed by the `/v1/leases/{id}` routes like any other), and the downgrade of a write
//! lease to a read.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

use super::answers::{AcquireRefusal, Json};
use super::body::{JsonBody, Millis};
use super::error::{problem_with, ApiError};
use super::handlers::{acquire_request, answer_acquisition, lease_id, renew_error, resource_path};
use super::requests::{AcquireBody, LeaseIdParam};
use super::AppState;
use crate::lease::read_write::DowngradeError;
use crate::lease::{AcquireKind, LeaseView};

/// Body of `POST /v1/rwlocks/{resource}/acquire`: the acquire body's fields and the mode
/// (unknown fields are refused; `null` is the same as leaving a field out).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RwAcquireBody {
    /// Who holds the lease: 1–256 bytes, no control or format characters.
    #[schema(value_type = String, min_length = 1)]
    owner: Option<String>,
    /// `read` (shared with other readers) or `write` (alone).
    #[schema(value_type = String, pattern = "^(read|write)$")]
    mode: Option<String>,
    /// TTL (ms), 10 to `lease.max_ttl_ms`; default: the adaptive TTL.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 10)]
    ttl_ms: Millis,
    /// How long to wait for the lock (ms), at most `lease.max_wait_ms`; default 0.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    wait_ms: Millis,
    /// Whether the sidecar renews the lease; default `true`.
    auto_renew: Option<bool>,
    /// Release the lease after this long without a sign of life (ms), 1 to
    /// `lease.max_idle_timeout_ms`; default `lease.idle_timeout_ms`.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1)]
    idle_timeout_ms: Millis,
    /// Wait in one queue with the fair readers and writers of every sidecar on this lock,
    /// first come first served (with `wait_ms`); default `false`.
    fair: Option<bool>,
}

/// Take a resource's read-write lock: readers share it, a writer holds it alone, and a waiting
/// writer keeps new readers out. The lease answered names its `mode`.
#[utoipa::path(
    post,
    path = "/v1/rwlocks/{resource}/acquire",
    operation_id = "acquireRwLock",
    tag = "leases",
    params(("resource" = String, Path,
        description = "1–512 bytes of UTF-8 (percent-decoded), no control or format characters")),
    request_body(content = RwAcquireBody, content_type = "application/json"),
    responses((status = 200, description = "The reader's or the writer's lease", body = LeaseView)),
)]
pub(super) async fn acquire(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<RwAcquireBody>, ApiError>,
) -> Result<Response, ApiError> {
    let resource = resource_path(resource)?;
    let JsonBody(body) = body?;
    let kind = match body.mode.as_deref() {
        Some("read") => AcquireKind::Read { beside: None },
        Some("write") => AcquireKind::Write,
        _ => {
            let detail = "mode is required: read or write";
            return Err(ApiError::bad_request("invalid_mode", detail));
        }
    };
    let common = AcquireBody {
        owner: body.owner,
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        auto_renew: body.auto_renew,
        idle_timeout_ms: body.idle_timeout_ms,
        fair: body.fair,
    };
    let request = acquire_request(&state, resource, common, kind)?;
    if kind == AcquireKind::Write && state.manager.holds_read(&request.resource, &request.owner) {
        let detail = "this owner holds a read of the lock here: an upgrade would wait for its \
                      own read; release the read, then take the write";
        let extra = AcquireRefusal { acquired: false };
        return Ok(problem_with(
            StatusCode::CONFLICT,
            "upgrade_refused",
            detail,
            extra,
        ));
    }
    answer_acquisition(&state, request).await
}

/// Downgrade a write lease to a read: a read lease of the same resource, owner and settings
/// is taken beside the write, then the write is released.
#[utoipa::path(
    post,
    path = "/v1/leases/{id}/downgrade",
    operation_id = "downgradeLease",
    tag = "leases",
    params(LeaseIdParam),
    responses((status = 200, description = "The new read lease", body = LeaseView)),
)]
pub(super) async fn downgrade(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    match state.manager.downgrade(id).await {
        Ok(read) => Ok(Json(read).into_response()),
        Err(DowngradeError::Renew(error)) => Err(renew_error(error)),
        Err(DowngradeError::NotAWriter) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_a_writer",
            "only a read-write lock's write lease can be downgraded",
        )),
        Err(DowngradeError::Held) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "held",
            "another lease's writer keeps the read out; the write lease is kept",
        )),
        Err(DowngradeError::Closing) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the sidecar is shutting down",
        )),
    }
}

//! The semaphore route: a permit of a resource's counting semaphore, as a lease the
//! `/v1/leases/{id}` routes manage like any other.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use utoipa::ToSchema;

use super::body::{JsonBody, Millis};
use super::error::ApiError;
use super::handlers::{acquire_request, answer_acquisition, resource_path};
use super::requests::AcquireBody;
use super::AppState;
use crate::keys::MAX_SEMAPHORE_LIMIT;
use crate::lease::{AcquireKind, LeaseView};
use crate::redlock::Permits;

/// Body of `POST /v1/semaphores/{resource}/acquire`: the acquire body's fields, and the
/// semaphore's limit (unknown fields are refused; `null` is the same as leaving a field out).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SemaphoreAcquireBody {
    /// Who holds the permit: 1–256 bytes, no control or format characters.
    #[schema(value_type = String, min_length = 1)]
    owner: Option<String>,
    /// How many permits the semaphore has, 1 to 64: the same for every holder (a limit
    /// other than the one its holders use is refused, `limit_mismatch`).
    #[schema(value_type = u32, minimum = 1, maximum = 64)]
    limit: Option<u64>,
    /// How many permits this lease takes, all or none, 1 (the default) to `limit`: that many
    /// slots, all held by one lease with one fencing token.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 64)]
    permits: Option<u64>,
    /// TTL (ms), 10 to `lease.max_ttl_ms`; default: the adaptive TTL.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 10)]
    ttl_ms: Millis,
    /// How long to wait for a free slot (ms), at most `lease.max_wait_ms`; default 0.
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
    /// Wait in one queue with the fair waiters of every sidecar on this semaphore, first come
    /// first served (with `wait_ms`); default `false`.
    fair: Option<bool>,
}

/// Take permits of a counting semaphore: `permits` (default 1) of its `limit` slots, all or
/// none, each an exclusive lock of its own, granted by a quorum of masters. The lease answered
/// names its `slots`; fence per slot (the lease's one token is valid for each of them).
#[utoipa::path(
    post,
    path = "/v1/semaphores/{resource}/acquire",
    operation_id = "acquirePermit",
    tag = "leases",
    params(("resource" = String, Path,
        description = "1–512 bytes of UTF-8 (percent-decoded), no control or format characters")),
    request_body(content = SemaphoreAcquireBody, content_type = "application/json"),
    responses((status = 200, description = "The permit's lease", body = LeaseView)),
)]
pub(super) async fn acquire(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<SemaphoreAcquireBody>, ApiError>,
) -> Result<Response, ApiError> {
    let resource = resource_path(resource)?;
    let JsonBody(body) = body?;
    let limit = semaphore_limit(body.limit)?;
    let permits = permit_count(body.permits, limit)?;
    let common = AcquireBody {
        owner: body.owner,
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        auto_renew: body.auto_renew,
        idle_timeout_ms: body.idle_timeout_ms,
        fair: body.fair,
    };
    let kind = AcquireKind::Permit(Permits {
        limit,
        count: permits,
    });
    let request = acquire_request(&state, resource, common, kind)?;
    answer_acquisition(&state, request).await
}

/// The permits asked for: 1 by default, else within 1 to `limit`.
fn permit_count(permits: Option<u64>, limit: u32) -> Result<u32, ApiError> {
    let Some(permits) = permits else {
        return Ok(1);
    };
    u32::try_from(permits)
        .ok()
        .filter(|permits| (1..=limit).contains(permits))
        .ok_or_else(|| {
            let detail = format!("permits must be between 1 and the limit, {limit}");
            ApiError::bad_request("invalid_permits", detail)
        })
}

/// The limit asked for, required and within 1 to [`MAX_SEMAPHORE_LIMIT`].
fn semaphore_limit(limit: Option<u64>) -> Result<u32, ApiError> {
    let detail = || format!("limit is required, between 1 and {MAX_SEMAPHORE_LIMIT}");
    let limit = limit.ok_or_else(|| ApiError::bad_request("invalid_limit", detail()))?;
    u32::try_from(limit)
        .ok()
        .filter(|limit| (1..=MAX_SEMAPHORE_LIMIT).contains(limit))
        .ok_or_else(|| ApiError::bad_request("invalid_limit", detail()))
}

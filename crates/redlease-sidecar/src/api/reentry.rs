//! Re-entry over HTTP: `POST /v1/leases/{id}/reenter`, which renews the lease on a quorum and
//! opens a hold on it, and the release of one hold by its id, which `DELETE /v1/leases/{id}`
//! hands over here when the id is no lease's. The holds themselves are the lease table's
//! (`lease::reentry`).

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};

use super::answers::{Json, Reentered, Released};
use super::body::OptionalJsonBody;
use super::error::ApiError;
use super::handlers::{lease_id, renew_error};
use super::requests::{LeaseIdParam, ReenterBody};
use super::AppState;
use crate::LeaseId;

/// Re-enter the lease: renew it on a quorum of masters, then open a hold on it.
///
/// The hold is this sidecar's bookkeeping: the lease keeps its fencing token and stays held
/// until `DELETE /v1/leases/{id}` (or its end), which closes every hold;
/// `DELETE /v1/leases/{hold_id}` releases one hold and nothing else. A re-entry refused —
/// no quorum (503), the lease ended (410), too many holds (409) — opens no hold. A sign of
/// life, as a renewal is.
#[utoipa::path(
    post,
    path = "/v1/leases/{id}/reenter",
    operation_id = "reenterLease",
    tag = "leases",
    params(LeaseIdParam),
    request_body(content = ReenterBody, content_type = "application/json",
        description = "Optional: an empty body, with any content type or none, keeps the TTL"),
    responses((status = 200, description = "The hold opened and the lease renewed", body = Reentered)),
)]
pub(super) async fn reenter(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    body: Result<OptionalJsonBody<ReenterBody>, ApiError>,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let OptionalJsonBody(body) = body?;
    let ttl = body.ttl_ms.get("ttl_ms", "invalid_ttl")?;
    let reentry = state.manager.reenter(id, ttl).await.map_err(renew_error)?;
    let answer = Reentered {
        hold_id: reentry.hold_id.to_string(),
        lease: reentry.view,
    };
    Ok(Json(answer).into_response())
}

/// `DELETE /v1/leases/{hold_id}`: releases that one hold, never writing to a master. 404
/// `unknown_lease` for an id that is no hold this sidecar knows.
pub(super) fn release_hold(state: &AppState, hold_id: LeaseId) -> Result<Response, ApiError> {
    let answer = state.manager.release_hold(hold_id);
    let answer = answer.ok_or_else(ApiError::unknown_lease)?;
    let view = answer.view;
    let body = Released {
        hold_id: Some(hold_id.to_string()),
        holds: Some(view.holds),
        reason: view.reason,
        released: answer.released,
        state: view.state,
    };
    Ok(Json(body).into_response())
}

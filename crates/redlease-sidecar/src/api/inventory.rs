//! The inventory routes (`GET /v1/locks/{resource}`, `GET /v1/locks`, `POST
//! /v1/locks/{resource}/force-release`) and the JSON shapes of lock views, force releases and
//! audit records, which the command line prints too.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::answers::Json;
use super::body::JsonBody;
use super::error::{problem_with, ApiError};
use super::handlers::resource_path;
use super::AppState;
use crate::keys::{lock_name, LockKind, MAX_READERS, MAX_SEMAPHORE_LIMIT};
use crate::redlock::inventory::DEFAULT_LIST_LIMIT;
use crate::{ForceOptions, ForceVerdict, LeaseId, LockView};

pub(crate) mod shapes;

pub(crate) use shapes::SemaphoreJson;
pub use shapes::{audit_json, force_release_json, lock_json, page_json};
pub use shapes::{AuditJson, ForceReleaseJson, LockJson, PageJson};

/// Query of `GET /v1/locks` (any other parameter is refused: 400 `invalid_query`).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only resources whose names start with this (the rules of a resource name).
    prefix: Option<String>,
    /// Locks per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
    /// List after this resource (exclusive): the previous page's `next`.
    after: Option<String>,
}

/// Body of `POST /v1/locks/{resource}/force-release`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForceReleaseBody {
    /// Who releases (recorded and logged): 1–512 bytes, no control or format characters.
    #[schema(value_type = String, min_length = 1)]
    actor: Option<String>,
    /// Why (recorded and logged): 1–512 bytes, no control or format characters.
    #[schema(value_type = String, min_length = 1)]
    reason: Option<String>,
    /// Revoke only this lease (32 hex digits): a compare-and-revoke.
    #[schema(pattern = "^[0-9a-f]{32}$")]
    lease_id: Option<String>,
    /// The holder is gone: delete the lock at once instead of waiting for it to be told.
    #[serde(default)]
    holder_gone: bool,
    /// Release another lock of the resource than its lock: `semaphore` (with `slot`), `read`
    /// (a reader slot of its read-write lock, with `slot`), `write` (its writer) or
    /// `election` (its election's leader).
    #[schema(value_type = Option<String>, pattern = "^(semaphore|read|write|election)$")]
    kind: Option<String>,
    /// The semaphore's slot or the reader slot (0–63); alone, a semaphore's slot.
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 63)]
    slot: Option<u64>,
}

/// The lock of the resource a force release names.
fn forced_kind(kind: Option<&str>, slot: Option<u64>) -> Result<LockKind, ApiError> {
    let slot = match slot {
        Some(slot) if slot < u64::from(MAX_SEMAPHORE_LIMIT.min(MAX_READERS)) => Some(slot as u32),
        Some(_) => {
            let detail = "slot must be below 64";
            return Err(ApiError::bad_request("invalid_slot", detail));
        }
        None => None,
    };
    match (kind, slot) {
        (None, None) => Ok(LockKind::Exclusive),
        (None | Some("semaphore"), Some(slot)) => Ok(LockKind::Slot(slot)),
        (Some("read"), Some(slot)) => Ok(LockKind::Reader(slot)),
        (Some("write"), None) => Ok(LockKind::Writer),
        (Some("election"), None) => Ok(LockKind::Election),
        (Some("semaphore" | "read"), None) => Err(ApiError::bad_request(
            "invalid_slot",
            "a semaphore's or a reader's force release names its slot",
        )),
        _ => Err(ApiError::bad_request(
            "invalid_kind",
            "kind is semaphore or read (with slot), or write or election (without)",
        )),
    }
}

/// One lock as every master holds it, and the lease a quorum carries.
#[utoipa::path(
    get,
    path = "/v1/locks/{resource}",
    operation_id = "showLock",
    tag = "inventory",
    params(("resource" = String, Path, description = "The resource (percent-decoded)")),
    responses((status = 200, description = "The lock", body = LockJson)),
)]
pub(crate) async fn show(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
) -> Result<Json<LockJson>, ApiError> {
    let resource = resource_path(resource)?;
    let view = state.engine.inspect(&resource).await?;
    let token = held_here(&state, &view);
    Ok(Json(lock_json(&view, token)))
}

/// Every slot of a counting semaphore that any master holds a value in, as locks.
#[utoipa::path(
    get,
    path = "/v1/semaphores/{resource}",
    operation_id = "showSemaphore",
    tag = "inventory",
    params(("resource" = String, Path, description = "The resource (percent-decoded)")),
    responses((status = 200, description = "The semaphore's slots", body = SemaphoreJson)),
)]
pub(crate) async fn show_semaphore(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
) -> Result<Json<SemaphoreJson>, ApiError> {
    let resource = resource_path(resource)?;
    let views = state.engine.inspect_semaphore(&resource).await?;
    let slots = views
        .iter()
        .map(|view| lock_json(view, held_here(&state, view)))
        .collect();
    Ok(Json(SemaphoreJson { resource, slots }))
}

/// The locks held under a prefix on any master, with their quorum holder, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/locks",
    operation_id = "listLocks",
    tag = "inventory",
    params(ListQuery),
    responses((status = 200, description = "A page of locks", body = PageJson)),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<PageJson>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    let engine = &state.engine;
    let page = engine
        .list_locks(query.prefix.as_deref(), query.after.as_deref(), limit)
        .await?;
    let tokens: Vec<Option<u64>> = page.locks.iter().map(|v| held_here(&state, v)).collect();
    Ok(Json(page_json(&page, &tokens)))
}

/// Revoke the lease holding a lock (its holder is told at once), audited on every master.
#[utoipa::path(
    post,
    path = "/v1/locks/{resource}/force-release",
    operation_id = "forceReleaseLock",
    tag = "inventory",
    params(("resource" = String, Path, description = "The resource (percent-decoded)")),
    request_body(content = ForceReleaseBody, content_type = "application/json"),
    responses((status = 200, description = "Revoked on a quorum", body = ForceReleaseJson)),
)]
pub(crate) async fn force_release(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<ForceReleaseBody>, ApiError>,
) -> Result<Response, ApiError> {
    let resource = resource_path(resource)?;
    let JsonBody(body) = body?;
    let name = match forced_kind(body.kind.as_deref(), body.slot)? {
        LockKind::Exclusive => resource,
        kind => lock_name(&resource, kind),
    };
    let actor = body.actor.unwrap_or_default();
    let reason = body.reason.unwrap_or_default();
    let lease_id = match body.lease_id.as_deref().map(str::parse::<LeaseId>) {
        None => None,
        Some(Ok(id)) => Some(id),
        Some(Err(_)) => {
            let detail = "lease_id must be 32 lowercase hex digits";
            return Err(ApiError::bad_request("invalid_lease_id", detail));
        }
    };
    let options = ForceOptions {
        lease_id,
        holder_gone: body.holder_gone,
    };
    let engine = &state.engine;
    let forced = engine
        .force_release(&name, &actor, &reason, &options)
        .await?;
    let answer = force_release_json(&forced);
    let (status, reason, detail) = match forced.verdict {
        ForceVerdict::Confirmed => return Ok(Json(answer).into_response()),
        ForceVerdict::Mismatch => (
            StatusCode::CONFLICT,
            "lease_mismatch",
            "another lease holds the lock; nothing was revoked",
        ),
        ForceVerdict::NoQuorum => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no_quorum",
            "too few masters confirmed the force release; the holder may keep its quorum",
        ),
    };
    // The problem's members, and what the force release did (RFC 9457 extension members).
    Ok(problem_with(status, reason, detail, answer))
}

/// The fencing token of the quorum holder when this sidecar holds that lease (held or
/// degraded, not ended).
fn held_here(state: &AppState, view: &LockView) -> Option<u64> {
    let holder = view.holder.as_ref()?;
    let lease = state.manager.get(holder.lease_id)?;
    (!lease.state.is_ended()).then_some(lease.fencing_token)
}

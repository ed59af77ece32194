//! The inventory routes (`GET /v1/locks/{resource}`, `GET /v1/locks`, `POST
//! /v1/locks/{resource}/force-release`) and the JSON shapes of lock views, force releases and
//! audit records, which the command line prints too.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::JsonBody;
use super::error::{problem, problem_body, ApiError};
use super::AppState;
use crate::redlock::inventory::DEFAULT_LIST_LIMIT;
use crate::{AuditRecord, ForceOptions, ForceRelease, ForceVerdict, LeaseId, LockPage, LockView};
use crate::{MasterAnswer, MasterView};

/// Query of `GET /v1/locks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    prefix: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

/// Body of `POST /v1/locks/{resource}/force-release`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForceReleaseBody {
    actor: Option<String>,
    reason: Option<String>,
    /// Revoke only this lease (32 hex digits): a compare-and-revoke.
    lease_id: Option<String>,
    /// The holder is gone: delete the lock at once instead of waiting for it to be told.
    #[serde(default)]
    holder_gone: bool,
}

pub(crate) async fn show(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(resource) =
        resource.map_err(|e| ApiError::bad_request("invalid_resource", e.body_text()))?;
    let view = state.engine.inspect(&resource).await?;
    let token = held_here(&state, &view);
    Ok(Json(lock_json(&view, token)))
}

pub(crate) async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    let engine = &state.engine;
    let page = engine
        .list_locks(query.prefix.as_deref(), query.after.as_deref(), limit)
        .await?;
    let tokens: Vec<Option<u64>> = page.locks.iter().map(|v| held_here(&state, v)).collect();
    Ok(Json(page_json(&page, &tokens)))
}

pub(crate) async fn force_release(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<ForceReleaseBody>, ApiError>,
) -> Result<Response, ApiError> {
    let Path(resource) =
        resource.map_err(|e| ApiError::bad_request("invalid_resource", e.body_text()))?;
    let JsonBody(body) = body?;
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
        .force_release(&resource, &actor, &reason, &options)
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
    // The problem's members, then what the force release did (RFC 9457 extension members).
    let mut body = problem_body(status, reason, detail);
    if let (Some(problem), Value::Object(fields)) = (body.as_object_mut(), answer) {
        problem.extend(fields);
    }
    Ok(problem(status, body))
}

/// The fencing token of the quorum holder when this sidecar holds that lease (held or
/// degraded, not ended).
fn held_here(state: &AppState, view: &LockView) -> Option<u64> {
    let holder = view.holder.as_ref()?;
    let lease = state.manager.get(holder.lease_id)?;
    (!lease.state.is_ended()).then_some(lease.fencing_token)
}

/// A lock as the fleet sees it: the quorum holder and every master's value.
pub fn lock_json(view: &LockView, fencing_token: Option<u64>) -> Value {
    let masters: Vec<Value> = view.masters.iter().map(master_json).collect();
    json!({
        "resource": view.resource,
        "quorum": view.quorum,
        "holder": holder_json(view, fencing_token),
        "masters_holding": view.masters_holding(),
        "masters": masters,
    })
}

/// A page of locks: each with its quorum holder and how many masters hold a value for it.
pub fn page_json(page: &LockPage, fencing_tokens: &[Option<u64>]) -> Value {
    let locks: Vec<Value> = page
        .locks
        .iter()
        .enumerate()
        .map(|(i, view)| {
            let token = fencing_tokens.get(i).copied().flatten();
            json!({
                "resource": view.resource,
                "holder": holder_json(view, token),
                "masters_holding": view.masters_holding(),
            })
        })
        .collect();
    json!({"locks": locks, "next": page.next, "complete": page.complete})
}

fn holder_json(view: &LockView, fencing_token: Option<u64>) -> Value {
    let Some(holder) = &view.holder else {
        return Value::Null;
    };
    let mut value = json!({
        "lease_id": holder.lease_id.to_string(),
        "owner": holder.owner,
        "masters": holder.masters,
        "validity_ms": holder.validity.as_millis() as u64,
    });
    if let (Some(token), Some(object)) = (fencing_token, value.as_object_mut()) {
        object.insert("fencing_token".into(), token.into());
    }
    value
}

fn master_json(master: &MasterView) -> Value {
    let mut value = json!({
        "node": master.node,
        "url": master.url,
        "up": master.up,
        "quarantined": master.quarantined,
    });
    let Some(object) = value.as_object_mut() else {
        return value;
    };
    match &master.answer {
        Ok(None) => {
            object.insert("held".into(), false.into());
        }
        Ok(Some(holding)) => {
            object.insert("held".into(), true.into());
            let lease_id = holding.lease_id.map(|id| id.to_string());
            object.insert("lease_id".into(), json!(lease_id));
            object.insert("owner".into(), json!(holding.owner));
            if holding.lease_id.is_none() {
                object.insert("value".into(), json!(holding.value));
            }
            let pttl = holding.pttl.map(|left| left.as_millis() as u64);
            object.insert("pttl_ms".into(), json!(pttl));
        }
        Err(error) => {
            object.insert("error".into(), error.to_string().into());
        }
    }
    value
}

/// What a force release did.
pub fn force_release_json(forced: &ForceRelease) -> Value {
    let removed: Vec<Value> = forced
        .removed
        .iter()
        .map(|holder| {
            json!({
                "lease_id": holder.lease_id.map(|id| id.to_string()),
                "owner": holder.owner,
                "value": holder.value,
                "masters": holder.masters,
            })
        })
        .collect();
    let masters: Vec<Value> = forced
        .masters
        .iter()
        .map(|master| {
            let mut value = json!({"url": master.url, "answer": master.answer.label()});
            if let MasterAnswer::NoAnswer { error } = &master.answer {
                value["error"] = error.clone().into();
            }
            value
        })
        .collect();
    let confirmed = forced.verdict == ForceVerdict::Confirmed;
    json!({
        "resource": forced.resource,
        "confirmed": confirmed,
        "holder_told": forced.holder_told,
        "free_at_ms": forced.free_at_ms,
        "masters": masters,
        "masters_answered": forced.masters_answered,
        "masters_removed": forced.masters_removed,
        "audits_recorded": forced.audits_recorded,
        "removed": removed,
        "audit_id": forced.audit_id,
        "time_ms": forced.time_ms,
    })
}

/// One audit record.
pub fn audit_json(record: &AuditRecord) -> Value {
    json!({
        "audit_id": record.audit_id,
        "time_ms": record.time_ms,
        "resource": record.resource,
        "actor": record.actor,
        "reason": record.reason,
        "holders": record.holders,
        "masters": record.masters,
    })
}

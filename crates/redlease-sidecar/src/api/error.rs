//! The one error type of the HTTP API, answered as `application/problem+json` with a stable
//! `reason`. 4xx come from the request and are not logged; a 5xx body stays opaque and the
//! cause is logged.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::answers::{encoded, Problem};

/// The media type of every refusal.
pub(crate) const PROBLEM_JSON: &str = "application/problem+json";

/// A refused request.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    /// Stable, machine-readable: `invalid_resource`, `invalid_ttl`, `unknown_lease`, …
    pub reason: &'static str,
    pub detail: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, reason: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            detail: detail.into(),
        }
    }

    pub(crate) fn bad_request(reason: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason, detail)
    }

    pub(crate) fn unknown_lease() -> Self {
        let detail = "this sidecar holds no lease with that id";
        Self::new(StatusCode::NOT_FOUND, "unknown_lease", detail)
    }

    pub(crate) fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }
}

impl From<crate::Error> for ApiError {
    fn from(error: crate::Error) -> Self {
        use crate::Error::*;
        let reason = match &error {
            InvalidResource(_) => "invalid_resource",
            InvalidOwner(_) => "invalid_owner",
            InvalidTtl(_) => "invalid_ttl",
            InvalidActor(_) => "invalid_actor",
            InvalidReason(_) => "invalid_reason",
            InvalidPrefix(_) => "invalid_prefix",
            InvalidLimit(_) => "invalid_limit",
            InvalidPermits(_) => "invalid_permits",
            InvalidLeaseId => "unknown_lease",
            InvalidValue(_) => "invalid_value",
            NotACampaign => {
                let detail = error.to_string();
                return Self::new(StatusCode::CONFLICT, "not_a_campaign", detail);
            }
            SemaphoreLimit { .. } => {
                let detail = error.to_string();
                return Self::new(StatusCode::CONFLICT, "limit_mismatch", detail);
            }
            InvalidMaster { .. }
            | NoMasters
            | DuplicateMaster { .. }
            | TwoFleets { .. }
            | BirthRefused(_)
            | QuarantineTooShort { .. }
            | InvalidToken(_)
            | InvalidSetting(_) => return Self::internal(error),
        };
        Self::bad_request(reason, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = problem_body(self.status, self.reason, &self.detail);
        problem(self.status, &body)
    }
}

/// The fields of every problem+json body. `type` is a relative reference naming the reason
/// (RFC 9457 allows one); `title` is the status's phrase.
pub(crate) fn problem_body(status: StatusCode, reason: &'static str, detail: &str) -> Problem {
    Problem {
        detail: detail.to_string(),
        reason,
        status: status.as_u16(),
        title: status.canonical_reason().unwrap_or("error"),
        problem_type: format!("/problems/{reason}"),
    }
}

/// A problem+json response with `body`.
pub(crate) fn problem(status: StatusCode, body: &impl Serialize) -> Response {
    encoded(status, PROBLEM_JSON, body)
}

/// A problem+json response whose body also has the fields of `extra` (RFC 9457 extension
/// members). Both go through one JSON map, which writes every key in name order, as the
/// answers always have.
pub(crate) fn problem_with(
    status: StatusCode,
    reason: &'static str,
    detail: &str,
    extra: impl Serialize,
) -> Response {
    #[derive(Serialize)]
    struct Extended<E> {
        #[serde(flatten)]
        problem: Problem,
        #[serde(flatten)]
        extra: E,
    }
    let problem_fields = problem_body(status, reason, detail);
    let body = serde_json::to_value(Extended {
        problem: problem_fields,
        extra,
    });
    match body {
        Ok(body) => problem(status, &body),
        Err(error) => ApiError::internal(error).into_response(),
    }
}

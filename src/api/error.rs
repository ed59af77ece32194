//! The one error type of the HTTP API, answered as `application/problem+json` with a stable
//! `reason`. 4xx come from the request and are not logged; a 5xx body stays opaque and the
//! cause is logged.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A refused request.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, machine-readable: `invalid_resource`, `invalid_ttl`, `unknown_lease`, …
    pub reason: &'static str,
    pub detail: String,
}

impl ApiError {
    pub fn new(status: StatusCode, reason: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            detail: detail.into(),
        }
    }

    pub fn bad_request(reason: &'static str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason, detail)
    }

    pub fn unknown_lease() -> Self {
        let detail = "this sidecar holds no lease with that id";
        Self::new(StatusCode::NOT_FOUND, "unknown_lease", detail)
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
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
            InvalidLeaseId => "unknown_lease",
            InvalidMaster { .. } | NoMasters | DuplicateMaster { .. } => {
                return Self::internal(error)
            }
        };
        Self::bad_request(reason, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "type": format!("https://redlease.dev/problems/{}", self.reason),
            "title": self.status.canonical_reason().unwrap_or("error"),
            "status": self.status.as_u16(),
            "reason": self.reason,
            "detail": self.detail,
        });
        problem(self.status, body)
    }
}

/// A problem+json response with `body`.
pub fn problem(status: StatusCode, body: serde_json::Value) -> Response {
    let content_type = [(header::CONTENT_TYPE, "application/problem+json")];
    (status, content_type, body.to_string()).into_response()
}

//! The API's bearer token: with `auth.token_file` set, every request but `/livez`, `/readyz`
//! and `/v1/openapi.json` (and `/metrics` with `auth.metrics_open`) must carry `Authorization: Bearer
//! <token>`, or is answered 401 problem+json (`unauthorized`). The token is compared in
//! constant time, never logged, and read again from its file on [`ApiToken::reload`] (SIGHUP).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::config::{read_token, AuthSettings};

/// Routes that answer without the token: the probes of orchestrators and load balancers, and
/// the API's OpenAPI document (the public contract, no data: generators fetch it).
const OPEN_PATHS: [&str; 3] = ["/livez", "/readyz", "/v1/openapi.json"];

/// A bearer token read from a file, if one is configured: read again on [`Self::reload`]
/// (SIGHUP), compared in constant time, never logged. The API's token and the metrics
/// listener's are each one.
pub(crate) struct BearerToken {
    file: Option<PathBuf>,
    token: RwLock<Option<Arc<str>>>,
}

impl BearerToken {
    /// Reads the token in `file` (already checked when the settings were loaded); none asked
    /// without a file.
    pub(crate) fn load(file: Option<&Path>) -> Result<Self, String> {
        let token = file.map(read_token).transpose()?.map(Arc::from);
        Ok(Self {
            file: file.map(Path::to_path_buf),
            token: RwLock::new(token),
        })
    }

    /// Reads the token file again; on an error the token in force stays.
    pub(crate) fn reload(&self) -> Result<(), String> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let token = read_token(file)?;
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::from(token));
        Ok(())
    }

    /// Whether no token is asked.
    fn is_none(&self) -> bool {
        // Only ever replaced whole: a poisoned lock still holds a whole token.
        let token = self.token.read().unwrap_or_else(|p| p.into_inner());
        token.is_none()
    }

    fn current(&self) -> Option<Arc<str>> {
        // Only ever replaced whole: a poisoned lock still holds a whole token.
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the `Authorization` header `authorization` carries the token (or none is
    /// asked).
    pub(crate) fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(token) = self.current() else {
            return true;
        };
        let presented = authorization.and_then(bearer_credentials);
        presented.is_some_and(|presented| same_bytes(presented, token.as_bytes()))
    }

    #[cfg(test)]
    pub(crate) fn fixed(token: &str) -> Self {
        Self {
            file: None,
            token: RwLock::new(Some(Arc::from(token))),
        }
    }
}

/// The token the API asks for, if any.
pub struct ApiToken {
    token: BearerToken,
    metrics_open: bool,
}

impl ApiToken {
    /// Reads the token named by `settings` (already checked when the settings were loaded).
    pub fn load(settings: &AuthSettings) -> Result<Arc<Self>, String> {
        Ok(Arc::new(Self {
            token: BearerToken::load(settings.token_file.as_deref())?,
            metrics_open: settings.metrics_open,
        }))
    }

    /// No token asked (tests and embedders that reach the router directly).
    pub fn none() -> Arc<Self> {
        Arc::new(Self {
            token: BearerToken {
                file: None,
                token: RwLock::new(None),
            },
            metrics_open: false,
        })
    }

    /// Reads the token file again; on an error the token in force stays.
    pub fn reload(&self) -> Result<(), String> {
        self.token.reload()
    }

    #[cfg(test)]
    pub(crate) fn fixed(token: &str) -> Arc<Self> {
        Arc::new(Self {
            token: BearerToken::fixed(token),
            metrics_open: false,
        })
    }

    /// Whether a request to `path` with the `Authorization` header `authorization` may pass.
    pub(crate) fn admits(&self, path: &str, authorization: Option<&[u8]>) -> bool {
        if self.token.is_none() {
            return true;
        }
        if OPEN_PATHS.contains(&path) || (self.metrics_open && path == "/metrics") {
            return true;
        }
        self.token.admits(authorization)
    }
}

/// The credentials of an `Authorization: Bearer <token>` header: the scheme in any case
/// (RFC 9110 §11.1 makes it case-insensitive), then one or more spaces; `None` for another
/// scheme.
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    const SCHEME: &[u8] = b"bearer";
    let scheme = value.get(..SCHEME.len())?;
    let rest = &value[SCHEME.len()..];
    if !scheme.eq_ignore_ascii_case(SCHEME) || rest.first() != Some(&b' ') {
        return None;
    }
    let start = rest.iter().position(|byte| *byte != b' ')?;
    Some(&rest[start..])
}

/// The 401 for a request without the token; `None` when it may pass.
pub(crate) fn refusal<B>(token: &ApiToken, request: &Request<B>) -> Option<Response> {
    let authorization = request.headers().get(header::AUTHORIZATION);
    if token.admits(request.uri().path(), authorization.map(|v| v.as_bytes())) {
        return None;
    }
    Some(unauthorized(
        "this API needs `Authorization: Bearer <token>`",
    ))
}

/// 401 problem+json (`unauthorized`, `detail`) with the `WWW-Authenticate: Bearer` challenge.
pub(crate) fn unauthorized(detail: &'static str) -> Response {
    let refused = ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", detail);
    let mut response = refused.into_response();
    let challenge = header::HeaderValue::from_static("Bearer");
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, challenge);
    response
}

/// `a == b` in a time that depends on their lengths only, not on where they differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let mut differ = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (
            a.get(i).copied().unwrap_or(0),
            b.get(i).copied().unwrap_or(0),
        );
        differ |= usize::from(x ^ y);
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_token(metrics_open: bool) -> ApiToken {
        ApiToken {
            token: BearerToken::fixed("s3cret"),
            metrics_open,
        }
    }

    /// Only the exact bearer token passes, its scheme in any case; the probes and the OpenAPI
    /// document need none; metrics only when open.
    #[test]
    fn only_the_token_passes() {
        let token = with_token(false);
        for right in [
            &b"Bearer s3cret"[..],
            b"bearer s3cret",
            b"BEARER s3cret",
            b"bEaReR  s3cret",
        ] {
            assert!(token.admits("/v1/fleet", Some(right)), "{right:?}");
        }
        for wrong in [
            &b"Bearer s3cre"[..],
            b"Bearer s3cret2",
            b"Bearers3cret",
            b"Basic s3cret",
            b"Bearer ",
            b"Bearer",
            b"s3cret",
            b"",
        ] {
            assert!(!token.admits("/v1/fleet", Some(wrong)), "{wrong:?}");
        }
        assert!(!token.admits("/v1/fleet", None));
        assert!(token.admits("/livez", None) && token.admits("/readyz", None));
        assert!(token.admits("/v1/openapi.json", None));
        assert!(!token.admits("/metrics", None));
        assert!(with_token(true).admits("/metrics", None));
        assert!(ApiToken::none().admits("/v1/fleet", None));
    }

    #[test]
    fn comparison_is_exact() {
        assert!(same_bytes(b"abc", b"abc"));
        assert!(!same_bytes(b"abc", b"abd"));
        assert!(!same_bytes(b"abc", b"abcd"));
        assert!(!same_bytes(b"", b"a"));
        assert!(same_bytes(b"", b""));
    }
}

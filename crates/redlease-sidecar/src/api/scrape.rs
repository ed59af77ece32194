//! The metrics listener's router (`metrics.listen`): `GET /metrics` and nothing else (every
//! other path 404, other methods 405), behind its own optional bearer token
//! (`metrics.token_file`), never the API's. The scheme is matched without regard to case
//! (`Bearer`, `bearer`), the token in constant time; the token is read again from its file on
//! [`MetricsToken::reload`] (SIGHUP) and never logged.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::{handlers, AppState};
use crate::config::{read_token, MetricsSettings};

/// The token the metrics listener asks for, if any.
pub struct MetricsToken {
    file: Option<PathBuf>,
    token: RwLock<Option<Arc<str>>>,
}

impl MetricsToken {
    /// Reads the token named by `settings` (already checked when the settings were loaded).
    pub fn load(settings: &MetricsSettings) -> Result<Arc<Self>, String> {
        let token = match &settings.token_file {
            Some(file) => Some(Arc::from(read_token(file)?)),
            None => None,
        };
        Ok(Arc::new(Self {
            file: settings.token_file.clone(),
            token: RwLock::new(token),
        }))
    }

    /// Reads the token file again; on an error the token in force stays.
    pub fn reload(&self) -> Result<(), String> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let token = read_token(file)?;
        *self.token.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::from(token));
        Ok(())
    }

    /// Whether a request with the `Authorization` header `authorization` may read metrics.
    fn admits(&self, authorization: Option<&[u8]>) -> bool {
        // Only ever replaced whole: a poisoned lock still holds a whole token.
        let current = self.token.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(token) = current else {
            return true;
        };
        authorization
            .and_then(bearer_credentials)
            .is_some_and(|presented| same_bytes(presented, token.as_bytes()))
    }
}

/// The credentials of an `Authorization: Bearer <token>` value, the scheme in any case and
/// the two separated by spaces (RFC 9110 §11.1, RFC 6750 §2.1).
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let start = rest.iter().position(|&b| b != b' ')?;
    Some(&rest[start..])
}

/// `a == b` in a time that depends on their lengths only, not on where they differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let mut differ = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        differ |= usize::from(x ^ y);
    }
    differ == 0
}

/// The router of the metrics listener, on the API's state (so the scrape-time gauges are the
/// same on both listeners).
pub(crate) fn router(state: AppState, token: Arc<MetricsToken>) -> Router {
    let scrape = move |state: State<AppState>, headers: HeaderMap| {
        let token = Arc::clone(&token);
        async move {
            let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
            if !token.admits(authorization) {
                return unauthorized();
            }
            handlers::metrics(state).await
        }
    };
    Router::new()
        .route("/metrics", get(scrape))
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .fallback(handlers::not_found)
        .with_state(state)
}

/// 401 problem+json with the `WWW-Authenticate: Bearer` challenge.
fn unauthorized() -> Response {
    let refused = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the metrics listener needs `Authorization: Bearer <metrics token>`",
    );
    let mut response = refused.into_response();
    let challenge = header::HeaderValue::from_static("Bearer");
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, challenge);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_token() -> MetricsToken {
        MetricsToken {
            file: None,
            token: RwLock::new(Some(Arc::from("m3trics"))),
        }
    }

    /// The exact token passes under a scheme in any case; anything else does not.
    #[test]
    fn only_the_metrics_token_passes() {
        let token = with_token();
        for right in [
            &b"Bearer m3trics"[..],
            b"bearer m3trics",
            b"BEARER m3trics",
            b"Bearer  m3trics",
        ] {
            assert!(token.admits(Some(right)), "{right:?}");
        }
        for wrong in [
            &b"Bearer m3tric"[..],
            b"Bearer m3trics2",
            b"Basic m3trics",
            b"Bearerm3trics",
            b"m3trics",
            b"Bearer ",
            b"",
        ] {
            assert!(!token.admits(Some(wrong)), "{wrong:?}");
        }
        assert!(!token.admits(None));
    }

    /// Without a token file the listener is open.
    #[test]
    fn no_token_admits_everyone() {
        let open = MetricsToken::load(&MetricsSettings::default()).unwrap();
        assert!(open.admits(None));
        assert!(open.reload().is_ok());
    }
}

//! The metrics listener's router (`metrics.listen`): `GET /metrics` and nothing else (every
//! other path 404, other methods 405), behind its own optional bearer token
//! (`metrics.token_file`), never the API's. The scheme is matched without regard to case
//! (`Bearer`, `bearer`), the token in constant time; the token is read again from its file on
//! [`MetricsToken::reload`] (SIGHUP) and never logged.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::routing::get;
use axum::Router;

use super::auth::{unauthorized, BearerToken};
use super::{handlers, AppState};
use crate::config::MetricsSettings;

/// The token the metrics listener asks for, if any.
pub struct MetricsToken(BearerToken);

impl MetricsToken {
    /// Reads the token named by `settings` (already checked when the settings were loaded).
    pub fn load(settings: &MetricsSettings) -> Result<Arc<Self>, String> {
        let token = BearerToken::load(settings.token_file.as_deref())?;
        Ok(Arc::new(Self(token)))
    }

    /// Reads the token file again; on an error the token in force stays.
    pub fn reload(&self) -> Result<(), String> {
        self.0.reload()
    }

    /// Whether a request with the `Authorization` header `authorization` may read metrics.
    fn admits(&self, authorization: Option<&[u8]>) -> bool {
        self.0.admits(authorization)
    }
}

/// The router of the metrics listener, on the API's state (so the scrape-time gauges are the
/// same on both listeners).
pub(crate) fn router(state: AppState, token: Arc<MetricsToken>) -> Router {
    let scrape = move |state: State<AppState>, headers: HeaderMap| {
        let token = Arc::clone(&token);
        async move {
            let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
            if !token.admits(authorization) {
                let detail = "the metrics listener needs `Authorization: Bearer <metrics token>`";
                return unauthorized(detail);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with_token() -> MetricsToken {
        MetricsToken(BearerToken::fixed("m3trics"))
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

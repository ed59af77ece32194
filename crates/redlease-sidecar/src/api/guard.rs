//! What every request must pass before it is routed: the size of its head (431) and its
//! target (414), the `Host` header against DNS rebinding (403), content and transfer
//! encodings (415), a declared body length (413), and the API token ([`Guard::unauthorized`],
//! 401). The server calls [`Guard::admit`] and [`Guard::unauthorized`] on each request before
//! the router and bounds it by [`Guard::request_limit`] (cheaper than middleware and layers,
//! which box and clone the router's service stack per request).
//!
//! hyper's own head limit, [`PARSER_MAX_HEAD_BYTES`], is above ours, so a head over our limit
//! but within it is parsed and refused here as problem+json; one over it, one with more than
//! hyper's 100 header fields (its default, which keeps its header arrays on the stack: any
//! other number puts about 13 KB on the heap for every request), or one that is not HTTP/1.x,
//! hyper refuses itself with an empty 400 or 431. A
//! layer's own refusal (a bare status, or plain text) is given its problem+json by
//! [`refusal_for`].

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, Request, StatusCode, Uri};
use axum::response::Response;

use super::auth::{self, ApiToken};
use super::error::ApiError;
use super::MAX_BODY_BYTES;

/// Longest request target (path and query) accepted.
pub(crate) const MAX_URI_BYTES: usize = 8 * 1024;
/// Largest request head (request line and header fields) accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Largest head hyper parses (it answers a larger one with an empty 431 and closes).
pub(crate) const PARSER_MAX_HEAD_BYTES: usize = 2 * MAX_HEAD_BYTES;

/// The checks of one listener.
pub(crate) struct Guard {
    /// Names a `Host` may carry besides IP literals and `localhost`; `None`: no `Host` check
    /// (a Unix socket, which no browser reaches).
    allowed_hosts: Option<Arc<[String]>>,
    /// The token every route but the probes needs, when there is one.
    token: Arc<ApiToken>,
    /// How long a request other than an event stream may take.
    request_limit: Duration,
}

impl Guard {
    pub(crate) fn new(
        allowed_hosts: Option<Arc<[String]>>,
        token: Arc<ApiToken>,
        request_limit: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            allowed_hosts,
            token,
            request_limit,
        })
    }

    /// The 401 for a request without the API token; `None` when it may pass.
    pub(crate) fn unauthorized<B>(&self, request: &Request<B>) -> Option<Response> {
        auth::refusal(&self.token, request)
    }

    /// Whether a request the server read itself (`server::fast_lane`) passes every check
    /// here: one to the origin-form target `path`, its head within our limits, with no
    /// content or transfer encoding and a declared length within the body limit (the server
    /// reads no other), its one `Host` header's value `host` (or none) and its one
    /// `Authorization`'s `authorization` (or none). One that does not is left to hyper and
    /// [`Guard::admit`], which word the refusal.
    pub(crate) fn admits_read(
        &self,
        path: &str,
        host: Option<&[u8]>,
        authorization: Option<&[u8]>,
    ) -> bool {
        let host_passes = match (&self.allowed_hosts, named_host(host)) {
            (Some(allowed), Some(host)) => host_allowed(host, allowed),
            _ => true,
        };
        host_passes && self.token.admits(path, authorization)
    }

    /// How long a request other than an event stream may take (then 408 `request_timeout`).
    pub(crate) fn request_limit(&self) -> Duration {
        self.request_limit
    }

    /// Whether `request` may be routed (its body is not looked at).
    pub(crate) fn admit<B>(&self, request: &Request<B>) -> Result<(), ApiError> {
        let (uri, headers) = (request.uri(), request.headers());
        if target_len(uri) > MAX_URI_BYTES {
            return Err(uri_too_long());
        }
        if head_len(request) > MAX_HEAD_BYTES {
            return Err(headers_too_large());
        }
        if let Some(allowed) = &self.allowed_hosts {
            check_host(uri, headers, allowed)?;
        }
        check_encodings(headers)?;
        check_declared_length(headers)
    }
}

/// The problem+json refusal for a layer's own answer of `status` (the request timeout's bare
/// 408, the body limit's plain-text 413).
pub(crate) fn refusal_for(status: StatusCode) -> ApiError {
    let detail = status.canonical_reason().unwrap_or("refused");
    match status {
        StatusCode::REQUEST_TIMEOUT => request_timeout(),
        StatusCode::PAYLOAD_TOO_LARGE => body_too_large(),
        StatusCode::NOT_FOUND => ApiError::new(status, "not_found", "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(status, "method_not_allowed", detail),
        _ if status.is_server_error() => ApiError::new(status, "internal", "internal error"),
        _ => ApiError::new(status, "bad_request", detail),
    }
}

pub(crate) fn bad_request(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("bad_request", detail)
}

fn uri_too_long() -> ApiError {
    let detail = format!("the request target is over {MAX_URI_BYTES} bytes");
    ApiError::new(StatusCode::URI_TOO_LONG, "uri_too_long", detail)
}

fn headers_too_large() -> ApiError {
    let detail = format!("the request head is over {MAX_HEAD_BYTES} bytes");
    let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    ApiError::new(status, "headers_too_large", detail)
}

pub(crate) fn body_too_large() -> ApiError {
    let detail = format!("the body is over {MAX_BODY_BYTES} bytes");
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", detail)
}

pub(crate) fn request_timeout() -> ApiError {
    let detail = "the request did not arrive in time";
    ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", detail)
}

/// A body declared longer than the limit is refused before it is read; one that streams past
/// it is cut where it does (the server reads every body through that limit).
fn check_declared_length(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers.get(header::CONTENT_LENGTH);
    let length = declared.and_then(|value| value.to_str().ok()?.trim().parse::<u64>().ok());
    match length {
        Some(length) if length > MAX_BODY_BYTES as u64 => Err(body_too_large()),
        _ => Ok(()),
    }
}

fn unsupported_transfer_encoding() -> ApiError {
    unsupported_encoding("a Transfer-Encoding other than `chunked` is not accepted")
}

fn unsupported_encoding(detail: &str) -> ApiError {
    let status = StatusCode::UNSUPPORTED_MEDIA_TYPE;
    ApiError::new(status, "unsupported_encoding", detail)
}

/// The head as sent, but for the spaces around field values: the request line, then
/// `name: value` and its line end per field.
fn head_len<B>(request: &Request<B>) -> usize {
    let (method, target) = (request.method().as_str(), target_len(request.uri()));
    let line = method.len() + " ".len() + target + " HTTP/1.1\r\n".len();
    let fields = request.headers().iter();
    fields.fold(line, |len, (name, value)| {
        len + name.as_str().len() + value.len() + 4
    })
}

/// The target as sent: path and query, and scheme and authority in absolute form.
fn target_len(uri: &Uri) -> usize {
    let path = uri.path_and_query().map_or(0, |pq| pq.as_str().len());
    let authority = uri.authority().map_or(0, |a| a.as_str().len());
    let scheme = uri.scheme_str().map_or(0, |s| s.len() + 3);
    path + authority + scheme
}

/// The host a request names (the target's authority and its one `Host` header) must be an IP
/// literal, `localhost` or an allowed name; no `Host` at all (or an empty one) passes.
fn check_host(uri: &Uri, headers: &HeaderMap, allowed: &[String]) -> Result<(), ApiError> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let (first, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return Err(bad_request("more than one Host header"));
    }
    let named = named_host(first.map(|value| value.as_bytes()));
    for host in [uri.authority().map(|a| a.as_str()), named]
        .into_iter()
        .flatten()
    {
        if !host_allowed(host, allowed) {
            let detail = format!(
                "Host {:?} is not an IP literal, localhost or a name in http.allowed_hosts",
                host.chars().take(100).collect::<String>()
            );
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                detail,
            ));
        }
    }
    Ok(())
}

/// The host a `Host` header's value names: `None` for no header or an empty one (what a
/// client sends when there is no host to name: as if absent). A value that is not visible
/// ASCII names no host that could pass (as `HeaderValue::to_str` reads it).
fn named_host(value: Option<&[u8]>) -> Option<&str> {
    value
        .map(|value| visible_text(value).trim())
        .filter(|host| !host.is_empty())
}

/// `value` as text when it is visible ASCII (tabs included), else the replacement character.
fn visible_text(value: &[u8]) -> &str {
    let visible = value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    match std::str::from_utf8(value) {
        Ok(text) if visible => text,
        _ => "\u{fffd}",
    }
}

/// `host[:port]`, `[v6][:port]`: an IP literal, `localhost` or a name of `allowed`
/// (lowercase), matched without case and without a trailing dot.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split_once(']')
                .is_some_and(|(v6, port)| v6.parse::<Ipv6Addr>().is_ok() && port_ok(port))
        }
        None => match host.rfind(':') {
            Some(colon) => host.split_at(colon),
            None => (host, ""),
        },
    };
    if !port_ok(port) {
        return false;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
        || name.parse::<IpAddr>().is_ok()
}

/// Nothing, or `:` and digits.
fn port_ok(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// `Content-Encoding` only `identity`; `Transfer-Encoding` only exactly `chunked`.
fn check_encodings(headers: &HeaderMap) -> Result<(), ApiError> {
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let value = value.to_str().unwrap_or("\u{fffd}");
        let identity = |coding: &str| {
            let coding = coding.trim();
            coding.is_empty() || coding.eq_ignore_ascii_case("identity")
        };
        if !value.split(',').all(identity) {
            return Err(unsupported_encoding(
                "a Content-Encoding other than `identity` is not accepted",
            ));
        }
    }
    let mut codings = headers.get_all(header::TRANSFER_ENCODING).iter();
    match (codings.next(), codings.next()) {
        (None, _) => Ok(()),
        (Some(only), None)
            if only
                .as_bytes()
                .trim_ascii()
                .eq_ignore_ascii_case(b"chunked") =>
        {
            Ok(())
        }
        _ => Err(unsupported_transfer_encoding()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IP literals with any port, `localhost` and allowed names pass; anything else does not.
    #[test]
    fn hosts_allowed_and_refused() {
        let allowed = ["sidecar.internal".to_string()];
        for host in [
            "127.0.0.1",
            "127.0.0.1:7600",
            "[::1]:80",
            "[::1]",
            "10.1.2.3:1",
            "localhost",
            "LOCALHOST:7600",
            "localhost.",
            "sidecar.internal:7600",
            "Sidecar.Internal",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7600",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "2130706433",
            "127.1",
            "[::1",
            "[nope]:80",
            "127.0.0.1:",
            "127.0.0.1:80x",
            "user@127.0.0.1",
            "",
        ] {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }

    /// A bare status from a layer becomes the catalogue's reason for it.
    #[test]
    fn bare_statuses_get_their_reasons() {
        for (status, reason) in [
            (408, "request_timeout"),
            (413, "body_too_large"),
            (404, "not_found"),
            (405, "method_not_allowed"),
            (400, "bad_request"),
            (500, "internal"),
        ] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(refusal_for(status).reason, reason, "{status}");
            assert_eq!(refusal_for(status).status, status);
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    /// Only `identity` content and exactly `chunked` transfer encodings pass.
    #[test]
    fn encodings_allowed_and_refused() {
        for pairs in [
            &[][..],
            &[("content-encoding", "identity")],
            &[("transfer-encoding", "chunked")],
            &[("transfer-encoding", "Chunked ")],
        ] {
            assert!(check_encodings(&headers(pairs)).is_ok(), "{pairs:?}");
        }
        for pairs in [
            &[("content-encoding", "gzip")][..],
            &[("content-encoding", "identity, br")],
            &[("transfer-encoding", "gzip, chunked")],
            &[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
        ] {
            let refused = check_encodings(&headers(pairs)).unwrap_err();
            assert_eq!(refused.reason, "unsupported_encoding", "{pairs:?}");
        }
    }

    /// A head is measured as sent: 16 KiB of request line and fields pass and a byte more does
    /// not; a target over 8 KiB is 414 first (more than 100 fields never reach the guard).
    #[test]
    fn heads_over_the_limits_are_refused() {
        let guard = Guard::new(None, ApiToken::none(), Duration::from_secs(60));
        let judged = |request: Request<()>| guard.admit(&request).err().map(|e| e.reason);
        // "GET /livez HTTP/1.1\r\n" is 21 bytes, "x-pad: " and the line end 9 more.
        let padded = |value_len: usize| {
            let value = "p".repeat(value_len);
            Request::get("/livez")
                .header("x-pad", value)
                .body(())
                .unwrap()
        };
        assert_eq!(judged(padded(MAX_HEAD_BYTES - 30)), None);
        assert_eq!(
            judged(padded(MAX_HEAD_BYTES - 29)),
            Some("headers_too_large")
        );
        let long = format!("/{}", "t".repeat(MAX_URI_BYTES));
        let request = Request::get(long).header("x-pad", "p".repeat(MAX_HEAD_BYTES));
        assert_eq!(judged(request.body(()).unwrap()), Some("uri_too_long"));
    }
}

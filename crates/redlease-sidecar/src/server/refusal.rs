//! Answers the server writes itself, below the router: the 429 of a connection over
//! `http.max_connections`, and the problem+json that replaces hyper's own empty answer to a
//! request it could not parse (or its silence, for an HTTP/2 preface).

use axum::http::StatusCode;

use crate::api::error::{problem_body, ApiError};
use crate::api::guard;

/// A whole HTTP/1.1 answer of `error` as problem+json, closing the connection.
pub(super) fn answer(error: &ApiError) -> Vec<u8> {
    let body = problem_body(error.status, error.reason, &error.detail).to_string();
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        error.status.as_u16(),
        error.status.canonical_reason().unwrap_or("Error"),
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

/// The answer to a connection over the cap of `max` open connections.
pub(super) fn too_many_connections(max: usize) -> Vec<u8> {
    let detail = format!("this sidecar serves at most {max} connections at once; retry later");
    answer(&ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_connections",
        detail,
    ))
}

/// The answer in place of hyper's own error answer of `status` (400 when hyper gave none),
/// judged from `unread`, what is left of the request from the start of its head: a request
/// target over the limit is 414 whatever hyper saw first, a `Transfer-Encoding` other than
/// `chunked` is 415, a head over the limits 431, anything else 400.
pub(super) fn unparsable(status: u16, unread: &[u8]) -> Vec<u8> {
    let error = if target_len(unread) > guard::MAX_URI_BYTES || status == 414 {
        guard::uri_too_long()
    } else if status == 431 {
        guard::headers_too_large()
    } else if refused_transfer_encoding(head_fields(unread)) {
        guard::unsupported_transfer_encoding()
    } else {
        guard::bad_request("the request is not valid HTTP/1.1")
    };
    answer(&error)
}

/// Length of the request target in the request line at the start of `unread` (to the end of
/// `unread` when the line is not complete).
fn target_len(unread: &[u8]) -> usize {
    let line = unread.split(|b| *b == b'\n').next().unwrap_or(unread);
    let Some(start) = line.iter().position(|b| *b == b' ') else {
        return 0;
    };
    let rest = &line[start + 1..];
    let complete = line.len() < unread.len();
    match rest.iter().rposition(|b| *b == b' ') {
        Some(end) if complete => end,
        _ => rest.len(),
    }
}

/// The header lines of the head at the start of `unread` (none when it is not complete).
fn head_fields(unread: &[u8]) -> impl Iterator<Item = &[u8]> {
    let end = unread
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(0);
    unread[..end].split(|b| *b == b'\n').skip(1)
}

fn refused_transfer_encoding<'a>(mut fields: impl Iterator<Item = &'a [u8]>) -> bool {
    const NAME: &[u8] = b"transfer-encoding:";
    fields.any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        line.len() >= NAME.len()
            && line[..NAME.len()].eq_ignore_ascii_case(NAME)
            && !line[NAME.len()..]
                .trim_ascii()
                .eq_ignore_ascii_case(b"chunked")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(answer: &[u8]) -> String {
        let text = String::from_utf8_lossy(answer);
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        format!("{} {}", body["status"], body["reason"].as_str().unwrap())
    }

    /// hyper's statuses become the catalogue's reasons; a long target is 414 even when hyper
    /// saw a head too large; an encoding hyper refused as 400 is 415.
    #[test]
    fn hyper_statuses_become_reasons() {
        let long = format!("GET /{} HTTP/1.1\r\nhost: a\r\n\r\n", "x".repeat(9000));
        assert_eq!(
            reason(&unparsable(431, long.as_bytes())),
            "414 uri_too_long"
        );
        let cut = format!("GET /{}", "x".repeat(9000));
        assert_eq!(reason(&unparsable(431, cut.as_bytes())), "414 uri_too_long");
        let fields = "GET / HTTP/1.1\r\nx: y\r\n\r\n";
        assert_eq!(
            reason(&unparsable(431, fields.as_bytes())),
            "431 headers_too_large"
        );
        let gzip = b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert_eq!(reason(&unparsable(400, gzip)), "415 unsupported_encoding");
        let chunked = b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(reason(&unparsable(400, chunked)), "400 bad_request");
        let h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(reason(&unparsable(400, h2)), "400 bad_request");
        assert_eq!(reason(&unparsable(505, b"")), "400 bad_request");
    }

    /// The canned 429 is a complete problem+json answer that closes the connection.
    #[test]
    fn the_connection_refusal_is_complete() {
        let bytes = too_many_connections(8);
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())));
        assert_eq!(reason(text.as_bytes()), "429 too_many_connections");
    }
}

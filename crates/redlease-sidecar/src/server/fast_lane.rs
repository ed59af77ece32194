//! The two requests of every lock's cycle, `POST /v1/locks/{resource}/acquire` and
//! `DELETE /v1/leases/{id}`, read, answered and written by the connection itself, without
//! hyper: its head and body parsing into a request, its body channel, its dispatcher and its
//! answer encoding cost the sidecar's one thread more per cycle than the rest of the HTTP
//! path (`bench/README.md`). So are the keepalive and the lease's `GET`, which an app without
//! an event stream sends while it holds a lease: hyper would keep its connection from then
//! on.
//!
//! The lane takes only a request it can answer exactly as hyper and the router would: whole
//! (its body read at most [`BODY_GRACE`] after its head), HTTP/1.1, an origin-form path of
//! plain characters (no `%`, no query), a head of at most [`MAX_HEAD`] bytes and
//! [`MAX_FIELDS`] fields, `Host`, `Content-Type`, `Content-Length` and `Authorization` at most
//! once each, `Connection` only `keep-alive`, none of the fields that change how hyper or the
//! guard takes a request (encodings, `Expect`, `Upgrade`, …), and passing every check of the
//! guard; an acquisition's body a JSON object of its shape sent as `application/json`, any
//! other's empty. Fields nothing reads (`Accept`, `User-Agent`, `Accept-Encoding`, trace
//! context) are passed over, as hyper and the router pass them over. Anything else — another
//! route, an encoding, a refusal to word, a body later than that or cut short — and hyper
//! serves the connection from that request on, reading again what the lane read
//! (`GuardedIo::replay`): the lane never answers what it would answer differently.
//!
//! What hyper does around a request, the lane does the same: the socket's deadlines
//! (`GuardedIo`), the request's count in and out and busy polling (`Finished`), the request
//! limit (408), the problem+json of error answers, a client hanging up while its request is
//! in flight (the request is dropped, as hyper drops it), pipelined requests answered in
//! order, `Connection: close` on an answer, and a drain that lets the request in flight
//! finish and takes no other.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::conn_io::{Activity, GuardedIo};
use super::connection::{typed, Finished, Serving};
use super::listener::Identify;
use super::rare::Rare;
use crate::api::guard::{self, Guard};
use crate::api::{answer_read, hot_route_of, AppState, HotRequest, MAX_BODY_BYTES};

/// Longest head (request line and fields) the lane reads; a longer one is hyper's.
const MAX_HEAD: usize = 4096;
/// Most header fields the lane reads; a request with more is hyper's.
const MAX_FIELDS: usize = 24;
/// How long the lane waits for the rest of a body after its head: a client that writes a
/// body apart from its head (Python's `httpx`) sends it microseconds later. A body later than
/// this goes to hyper, whose body deadline (`http.header_read_timeout_ms`) then starts, this
/// much later than had hyper read the head.
const BODY_GRACE: Duration = Duration::from_millis(1);
/// Room a connection's read buffer starts with.
pub(super) const READ_BUFFER: usize = 8 * 1024;

/// What the front of a connection's read buffer holds.
pub(super) enum Front {
    /// The start of a head the lane may take: more bytes are needed.
    Partial,
    /// A hot request, whole, of `len` bytes.
    Hot { request: HotRequest, len: usize },
    /// The head of a request the lane may take, its body not all read yet.
    BodyComing,
    /// A request the lane does not take, or bytes that are no request: hyper's.
    Other,
}

/// What the front of `buffer` holds, for a connection guarded by `guard`.
pub(super) fn read_front(buffer: &[u8], guard: &Guard) -> Front {
    let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
    let mut head = httparse::Request::new(&mut fields);
    let head_len = match head.parse(buffer) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Partial) if buffer.len() < MAX_HEAD => return Front::Partial,
        _ => return Front::Other,
    };
    let (Some(method), Some(path), Some(1)) = (head.method, head.path, head.version) else {
        return Front::Other;
    };
    if !path.bytes().all(plain_path_byte) {
        return Front::Other;
    }
    let Some(route) = hot_route_of(method, path) else {
        return Front::Other;
    };
    let mut host = None;
    let mut authorization = None;
    let mut content_type = None;
    let mut length = None;
    for field in head.headers.iter() {
        let (name, value) = (field.name, field.value);
        let is = |known: &str| name.eq_ignore_ascii_case(known);
        // Told apart by length first: one comparison for most fields.
        let slot = match name.len() {
            4 if is("host") => &mut host,
            14 if is("content-length") => &mut length,
            12 if is("content-type") => &mut content_type,
            13 if is("authorization") => &mut authorization,
            10 if is("connection") => {
                if value.trim_ascii().eq_ignore_ascii_case(b"keep-alive") {
                    continue;
                }
                return Front::Other;
            }
            _ if hyper_or_guard_reads(name) => return Front::Other,
            // Read by neither hyper nor the sidecar (`Accept`, `User-Agent`,
            // `Accept-Encoding`, trace context, …): as if absent.
            _ => continue,
        };
        if slot.replace(value).is_some() {
            return Front::Other;
        }
    }
    let length = match length.map(decimal) {
        None => 0,
        Some(Some(length)) if length <= MAX_BODY_BYTES => length,
        Some(_) => return Front::Other,
    };
    if !route.may_read(content_type, length) || !guard.admits_read(path, host, authorization) {
        return Front::Other;
    }
    let end = head_len + length;
    let Some(body) = buffer.get(head_len..end) else {
        return Front::BodyComing;
    };
    match HotRequest::read(route, content_type, body) {
        Some(request) => Front::Hot { request, len: end },
        None => Front::Other,
    }
}

/// Whether a field of this name (other than those [`read_front`] reads itself) changes what
/// hyper or the guard does with a request: how its body is framed or encoded, an expectation,
/// an upgrade, or how the connection goes on. Such a request is hyper's; a field of any other
/// name is read by neither, nor by the handlers of the lane's routes, and the lane passes it
/// over.
fn hyper_or_guard_reads(name: &str) -> bool {
    const READ: [&str; 8] = [
        "transfer-encoding",
        "content-encoding",
        "expect",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-connection",
    ];
    READ.iter().any(|read| name.eq_ignore_ascii_case(read))
}

/// Bytes a path the lane takes may hold: letters, digits, `-._~!$&'()*+,;=:@` and `/`, all of
/// which hyper takes as they are. A `%` (which the router decodes), a query or any other
/// byte leaves the request to hyper.
fn plain_path_byte(byte: u8) -> bool {
    matches!(byte,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
        | b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')'
        | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@' | b'/')
}

/// A `Content-Length` of digits alone (spaces around them aside).
fn decimal(value: &[u8]) -> Option<usize> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 18 ASCII digits: valid UTF-8, and below u64::MAX.
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// How a connection's time on the lane ended.
pub(super) enum Ended {
    /// The connection is over: the client left, was too slow or sent nothing for too long,
    /// the server drains, or the last answer closed it.
    Closed,
    /// A request the lane does not take is at the front of the read buffer: hyper serves
    /// the connection from it on.
    ToHyper,
}

/// Serves the hot requests that come first on `io` (read into `buffer`) until one that is
/// not, or the connection's end.
pub(super) async fn serve<T, D>(
    io: &mut GuardedIo<T>,
    buffer: &mut Vec<u8>,
    state: &AppState,
    serving: &Serving,
    activity: &Arc<Activity>,
    drain: &mut Rare<D>,
) -> Ended
where
    T: AsyncRead + AsyncWrite + Identify + Unpin,
    D: Future<Output = ()>,
{
    let mut out = Vec::new();
    // When the lane stops waiting for the rest of the body of the request at the front.
    let mut body_due = None;
    loop {
        let (request, len) = match read_front(buffer, &serving.guard) {
            Front::Other => return Ended::ToHyper,
            Front::Hot { request, len } => (request, len),
            Front::BodyComing => {
                let due = *body_due.get_or_insert_with(|| body_due_at(io));
                if due <= Instant::now() {
                    return Ended::ToHyper;
                }
                match tokio::time::timeout_at(due, io.read_buf(buffer)).await {
                    Ok(Ok(n)) if n > 0 => continue,
                    // Late, or the client stopped sending (hyper reads the end again, and
                    // answers as it does), or the read failed (the head's deadline, which
                    // hyper, having the head whole, no longer enforces; or the socket's, which
                    // hyper meets again): the request is hyper's, its body deadline too.
                    _ => return Ended::ToHyper,
                }
            }
            Front::Partial => {
                // Between requests, a drain ends the connection; a head begun is read on.
                let read = if buffer.is_empty() {
                    tokio::select! {
                        biased;
                        read = io.read_buf(buffer) => read,
                        () = &mut *drain => return Ended::Closed,
                    }
                } else {
                    io.read_buf(buffer).await
                };
                match read {
                    Ok(n) if n > 0 => continue,
                    _ => return Ended::Closed,
                }
            }
        };
        buffer.drain(..len);
        body_due = None;
        let finished = Finished::dispatched(activity, serving.busy_poll.as_ref());
        let limit = serving.guard.request_limit();
        // Boxed where it is made: the handler's future is kilobytes, moved at each step on
        // its way into this one's state otherwise.
        let answer = Box::pin(answer_read(state.clone(), request));
        let answer = tokio::time::timeout(limit, answer);
        let Some(answer) = unless_hung_up(io, buffer, answer).await else {
            return Ended::Closed;
        };
        let response = match answer {
            Ok(answer) => typed(answer),
            Err(_) => guard::request_timeout().into_response(),
        };
        out.clear();
        let draining = serving.drain.is_cancelled();
        let Some(closes) = encode(response, draining, &mut out).await else {
            return Ended::Closed;
        };
        if io.write_all(&out).await.is_err() || io.flush().await.is_err() {
            return Ended::Closed;
        }
        drop(finished);
        if closes {
            return Ended::Closed;
        }
    }
}

/// When the lane stops waiting for a body whose head it read: [`BODY_GRACE`] from now, or
/// earlier, before the head's own deadline (`GuardedIo` would close the connection there, where
/// hyper, having taken the head, would wait for the body under its own deadline).
fn body_due_at<T>(io: &mut GuardedIo<T>) -> Instant {
    let soon = Instant::now() + BODY_GRACE;
    let head_due = io
        .head_deadline()
        .map(|due| due.checked_sub(BODY_GRACE).unwrap_or(due));
    head_due.map_or(soon, |head_due| head_due.min(soon))
}

/// `answer`, or `None` when the client hangs up first. As hyper does while a request is in
/// flight, the socket is read only to notice the client leaving (a read of nothing, or one
/// that fails), and not at all once bytes of a next request wait in `buffer` (they stay
/// there for their turn). As hyper does, it is read before the answer is first polled: a
/// request whose client hung up as it sent it is dropped before its handler runs, however
/// soon its answer would be ready (a keepalive, a refusal).
async fn unless_hung_up<T, F>(
    io: &mut GuardedIo<T>,
    buffer: &mut Vec<u8>,
    answer: F,
) -> Option<F::Output>
where
    T: AsyncRead + AsyncWrite + Identify + Unpin,
    F: Future,
{
    let mut answer = std::pin::pin!(answer);
    while buffer.is_empty() {
        tokio::select! {
            biased;
            read = io.read_buf(buffer) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return None;
                }
            }
            answered = &mut answer => return Some(answered),
        }
    }
    Some(answer.await)
}

/// Writes `response` into `out` as hyper writes an answer: the status line, the answer's
/// fields, its length and the date, then its body; while the server drains, with
/// `Connection: close` (as hyper's graceful shutdown adds it), so that the client sends
/// nothing more on the connection. `Some(true)` when the answer closes the connection;
/// `None` when its body failed.
async fn encode(response: Response<Body>, draining: bool, out: &mut Vec<u8>) -> Option<bool> {
    let (parts, body) = response.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    let status = parts.status;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut closes = false;
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::DATE {
            continue;
        }
        closes |= name == header::CONNECTION && says_close(value);
        push_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    if draining && !closes {
        push_field(out, b"connection", b"close");
        closes = true;
    }
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if !bodiless {
        let mut length = itoa::Buffer::new();
        push_field(out, b"content-length", length.format(body.len()).as_bytes());
    }
    push_date(out);
    out.extend_from_slice(b"\r\n");
    if !bodiless {
        out.extend_from_slice(&body);
    }
    Some(closes)
}

fn push_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Whether a `Connection` value holds `close`.
fn says_close(value: &HeaderValue) -> bool {
    let mut options = value.as_bytes().split(|byte| *byte == b',');
    options.any(|option| option.trim_ascii().eq_ignore_ascii_case(b"close"))
}

/// The `Date` field, its text made once a second per thread (as hyper caches its own).
fn push_date(out: &mut Vec<u8>) {
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second || text.is_empty() {
            *text = httpdate::fmt_http_date(now);
            *at = second;
        }
        push_field(out, b"date", text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::auth::ApiToken;

    const ID: &str = "00112233445566778899aabbccddeeff";

    fn open_guard() -> Arc<Guard> {
        Guard::new(
            Some(Arc::from([])),
            ApiToken::none(),
            Duration::from_secs(5),
        )
    }

    fn token_guard() -> Arc<Guard> {
        Guard::new(None, ApiToken::fixed("t0ken"), Duration::from_secs(5))
    }

    fn acquire(fields: &str, body: &str) -> String {
        format!("POST /v1/locks/job-1/acquire HTTP/1.1\r\n{fields}\r\n{body}")
    }

    fn plain_acquire() -> String {
        let body = r#"{"owner":"me"}"#;
        let fields = format!(
            "host: 127.0.0.1:7600\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        acquire(&fields, body)
    }

    fn release() -> String {
        format!("DELETE /v1/leases/{ID} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 0\r\n\r\n")
    }

    fn keepalive() -> String {
        format!("POST /v1/leases/{ID}/keepalive HTTP/1.1\r\nhost: localhost\r\n\r\n")
    }

    /// The length of the hot request at the front, `None` when it is not one.
    fn hot(request: &str, guard: &Guard) -> Option<usize> {
        match read_front(request.as_bytes(), guard) {
            Front::Hot { len, .. } => Some(len),
            _ => None,
        }
    }

    fn is_other(request: &str, guard: &Guard) -> bool {
        matches!(read_front(request.as_bytes(), guard), Front::Other)
    }

    /// The two requests of a cycle, as the clients send them, are taken whole; a pipelined
    /// one after them waits for its turn.
    #[test]
    fn the_lane_takes_the_two_requests_of_a_cycle() {
        let guard = open_guard();
        let acquisition = plain_acquire();
        assert_eq!(hot(&acquisition, &guard), Some(acquisition.len()));
        assert_eq!(hot(&release(), &guard), Some(release().len()));
        let pipelined = format!("{acquisition}{}", release());
        assert_eq!(hot(&pipelined, &guard), Some(acquisition.len()));
        let curl = acquire(
            "Host: localhost\r\nUser-Agent: curl/8.14\r\nAccept: */*\r\n\
             Connection: keep-alive\r\nContent-Type: Application/JSON\r\nContent-Length: 2\r\n",
            "{}",
        );
        assert_eq!(hot(&curl, &guard), Some(curl.len()));
        // As Go's net/http, Node's fetch and Python's requests send it: fields nothing reads.
        let others = acquire(
            "Host: localhost\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\
             accept-language: *\r\nsec-fetch-mode: cors\r\nX-Request-Id: 1\r\nX-Request-Id: 2\r\n\
             traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n",
            "{}",
        );
        assert_eq!(hot(&others, &guard), Some(others.len()));
        let bare = format!("DELETE /v1/leases/{ID} HTTP/1.1\r\n\r\n");
        assert_eq!(hot(&bare, &guard), Some(bare.len()));
        assert_eq!(hot(&keepalive(), &guard), Some(keepalive().len()));
        let read = format!("GET /v1/leases/{ID} HTTP/1.1\r\naccept: */*\r\n\r\n");
        assert_eq!(hot(&read, &guard), Some(read.len()));
        let token = token_guard();
        let with_token = acquire(
            "authorization: bearer   t0ken\r\ncontent-type: application/json\r\n\
             content-length: 2\r\n",
            "{}",
        );
        assert_eq!(hot(&with_token, &token), Some(with_token.len()));
        assert!(is_other(&plain_acquire(), &token), "no token");
    }

    /// A head not all read yet is waited for, and so is a body (for a while: `serve`); a head
    /// over the lane's limit is hyper's.
    #[test]
    fn a_head_or_body_begun_is_read_on() {
        let guard = open_guard();
        let whole = plain_acquire();
        let head_end = whole.find("\r\n\r\n").unwrap() + 4;
        for cut in [0, 1, 10, head_end - 1] {
            let front = read_front(&whole.as_bytes()[..cut], &guard);
            assert!(matches!(front, Front::Partial), "cut at {cut}");
        }
        for cut in [head_end, whole.len() - 1] {
            let front = read_front(&whole.as_bytes()[..cut], &guard);
            assert!(matches!(front, Front::BodyComing), "cut at {cut}");
        }
        // Not waited for: a body the lane would not take once there.
        let text = whole.replacen("application/json", "text/plain", 1);
        assert!(is_other(&text[..head_end + 1], &guard), "a text body");
        let release_with_body = release().replacen("content-length: 0", "content-length: 2", 1);
        assert!(is_other(&release_with_body, &guard), "a release's body");
        let long = format!(
            "POST /v1/locks/job/acquire HTTP/1.1\r\nuser-agent: {}",
            "a".repeat(5000)
        );
        assert!(is_other(&long, &guard));
        let long_whole = acquire(&format!("user-agent: {}\r\n", "a".repeat(5000)), "");
        assert!(is_other(&long_whole, &guard));
    }

    /// Every request the lane might answer differently from hyper and the router is left
    /// to them.
    #[test]
    fn hyper_takes_every_other_request() {
        let guard = open_guard();
        let json = "content-type: application/json\r\ncontent-length: 2\r\n";
        let with = |extra: &str| acquire(&format!("{json}{extra}"), "{}");
        let body = |content_type: &str, body: &str| {
            let fields = format!(
                "content-type: {content_type}\r\ncontent-length: {}\r\n",
                body.len()
            );
            acquire(&fields, body)
        };
        let others = [
            (
                "a query",
                plain_acquire().replacen("acquire ", "acquire?x=1 ", 1),
            ),
            ("a percent", plain_acquire().replacen("job-1", "job%2D1", 1)),
            (
                "HTTP/1.0",
                plain_acquire().replacen("HTTP/1.1", "HTTP/1.0", 1),
            ),
            ("another method", plain_acquire().replacen("POST", "PUT", 1)),
            (
                "another route",
                plain_acquire().replacen("/locks/", "/semaphores/", 1),
            ),
            (
                "absolute form",
                plain_acquire().replacen("/v1", "http://localhost/v1", 1),
            ),
            ("a space", plain_acquire().replacen("job-1", "job\"1", 1)),
            ("expect", with("expect: 100-continue\r\n")),
            ("chunked", with("transfer-encoding: chunked\r\n")),
            ("gzip", with("content-encoding: gzip\r\n")),
            ("identity", with("Content-Encoding: identity\r\n")),
            ("an upgrade", with("upgrade: h2c\r\n")),
            ("te", with("TE: trailers\r\n")),
            ("a trailer", with("trailer: x-sum\r\n")),
            ("keep-alive", with("keep-alive: timeout=5\r\n")),
            ("proxy-connection", with("proxy-connection: keep-alive\r\n")),
            ("upgrading", with("connection: upgrade\r\n")),
            (
                "two authorizations",
                with("authorization: a\r\nauthorization: b\r\n"),
            ),
            ("two lengths", with("content-length: 2\r\n")),
            ("two hosts", with("host: a\r\nhost: b\r\n")),
            ("two types", with("content-type: application/json\r\n")),
            ("closing", with("connection: close\r\n")),
            ("a host not allowed", with("host: evil.example\r\n")),
            ("a host not ASCII", with("host: l\u{f6}calhost\r\n")),
            (
                "a signed length",
                acquire(
                    "content-type: application/json\r\ncontent-length: +2\r\n",
                    "{}",
                ),
            ),
            (
                "a length too large",
                acquire(
                    "content-type: application/json\r\ncontent-length: 99999999\r\n",
                    "{}",
                ),
            ),
            ("no type", acquire("content-length: 2\r\n", "{}")),
            (
                "no length",
                acquire("content-type: application/json\r\n", ""),
            ),
            ("text", body("text/plain", "{}")),
            ("a charset", body("application/json; charset=utf-8", "{}")),
            ("not JSON", body("application/json", "{")),
            ("not an object", body("application/json", "[]")),
            (
                "an unknown key",
                body("application/json", r#"{"owner":"a","x":1}"#),
            ),
            ("a wrong kind", body("application/json", r#"{"owner":1}"#)),
            (
                "not UTF-8",
                body("application/json", "{\"owner\":\"\u{0}\"}").replace('\u{0}', "\u{ff}"),
            ),
            (
                "a release's body",
                release().replacen("content-length: 0", "content-length: 2", 1) + "{}",
            ),
            ("a release's bad id", release().replacen(ID, "nothex", 1)),
            (
                "a keepalive's body",
                keepalive().replacen("\r\n\r\n", "\r\ncontent-length: 2\r\n\r\n{}", 1),
            ),
            ("a renewal", keepalive().replacen("keepalive", "renew", 1)),
            (
                "a lease's stream",
                keepalive()
                    .replacen("POST", "GET", 1)
                    .replacen("keepalive", "events", 1),
            ),
            (
                "a release's id with a slash",
                release().replacen(ID, &format!("{ID}/x"), 1),
            ),
            ("no request", "SSH-2.0-OpenSSH_9.6\r\n\r\n".to_string()),
        ];
        for (what, request) in others {
            assert!(is_other(&request, &guard), "{what}: {request:?}");
        }
        let fields: String = (0..MAX_FIELDS + 1)
            .map(|n| format!("accept: {n}\r\n"))
            .collect();
        assert!(is_other(&with(&fields), &guard), "too many fields");
    }

    /// An answer is written as hyper writes it: the status line, its fields, its length and
    /// the date; a `204` without a length or body; `Connection: close` said, or added while
    /// the server drains (once).
    #[tokio::test]
    async fn answers_are_written_as_hyper_writes_them() {
        let written = |response: Response<Body>, draining| async move {
            let mut out = Vec::new();
            let closes = encode(response, draining, &mut out).await.unwrap();
            let text = String::from_utf8(out).unwrap();
            let (head, rest) = text.split_once("date: ").unwrap();
            let (date, body) = rest.split_once("\r\n").unwrap();
            assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
            (format!("{head}{body}"), closes)
        };
        let json = (
            StatusCode::CONFLICT,
            [(header::CONTENT_TYPE, "application/problem+json")],
            r#"{"reason":"held"}"#,
        );
        assert_eq!(
            written(json.clone().into_response(), false).await,
            (
                "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\n\
                 content-length: 17\r\n\r\n{\"reason\":\"held\"}"
                    .to_string(),
                false
            )
        );
        assert_eq!(
            written(json.into_response(), true).await,
            (
                "HTTP/1.1 409 Conflict\r\ncontent-type: application/problem+json\r\n\
                 connection: close\r\ncontent-length: 17\r\n\r\n{\"reason\":\"held\"}"
                    .to_string(),
                true
            ),
            "while the server drains"
        );
        let empty = StatusCode::NO_CONTENT.into_response();
        assert_eq!(
            written(empty, false).await,
            ("HTTP/1.1 204 No Content\r\n\r\n".to_string(), false)
        );
        let closing = (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::CONNECTION, "Keep-Alive, Close")],
            "",
        );
        assert_eq!(
            written(closing.into_response(), true).await,
            (
                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain; charset=utf-8\r\n\
                 connection: Keep-Alive, Close\r\ncontent-length: 0\r\n\r\n"
                    .to_string(),
                true
            )
        );
    }
}

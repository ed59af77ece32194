//! One HTTP/1.1 connection: the fast lane (`fast_lane`) answers the requests it takes (a lock's
//! cycle, a lease's keepalive and read), then hyper serves the guard and the API (`Api`) on the
//! guarded socket from the first request the lane does not take, and answers by itself what it
//! cannot parse (an empty 400 or 431). Then the connection closes gently: its write side
//! first, then what the client still sends is read and dropped for a moment, so the last
//! answer is not lost to a reset.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, Response};
use axum::response::IntoResponse;
use http_body_util::Limited;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::busy_poll::{Arrival, BusyPoll};
use super::conn_io::{Activity, Deadlines, GuardedIo};
use super::fast_lane;
use super::listener::Identify;
use super::rare::Rare;
use crate::api::error::PROBLEM_JSON;
use crate::api::events::StreamConn;
use crate::api::guard::{self, Guard, PARSER_MAX_HEAD_BYTES};
use crate::api::{segment_between, Api, MAX_BODY_BYTES};

/// How long a closing connection keeps reading what its client still sends.
const LINGER: Duration = Duration::from_millis(500);
/// How much a closing connection reads and drops at most.
const LINGER_BYTES: usize = 256 * 1024;
/// How long writing an answer of our own may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// What every connection is served with.
#[derive(Clone)]
pub(super) struct Serving {
    pub(super) api: Api,
    /// What every request must pass before the API.
    pub(super) guard: Arc<Guard>,
    pub(super) deadlines: Deadlines,
    /// Graceful: finish the request in flight, take no other.
    pub(super) drain: CancellationToken,
    /// The grace period is over: drop the connection.
    pub(super) abort: CancellationToken,
    /// Told of each request's arrival and of its answer (but a stream's).
    pub(super) busy_poll: Option<Arc<BusyPoll>>,
}

/// Serves `stream` until the client leaves, a deadline passes or the server stops.
pub(super) async fn serve<T>(stream: T, serving: Serving)
where
    T: AsyncRead + AsyncWrite + Identify + Unpin + Send + 'static,
{
    // Both signals are polled only when they woke the task (see `Rare`), and the connection
    // first (`biased`: no random draw per poll).
    let abort = Rare::new(serving.abort.clone().cancelled_owned());
    tokio::select! {
        biased;
        _ = serve_until_done(stream, serving) => {}
        _ = abort => {}
    }
}

/// The fast lane serves the connection's first requests, as long as it takes them; hyper
/// serves the rest, from the first the lane does not take.
async fn serve_until_done<T>(stream: T, serving: Serving)
where
    T: AsyncRead + AsyncWrite + Identify + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let mut io = GuardedIo::new(stream, Arc::clone(&activity), serving.deadlines);
    let mut drain = Rare::new(serving.drain.clone().cancelled_owned());
    let mut read = Vec::new();
    if let Some(state) = serving.api.hot_state().cloned() {
        read.reserve(fast_lane::READ_BUFFER);
        let lane = fast_lane::serve(&mut io, &mut read, &state, &serving, &activity, &mut drain);
        if let fast_lane::Ended::Closed = lane.await {
            close(io.get_mut(), None).await;
            return;
        }
    }
    let service = ConnService {
        api: serving.api,
        guard: serving.guard,
        activity,
        busy_poll: serving.busy_poll,
    };
    io.replay(read);
    let mut conn = builder().serve_connection(TokioIo::new(io), service);
    let mut pinned = Pin::new(&mut conn);
    let result = tokio::select! {
        biased;
        result = std::future::poll_fn(|cx| pinned.as_mut().get_mut().poll_without_shutdown(cx)) => result,
        _ = &mut drain => {
            pinned.as_mut().graceful_shutdown();
            std::future::poll_fn(|cx| pinned.as_mut().get_mut().poll_without_shutdown(cx)).await
        }
    };
    if let Err(error) = &result {
        tracing::debug!(%error, "connection ended");
    }
    let mut io = conn.into_parts().io.into_inner();
    close(io.get_mut(), None).await;
}

/// HTTP/1.1 only. hyper's limits on a head are the guard's parser limits, above ours, so that
/// the guard answers a head over ours; hyper's read buffer holds such a head and no more.
/// Writes go out vectored where the socket takes them so.
fn builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .max_header_size(PARSER_MAX_HEAD_BYTES)
        .max_buf_size(PARSER_MAX_HEAD_BYTES)
        .half_close(false)
        .keep_alive(true);
    builder
}

/// Sends `answer`, closes the write side, then reads and drops what the client still sends
/// (bounded in time and bytes) before the socket closes.
pub(super) async fn close<T: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut T,
    answer: Option<Vec<u8>>,
) {
    if let Some(answer) = answer {
        let sent = tokio::time::timeout(ANSWER_TIMEOUT, stream.write_all(&answer)).await;
        if !matches!(sent, Ok(Ok(()))) {
            return;
        }
    }
    if stream.shutdown().await.is_err() {
        return;
    }
    let drain = async {
        let mut buf = [0u8; 4096];
        let mut total = 0;
        while total < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// The API as one connection's hyper service: the guard first, then the API; counts
/// requests in and answers out for the socket's deadlines.
struct ConnService {
    api: Api,
    guard: Arc<Guard>,
    activity: Arc<Activity>,
    busy_poll: Option<Arc<BusyPoll>>,
}

type ServiceFuture =
    Pin<Box<dyn Future<Output = Result<Response<TrackedBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        // A stream's handler checks its reader through the connection's socket.
        let streaming = opens_a_stream(&request);
        if streaming {
            self.activity.want_socket();
            let conn = StreamConn(Arc::clone(&self.activity) as _);
            request.extensions_mut().insert(conn);
        }
        // A stream (a lease's events, an election's observers) waits on nothing in particular
        // and stays open: no busy polling for it.
        let busy_poll = self.busy_poll.as_ref().filter(|_| !streaming);
        let finished = Finished::dispatched(&self.activity, busy_poll);
        let refused = match self.guard.admit(&request) {
            Err(refused) => Some(refused.into_response()),
            Ok(()) => self.guard.unauthorized(&request),
        };
        if let Some(refused) = refused {
            let response = TrackedBody::wrap(refused, finished);
            return Box::pin(std::future::ready(Ok(response)));
        }
        let request = request.map(|body| Limited::new(body, MAX_BODY_BYTES));
        let answer = self.api.call(request);
        if streaming {
            return Box::pin(async move { Ok(TrackedBody::wrap(typed(answer.await), finished)) });
        }
        let limit = self.guard.request_limit();
        Box::pin(async move {
            let response = match tokio::time::timeout(limit, answer).await {
                Ok(answer) => typed(answer),
                Err(_) => guard::request_timeout().into_response(),
            };
            Ok(TrackedBody::wrap(response, finished))
        })
    }
}

/// A request that may open a stream of Server-Sent Events: a lease's events
/// (`GET /v1/leases/{id}/events`) or an election's observers
/// (`GET /v1/elections/{resource}/observe`). Prefix and suffix compares, no more.
fn opens_a_stream<B>(request: &Request<B>) -> bool {
    let path = request.uri().path();
    let between = |prefix, suffix| segment_between(path, prefix, suffix).is_some();
    request.method() == axum::http::Method::GET
        && (between("/v1/leases/", "/events") || between("/v1/elections/", "/observe"))
}

/// A layer's own refusal, which is not problem+json (the request timeout's bare 408, the body
/// limit's plain-text 413), is given its problem+json body, so that every error answer of the
/// service has one. Its other headers (`Allow`, …) stay.
pub(super) fn typed(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let content_type = response.headers().get(header::CONTENT_TYPE);
    let problem = content_type.is_some_and(|media| media == PROBLEM_JSON);
    if status.as_u16() < 400 || problem {
        return response;
    }
    let mut answer = guard::refusal_for(status).into_response();
    for (name, value) in response.headers() {
        if name != header::CONTENT_LENGTH && name != header::CONTENT_TYPE {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

/// Marks the request finished when dropped (its answer sent whole, or abandoned).
pub(super) struct Finished {
    activity: Arc<Activity>,
    /// Busy polling, and what it made of the request's arrival.
    busy_poll: Option<(Arc<BusyPoll>, Arrival)>,
}

impl Finished {
    /// A request handed to the API: counted in for the socket's deadlines, and told to
    /// `busy_poll` (none for a stream).
    pub(super) fn dispatched(activity: &Arc<Activity>, busy_poll: Option<&Arc<BusyPoll>>) -> Self {
        activity.dispatch();
        Self {
            activity: Arc::clone(activity),
            busy_poll: busy_poll.map(|busy_poll| (Arc::clone(busy_poll), busy_poll.arrive())),
        }
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        self.activity.finish();
        if let Some((busy_poll, arrival)) = &self.busy_poll {
            busy_poll.answer(*arrival);
        }
    }
}

/// An answer's body that marks its request finished once hyper is done with it.
pub(super) struct TrackedBody {
    body: Body,
    _finished: Finished,
}

impl TrackedBody {
    fn wrap(response: Response<Body>, finished: Finished) -> Response<Self> {
        response.map(|body| TrackedBody {
            body,
            _finished: finished,
        })
    }
}

impl hyper::body::Body for TrackedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str) -> Request<()> {
        let request = Request::builder().method(method).uri(path);
        request.body(()).expect("a valid request")
    }

    /// Streams are left out of busy polling: a lease's events and an election's observers,
    /// and nothing else.
    #[test]
    fn streams_are_told_from_requests_that_wait_on_the_masters() {
        assert!(opens_a_stream(&request("GET", "/v1/leases/abc/events")));
        assert!(opens_a_stream(&request("GET", "/v1/elections/db/observe")));
        assert!(!opens_a_stream(&request("POST", "/v1/locks/db/acquire")));
        assert!(!opens_a_stream(&request("GET", "/v1/elections/db")));
        assert!(!opens_a_stream(&request("DELETE", "/v1/leases/abc")));
        assert!(!opens_a_stream(&request(
            "POST",
            "/v1/elections/db/observe"
        )));
        // A resource or lease named like the stream's last segment opens none.
        assert!(!opens_a_stream(&request("GET", "/v1/elections/observe")));
        assert!(!opens_a_stream(&request("GET", "/v1/locks/observe")));
        assert!(!opens_a_stream(&request("GET", "/v1/locks/events")));
        assert!(!opens_a_stream(&request("GET", "/v1/leases/events")));
    }
}

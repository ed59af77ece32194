//! One HTTP/1.1 connection: hyper serves the router on the guarded socket; afterwards the
//! connection answers what hyper could not parse as problem+json, then closes gently (its
//! write side first, then what the client still sends is read and dropped for a moment, so
//! the answer is not lost to a reset).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, Response};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::conn_io::{Activity, Deadlines, GuardedIo};
use super::listener::Identify;
use super::refusal;
use crate::api::events::StreamConn;
use crate::api::guard::{self, Guard, MAX_HEAD_BYTES};

/// How long a closing connection keeps reading what its client still sends.
const LINGER: Duration = Duration::from_millis(500);
/// How much a closing connection reads and drops at most.
const LINGER_BYTES: usize = 256 * 1024;
/// How long writing an answer of our own may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// hyper's read buffer: a request head over [`MAX_HEAD_BYTES`] is refused before this fills.
const READ_BUFFER: usize = 2 * MAX_HEAD_BYTES;

/// What every connection is served with.
#[derive(Clone)]
pub(super) struct Serving {
    pub(super) router: Router,
    /// What every request must pass before the router.
    pub(super) guard: Arc<Guard>,
    pub(super) deadlines: Deadlines,
    /// Graceful: finish the request in flight, take no other.
    pub(super) drain: CancellationToken,
    /// The grace period is over: drop the connection.
    pub(super) abort: CancellationToken,
}

/// Serves `stream` until the client leaves, a deadline passes or the server stops.
pub(super) async fn serve<T>(stream: T, serving: Serving)
where
    T: AsyncRead + AsyncWrite + Identify + Unpin + Send + 'static,
{
    let abort = serving.abort.clone();
    tokio::select! {
        _ = abort.cancelled() => {}
        _ = serve_until_done(stream, serving) => {}
    }
}

async fn serve_until_done<T>(stream: T, serving: Serving)
where
    T: AsyncRead + AsyncWrite + Identify + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let io = GuardedIo::new(stream, Arc::clone(&activity), serving.deadlines);
    let service = ConnService {
        router: serving.router,
        guard: serving.guard,
        activity,
    };
    let mut conn = builder().serve_connection(TokioIo::new(io), service);
    let mut pinned = Pin::new(&mut conn);
    let result = tokio::select! {
        result = std::future::poll_fn(|cx| pinned.as_mut().get_mut().poll_without_shutdown(cx)) => result,
        _ = serving.drain.cancelled() => {
            pinned.as_mut().graceful_shutdown();
            std::future::poll_fn(|cx| pinned.as_mut().get_mut().poll_without_shutdown(cx)).await
        }
    };
    let parts = conn.into_parts();
    let mut io = parts.io.into_inner();
    let answer = own_answer(&result, &mut io, &parts.read_buf);
    if let Err(error) = &result {
        tracing::debug!(%error, answered = answer.is_some(), "connection ended");
    }
    close(io.get_mut(), answer).await;
}

/// HTTP/1.1 only; hyper's limits are ours (a head of 16 KiB; 100 fields is hyper's default,
/// [`guard::MAX_HEAD_FIELDS`], left unset: setting it puts hyper's header arrays on the heap);
/// writes are flattened so that hyper's own error answer reaches [`GuardedIo`] as one piece at
/// the end of a buffer.
fn builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(READ_BUFFER)
        .writev(false)
        .half_close(false)
        .keep_alive(true);
    builder
}

/// Our answer once hyper gave up on a request: in place of the error answer it wrote (held
/// back), or where it wrote none to a request it could not parse (an HTTP/2 preface, a head
/// cut short) while no other request was in flight. The refused head is judged from the
/// bytes the socket saw of it, else from what hyper left unread.
fn own_answer<T>(
    result: &Result<(), hyper::Error>,
    io: &mut GuardedIo<T>,
    unread: &[u8],
) -> Option<Vec<u8>> {
    let in_flight = io.request_in_flight();
    let head = if io.head().is_empty() {
        unread
    } else {
        io.head()
    };
    if let Some(status) = io.withheld() {
        return Some(refusal::unparsable(status, head));
    }
    let error = result.as_ref().err()?;
    let unparsed = error.is_parse() || (error.is_incomplete_message() && !unread.is_empty());
    (unparsed && !in_flight).then(|| refusal::unparsable(400, head))
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

/// The router as one connection's hyper service: the guard first, then the router; counts
/// requests in and answers out for the socket's deadlines.
struct ConnService {
    router: Router,
    guard: Arc<Guard>,
    activity: Arc<Activity>,
}

type ServiceFuture =
    Pin<Box<dyn Future<Output = Result<Response<TrackedBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<TrackedBody>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        self.activity.dispatch();
        if is_event_stream(&request) {
            self.activity.want_socket();
            let conn = StreamConn(Arc::clone(&self.activity) as _);
            request.extensions_mut().insert(conn);
        }
        let finished = Finished(Arc::clone(&self.activity));
        if let Err(refused) = self.guard.admit(request.uri(), request.headers()) {
            let response = TrackedBody::wrap(refused.into_response(), finished);
            return Box::pin(std::future::ready(Ok(response)));
        }
        let mut router = self.router.clone();
        // A `Router` is always ready: `poll_ready` need not be called first.
        let answer = tower_service::Service::call(&mut router, request);
        Box::pin(async move { Ok(TrackedBody::wrap(typed(answer.await?), finished)) })
    }
}

/// A request that may open an event stream (`GET …/events`): a suffix compare, no more.
fn is_event_stream<B>(request: &Request<B>) -> bool {
    request.method() == axum::http::Method::GET && request.uri().path().ends_with("/events")
}

/// A refusal without a content type (a layer's bare status, such as the request timeout's
/// 408) is given its problem+json body, so that every error answer of the service has one (the
/// socket tells hyper's own apart by that). Its other headers (`Allow`, …) stay.
fn typed(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    if status.as_u16() < 400 || response.headers().contains_key(header::CONTENT_TYPE) {
        return response;
    }
    let mut answer = guard::refusal_for(status).into_response();
    for (name, value) in response.headers() {
        if name != header::CONTENT_LENGTH {
            answer.headers_mut().append(name.clone(), value.clone());
        }
    }
    answer
}

/// Marks the request finished when dropped (its answer sent whole, or abandoned).
struct Finished(Arc<Activity>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.finish();
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

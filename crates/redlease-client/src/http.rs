//! The client's HTTP/1.1 transport to one sidecar, over TCP or a Unix socket: keep-alive
//! connections kept in a small pool between requests, each request written and its answer
//! read by the caller's own task (`exchange`). An event stream gets a connection of its own,
//! driven by hyper's client connection inside the task that reads it (no connection task,
//! no channel or wake-up between tasks, and no wake-up of the task by its own poll: see
//! `own_wakes`).

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixStream};
use tokio_util::either::Either;

use crate::exchange::{ExchangeError, Outgoing, Plain};
use crate::own_wakes::OwnWakes;
use crate::CONNECT_TIMEOUT;

/// Idle connections kept for later requests; more are closed when let go.
const MAX_IDLE: usize = 64;

/// A connection's socket.
type Stream = Either<TcpStream, UnixStream>;

/// Why a request got no answer: the sidecar could not be reached, the connection broke, or
/// the answer did not come in time.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    message: String,
    timeout: bool,
}

impl TransportError {
    /// The request (or the connection) was given up on after its time.
    pub fn is_timeout(&self) -> bool {
        self.timeout
    }

    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            timeout: false,
        }
    }

    fn timed_out(what: &str, limit: Duration) -> Self {
        Self {
            message: format!("{what}: no answer within {} ms", limit.as_millis()),
            timeout: true,
        }
    }

    fn io(what: &str, error: &io::Error) -> Self {
        Self::new(format!("{what}: {error}"))
    }

    fn http(error: &hyper::Error) -> Self {
        let mut message = error.to_string();
        let mut cause = std::error::Error::source(error);
        while let Some(error) = cause {
            message.push_str(": ");
            message.push_str(&error.to_string());
            cause = error.source();
        }
        Self::new(message)
    }
}

/// Where the sidecar listens.
#[derive(Clone, Debug)]
pub(crate) enum Endpoint {
    /// `host:port`, resolved at each new connection.
    Tcp(String),
    Unix(PathBuf),
}

/// A status and a whole body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

/// An answer whose body is read as it comes (an event stream), with its connection.
pub(crate) struct Streaming {
    pub(crate) status: u16,
    body: Incoming,
    conn: Box<Conn>,
}

/// Requests to one sidecar. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub(crate) struct Transport {
    shared: Arc<Shared>,
}

struct Shared {
    endpoint: Endpoint,
    /// The `Host` header: the URL's authority, or `localhost` on a Unix socket.
    host: HeaderValue,
    authorization: Option<HeaderValue>,
    idle: Mutex<Vec<Plain<Stream>>>,
}

/// An event stream's connection: hyper's handle to send on it, and the connection itself,
/// polled only while the stream is read.
struct Conn {
    send: http1::SendRequest<Full<Bytes>>,
    conn: http1::Connection<TokioIo<Stream>, Full<Bytes>>,
    /// The waker of what the connection and its exchanges register.
    wakes: Arc<OwnWakes>,
}

// === impl Transport ===

impl Transport {
    pub(crate) fn new(endpoint: Endpoint, host: HeaderValue) -> Self {
        Self::with(endpoint, host, None)
    }

    /// The same transport (a new pool) sending `authorization` with every request.
    pub(crate) fn authorized(&self, authorization: HeaderValue) -> Self {
        let shared = &self.shared;
        Self::with(
            shared.endpoint.clone(),
            shared.host.clone(),
            Some(authorization),
        )
    }

    fn with(endpoint: Endpoint, host: HeaderValue, authorization: Option<HeaderValue>) -> Self {
        Self {
            shared: Arc::new(Shared {
                endpoint,
                host,
                authorization,
                idle: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Sends `method path` with `json` as its body and reads the whole answer, within `limit`.
    /// A pooled connection found closed before the request went out is replaced once.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        json: Option<Vec<u8>>,
        limit: Duration,
    ) -> Result<Answer, TransportError> {
        let shared = &self.shared;
        let request = Outgoing {
            method: method.as_str(),
            path,
            host: shared.host.as_bytes(),
            authorization: shared.authorization.as_ref().map(HeaderValue::as_bytes),
            json: json.as_deref(),
        };
        let exchange = async {
            let (mut conn, reused) = match self.take_idle() {
                Some(conn) => (conn, true),
                None => (Plain::new(self.open().await?), false),
            };
            let whole = match conn.exchange(&request).await {
                Err(ExchangeError::NotSent(_)) if reused => {
                    conn = Plain::new(self.open().await?);
                    conn.exchange(&request).await
                }
                other => other,
            };
            let whole = whole.map_err(|error| match error {
                ExchangeError::NotSent(error) => TransportError::io("send the request", &error),
                ExchangeError::Failed(message) => TransportError::new(message),
            })?;
            if whole.reusable {
                self.put_idle(conn);
            }
            Ok(Answer {
                status: whole.status,
                body: whole.body,
            })
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(TransportError::timed_out(
                &format!("{method} {path}"),
                limit,
            )),
        }
    }

    /// Opens `GET path` on a connection of its own and returns once the head has arrived.
    pub(crate) async fn stream(&self, path: &str) -> Result<Streaming, TransportError> {
        let mut conn = self.connect().await?;
        let request = self.get(path);
        let response = drive(&mut conn.conn, &conn.wakes, conn.send.send_request(request))
            .await?
            .map_err(|error| TransportError::http(&error))?;
        let status = response.status().as_u16();
        Ok(Streaming {
            status,
            body: response.into_body(),
            conn,
        })
    }

    /// `GET path`, for an event stream (whole-body requests are written by `exchange`).
    fn get(&self, path: &str) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(Bytes::new()));
        // Paths are built by the client from percent-encoded segments: always a valid URI.
        *request.uri_mut() = path.parse().unwrap_or_default();
        let headers = request.headers_mut();
        headers.insert(header::HOST, self.shared.host.clone());
        if let Some(authorization) = &self.shared.authorization {
            headers.insert(header::AUTHORIZATION, authorization.clone());
        }
        request
    }

    /// A hyper connection of its own, for an event stream.
    async fn connect(&self) -> Result<Box<Conn>, TransportError> {
        let stream = self.open().await?;
        let (send, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| TransportError::http(&error))?;
        Ok(Box::new(Conn {
            send,
            conn,
            wakes: OwnWakes::new(),
        }))
    }

    /// A new socket to the sidecar.
    async fn open(&self) -> Result<Stream, TransportError> {
        let what = match &self.shared.endpoint {
            Endpoint::Tcp(authority) => format!("connect to {authority}"),
            Endpoint::Unix(path) => format!("connect to unix:{}", path.display()),
        };
        let stream = async {
            match &self.shared.endpoint {
                Endpoint::Tcp(authority) => {
                    let stream = TcpStream::connect(authority.as_str()).await?;
                    stream.set_nodelay(true)?;
                    Ok(Either::Left(stream))
                }
                Endpoint::Unix(path) => Ok(Either::Right(UnixStream::connect(path).await?)),
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, stream).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => Err(TransportError::io(&what, &error)),
            Err(_) => Err(TransportError::timed_out(&what, CONNECT_TIMEOUT)),
        }
    }

    /// An idle connection still open (one the sidecar closed meanwhile, or that has bytes
    /// nobody asked for, is dropped).
    fn take_idle(&self) -> Option<Plain<Stream>> {
        loop {
            let conn = self.idle().pop()?;
            let mut byte = [0u8; 1];
            let read = match conn.stream() {
                Either::Left(tcp) => tcp.try_read(&mut byte),
                Either::Right(unix) => unix.try_read(&mut byte),
            };
            if read.is_err_and(|error| error.kind() == io::ErrorKind::WouldBlock) {
                return Some(conn);
            }
        }
    }

    fn put_idle(&self, conn: Plain<Stream>) {
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Plain<Stream>>> {
        // Pushes and pops only: a poisoned pool is still consistent.
        self.shared
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("endpoint", &self.shared.endpoint)
            .finish_non_exhaustive()
    }
}

/// Polls `work` and, while it waits, the connection it needs; the connection ending first
/// (the sidecar closed it, or it failed) ends the exchange. Both are polled with `wakes`: the
/// connection handing `work` its answer polls `work` again at once (see `own_wakes`).
async fn drive<F: Future>(
    conn: &mut http1::Connection<TokioIo<Stream>, Full<Bytes>>,
    wakes: &Arc<OwnWakes>,
    work: F,
) -> Result<F::Output, TransportError> {
    let mut work = pin!(work);
    let mut over: Option<Result<(), hyper::Error>> = None;
    std::future::poll_fn(|cx| {
        wakes.poll(cx, |cx| {
            if let Poll::Ready(output) = work.as_mut().poll(cx) {
                return Poll::Ready(Ok(output));
            }
            if over.is_none() {
                match Pin::new(&mut *conn).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    // Over: `work` is polled once more, as it may have finished with it.
                    Poll::Ready(result) => over = Some(result),
                }
                if let Poll::Ready(output) = work.as_mut().poll(cx) {
                    return Poll::Ready(Ok(output));
                }
            }
            // The request may have reached the sidecar: never taken as unsent (hyper tells an
            // unsent one apart itself, as a cancelled request).
            let error = match over.take() {
                Some(Err(error)) => TransportError::http(&error),
                _ => TransportError::new("the sidecar closed the connection"),
            };
            Poll::Ready(Err(error))
        })
    })
    .await
}

// === impl Streaming ===

impl Streaming {
    /// The next piece of the body; `None` at its end or when the connection breaks.
    pub(crate) async fn next(&mut self) -> Option<Bytes> {
        loop {
            let frame = drive(&mut self.conn.conn, &self.conn.wakes, self.body.frame())
                .await
                .ok()?;
            match frame? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some(data);
                    }
                }
                Err(_) => return None,
            }
        }
    }
}

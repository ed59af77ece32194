//! The accept loop: a task per connection, up to `http.max_connections` at once (the next
//! connection is answered 429 `too_many_connections` and closed), until told to stop. Then
//! the listener goes (a Unix socket file with it), every connection finishes the request in
//! flight and closes, and whatever is left is dropped once the server is aborted.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::busy_poll::BusyPoll;
use super::conn_io::Deadlines;
use super::connection::{self, Serving};
use super::listener::{Listener, Stream};
use crate::api::error::{problem_body, PROBLEM_JSON};
use crate::api::guard::Guard;
use crate::api::Api;
use crate::config::HttpSettings;

/// Refused connections answered at once, each for up to about 1.5 s; past this many, a
/// refused connection gets its answer in one non-blocking send and is closed at once.
const MAX_REFUSING: usize = 64;
/// Pause after an accept error that is not the client's (out of file descriptors, …).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `api` behind `guard` on `listener` until `stop` resolves, then drains the
/// connections; returns once they are all closed. `abort` drops every connection at once.
/// Requests tell `busy_poll` of their arrival and answer, when there is one.
pub(super) async fn serve(
    listener: Listener,
    (api, guard, busy_poll): (Api, Arc<Guard>, Option<Arc<BusyPoll>>),
    http: &HttpSettings,
    stop: impl Future<Output = ()>,
    abort: CancellationToken,
) {
    let drain = CancellationToken::new();
    let serving = Serving {
        api,
        guard,
        deadlines: Deadlines {
            head: http.header_read_timeout,
            idle: http.idle_timeout,
        },
        drain: drain.clone(),
        abort,
        busy_poll,
    };
    let slots = Arc::new(Semaphore::new(http.max_connections));
    let refusals = Refusals {
        answer: too_many_connections(http.max_connections).into(),
        slots: Arc::new(Semaphore::new(MAX_REFUSING)),
    };
    let tracker = TaskTracker::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok(stream) => stream,
            Err(error) => {
                backoff(error).await;
                continue;
            }
        };
        match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => {
                tracker.spawn(serve_stream(stream, serving.clone(), slot));
            }
            Err(_) => refusals.refuse(stream, &tracker),
        }
    }
    drop(listener);
    drain.cancel();
    tracker.close();
    tracker.wait().await;
}

async fn serve_stream(stream: Stream, serving: Serving, _slot: OwnedSemaphorePermit) {
    match stream {
        Stream::Tcp(stream) => connection::serve(stream, serving).await,
        Stream::Unix(stream) => connection::serve(stream, serving).await,
    }
}

/// The whole HTTP/1.1 answer to a connection over the cap of `max` open connections, sent
/// before anything is read from it: 429 problem+json, closing the connection.
fn too_many_connections(max: usize) -> Vec<u8> {
    let detail = format!("this sidecar serves at most {max} connections at once; retry later");
    let status = StatusCode::TOO_MANY_REQUESTS;
    let body = problem_body(status, "too_many_connections", &detail);
    // A problem is strings and a number: it always encodes.
    let body = serde_json::to_string(&body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: {PROBLEM_JSON}\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Error"),
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

/// How connections over the cap are answered.
struct Refusals {
    answer: Arc<[u8]>,
    slots: Arc<Semaphore>,
}

impl Refusals {
    fn refuse(&self, stream: Stream, tracker: &TaskTracker) {
        tracing::debug!("connection refused: too many connections");
        match stream {
            Stream::Tcp(stream) => self.answer_then_close(stream, tracker),
            Stream::Unix(stream) => self.answer_then_close(stream, tracker),
        }
    }

    fn answer_then_close<T>(&self, mut stream: T, tracker: &TaskTracker)
    where
        T: AsyncRead + AsyncWrite + std::os::fd::AsFd + Unpin + Send + 'static,
    {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(slot) => {
                let answer = self.answer.to_vec();
                tracker.spawn(async move {
                    connection::close(&mut stream, Some(answer)).await;
                    drop(slot);
                });
            }
            Err(_) => {
                // A new socket's send buffer takes the few hundred bytes whole.
                let _ = socket2::SockRef::from(&stream).send(&self.answer);
            }
        }
    }
}

/// Errors of one connection are the client's and are skipped; others (out of descriptors)
/// are logged and pause the loop a moment rather than spin.
async fn backoff(error: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        return;
    }
    tracing::warn!(%error, "cannot accept a connection");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canned 429 is a complete problem+json answer that closes the connection.
    #[test]
    fn the_connection_refusal_is_complete() {
        let text = String::from_utf8(too_many_connections(8)).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        assert!(text.contains(&format!("content-length: {}\r\n", body.len())));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["reason"], "too_many_connections");
        assert_eq!(body["status"], 429);
    }
}

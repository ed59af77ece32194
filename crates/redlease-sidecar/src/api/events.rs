//! `GET /v1/leases/{id}/events`: a lease's events as Server-Sent Events, and the stream's
//! heartbeats. Before each heartbeat the stream asks the kernel how far the app has read
//! (`sockdiag`) and hands what that proves to the lease (`lease::reading`): the stream keeps
//! the app counted as alive only while the app reads it. The server tells the handler which
//! socket the stream is on ([`StreamConn`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::Extension;
use futures_util::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use utoipa::ToSchema;

use super::error::ApiError;
use super::handlers::lease_id;
use super::requests::LeaseIdParam;
use super::AppState;
use crate::lease::reading::{heartbeat_period, ReadingChecks, Sample};
use crate::lease::{LeaseEvent, LeaseState, LeaseView, Watch, WatchGuard};
use crate::metrics::{self, METRICS};
use crate::sockdiag::{self, Reading, SocketId};

/// The connection's socket, as the server knows it: put in the extensions of event-stream
/// requests only.
pub(crate) trait StreamSocket: Send + Sync {
    /// The socket, once the server could tell it (after the answer's head was written);
    /// `None` before that or for a connection that has none.
    fn socket(&self) -> Option<SocketId>;
}

/// The request extension that carries the connection's [`StreamSocket`].
#[derive(Clone)]
pub(crate) struct StreamConn(pub Arc<dyn StreamSocket>);

/// One Server-Sent Event of a lease's stream: its `event:` line names it, its `data:` line is
/// the lease at that moment as JSON (one line). Heartbeats are empty comment lines (`:`).
#[derive(ToSchema)]
#[allow(dead_code)] // Describes the stream's frames, which `sse` writes; never built.
pub(crate) struct StreamEvent {
    /// The `event:` line.
    event: LeaseEventName,
    /// The `data:` line: the lease.
    data: LeaseView,
}

/// The name of a lease's event.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Describes the names the lease module sends; never built.
pub(crate) enum LeaseEventName {
    /// A renewal extended the lease.
    Renewed,
    /// A renewal fell short and a quorum of shadows keeps the lease; again at each shadow
    /// refresh.
    Degraded,
    /// The first renewal after `degraded`.
    Recovered,
    /// The lease is lost (`reason` `expired`, `not_ours`, `revoked` or `invalid`); the last
    /// event.
    Lost,
    /// A quorum confirmed the release (`reason` `released`, `idle` or `shutdown`), or every
    /// key it could have left expired (`expired`); the last event.
    Released,
}

/// Server-Sent Events of one lease; ends after `lost` or `released`. Each open stream holds
/// one of `http.max_event_streams` permits until it ends or its client goes.
#[utoipa::path(
    get,
    path = "/v1/leases/{id}/events",
    operation_id = "leaseEvents",
    tag = "leases",
    params(LeaseIdParam),
    responses((
        status = 200,
        description = "Server-Sent Events, each a `StreamEvent`: `event:` one of `renewed`, \
            `degraded`, `recovered`, `lost`, `released`, and `data:` the lease (`LeaseView`). \
            Nothing is sent on opening; a lease already ended sends its one last event and the \
            stream ends; every stream ends after `lost` or `released`. Heartbeats (`:`) come \
            every quarter of the lease's `idle_timeout_ms` (50 ms to 5 s).",
        content_type = "text/event-stream",
        body = String,
    )),
)]
pub(crate) async fn events(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    conn: Option<Extension<StreamConn>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = lease_id(id)?;
    let permit = Arc::clone(&state.streams)
        .try_acquire_owned()
        .map_err(|_| {
            let detail = "too many event streams are open; retry later";
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", detail)
        })?;
    let watch = state
        .manager
        .watch(id)
        .ok_or_else(ApiError::unknown_lease)?;
    let conn = conn.map(|Extension(conn)| conn);
    Ok(Sse::new(event_stream(watch, permit, conn)))
}

/// The lease's events and heartbeats; a lease that already ended gives its last state and
/// closes.
fn event_stream(
    watch: Watch,
    permit: OwnedSemaphorePermit,
    conn: Option<StreamConn>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let Watch {
        view,
        events,
        guard,
    } = watch;
    let ended = view.state.is_terminal().then(|| LeaseEvent {
        event: if view.state == LeaseState::Lost {
            "lost"
        } else {
            "released"
        },
        lease: view.clone(),
    });
    let feed = Feed::new(events, guard, permit, conn, view.lease_id.to_string());
    futures_util::stream::unfold((feed, ended, false), |(mut feed, ended, done)| async move {
        if done {
            return None;
        }
        if let Some(event) = ended {
            return Some((Ok(sse(&event)), (feed, None, true)));
        }
        match feed.next().await? {
            Next::Event(event) => {
                let last = event.lease.state.is_terminal();
                Some((Ok(sse(&event)), (feed, None, last)))
            }
            Next::Heartbeat => Some((Ok(Event::default().comment("")), (feed, None, false))),
        }
    })
}

fn sse(event: &LeaseEvent) -> Event {
    let data = serde_json::to_string(&event.lease).unwrap_or_default();
    Event::default().event(event.event).data(data)
}

/// What the stream sends next.
enum Next {
    /// Boxed: a lease is a few hundred bytes, and most of what a stream sends is heartbeats.
    Event(Box<LeaseEvent>),
    /// An empty comment line, right after a check of the reader.
    Heartbeat,
}

/// One open stream: the lease's events, its hold on the lease, and its checks.
struct Feed {
    events: broadcast::Receiver<LeaseEvent>,
    guard: WatchGuard,
    _permit: OwnedSemaphorePermit,
    reader: StreamReader,
    /// A second look, this long after a Unix check found something unconsumed (an event sent
    /// a moment before the check may not have been read yet).
    recheck: Duration,
    lease_id: String,
    /// Whether the log has said that this stream cannot be checked.
    told_unchecked: bool,
}

impl Feed {
    fn new(
        events: broadcast::Receiver<LeaseEvent>,
        guard: WatchGuard,
        permit: OwnedSemaphorePermit,
        conn: Option<StreamConn>,
        lease_id: String,
    ) -> Self {
        let period = heartbeat_period(guard.idle_timeout());
        Self {
            events,
            guard,
            _permit: permit,
            reader: StreamReader::new(conn, period, Instant::now()),
            recheck: period / 10,
            lease_id,
            told_unchecked: false,
        }
    }

    /// The next event, or a heartbeat once a check is due; `None` once the lease's events
    /// are over.
    async fn next(&mut self) -> Option<Next> {
        loop {
            tokio::select! {
                received = self.events.recv() => match received {
                    Ok(event) => return Some(Next::Event(Box::new(event))),
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return None,
                },
                _ = self.reader.heartbeat.tick() => {
                    self.check().await;
                    return Some(Next::Heartbeat);
                }
            }
        }
    }

    /// Asks how far the app has read and tells the lease what that proves.
    async fn check(&mut self) {
        let now = Instant::now();
        let sample = self.sample().await;
        let proof = self.reader.judge(now, sample);
        if let Some(at) = proof {
            self.guard.alive_at(at);
        }
        if sample == Sample::Unchecked && !self.told_unchecked {
            self.told_unchecked = true;
            tracing::warn!(
                lease_id = %self.lease_id,
                "event stream cannot be checked (its peer is not on this host, or the kernel \
                 did not answer): it does not count as a sign of life; keepalive does"
            );
        }
    }

    /// How far the app has read: a Unix check that finds something unconsumed looks again
    /// `recheck` later (an event sent a moment before the check may not have been read yet).
    async fn sample(&self) -> Sample {
        let first = self.reader.sample();
        if first != Sample::Drained(false) {
            return first;
        }
        tokio::time::sleep(self.recheck).await;
        self.reader.sample()
    }
}

/// The reader of a stream (a lease's events, an election's observers), checked before each
/// heartbeat: the stream's socket, its heartbeat, and what the checks so far found.
pub(super) struct StreamReader {
    conn: Option<StreamConn>,
    /// Ticks when the next check and heartbeat are due.
    pub(super) heartbeat: Interval,
    checks: ReadingChecks,
}

impl StreamReader {
    /// The reader on `conn` (`None`: a connection the server could not tell), checked every
    /// `period` from `now`.
    pub(super) fn new(conn: Option<StreamConn>, period: Duration, now: Instant) -> Self {
        let mut heartbeat = tokio::time::interval_at(now + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self {
            conn,
            heartbeat,
            checks: ReadingChecks::new(now),
        }
    }

    /// How far the reader has read, as the kernel tells now.
    pub(super) fn sample(&self) -> Sample {
        match self.conn.as_ref().and_then(|conn| conn.0.socket()) {
            Some(socket) => sample_of(&socket),
            None => Sample::Unchecked,
        }
    }

    /// Takes the check made at `now`: the instant the reader is proven to have been alive at,
    /// if `sample` proves anything; counted in `lock_event_stream_checks_total`.
    pub(super) fn judge(&mut self, now: Instant, sample: Sample) -> Option<Instant> {
        let proof = self.checks.observe(now, sample);
        let outcome = match (sample, proof) {
            (Sample::Unchecked, _) => "unchecked",
            (_, Some(_)) => "read",
            (_, None) => "unread",
        };
        METRICS
            .stream_checks
            .add(1, &metrics::label("outcome", outcome));
        proof
    }
}

/// The kernel's answer for `socket` as a check's sample.
fn sample_of(socket: &SocketId) -> Sample {
    match sockdiag::reading(socket) {
        Ok(Some(Reading::Tcp { received, unread })) => Sample::Received {
            received,
            unread: u64::from(unread),
        },
        Ok(Some(Reading::Unix { unconsumed })) => Sample::Drained(unconsumed == 0),
        Ok(None) => Sample::Unchecked,
        Err(error) => {
            tracing::debug!(%error, "sock_diag query failed");
            Sample::Unchecked
        }
    }
}

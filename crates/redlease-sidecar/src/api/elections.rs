//! The election routes: a campaign (`POST /v1/elections/{resource}/campaign`, a lease the
//! `/v1/leases/{id}` routes manage like any other, whose fencing token is the term), the
//! leader's proclamation (`POST /v1/leases/{id}/proclaim`), the leader as a quorum of masters
//! says (`GET /v1/elections/{resource}`) and its changes as Server-Sent Events
//! (`GET /v1/elections/{resource}/observe`). Resigning is `DELETE /v1/leases/{id}`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use utoipa::ToSchema;

use super::answers::Json;
use super::body::{JsonBody, Millis};
use super::error::ApiError;
use super::events::{StreamConn, StreamReader};
use super::handlers::{acquire_request, answer_acquisition, lease_id, renew_error, resource_path};
use super::requests::{AcquireBody, LeaseIdParam};
use super::AppState;
use crate::keys::validate_value;
use crate::lease::reading::{heartbeat_period, Sample};
use crate::lease::{AcquireKind, LeaseView};
use crate::redlock::election::DEFAULT_OBSERVE_POLL;
use crate::redlock::Leadership;

/// Body of `POST /v1/elections/{resource}/campaign`: the acquire body's fields and the value
/// the leader proclaims (unknown fields are refused; `null` is the same as leaving a field
/// out).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CampaignBody {
    /// Who campaigns: 1–256 bytes, no control or format characters.
    #[schema(value_type = String, min_length = 1)]
    owner: Option<String>,
    /// What the leader proclaims (an address, an id…): 0–4096 bytes of UTF-8 without control
    /// characters; default empty.
    #[schema(max_length = 4096)]
    value: Option<String>,
    /// TTL (ms), 10 to `lease.max_ttl_ms`; default: the adaptive TTL.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 10)]
    ttl_ms: Millis,
    /// How long to wait for the leadership (ms), at most `lease.max_wait_ms`; default 0.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    wait_ms: Millis,
    /// Whether the sidecar renews the lease; default `true`.
    auto_renew: Option<bool>,
    /// Release (resign) the lease after this long without a sign of life (ms), 1 to
    /// `lease.max_idle_timeout_ms`; default `lease.idle_timeout_ms`.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1)]
    idle_timeout_ms: Millis,
    /// Wait in one queue with the fair candidates of every sidecar in this election, first
    /// come first served (with `wait_ms`); default `false`.
    fair: Option<bool>,
}

/// Body of `POST /v1/leases/{id}/proclaim`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ProclaimBody {
    /// The new value: 0–4096 bytes of UTF-8 without control characters.
    #[schema(value_type = String, max_length = 4096)]
    value: Option<String>,
}

/// Who leads an election, as a quorum of masters says (`GET /v1/elections/{resource}`, and
/// the data of every observed event).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct ElectionView {
    /// The leader's lease (32 lowercase hex digits); only with `leader`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9a-f]{32}$")]
    lease_id: Option<String>,
    /// The leader's owner; only with `leader`.
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    /// `leader`, `vacant` or `unknown`.
    state: ElectionState,
    /// The leader's term (its lease's fencing token); only with `leader`.
    #[serde(skip_serializing_if = "Option::is_none")]
    term: Option<u64>,
    /// How long a quorum of masters still keeps the leader (ms); only with `leader`.
    #[serde(skip_serializing_if = "Option::is_none")]
    validity_ms: Option<u64>,
    /// The value the leader proclaimed last; only with `leader`.
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
}

/// Where an election stands (also the name of an observed event).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ElectionState {
    /// A quorum of masters carries the leader's lease, term and value.
    Leader,
    /// A quorum of masters answered, and no lease is (or can be) on a quorum of them.
    Vacant,
    /// The masters cannot tell: fewer than a quorum answered or agree; or, to an observer, a
    /// term lower than one it was already told.
    Unknown,
}

/// One Server-Sent Event of an observe stream: its `event:` line names the state, its `data:`
/// line is the election as `GET /v1/elections/{resource}` answers it. Heartbeats are empty
/// comment lines (`:`).
#[derive(ToSchema)]
#[allow(dead_code)] // Describes the stream's frames, which `observe` writes; never built.
pub(crate) struct ElectionEvent {
    /// The `event:` line: `leader`, `vacant` or `unknown`.
    event: ElectionState,
    /// The `data:` line.
    data: ElectionView,
}

impl From<&Leadership> for ElectionView {
    fn from(leadership: &Leadership) -> Self {
        let leader = leadership.leader();
        Self {
            lease_id: leader.map(|l| l.lease_id.to_string()),
            owner: leader.map(|l| l.owner.clone()),
            state: match leadership {
                Leadership::Leader(_) => ElectionState::Leader,
                Leadership::Vacant => ElectionState::Vacant,
                Leadership::Unknown => ElectionState::Unknown,
            },
            term: leader.map(|l| l.term),
            validity_ms: leader.map(|l| l.validity.as_millis() as u64),
            value: leader.map(|l| l.value.clone()),
        }
    }
}

/// Campaign for the leadership of an election: granted as a lock is (one leader at a time),
/// its fencing token is the **term**, written with `value` on a quorum of masters before the
/// answer. Resign with `DELETE /v1/leases/{id}`; change the value with
/// `POST /v1/leases/{id}/proclaim`.
#[utoipa::path(
    post,
    path = "/v1/elections/{resource}/campaign",
    operation_id = "campaign",
    tag = "elections",
    params(("resource" = String, Path,
        description = "1–512 bytes of UTF-8 (percent-decoded), no control or format characters")),
    request_body(content = CampaignBody, content_type = "application/json"),
    responses((status = 200, description = "The leader's lease, with its `term` and `value`", body = LeaseView)),
)]
pub(super) async fn campaign(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<CampaignBody>, ApiError>,
) -> Result<Response, ApiError> {
    let resource = resource_path(resource)?;
    let JsonBody(body) = body?;
    let value = body.value.unwrap_or_default();
    validate_value(&value)?;
    let common = AcquireBody {
        owner: body.owner,
        ttl_ms: body.ttl_ms,
        wait_ms: body.wait_ms,
        auto_renew: body.auto_renew,
        idle_timeout_ms: body.idle_timeout_ms,
        fair: body.fair,
    };
    let mut request = acquire_request(&state, resource, common, AcquireKind::Lock)?;
    request.campaign = Some(value);
    answer_acquisition(&state, request).await
}

/// The leader proclaims a new value: written over its lease's key on a quorum of masters,
/// the term unchanged (a sign of life). 409 `not_a_campaign` for a lease that is no
/// election's.
#[utoipa::path(
    post,
    path = "/v1/leases/{id}/proclaim",
    operation_id = "proclaimLease",
    tag = "elections",
    params(LeaseIdParam),
    request_body(content = ProclaimBody, content_type = "application/json"),
    responses((status = 200, description = "The lease, with its new `value`", body = LeaseView)),
)]
pub(super) async fn proclaim(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    body: Result<JsonBody<ProclaimBody>, ApiError>,
) -> Result<Response, ApiError> {
    let id = lease_id(id)?;
    let JsonBody(body) = body?;
    let value = body
        .value
        .ok_or_else(|| ApiError::bad_request("invalid_value", "value is required"))?;
    let view = state
        .manager
        .proclaim(id, &value)
        .await
        .map_err(renew_error)?;
    Ok(Json(view).into_response())
}

/// Who leads the election now, as a quorum of masters says: `leader` (with owner, value,
/// term, validity and lease), `vacant` or `unknown`.
#[utoipa::path(
    get,
    path = "/v1/elections/{resource}",
    operation_id = "showElection",
    tag = "elections",
    params(("resource" = String, Path, description = "The resource (percent-decoded)")),
    responses((status = 200, description = "The election", body = ElectionView)),
)]
pub(super) async fn show(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
) -> Result<Json<ElectionView>, ApiError> {
    let resource = resource_path(resource)?;
    let leadership = state.engine.leader(&resource).await?;
    Ok(Json(ElectionView::from(&leadership)))
}

/// The election's changes as Server-Sent Events, the first at once: `leader`, `vacant` or
/// `unknown`, each with the election as `GET` answers it, sent whenever the state, the
/// leader, its term or its value changes. The masters are read every 200 ms and at once when
/// a leader resigns or proclaims. Each open stream holds one of `http.max_event_streams`
/// permits until it ends: when its client goes, when its client has read nothing of it for
/// `lease.idle_timeout_ms` (checked as a lease's event stream is, before each heartbeat), or
/// at the sidecar's shutdown.
#[utoipa::path(
    get,
    path = "/v1/elections/{resource}/observe",
    operation_id = "observeElection",
    tag = "elections",
    params(("resource" = String, Path, description = "The resource (percent-decoded)")),
    responses((
        status = 200,
        description = "Server-Sent Events, each an `ElectionEvent`: `event:` one of `leader`, \
            `vacant`, `unknown`, and `data:` the election (`ElectionView`). The first comes at \
            once; then one per change (the validity aside). Terms never go back on one stream: \
            a read showing a lower term than one sent is sent as `unknown`. Heartbeats (`:`) \
            every quarter of the sidecar's `lease.idle_timeout_ms` (50 ms to 5 s); a client \
            on this host that has read nothing of the stream for `lease.idle_timeout_ms` (four \
            heartbeats at least) has its stream ended.",
        content_type = "text/event-stream",
        body = String,
    )),
)]
pub(super) async fn observe(
    State(state): State<AppState>,
    resource: Result<Path<String>, PathRejection>,
    conn: Option<Extension<StreamConn>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let resource = resource_path(resource)?;
    let permit = Arc::clone(&state.streams)
        .try_acquire_owned()
        .map_err(|_| {
            let detail = "too many event streams are open; retry later";
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_streams", detail)
        })?;
    let observer = state.engine.observe(&resource, DEFAULT_OBSERVE_POLL)?;
    let client = ObserverReader::new(
        resource,
        conn.map(|Extension(conn)| conn),
        state.manager.policy().idle_timeout,
        Instant::now(),
    );
    // The stream ends at shutdown, so that it holds no connection the drain waits for.
    let closing = Box::pin(state.manager.closing());
    // The changes as a stream of their own, which keeps a read of the masters in progress
    // while a heartbeat goes out (a read cut short at every heartbeat would never end when
    // reads take longer than the heartbeat period, as with frozen masters).
    let changes = Box::pin(futures_util::stream::unfold(
        observer,
        |mut observer| async {
            let told = observer.next().await;
            Some((told, observer))
        },
    ));
    let stream = futures_util::stream::unfold(
        (changes, client, permit, closing),
        |(mut changes, mut client, permit, mut closing)| async move {
            let event = tokio::select! {
                told = changes.next() => {
                    let told = told?;
                    let view = ElectionView::from(&told);
                    let data = serde_json::to_string(&view).unwrap_or_default();
                    Event::default().event(told.state()).data(data)
                }
                _ = client.reader.heartbeat.tick() => {
                    if client.gone() {
                        return None;
                    }
                    Event::default().comment("")
                }
                _ = &mut closing => return None,
            };
            Some((Ok(event), (changes, client, permit, closing)))
        },
    );
    Ok(Sse::new(stream))
}

/// The client of one observe stream, checked before each heartbeat as a lease's event stream
/// is: a client that has read nothing for the idle timeout (a frozen or stuck process, whose
/// kernel keeps the connection open) is gone, and its stream gives its permit back.
struct ObserverReader {
    resource: String,
    reader: StreamReader,
    /// The latest instant the client was proven to read at (its opening at first), or the last
    /// check that could not tell (a client off this host is not judged).
    alive: Instant,
    /// How long the client may go without a proof of reading: the idle timeout, and at least
    /// four heartbeat periods (a live reader's newest proof is up to two periods old).
    unread_limit: Duration,
}

impl ObserverReader {
    fn new(
        resource: String,
        conn: Option<StreamConn>,
        idle_timeout: Duration,
        now: Instant,
    ) -> Self {
        let period = heartbeat_period(idle_timeout);
        Self {
            resource,
            reader: StreamReader::new(conn, period, now),
            alive: now,
            unread_limit: idle_timeout.max(4 * period),
        }
    }

    /// Checks how far the client has read; `true` once it has read nothing for the idle
    /// timeout. One look at the kernel, no second look later (as a lease's stream takes over a
    /// Unix socket): an unconsumed heartbeat proves nothing this time, and the next check
    /// looks again, while the changes go on being told.
    fn gone(&mut self) -> bool {
        let sample = self.reader.sample();
        let now = Instant::now();
        match (sample, self.reader.judge(now, sample)) {
            (Sample::Unchecked, _) => self.alive = now,
            (_, Some(at)) => self.alive = self.alive.max(at),
            (_, None) => {}
        }
        let gone = now.saturating_duration_since(self.alive) > self.unread_limit;
        if gone {
            tracing::info!(
                resource = %self.resource,
                "an election's observer has read nothing for its idle timeout: its stream \
                 is ended"
            );
        }
        gone
    }
}

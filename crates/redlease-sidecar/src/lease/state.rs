//! One tracked lease: its record, its state machine (`held ⇄ degraded → releasing →
//! released`, `held | degraded → lost`), the pure decision of what its task does next, and
//! the record's lock, which tells the lease's followers where its validity ends.

use std::ops::{Deref, DerefMut};
use std::sync::{MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;
use utoipa::ToSchema;

use super::reentry::Holds;
use crate::keys::{parse_lock_name, LockKind, LockName, SlotSet};
use crate::redlock::election::election_tail;
use crate::redlock::Lease;
use crate::LeaseId;

/// Where a lease stands, as the API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// Held and valid.
    Held,
    /// A renewal fell short and a quorum of shadows keeps it: still valid.
    Degraded,
    /// The app (or idleness, or shutdown) asked for the release and a quorum of masters has
    /// not confirmed it yet: no longer the app's to act on, and the release keeps trying.
    Releasing,
    /// Lost: its validity ran out, or the masters say it is not ours any more.
    Lost,
    /// Released: a quorum confirmed the release, or every key it could have left expired.
    Released,
}

impl LeaseState {
    /// Lost or released: nothing more happens to the lease.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Lost | Self::Released)
    }

    /// No longer valid for the app: releasing, lost or released. Its validity is 0.
    pub fn is_ended(self) -> bool {
        self.is_terminal() || self == Self::Releasing
    }
}

/// What this sidecar knows about one lease it holds.
#[derive(Clone, Debug)]
pub(crate) struct LeaseRecord {
    pub lease: Lease,
    /// A semaphore permit's limit (its lease's resource names the slot); `None` for a lock.
    pub limit: Option<u32>,
    /// An election leader's value, as it proclaimed it last (its lease's resource names the
    /// election, its fencing token is the term); `None` for a lock or a permit.
    pub election: Option<String>,
    /// Where it stands.
    pub state: LeaseState,
    /// When the lease was granted (for the hold-duration metric).
    pub acquired_at: Instant,
    /// Why the lease was lost or released (`expired`, `not_ours`, `idle`, `shutdown`, …).
    pub reason: Option<&'static str>,
    /// Whether the sidecar renews it.
    pub auto_renew: bool,
    /// With auto-renewal, the lease is released when the app shows no sign of life this long.
    pub idle_timeout: Duration,
    /// Last sign of life from the app: acquire, keepalive, renew, an event stream opening or
    /// closing, or the app reading its event stream (`reading`).
    pub last_seen: Instant,
    /// When the next automatic renewal is due.
    pub renew_at: Instant,
    /// When the lease stopped being valid for the app (release began, or it was lost).
    pub ended_at: Option<Instant>,
    /// Its re-entry holds (`POST …/reenter`): open ones, and the ids of those released.
    pub holds: Holds,
}

/// What the lease's task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing until this instant (or a wake-up).
    Wait(Instant),
    Renew,
    /// Validity ran out without a successful renewal: lost, at once.
    Expire,
    /// The app went quiet: release the lease.
    IdleRelease,
    /// Lost or released: the task ends.
    Done,
}

/// How long the task of a lease being released sleeps between looks (its release task wakes
/// it when done).
const RELEASING_NAP: Duration = Duration::from_secs(3600);

impl LeaseRecord {
    /// The next step at `now`. Validity is checked first: a lease never outlives it silently.
    pub(crate) fn next_step(&self, now: Instant) -> Step {
        if self.state.is_terminal() {
            return Step::Done;
        }
        if self.state == LeaseState::Releasing {
            return Step::Wait(now + RELEASING_NAP);
        }
        if now >= self.lease.valid_until {
            return Step::Expire;
        }
        let mut wake = self.lease.valid_until;
        if self.auto_renew {
            // An idle timeout past the end of time (`NEVER_IDLE`) never passes.
            if let Some(idle_at) = self.last_seen.checked_add(self.idle_timeout) {
                if now >= idle_at {
                    return Step::IdleRelease;
                }
                wake = wake.min(idle_at);
            }
            if now >= self.renew_at {
                return Step::Renew;
            }
            wake = wake.min(self.renew_at);
        }
        Step::Wait(wake)
    }

    /// The state as of `now`: a lease past its validity is lost even before its task says so.
    pub(crate) fn state_at(&self, now: Instant) -> LeaseState {
        if !self.state.is_ended() && now >= self.lease.valid_until {
            LeaseState::Lost
        } else {
            self.state
        }
    }

    /// Validity left at `now`: zero once the lease has ended, whatever its keys still say.
    pub(crate) fn remaining_validity(&self, now: Instant) -> Duration {
        if self.state.is_ended() {
            return Duration::ZERO;
        }
        self.lease.remaining_validity(now)
    }

    /// When the validity ends (or ended): the lease's `valid_until`, or when it ended sooner.
    pub(crate) fn valid_until(&self) -> Instant {
        match self.ended_at {
            Some(ended) => ended.min(self.lease.valid_until),
            None => self.lease.valid_until,
        }
    }

    /// Re-entry holds open on a lease in `state`: none once it has ended, which closed them all.
    pub(crate) fn open_holds(&self, state: LeaseState) -> usize {
        match state.is_ended() {
            true => 0,
            false => self.holds.open(),
        }
    }

    /// What the lease's shadow writes after `<lease id>|`: its owner, and a leader's term and
    /// value, or a permit's limit, besides, as its acquisition wrote them, so that a master
    /// that lost the key gets them back with the shadow (and refuses another limit there).
    pub(crate) fn shadow_owner(&self) -> String {
        let lease = &self.lease;
        match (&self.election, self.limit) {
            (Some(value), _) => election_tail(&lease.owner, lease.fencing_token, value),
            (None, Some(limit)) => format!("{}\u{1f}{limit}", lease.owner),
            (None, None) => lease.owner.clone(),
        }
    }

    pub(crate) fn view(&self, now: Instant) -> LeaseView {
        let state = self.state_at(now);
        let remaining = self.remaining_validity(now);
        let until = self.valid_until();
        let wall_now = SystemTime::now();
        let expires = match until.checked_duration_since(now) {
            Some(ahead) => wall_now + ahead,
            None => wall_now - now.saturating_duration_since(until),
        };
        let expires_at = expires
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (resource, slots, mode) = match parse_lock_name(&self.lease.resource) {
            Some(LockName { resource, kind }) => match kind {
                LockKind::Exclusive => (resource, None, None),
                LockKind::Slot(_) | LockKind::Slots(_) => (resource, Some(kind.slots()), None),
                LockKind::Reader(_) => (resource, None, Some(LeaseMode::Read)),
                LockKind::Writer => (resource, None, Some(LeaseMode::Write)),
                LockKind::Election => (resource, None, None),
            },
            None => (self.lease.resource.as_str(), None, None),
        };
        let term = self.election.as_ref().map(|_| self.lease.fencing_token);
        LeaseView {
            acquired: true,
            lease_id: self.lease.id,
            resource: resource.to_string(),
            slot: slots.and_then(SlotSet::lowest),
            slots: SlotList(slots.unwrap_or_default()),
            limit: self.limit,
            mode,
            owner: self.lease.owner.clone(),
            fencing_token: self.lease.fencing_token,
            ttl_ms: self.lease.ttl.as_millis() as u64,
            validity_ms: remaining.as_millis() as u64,
            expires_at,
            state,
            auto_renew: self.auto_renew,
            holds: self.open_holds(state),
            reason: self.reason,
            term,
            value: self.election.clone(),
        }
    }
}

/// A lease's record, locked. When the lease's `valid_until` moved meanwhile (a renewal, a
/// shadow, a cap after a renewal that fell short), the new end is published to the lease's
/// followers as the lock is let go, in the order the changes were made.
pub(crate) struct RecordGuard<'a> {
    record: MutexGuard<'a, LeaseRecord>,
    /// `valid_until` when the lock was taken.
    before: Instant,
    validity: &'a OnceLock<watch::Sender<Instant>>,
}

impl<'a> RecordGuard<'a> {
    /// Holds `record`, publishing a moved `valid_until` to `validity` when let go.
    pub(crate) fn new(
        record: MutexGuard<'a, LeaseRecord>,
        validity: &'a OnceLock<watch::Sender<Instant>>,
    ) -> Self {
        let before = record.lease.valid_until;
        Self {
            record,
            before,
            validity,
        }
    }
}

impl Deref for RecordGuard<'_> {
    type Target = LeaseRecord;

    fn deref(&self) -> &LeaseRecord {
        &self.record
    }
}

impl DerefMut for RecordGuard<'_> {
    fn deref_mut(&mut self) -> &mut LeaseRecord {
        &mut self.record
    }
}

impl Drop for RecordGuard<'_> {
    fn drop(&mut self) {
        let valid_until = self.record.lease.valid_until;
        if valid_until != self.before {
            if let Some(validity) = self.validity.get() {
                validity.send_replace(valid_until);
            }
        }
    }
}

/// A semaphore lease's slots, shown as a list of slot numbers, ascending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotList(pub SlotSet);

impl SlotList {
    /// Whether it names no slot (a lease of another kind).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for SlotList {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

/// A lease id as its 32 lowercase hex digits, written from the stack.
fn hex_digits<S: serde::Serializer>(id: &LeaseId, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(id.hex().as_str())
}

/// A lease as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct LeaseView {
    /// Always `true` on a lease (the acquire answer's shape).
    pub acquired: bool,
    /// 32 lowercase hex digits.
    #[schema(value_type = String, pattern = "^[0-9a-f]{32}$")]
    #[serde(serialize_with = "hex_digits")]
    pub lease_id: LeaseId,
    /// The resource it locks.
    pub resource: String,
    /// A semaphore permit's slot, 0 to `limit − 1`: fence per slot (absent on a lock). A
    /// lease of several permits names its lowest slot here, and all of them in `slots`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Every slot a semaphore lease holds, ascending (one per permit; absent on a lock): the
    /// fencing token is valid for each of them.
    #[serde(skip_serializing_if = "SlotList::is_empty")]
    #[schema(value_type = Vec<u32>, required = false)]
    pub slots: SlotList,
    /// A semaphore permit's limit (absent on a lock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// A read-write lock's lease: `read` or `write` (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false)]
    pub mode: Option<LeaseMode>,
    /// Who holds it.
    pub owner: String,
    /// Larger than every earlier holder's: pass it to what you write.
    pub fencing_token: u64,
    /// The TTL set by the last grant or renewal.
    pub ttl_ms: u64,
    /// Validity left now (0 once it has elapsed or the lease has ended).
    pub validity_ms: u64,
    /// When the validity runs out (or ran out, or the lease ended), in Unix milliseconds
    /// (this host's clock).
    pub expires_at: u64,
    /// Where it stands.
    pub state: LeaseState,
    /// Whether the sidecar renews it.
    pub auto_renew: bool,
    /// Re-entry holds open on it (`POST …/reenter`), not counting the lease itself; 0 for a
    /// lease never re-entered, and once it has ended.
    pub holds: usize,
    /// Why it ended; absent while held or degraded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = LeaseEndReason, required = false)]
    pub reason: Option<&'static str>,
    /// An election leader's term: its fencing token, larger than every earlier leader's
    /// (absent on a lock or a permit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// An election leader's value, as it proclaimed it last (absent on a lock or a permit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl LeaseView {
    /// The view as JSON, the same bytes as `serde_json` writes it (a test compares them),
    /// without its serializer's call per field and its scan of every key for characters to
    /// escape: the body of every answer that shows a lease, the acquisition's first.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut number = itoa::Buffer::new();
        out.extend_from_slice(b"{\"acquired\":");
        push_bool(out, self.acquired);
        out.extend_from_slice(b",\"lease_id\":\"");
        out.extend_from_slice(self.lease_id.hex().as_str().as_bytes());
        out.extend_from_slice(b"\",\"resource\":");
        push_str(out, &self.resource);
        if let Some(slot) = self.slot {
            out.extend_from_slice(b",\"slot\":");
            out.extend_from_slice(number.format(slot).as_bytes());
        }
        if !self.slots.is_empty() {
            out.extend_from_slice(b",\"slots\":[");
            for (n, slot) in self.slots.0.iter().enumerate() {
                if n > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(number.format(slot).as_bytes());
            }
            out.push(b']');
        }
        if let Some(limit) = self.limit {
            out.extend_from_slice(b",\"limit\":");
            out.extend_from_slice(number.format(limit).as_bytes());
        }
        if let Some(mode) = self.mode {
            out.extend_from_slice(b",\"mode\":");
            push_str(out, mode.as_str());
        }
        out.extend_from_slice(b",\"owner\":");
        push_str(out, &self.owner);
        for (key, value) in [
            (&b",\"fencing_token\":"[..], self.fencing_token),
            (b",\"ttl_ms\":", self.ttl_ms),
            (b",\"validity_ms\":", self.validity_ms),
            (b",\"expires_at\":", self.expires_at),
        ] {
            out.extend_from_slice(key);
            out.extend_from_slice(number.format(value).as_bytes());
        }
        out.extend_from_slice(b",\"state\":");
        push_str(out, self.state.as_str());
        out.extend_from_slice(b",\"auto_renew\":");
        push_bool(out, self.auto_renew);
        out.extend_from_slice(b",\"holds\":");
        out.extend_from_slice(number.format(self.holds).as_bytes());
        if let Some(reason) = self.reason {
            out.extend_from_slice(b",\"reason\":");
            push_str(out, reason);
        }
        if let Some(term) = self.term {
            out.extend_from_slice(b",\"term\":");
            out.extend_from_slice(number.format(term).as_bytes());
        }
        if let Some(value) = &self.value {
            out.extend_from_slice(b",\"value\":");
            push_str(out, value);
        }
        out.push(b'}');
    }
}

fn push_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

/// `text` as a JSON string, escaped as `serde_json` escapes it.
fn push_str(out: &mut Vec<u8>, text: &str) {
    // Writing a string into a `Vec` cannot fail: serde_json fails only on a writer's error
    // or a map key that is not a string.
    let _ = serde_json::to_writer(&mut *out, text);
}

impl LeaseState {
    /// Its name in the API (`serde`'s snake case).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Degraded => "degraded",
            Self::Releasing => "releasing",
            Self::Lost => "lost",
            Self::Released => "released",
        }
    }
}

impl LeaseMode {
    /// Its name in the API (`serde`'s snake case).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// A read-write lock's lease's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeaseMode {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

/// Why a lease ended (its `reason`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Describes strings the lease module sets; never built.
pub(crate) enum LeaseEndReason {
    /// A `DELETE`.
    Released,
    /// No sign of life for `idle_timeout_ms`.
    Idle,
    /// The sidecar shut down.
    Shutdown,
    /// Validity ran out (or a release's keys ran out before a quorum confirmed it).
    Expired,
    /// A majority of masters said the lease is not ours.
    NotOurs,
    /// An operator's force release.
    Revoked,
    /// The sidecar's own renewal was refused as invalid input.
    Invalid,
}

/// What happened to a lease, streamed to the app.
#[derive(Clone, Debug, Serialize)]
pub struct LeaseEvent {
    /// `renewed`, `degraded`, `recovered`, `lost` or `released`.
    pub event: &'static str,
    /// The lease at that moment.
    pub lease: LeaseView,
}

#[cfg(test)]
mod tests;

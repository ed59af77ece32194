//! Read-write locks: readers share, a writer excludes readers and writers. On each master a
//! read-write lock is a writer key (`<prefix>rw:<resource>:w`) and [`MAX_READERS`] reader
//! slots (`…:r<n>`); `rw_acquire.lua` admits a writer only where no reader stands and a reader
//! only where no other lease's writer stands, so every conflict is between two keys of one
//! master and the majority-intersection argument of the exclusive lock carries over: two
//! conflicting leases would each need a majority, and a master in both would have admitted
//! both. A writer is a slotted acquisition of one slot; a reader one of the reader slots
//! ([`super::slotted`]).
//!
//! Write-preferring: a blocking writer refused because readers stand leaves an intent
//! (`…:wi`, the id of its wait) that keeps new readers out, so a stream of readers cannot
//! starve it; the intent goes when it is granted or stops waiting. It lives [`INTENT_TTL`]
//! and two per-master timeouts past each attempt (an attempt waits at most that long for its
//! masters and its stray claims), and a waiting writer makes one at least every
//! [`INTENT_REFRESH`] after the last, so the intent stands for as long as the writer waits,
//! and a writer whose process died keeps readers out that long at most.
//!
//! Fair waiting ([`Redlock::acquire_rw_fair_with_wait`]) queues readers and writers in one
//! queue per lock across processes; `rw_acquire.lua` behind the head check decides as here.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::fair::{Queue, Turn};
use super::slotted::{slot_order, SlottedAttempt};
use super::wait::Line;
use super::{AcquireOutcome, Redlock};
use crate::keys::{lock_name, validate_resource, waiting_name, LockKind, SlotSet, MAX_READERS};
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

/// How long a waiting writer's intent outlives its last attempt, besides two per-master
/// timeouts.
pub const INTENT_TTL: Duration = Duration::from_secs(2);
/// A waiting writer with an intent tries again at least this often, setting its intent again.
pub const INTENT_REFRESH: Duration = Duration::from_millis(500);

/// A read-write lock's two modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwMode {
    /// Shared with other readers; excludes writers.
    Read,
    /// Excludes readers and other writers.
    Write,
}

impl RwMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// One read-write acquisition's request.
#[derive(Clone, Copy, Debug)]
pub struct RwRequest<'a> {
    /// The resource.
    pub resource: &'a str,
    /// Who holds the lease.
    pub owner: &'a str,
    /// Its TTL.
    pub ttl: Duration,
    /// Read or write.
    pub mode: RwMode,
    /// A read taken by the holder of this write lease, which it downgrades (the writer does
    /// not keep this read out).
    pub beside: Option<LeaseId>,
}

// === impl Redlock ===

impl Redlock {
    /// One attempt to take the read-write lock `request.resource` in `request.mode`. The
    /// lease's resource is the lock name of its writer key or reader slot; extend, release and
    /// inspect it as any lease.
    pub async fn acquire_rw(&self, request: RwRequest<'_>) -> Result<AcquireOutcome, Error> {
        self.acquire_rw_intending(request, None, None).await
    }

    /// Tries to take the read-write lock until granted or `wait` has passed, queued in this
    /// process behind its other waiters on the lock; a writer leaves its intent while it
    /// waits (see the module), and withdraws it when it stops waiting ungranted.
    pub async fn acquire_rw_with_wait(
        &self,
        request: RwRequest<'_>,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        validate_resource(request.resource)?;
        let writer = lock_name(request.resource, LockKind::Writer);
        let queue = waiting_name(&writer).into_owned();
        let intent = (request.mode == RwMode::Write && !wait.is_zero()).then(LeaseId::random);
        let mut standing = StandingIntent::new(self, request, intent);
        let refresh = intent.map(|_| INTENT_REFRESH);
        let outcome = self
            .wait_for_grant(&queue, wait, (Line::ThisProcess, refresh), || {
                self.acquire_rw_intending(request, intent, None)
            })
            .await;
        standing.armed = false;
        self.withdraw_intent(request, intent, &outcome).await;
        outcome
    }

    /// Takes the read-write lock in the order fair waiters of every process asked for it,
    /// readers and writers in one queue, waiting at most `wait` ([`super::fair`]): each
    /// attempt only while this waiter is the head of the lock's queue, and the head then
    /// taken as [`Redlock::acquire_rw`] would (a writer waiting as the head leaves its
    /// intent, as in [`Redlock::acquire_rw_with_wait`]). A writer at the head holds back the
    /// readers queued after it, even where they could share the lock with its readers; a
    /// granted reader leaves the queue, and the reader after it is let in beside it.
    /// Contended with [`super::Shortfall::Dequeued`] when a majority purged the waiter.
    pub async fn acquire_rw_fair_with_wait(
        &self,
        request: RwRequest<'_>,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(request.resource, request.owner, request.ttl)?;
        let writer = lock_name(request.resource, LockKind::Writer);
        let queue = Queue::of(self.fleet.keyspace(), &writer);
        let intent = (request.mode == RwMode::Write && !wait.is_zero()).then(LeaseId::random);
        let mut standing = StandingIntent::new(self, request, intent);
        let pace = (request.ttl, wait, intent.map(|_| INTENT_REFRESH));
        let outcome = self
            .wait_fairly(&queue, pace, |waiter| {
                let turn = Turn {
                    queue: &queue,
                    waiter,
                };
                self.acquire_rw_intending(request, intent, Some(turn))
            })
            .await;
        standing.armed = false;
        self.withdraw_intent(request, intent, &outcome).await;
        outcome
    }

    /// A writer that stopped waiting takes its intent back on every master: one granted too,
    /// since a master that refused its last attempt (readers still there) set the intent and
    /// keeps it (a master that granted it deleted it). Ungranted, the withdrawal is waited for;
    /// granted, it is sent and not waited for, so the grant goes back to its caller with no
    /// await in between. The withdrawal deletes only the intent (keyed on the wait's id, which
    /// no lease carries).
    async fn withdraw_intent(
        &self,
        request: RwRequest<'_>,
        intent: Option<LeaseId>,
        outcome: &Result<AcquireOutcome, Error>,
    ) {
        let (Some(intent), Ok(outcome)) = (intent, outcome) else {
            return;
        };
        let all: Vec<usize> = (0..self.fleet.len()).collect();
        let call = self.rw_release_call(request.resource, intent, None);
        let timeout = self.node_timeout(request.ttl, tokio::time::Instant::now());
        let withdrawal = self.release_claims(call, &all, timeout);
        match outcome.lease() {
            None => withdrawal.await,
            // The first poll puts the call on every master's connection.
            Some(_) => drop(withdrawal.now_or_never()),
        }
    }

    /// One attempt; with a fair waiter's `turn`, by the fair variant of the script, which
    /// lets only the head of the lock's queue try.
    async fn acquire_rw_intending(
        &self,
        request: RwRequest<'_>,
        intent: Option<LeaseId>,
        turn: Option<Turn<'_>>,
    ) -> Result<AcquireOutcome, Error> {
        let RwRequest {
            resource,
            owner,
            ttl,
            mode,
            beside,
        } = request;
        self.check_request(resource, owner, ttl)?;
        let id = LeaseId::random();
        let keyspace = self.fleet.keyspace();
        let base = keyspace.read_write(resource);
        let order = match mode {
            RwMode::Read => slot_order(id, MAX_READERS),
            RwMode::Write => Vec::new(),
        };
        let (value, ttl_ms) = (id.value_for(owner), ttl.as_millis().to_string());
        let (most, beside) = (
            MAX_READERS.to_string(),
            beside.map(|id| id.to_string()).unwrap_or_default(),
        );
        let intent = intent.map(|id| id.to_string()).unwrap_or_default();
        let timeout = self.node_timeout(ttl, tokio::time::Instant::now());
        let intent_ttl = (INTENT_TTL + 2 * timeout).as_millis().to_string();
        let order: Vec<String> = order.iter().map(u32::to_string).collect();
        let mut args: Vec<&[u8]> = vec![
            base.as_bytes(),
            value.as_bytes(),
            ttl_ms.as_bytes(),
            mode.as_str().as_bytes(),
            most.as_bytes(),
            beside.as_bytes(),
            intent.as_bytes(),
            intent_ttl.as_bytes(),
        ];
        args.extend(order.iter().map(|slot| slot.as_bytes()));
        let fence = keyspace.fence();
        let scripts = (&SCRIPTS.rw_acquire, &SCRIPTS.rw_acquire_fair);
        let acquire = Turn::call(turn, scripts, &fence, &args);
        let kind_of = |slot| match mode {
            RwMode::Read => LockKind::Reader(slot),
            RwMode::Write => LockKind::Writer,
        };
        // A read-write lock's script grants one slot at a time: a set granted holds one.
        let slot_of = |slots: SlotSet| slots.lowest().unwrap_or(0);
        let release_claims = |keep: Option<SlotSet>| {
            self.rw_release_call(
                resource,
                id,
                keep.map(|slots| lock_name(resource, kind_of(slot_of(slots)))),
            )
        };
        let name_of = |slots| lock_name(resource, kind_of(slot_of(slots)));
        let attempt = SlottedAttempt {
            id,
            owner,
            ttl,
            acquire,
            release_claims: &release_claims,
            name_of: &name_of,
        };
        Ok(self.acquire_slotted(attempt).await.0)
    }

    /// `rw_release.lua` for lease (or wait) `id` on `resource`, keeping the lock name `keep`.
    fn rw_release_call(
        &self,
        resource: &str,
        id: LeaseId,
        keep: Option<String>,
    ) -> Arc<ScriptCall> {
        let keyspace = self.fleet.keyspace();
        let base = keyspace.read_write(resource);
        let channel = keyspace.released_channel(&lock_name(resource, LockKind::Writer));
        let keep = match keep {
            Some(name) => keyspace.lock(&name)[base.len()..].to_string(),
            None => String::new(),
        };
        let (id, most) = (id.to_string(), MAX_READERS.to_string());
        let args: [&[u8]; 5] = [
            base.as_bytes(),
            id.as_bytes(),
            most.as_bytes(),
            keep.as_bytes(),
            channel.as_bytes(),
        ];
        Arc::new(ScriptCall::new(&SCRIPTS.rw_release, &[], &args))
    }
}

/// A waiting writer's intent while its wait is under way: dropped so (the caller went away),
/// it is withdrawn from every master in tasks of its own, rather than keeping readers out for
/// its TTL.
struct StandingIntent<'a> {
    engine: &'a Redlock,
    resource: &'a str,
    ttl: Duration,
    intent: Option<LeaseId>,
    armed: bool,
}

impl<'a> StandingIntent<'a> {
    fn new(engine: &'a Redlock, request: RwRequest<'a>, intent: Option<LeaseId>) -> Self {
        Self {
            engine,
            resource: request.resource,
            ttl: request.ttl,
            intent,
            armed: true,
        }
    }
}

impl Drop for StandingIntent<'_> {
    fn drop(&mut self) {
        let Some(intent) = self.intent.filter(|_| self.armed) else {
            return;
        };
        // Outside a runtime (the process is ending) nothing can be sent: the intent expires.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let call = self.engine.rw_release_call(self.resource, intent, None);
        let timeout = self
            .engine
            .node_timeout(self.ttl, tokio::time::Instant::now());
        self.engine.release_claims_detached(&runtime, call, timeout);
    }
}

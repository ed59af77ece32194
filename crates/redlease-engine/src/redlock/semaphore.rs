//! Counting semaphores: a permit is one of the semaphore's `limit` slots, each an exclusive
//! lock of its own (`<prefix>sem:<resource>:<n>`), taken on every master at once by
//! `semaphore_acquire.lua` and kept only where a quorum gave the same slots
//! ([`super::slotted`]). The bound holds by construction: a slot has at most one valid holder,
//! as any exclusive lock, and there are `limit` slots. Nothing counts holders on a majority.
//!
//! A lease may take `k` permits at once, all or none ([`Permits`]): each master takes the
//! first `k` free slots of the lease's order or nothing, and the lease stands only where a
//! quorum gave it the same `k` slots. Its slots are part of its lock name
//! ([`crate::keys::lock_name`], [`crate::keys::LockKind::Slots`]), and renewing, shadowing and
//! releasing it touch each of them: a master counts for the lease only where it holds all of
//! them. So renewing, shadowing, releasing, force-releasing (one slot at a time) and
//! inspecting a permit are those of any lease.
//!
//! Fair waiting ([`Redlock::acquire_permit_fair_with_wait`]) queues waiters across processes
//! in one queue per semaphore; `semaphore_acquire.lua` behind the head check decides as here.

use std::sync::Arc;
use std::time::Duration;

use super::fair::{Queue, Turn};
use super::slotted::{slot_order, SlotReply, SlottedAttempt};
use super::wait::Line;
use super::{AcquireOutcome, Redlock};
use crate::keys::{
    lock_name, validate_resource, waiting_name, LockKind, SlotSet, MAX_SEMAPHORE_LIMIT,
};
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

/// How many permits a semaphore acquisition takes, of a semaphore of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permits {
    /// The semaphore's limit: how many slots it has (1 to [`MAX_SEMAPHORE_LIMIT`]), the same
    /// for every holder.
    pub limit: u32,
    /// How many slots the lease takes, all or none (1 to `limit`).
    pub count: u32,
}

impl Permits {
    /// One permit of a semaphore of `limit`.
    pub fn one(limit: u32) -> Self {
        Self { limit, count: 1 }
    }

    /// Both within their bounds.
    pub fn check(self) -> Result<Self, Error> {
        check_limit(self.limit)?;
        if !(1..=self.limit).contains(&self.count) {
            return Err(Error::InvalidPermits(format!(
                "permits must be between 1 and the limit, {}",
                self.limit
            )));
        }
        Ok(self)
    }
}

// === impl Redlock ===

impl Redlock {
    /// One attempt to take a permit of the semaphore `resource` of `limit` slots
    /// (1 to [`MAX_SEMAPHORE_LIMIT`]) for `owner` for `ttl`. The lease's resource is the lock
    /// name of the slot it holds (see [`crate::keys::parse_lock_name`]); extend, release and
    /// inspect it as any lease. Every master is asked and waited for (up to the node
    /// timeout); the claims of masters that gave another slot than the quorum's are deleted.
    /// `Err(Error::SemaphoreLimit)` when a master holds a permit of another limit.
    #[tracing::instrument(level = "debug", skip(self), fields(ttl_ms = ttl.as_millis() as u64))]
    pub async fn acquire_permit(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        limit: u32,
    ) -> Result<AcquireOutcome, Error> {
        self.acquire_permits(resource, owner, ttl, Permits::one(limit))
            .await
    }

    /// One attempt to take `permits.count` permits at once, all or none, as
    /// [`Redlock::acquire_permit`] takes one: one lease holding that many slots, named in its
    /// resource ([`LockKind::Slots`]), with one fencing token valid for each of them.
    /// `Err(Error::InvalidPermits)` for a count outside 1 to the limit.
    pub async fn acquire_permits(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        permits: Permits,
    ) -> Result<AcquireOutcome, Error> {
        self.attempt_permit(resource, owner, ttl, permits, None)
            .await
    }

    /// One attempt at permits; with a fair waiter's `turn`, by the fair variant of the
    /// script, which lets only the head of the semaphore's queue try.
    async fn attempt_permit(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        permits: Permits,
        turn: Option<Turn<'_>>,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(resource, owner, ttl)?;
        let Permits { limit, .. } = permits.check()?;
        let id = LeaseId::random();
        let keyspace = self.fleet.keyspace();
        let base = keyspace.semaphore_slots(resource);
        let channel = keyspace.released_channel(&lock_name(resource, LockKind::Slot(0)));
        let release_claims = |keep: Option<SlotSet>| release_call(&base, id, keep, &channel);
        // Every set granted holds a slot (`SlotReply::from_script`).
        let name_of =
            |slots: SlotSet| lock_name(resource, slots.kind().unwrap_or(LockKind::Slot(0)));
        let attempt = SlottedAttempt {
            id,
            owner,
            ttl,
            acquire: acquire_call(&keyspace.fence(), &base, (id, owner, ttl, permits), turn),
            release_claims: &release_claims,
            name_of: &name_of,
        };
        let (outcome, replies) = self.acquire_slotted(attempt).await;
        let other_limit = replies.iter().find_map(|reply| match reply {
            Some(SlotReply::OtherLimit { in_force }) => Some(*in_force),
            _ => None,
        });
        match (outcome, other_limit) {
            (AcquireOutcome::Acquired(lease), _) => Ok(AcquireOutcome::Acquired(lease)),
            (_, Some(in_force)) => Err(Error::SemaphoreLimit {
                asked: limit,
                in_force,
            }),
            (outcome, None) => Ok(outcome),
        }
    }

    /// Tries to take permits until granted or `wait` has passed, as
    /// [`Redlock::acquire_with_wait`] does for an exclusive lock: the waiters of this process
    /// for one permit queue on the semaphore, and the head retries when any of its slots is
    /// released; a waiter for several permits is not in that line (it would hold up those
    /// behind it while too few slots are free) and retries on its own at every release.
    pub async fn acquire_permit_with_wait(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        permits: Permits,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        validate_resource(resource)?;
        permits.check()?;
        let queue = lock_name(resource, LockKind::Slot(0));
        let queue = waiting_name(&queue).into_owned();
        // Several permits: not lined up behind (or ahead of) this process's waiters for one.
        let line = match permits.count {
            1 => Line::ThisProcess,
            _ => Line::Alone,
        };
        self.wait_for_grant(&queue, wait, (line, None), || {
            self.acquire_permits(resource, owner, ttl, permits)
        })
        .await
    }

    /// Takes permits in the order fair waiters of every process asked for them, waiting at
    /// most `wait` ([`super::fair`]): in the semaphore's own queue, and each attempt only
    /// while this waiter is the head of it; the head takes free slots as
    /// [`Redlock::acquire_permits`] would (a head that needs more slots than are free waits,
    /// and so do the waiters behind it). Contended with [`super::Shortfall::Dequeued`] when a
    /// majority purged the waiter.
    pub async fn acquire_permit_fair_with_wait(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        permits: Permits,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(resource, owner, ttl)?;
        permits.check()?;
        let queue = Queue::of(
            self.fleet.keyspace(),
            &lock_name(resource, LockKind::Slot(0)),
        );
        self.wait_fairly(&queue, (ttl, wait, None), |waiter| {
            let turn = Turn {
                queue: &queue,
                waiter,
            };
            self.attempt_permit(resource, owner, ttl, permits, Some(turn))
        })
        .await
    }

    /// What every master holds in each slot of the semaphore `resource` that any master holds
    /// a value in, slot order (the inventory of a semaphore: a [`super::LockView`] per slot).
    pub async fn inspect_semaphore(&self, resource: &str) -> Result<Vec<super::LockView>, Error> {
        validate_resource(resource)?;
        self.fleet
            .wait_for_statuses(super::inventory::INSPECT_TIMEOUT)
            .await;
        let names: Vec<String> = (0..MAX_SEMAPHORE_LIMIT)
            .map(|slot| lock_name(resource, LockKind::Slot(slot)))
            .collect();
        let views = self.read_locks(&names).await;
        Ok(views
            .into_iter()
            .filter(|view| view.masters_holding() > 0)
            .collect())
    }
}

fn check_limit(limit: u32) -> Result<(), Error> {
    if !(1..=MAX_SEMAPHORE_LIMIT).contains(&limit) {
        return Err(Error::InvalidLimit(format!(
            "limit must be between 1 and {MAX_SEMAPHORE_LIMIT}"
        )));
    }
    Ok(())
}

/// KEYS fence; ARGV slot base, value, ttl, limit, most slots, permits, then the slots in
/// order (with a fair waiter's turn, the fair variant's queue keys and waiter id too).
fn acquire_call(
    fence: &str,
    base: &str,
    (id, owner, ttl, permits): (LeaseId, &str, Duration, Permits),
    turn: Option<Turn<'_>>,
) -> Arc<ScriptCall> {
    let value = id.value_for(owner);
    let ttl = ttl.as_millis().to_string();
    let limit = permits.limit;
    let (limit_text, most) = (limit.to_string(), MAX_SEMAPHORE_LIMIT.to_string());
    let count = permits.count.to_string();
    let order: Vec<String> = slot_order(id, limit).iter().map(u32::to_string).collect();
    let mut args: Vec<&[u8]> = vec![
        base.as_bytes(),
        value.as_bytes(),
        ttl.as_bytes(),
        limit_text.as_bytes(),
        most.as_bytes(),
        count.as_bytes(),
    ];
    args.extend(order.iter().map(|slot| slot.as_bytes()));
    let scripts = (&SCRIPTS.semaphore_acquire, &SCRIPTS.semaphore_acquire_fair);
    Turn::call(turn, scripts, fence, &args)
}

/// ARGV slot base, lease id, most slots, channel, then the slots to keep (none: every claim
/// is deleted).
fn release_call(base: &str, id: LeaseId, keep: Option<SlotSet>, channel: &str) -> Arc<ScriptCall> {
    let id = id.to_string();
    let most = MAX_SEMAPHORE_LIMIT.to_string();
    let keep: Vec<String> = keep
        .into_iter()
        .flat_map(SlotSet::iter)
        .map(|s| s.to_string())
        .collect();
    let mut args: Vec<&[u8]> = vec![
        base.as_bytes(),
        id.as_bytes(),
        most.as_bytes(),
        channel.as_bytes(),
    ];
    args.extend(keep.iter().map(|slot| slot.as_bytes()));
    Arc::new(ScriptCall::new(&SCRIPTS.semaphore_release, &[], &args))
}

//! Counting semaphores: a permit is one of the semaphore's `limit` slots, each an exclusive
//! lock of its own (`<prefix>sem:<resource>:<n>`), taken on every master at once by
//! `semaphore_acquire.lua` and kept only where a quorum gave the same slot ([`super::slotted`]).
//! The bound holds by construction: a slot has at most one valid holder, as any exclusive
//! lock, and there are `limit` slots. Nothing counts holders on a majority.
//!
//! The slot a lease holds is part of its lock name ([`crate::keys::lock_name`]), so renewing,
//! shadowing, releasing, force-releasing and inspecting a permit are those of any lease.
//!
//! Fair waiting ([`Redlock::acquire_permit_fair_with_wait`]) queues waiters across processes
//! in one queue per semaphore; `semaphore_acquire.lua` behind the head check decides as here.

use std::sync::Arc;
use std::time::Duration;

use super::fair::{Queue, Turn};
use super::slotted::{slot_order, SlotReply, SlottedAttempt};
use super::{AcquireOutcome, Redlock};
use crate::keys::{lock_name, validate_resource, waiting_name, LockKind, MAX_SEMAPHORE_LIMIT};
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

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
        self.attempt_permit(resource, owner, ttl, limit, None).await
    }

    /// One attempt at a permit; with a fair waiter's `turn`, by the fair variant of the
    /// script, which lets only the head of the semaphore's queue try.
    async fn attempt_permit(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        limit: u32,
        turn: Option<Turn<'_>>,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(resource, owner, ttl)?;
        check_limit(limit)?;
        let id = LeaseId::random();
        let keyspace = self.fleet.keyspace();
        let base = keyspace.semaphore_slots(resource);
        let channel = keyspace.released_channel(&lock_name(resource, LockKind::Slot(0)));
        let release_claims = |keep: Option<u32>| release_call(&base, id, keep, &channel);
        let name_of = |slot| lock_name(resource, LockKind::Slot(slot));
        let attempt = SlottedAttempt {
            id,
            owner,
            ttl,
            acquire: acquire_call(&keyspace.fence(), &base, (id, owner, ttl, limit), turn),
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

    /// Tries to take a permit until granted or `wait` has passed, as
    /// [`Redlock::acquire_with_wait`] does for an exclusive lock: the waiters of this process
    /// queue on the semaphore, and the head retries when any of its slots is released.
    pub async fn acquire_permit_with_wait(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        limit: u32,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        validate_resource(resource)?;
        let queue = lock_name(resource, LockKind::Slot(0));
        let queue = waiting_name(&queue).into_owned();
        self.wait_for_grant(&queue, wait, || {
            self.acquire_permit(resource, owner, ttl, limit)
        })
        .await
    }

    /// Takes a permit in the order fair waiters of every process asked for one, waiting at
    /// most `wait` ([`super::fair`]): in the semaphore's own queue, and each attempt only
    /// while this waiter is the head of it; the head takes a free slot as
    /// [`Redlock::acquire_permit`] would. Contended with [`super::Shortfall::Dequeued`] when
    /// a majority purged the waiter.
    pub async fn acquire_permit_fair_with_wait(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        limit: u32,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(resource, owner, ttl)?;
        check_limit(limit)?;
        let queue = Queue::of(
            self.fleet.keyspace(),
            &lock_name(resource, LockKind::Slot(0)),
        );
        self.wait_fairly(&queue, ttl, wait, |waiter| {
            let turn = Turn {
                queue: &queue,
                waiter,
            };
            self.attempt_permit(resource, owner, ttl, limit, Some(turn))
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

/// KEYS fence; ARGV slot base, value, ttl, limit, most slots, then the slots in order (with a
/// fair waiter's turn, the fair variant's queue keys and waiter id too).
fn acquire_call(
    fence: &str,
    base: &str,
    (id, owner, ttl, limit): (LeaseId, &str, Duration, u32),
    turn: Option<Turn<'_>>,
) -> Arc<ScriptCall> {
    let value = id.value_for(owner);
    let ttl = ttl.as_millis().to_string();
    let (limit_text, most) = (limit.to_string(), MAX_SEMAPHORE_LIMIT.to_string());
    let order: Vec<String> = slot_order(id, limit).iter().map(u32::to_string).collect();
    let mut args: Vec<&[u8]> = vec![
        base.as_bytes(),
        value.as_bytes(),
        ttl.as_bytes(),
        limit_text.as_bytes(),
        most.as_bytes(),
    ];
    args.extend(order.iter().map(|slot| slot.as_bytes()));
    let scripts = (&SCRIPTS.semaphore_acquire, &SCRIPTS.semaphore_acquire_fair);
    Turn::call(turn, scripts, fence, &args)
}

/// ARGV slot base, lease id, most slots, slot to keep (-1: none), channel.
fn release_call(base: &str, id: LeaseId, keep: Option<u32>, channel: &str) -> Arc<ScriptCall> {
    let id = id.to_string();
    let most = MAX_SEMAPHORE_LIMIT.to_string();
    let keep = keep.map_or_else(|| "-1".to_string(), |slot| slot.to_string());
    let args: [&[u8]; 5] = [
        base.as_bytes(),
        id.as_bytes(),
        most.as_bytes(),
        keep.as_bytes(),
        channel.as_bytes(),
    ];
    Arc::new(ScriptCall::new(&SCRIPTS.semaphore_release, &[], &args))
}

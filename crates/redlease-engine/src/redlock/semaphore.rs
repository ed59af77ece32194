//! Counting semaphores: a permit is one of the semaphore's `limit` slots, each an exclusive
//! lock of its own (`<prefix>sem:<resource>:<n>`), taken on every master at once by
//! `semaphore_acquire.lua` and kept only where a quorum gave the same slot. The bound holds by
//! construction: a slot has at most one valid holder, as any exclusive lock, and there are
//! `limit` slots. Nothing counts holders on a majority.
//!
//! The slot a lease holds is part of its lock name ([`crate::keys::lock_name`]), so renewing,
//! shadowing, releasing, force-releasing and inspecting a permit are those of any lease.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::calls::eval_values_on;
use super::fanout::fan_out;
use super::quorum;
use super::{fencing, AcquireOutcome, Lease, NodeVote, Redlock, Refusal, Shortfall};
use crate::fleet::{Admission, CallError, Deadline, Node};
use crate::keys::{
    lock_name, validate_owner, validate_resource, waiting_name, LockKind, MAX_SEMAPHORE_LIMIT,
};
use crate::metrics::METRICS;
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

/// What `semaphore_acquire.lua` answered on one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotReply {
    /// This slot is ours here; the fence counter after the script's `INCR`.
    Granted {
        /// The slot taken.
        slot: u32,
        /// The master's fence counter after the `INCR`.
        counter: u64,
    },
    /// Every slot is held here; the soonest a holder's key expires, when one has a TTL.
    Full {
        /// The least `PTTL` among the slots' holders.
        soonest: Option<Duration>,
    },
    /// A holder here asked for another limit: nothing was written.
    OtherLimit {
        /// The limit that holder uses.
        in_force: u32,
    },
}

impl SlotReply {
    /// From the script's `{code, value}`; `None` for a reply it never gives.
    pub fn from_script(reply: &[i64]) -> Option<Self> {
        let (&code, &value) = (reply.first()?, reply.get(1)?);
        Some(match code {
            -1 => Self::Full {
                soonest: u64::try_from(value).ok().map(Duration::from_millis),
            },
            -2 => Self::OtherLimit {
                in_force: u32::try_from(value).ok()?,
            },
            slot => Self::Granted {
                slot: u32::try_from(slot).ok()?,
                counter: u64::try_from(value).ok()?,
            },
        })
    }
}

/// The slot a quorum of masters gave the lease, if any: each master gives at most one, so
/// at most one slot can have a quorum.
pub fn quorum_slot(replies: &[Option<SlotReply>], quorum: usize) -> Option<u32> {
    let mut granted: Vec<u32> = replies
        .iter()
        .filter_map(|reply| match reply {
            Some(SlotReply::Granted { slot, .. }) => Some(*slot),
            _ => None,
        })
        .collect();
    granted.sort_unstable();
    granted
        .chunk_by(|a, b| a == b)
        .find(|same| same.len() >= quorum)
        .map(|same| same[0])
}

/// The order a lease tries the slots in, the same on every master: all `limit` slots,
/// starting from one its id picks, so concurrent callers spread over the slots.
pub fn slot_order(id: LeaseId, limit: u32) -> Vec<u32> {
    let start = (id.as_u128() % u128::from(limit)) as u32;
    (0..limit).map(|i| (start + i) % limit).collect()
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
        validate_resource(resource)?;
        validate_owner(owner)?;
        self.check_ttl(ttl)?;
        check_limit(limit)?;
        let id = LeaseId::random();
        let start = Instant::now();
        let timeout = self.node_timeout(ttl, start);
        let keyspace = self.fleet.keyspace();
        let base = keyspace.semaphore_slots(resource);
        let call = acquire_call(&keyspace.fence(), &base, id, owner, ttl, limit);
        let mut replies = fan_out(
            &self.tasks,
            self.fleet.nodes(),
            start + timeout,
            |node, deadline, reply| eval_values_on(node, call.clone(), deadline, reply),
        );
        let n = self.fleet.len();
        let mut answers: Vec<Result<Option<SlotReply>, CallError>> =
            (0..n).map(|_| Err(CallError::Timeout)).collect();
        let mut answered = vec![false; n];
        while let Some((index, answer)) = replies.recv().await {
            answered[index] = true;
            answers[index] = answer.map(|values| SlotReply::from_script(&values));
        }
        let slots: Vec<Option<SlotReply>> = answers
            .iter()
            .map(|answer| answer.as_ref().ok().copied().flatten())
            .collect();
        let quorum = self.fleet.quorum();
        let chosen = quorum_slot(&slots, quorum);
        let votes: Vec<NodeVote> = answers
            .iter()
            .zip(&answered)
            .map(|(answer, answered)| slot_vote(answer, *answered, chosen))
            .collect();
        // Every master that may hold a claim other than the chosen slot gives it back (on the
        // same connection, after the claim): one that answered another slot, and one that
        // did not answer at all.
        let stray: Vec<usize> = (0..n)
            .filter(|&i| match (&answers[i], slots[i]) {
                (Err(_), _) => true,
                (Ok(_), Some(SlotReply::Granted { slot, .. })) => Some(slot) != chosen,
                (Ok(_), _) => false,
            })
            .collect();
        let keep = chosen.map_or(-1, i64::from);
        let cleanup = self.release_claims(resource, id, keep, &stray, timeout);
        let outcome = match chosen {
            Some(slot) => {
                cleanup.await;
                let name = lock_name(resource, LockKind::Slot(slot));
                self.confirm_permit(votes, (start, ttl, timeout), id, name, owner)
                    .await
            }
            None => {
                cleanup.await;
                if let Some(in_force) = slots.iter().find_map(|reply| match reply {
                    Some(SlotReply::OtherLimit { in_force }) => Some(*in_force),
                    _ => None,
                }) {
                    return Err(Error::SemaphoreLimit {
                        asked: limit,
                        in_force,
                    });
                }
                let heard = answers.iter().filter(|a| a.is_ok()).count();
                let cause = if heard >= quorum {
                    Shortfall::Held
                } else {
                    Shortfall::TooFewAnswers
                };
                let refusal = Refusal {
                    cause,
                    votes,
                    valid_until_cap: None,
                };
                if heard >= quorum {
                    AcquireOutcome::Contended(refusal)
                } else {
                    AcquireOutcome::NoQuorum(refusal)
                }
            }
        };
        METRICS.record_acquisition(outcome.label(), start.elapsed());
        Ok(outcome)
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
        let queue = waiting_name(&queue).to_string();
        self.wait_for_grant(&queue, wait, || {
            self.acquire_permit(resource, owner, ttl, limit)
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

    /// Fences a permit a quorum gave, as [`Redlock::confirm`] does a grant: the token is the
    /// largest counter among the masters that gave this slot, the lagging ones are raised, and
    /// the permit stands if a quorum holds the token and validity is left. A permit that does
    /// not stand is released.
    async fn confirm_permit(
        &self,
        votes: Vec<NodeVote>,
        (start, ttl, timeout): (Instant, Duration, Duration),
        id: LeaseId,
        name: String,
        owner: &str,
    ) -> AcquireOutcome {
        let granted: Vec<(usize, u64)> = votes
            .iter()
            .enumerate()
            .filter_map(|(i, vote)| match vote {
                NodeVote::Granted { counter } => Some((i, *counter)),
                _ => None,
            })
            .collect();
        let refuse = |cause, votes| Refusal {
            cause,
            votes,
            valid_until_cap: None,
        };
        let Some(plan) = fencing::plan(&granted) else {
            return AcquireOutcome::NoQuorum(refuse(Shortfall::TooFewAnswers, votes));
        };
        let confirmed = plan.at_token.len() + self.raise_fence(&plan, timeout).await;
        let now = Instant::now();
        let opts = &self.options;
        let validity = quorum::validity(&opts.drift, start, now, ttl, opts.min_validity);
        let cause = if confirmed < self.fleet.quorum() {
            Some(Shortfall::FenceNotConfirmed)
        } else if validity.is_none() {
            Some(Shortfall::ValidityExpired)
        } else {
            None
        };
        match (cause, validity) {
            (None, Some(validity)) => AcquireOutcome::Acquired(Lease {
                id,
                resource: name,
                owner: owner.to_string(),
                fencing_token: plan.token,
                ttl,
                validity,
                valid_until: now + validity,
            }),
            (cause, _) => {
                let _ = self.release(&name, id).await;
                let cause = cause.unwrap_or(Shortfall::ValidityExpired);
                AcquireOutcome::NoQuorum(refuse(cause, votes))
            }
        }
    }

    /// Deletes the claims of lease `id` on the semaphore `resource` on masters `at`, except
    /// slot `keep` (`-1`: every claim), and waits for their answers (at most `timeout`).
    async fn release_claims(
        &self,
        resource: &str,
        id: LeaseId,
        keep: i64,
        at: &[usize],
        timeout: Duration,
    ) {
        if at.is_empty() {
            return;
        }
        let keyspace = self.fleet.keyspace();
        let base = keyspace.semaphore_slots(resource);
        let channel = keyspace.released_channel(&lock_name(resource, LockKind::Slot(0)));
        let (id, most, keep) = (
            id.to_string(),
            MAX_SEMAPHORE_LIMIT.to_string(),
            keep.to_string(),
        );
        let args: [&[u8]; 5] = [
            base.as_bytes(),
            id.as_bytes(),
            most.as_bytes(),
            keep.as_bytes(),
            channel.as_bytes(),
        ];
        let call = Arc::new(ScriptCall::new(&SCRIPTS.semaphore_release, &[], &args));
        let nodes = at.iter().map(|&i| &self.fleet.nodes()[i]);
        let until = Instant::now() + timeout;
        let mut replies = fan_out(&self.tasks, nodes, until, |node, deadline, reply| {
            release_claims_on(node, call.clone(), deadline, reply)
        });
        while replies.recv().await.is_some() {}
    }
}

/// One master's release of stray claims; a master that did not answer keeps them until
/// their TTL, which bounds how long a stray claim can hold a slot.
async fn release_claims_on(
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    deadline: Deadline,
    reply: super::fanout::Reply<()>,
) {
    let result = node.eval::<i64>(&call, &deadline, Admission::Always).await;
    if let Err(error) = result {
        tracing::debug!(node = node.index(), %error, "a semaphore's stray claim was not released");
    }
    reply.send(());
}

fn check_limit(limit: u32) -> Result<(), Error> {
    if !(1..=MAX_SEMAPHORE_LIMIT).contains(&limit) {
        return Err(Error::InvalidLimit(format!(
            "limit must be between 1 and {MAX_SEMAPHORE_LIMIT}"
        )));
    }
    Ok(())
}

/// KEYS fence; ARGV slot base, value, ttl, limit, most slots, then the slots in order.
fn acquire_call(
    fence: &str,
    base: &str,
    id: LeaseId,
    owner: &str,
    ttl: Duration,
    limit: u32,
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
    Arc::new(ScriptCall::new(
        &SCRIPTS.semaphore_acquire,
        &[fence.as_bytes()],
        &args,
    ))
}

/// A master's answer as a vote on the chosen slot: granted only for that slot.
fn slot_vote(
    answer: &Result<Option<SlotReply>, CallError>,
    answered: bool,
    chosen: Option<u32>,
) -> NodeVote {
    if !answered {
        return NodeVote::NoAnswer;
    }
    match answer {
        Ok(Some(SlotReply::Granted { slot, counter })) if Some(*slot) == chosen => {
            NodeVote::Granted { counter: *counter }
        }
        Ok(Some(SlotReply::Granted { .. })) => NodeVote::Refused {
            holder_remaining: Some(Duration::ZERO),
        },
        Ok(Some(SlotReply::Full { soonest })) => NodeVote::Refused {
            holder_remaining: *soonest,
        },
        Ok(Some(SlotReply::OtherLimit { .. })) => NodeVote::Refused {
            holder_remaining: None,
        },
        Ok(None) => NodeVote::Failed(CallError::Reply("unexpected semaphore reply".into())),
        Err(error) => NodeVote::Failed(error.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a slot a quorum gave wins; divergent grants give none.
    #[test]
    fn only_a_slot_a_quorum_gave_wins() {
        let g = |slot| Some(SlotReply::Granted { slot, counter: 1 });
        assert_eq!(quorum_slot(&[g(1), g(1), g(0)], 2), Some(1));
        assert_eq!(quorum_slot(&[g(0), g(1), None], 2), None);
        assert_eq!(quorum_slot(&[g(0), g(1), g(2), g(2), g(2)], 3), Some(2));
        let full = Some(SlotReply::Full { soonest: None });
        assert_eq!(quorum_slot(&[g(0), full, full], 2), None);
    }

    /// Every slot is offered once, from a start the lease id picks.
    #[test]
    fn the_order_offers_every_slot_once() {
        let id = LeaseId::random();
        let mut order = slot_order(id, 5);
        assert_eq!(order.len(), 5);
        assert_eq!(order, slot_order(id, 5), "the same on every master");
        order.sort_unstable();
        assert_eq!(order, [0, 1, 2, 3, 4]);
        assert_eq!(slot_order(id, 1), [0]);
    }

    /// The script's replies parse; nonsense does not.
    #[test]
    fn script_replies_parse() {
        assert_eq!(
            SlotReply::from_script(&[3, 17]),
            Some(SlotReply::Granted {
                slot: 3,
                counter: 17
            })
        );
        assert_eq!(
            SlotReply::from_script(&[-1, -1]),
            Some(SlotReply::Full { soonest: None })
        );
        assert_eq!(
            SlotReply::from_script(&[-2, 4]),
            Some(SlotReply::OtherLimit { in_force: 4 })
        );
        assert_eq!(SlotReply::from_script(&[-2, -4]), None);
        assert_eq!(SlotReply::from_script(&[1]), None);
    }
}

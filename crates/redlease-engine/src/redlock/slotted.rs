//! Slotted acquisitions: a script takes one or several of a set of keys (slots) on every
//! master at once, and the lease keeps the slots a quorum gave it. Counting semaphores (their
//! permits) and read-write locks (their readers, and their writer as a single slot) are built
//! on it.
//!
//! Every master is asked and waited for (up to the node timeout): a master that gave other
//! slots than the quorum's, or did not answer, is sent the release of the lease's other claims
//! (on the same connection, after its claim). The slots a quorum gave (the same set on each
//! master of the quorum) are then fenced and judged as an exclusive grant is
//! ([`super::fencing`], [`super::quorum::validity`]).
//!
//! An attempt dropped before it answered (its caller went away) sends the release of every
//! claim of its lease to every master, in tasks of their own, behind its writes on the same
//! connections: a slot is not kept for nobody until its TTL.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::calls::eval_values_on;
use super::fanout::{fan_out, Reply};
use super::{AcquireOutcome, Lease, NodeVote, Redlock, Refusal, Shortfall};
use crate::fleet::{Admission, CallError, Deadline, Node};
use crate::keys::{SlotSet, MAX_READERS, MAX_SEMAPHORE_LIMIT};
use crate::metrics::METRICS;
use crate::scripts::ScriptCall;
use crate::LeaseId;

/// Slots are numbered below this (a semaphore's most slots, a read-write lock's readers).
const MAX_SLOTS: u32 = MAX_SEMAPHORE_LIMIT;
const _: () = assert!(MAX_READERS <= MAX_SLOTS, "a reader slot fits a slot set");

/// What a slotted acquisition's script answered on one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotReply {
    /// These slots are ours here; the fence counter after the script's `INCR`.
    Granted {
        /// The slots taken (one or more).
        slots: SlotSet,
        /// The master's fence counter after the `INCR`.
        counter: u64,
    },
    /// Nothing could be taken here; the soonest a holder's key expires, when known.
    Full {
        /// The least `PTTL` among the keys that refused.
        soonest: Option<Duration>,
    },
    /// A semaphore's holder here asked for another limit: nothing was written.
    OtherLimit {
        /// The limit that holder uses.
        in_force: u32,
    },
}

impl SlotReply {
    /// From the script's `{code, value, more slots…}`; `None` for a reply it never gives.
    pub fn from_script(reply: &[i64]) -> Option<Self> {
        let (&code, &value) = (reply.first()?, reply.get(1)?);
        Some(match code {
            -1 => Self::Full {
                soonest: u64::try_from(value).ok().map(Duration::from_millis),
            },
            -2 => Self::OtherLimit {
                in_force: u32::try_from(value).ok()?,
            },
            first => {
                let slot = |code: i64| u32::try_from(code).ok().filter(|&slot| slot < MAX_SLOTS);
                let mut slots = SlotSet::single(slot(first)?);
                for &more in &reply[2..] {
                    slots = slots.with(slot(more)?);
                }
                Self::Granted {
                    slots,
                    counter: u64::try_from(value).ok()?,
                }
            }
        })
    }
}

/// The slots a quorum of masters gave the lease, if any: the same set on each master of the
/// quorum. Each master gives at most one set, so at most one set can have a quorum.
pub fn quorum_slots(replies: &[Option<SlotReply>], quorum: usize) -> Option<SlotSet> {
    let mut granted: Vec<SlotSet> = replies
        .iter()
        .filter_map(|reply| match reply {
            Some(SlotReply::Granted { slots, .. }) => Some(*slots),
            _ => None,
        })
        .collect();
    granted.sort_unstable();
    granted
        .chunk_by(|a, b| a == b)
        .find(|same| same.len() >= quorum)
        .map(|same| same[0])
}

/// The order a lease tries `slots` slots in, the same on every master: every slot once,
/// starting from one its id picks, so concurrent callers spread over the slots.
pub fn slot_order(id: LeaseId, slots: u32) -> Vec<u32> {
    let start = (id.as_u128() % u128::from(slots)) as u32;
    (0..slots).map(|i| (start + i) % slots).collect()
}

/// One slotted attempt: its lease, the script that takes a slot, and how to name and give
/// back slots.
pub(super) struct SlottedAttempt<'a> {
    pub id: LeaseId,
    pub owner: &'a str,
    pub ttl: Duration,
    /// Takes a slot on one master (answers as [`SlotReply::from_script`] reads).
    pub acquire: Arc<ScriptCall>,
    /// Deletes the lease's claims on one master except the slots given (`None`: every one).
    pub release_claims: &'a (dyn Fn(Option<SlotSet>) -> Arc<ScriptCall> + Sync),
    /// The lock name of the slots a lease holds.
    pub name_of: &'a (dyn Fn(SlotSet) -> String + Sync),
}

// === impl Redlock ===

impl Redlock {
    /// Runs one slotted attempt: the outcome, and what each master answered (`None`: no
    /// usable answer).
    pub(super) async fn acquire_slotted(
        &self,
        attempt: SlottedAttempt<'_>,
    ) -> (AcquireOutcome, Vec<Option<SlotReply>>) {
        let start = Instant::now();
        let timeout = self.node_timeout(attempt.ttl, start);
        let mut unanswered = Unanswered {
            engine: self,
            release_claims: attempt.release_claims,
            timeout,
            armed: true,
        };
        let call = &attempt.acquire;
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
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
        let chosen = quorum_slots(&slots, quorum);
        let votes: Vec<NodeVote> = answers
            .iter()
            .zip(&answered)
            .map(|(answer, answered)| slot_vote(answer, *answered, chosen))
            .collect();
        // Every master that may hold a claim other than the chosen slot gives it back: one
        // that answered another slot, and one that did not answer at all.
        let stray: Vec<usize> = (0..n)
            .filter(|&i| match (&answers[i], slots[i]) {
                (Err(_), _) => true,
                (Ok(_), Some(SlotReply::Granted { slots, .. })) => Some(slots) != chosen,
                (Ok(_), _) => false,
            })
            .collect();
        let cleanup = (attempt.release_claims)(chosen);
        self.release_claims(cleanup, &stray, timeout).await;
        let outcome = match chosen {
            Some(set) => {
                let name = (attempt.name_of)(set);
                let (ttl, id, owner) = (attempt.ttl, attempt.id, attempt.owner);
                self.confirm_slot(votes, (start, ttl, timeout), id, name, owner)
                    .await
            }
            None => {
                let heard = answers.iter().filter(|a| a.is_ok()).count();
                let held = heard >= quorum;
                let refusal = Refusal {
                    cause: if held {
                        Shortfall::Held
                    } else {
                        Shortfall::TooFewAnswers
                    },
                    votes,
                    valid_until_cap: None,
                };
                if held {
                    AcquireOutcome::Contended(refusal)
                } else {
                    AcquireOutcome::NoQuorum(refusal)
                }
            }
        };
        unanswered.armed = false;
        METRICS.record_acquisition(outcome.label(), start.elapsed());
        (outcome, slots)
    }

    /// Fences a slot a quorum gave, as [`Redlock::confirm`] does a grant
    /// ([`Redlock::fence_and_judge`]); a lease that does not stand is released.
    async fn confirm_slot(
        &self,
        votes: Vec<NodeVote>,
        timing: (Instant, Duration, Duration),
        id: LeaseId,
        name: String,
        owner: &str,
    ) -> AcquireOutcome {
        match self.fence_and_judge(&votes, timing, &name).await {
            Ok((fencing_token, validity, now)) => AcquireOutcome::Acquired(Lease {
                id,
                resource: name,
                owner: owner.to_string(),
                fencing_token,
                ttl: timing.1,
                validity,
                valid_until: now + validity,
            }),
            Err(cause) => {
                let _ = self.release(&name, id).await;
                AcquireOutcome::NoQuorum(Refusal {
                    cause,
                    votes,
                    valid_until_cap: None,
                })
            }
        }
    }

    /// Sends `call` (a release of claims) to masters `at`, and waits for their answers (at
    /// most `timeout`).
    pub(super) async fn release_claims(
        &self,
        call: Arc<ScriptCall>,
        at: &[usize],
        timeout: Duration,
    ) {
        if at.is_empty() {
            return;
        }
        let nodes = at.iter().map(|&i| &self.fleet.nodes()[i]);
        let until = Instant::now() + timeout;
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            nodes,
            until,
            |node, deadline, reply| release_claims_on(node, call.clone(), deadline, reply),
        );
        while replies.recv().await.is_some() {}
    }
}

/// A slotted attempt not answered yet: dropped so, it releases every claim of its lease.
struct Unanswered<'a> {
    engine: &'a Redlock,
    release_claims: &'a (dyn Fn(Option<SlotSet>) -> Arc<ScriptCall> + Sync),
    timeout: Duration,
    armed: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Outside a runtime (the process is ending) there is nothing left to send them on;
        // the claims then expire with their TTL.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let call = (self.release_claims)(None);
        self.engine
            .release_claims_detached(&runtime, call, self.timeout);
    }
}

// === impl Redlock ===

impl Redlock {
    /// Sends `call` (a release of claims) to every master in tasks of its own on `runtime`,
    /// for a caller that cannot wait: one that is being dropped. A master that does not answer
    /// it with a result is sent it again, as a release is ([`super::retry`]).
    pub(super) fn release_claims_detached(
        &self,
        runtime: &tokio::runtime::Handle,
        call: Arc<ScriptCall>,
        timeout: Duration,
    ) {
        for node in self.fleet.nodes() {
            let (node, call) = (Arc::clone(node), call.clone());
            let retries = Arc::clone(&self.retries);
            let release = async move {
                let deadline = Deadline::After(timeout);
                let released = node.eval::<i64>(&call, &deadline, Admission::Always).await;
                if let Err(error) = released {
                    tracing::debug!(node = node.index(), %error, "an abandoned claim is sent again");
                    retries.push(node, call, None);
                }
            };
            runtime.spawn(self.tasks.track_future(release));
        }
    }
}

/// One master's release of stray claims; a master that did not answer keeps them until
/// their TTL, which bounds how long a stray claim can hold a slot there.
async fn release_claims_on(
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    deadline: Deadline,
    reply: Reply<()>,
) {
    let result = node.eval::<i64>(&call, &deadline, Admission::Always).await;
    if let Err(error) = result {
        tracing::debug!(node = node.index(), %error, "a stray claim was not released");
    }
    reply.send(());
}

/// A master's answer as a vote on the chosen slots: granted only for that set.
fn slot_vote(
    answer: &Result<Option<SlotReply>, CallError>,
    answered: bool,
    chosen: Option<SlotSet>,
) -> NodeVote {
    if !answered {
        return NodeVote::NoAnswer;
    }
    match answer {
        Ok(Some(SlotReply::Granted { slots, counter })) if Some(*slots) == chosen => {
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
        Ok(None) => NodeVote::Failed(CallError::Reply("unexpected slot reply".into())),
        Err(error) => NodeVote::Failed(error.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only slots a quorum gave win, as one set; divergent grants give none, even where each
    /// slot of a set has a quorum of its own.
    #[test]
    fn only_slots_a_quorum_gave_win() {
        let g = |slots: &[u32]| {
            Some(SlotReply::Granted {
                slots: slots.iter().copied().collect(),
                counter: 1,
            })
        };
        let set = |slots: &[u32]| Some(slots.iter().copied().collect::<SlotSet>());
        assert_eq!(quorum_slots(&[g(&[1]), g(&[1]), g(&[0])], 2), set(&[1]));
        assert_eq!(quorum_slots(&[g(&[0]), g(&[1]), None], 2), None);
        let five = [g(&[0]), g(&[1]), g(&[2]), g(&[2]), g(&[2])];
        assert_eq!(quorum_slots(&five, 3), set(&[2]));
        let full = Some(SlotReply::Full { soonest: None });
        assert_eq!(quorum_slots(&[g(&[0]), full, full], 2), None);
        let pairs = [g(&[0, 1]), g(&[1, 2]), g(&[0, 2])];
        assert_eq!(quorum_slots(&pairs, 2), None);
        let agreed = [g(&[0, 1]), g(&[1, 2]), g(&[0, 1])];
        assert_eq!(quorum_slots(&agreed, 2), set(&[0, 1]));
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

    /// The scripts' replies parse; nonsense does not.
    #[test]
    fn script_replies_parse() {
        assert_eq!(
            SlotReply::from_script(&[3, 17]),
            Some(SlotReply::Granted {
                slots: SlotSet::single(3),
                counter: 17
            })
        );
        assert_eq!(
            SlotReply::from_script(&[3, 17, 0, 9]),
            Some(SlotReply::Granted {
                slots: [0, 3, 9].into_iter().collect(),
                counter: 17
            })
        );
        assert_eq!(SlotReply::from_script(&[3, 17, 64]), None);
        assert_eq!(SlotReply::from_script(&[3, 17, -1]), None);
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

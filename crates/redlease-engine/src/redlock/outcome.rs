//! What the engine hands back: leases, renewals, per-master votes and the outcome values.

use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::CallError;
use crate::scripts::ExtendReply;
use crate::LeaseId;

/// A granted lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The lease's id, written into the lock's value on every master.
    pub id: LeaseId,
    /// The resource it locks.
    pub resource: String,
    /// Who holds it.
    pub owner: String,
    /// Strictly greater than the token of every earlier holder of any resource on this fleet.
    /// Pass it to the protected resource, which must refuse writes with a smaller token.
    pub fencing_token: u64,
    /// The TTL set on the masters by the last grant or renewal.
    pub ttl: Duration,
    /// Validity at the moment of the last grant or renewal: `ttl − elapsed − drift`.
    pub validity: Duration,
    /// When the validity runs out (monotonic clock). Act on the lock only before this.
    pub valid_until: Instant,
}

impl Lease {
    /// Validity left at `now`; zero once it has elapsed.
    pub fn remaining_validity(&self, now: Instant) -> Duration {
        self.valid_until.saturating_duration_since(now)
    }

    /// Whether the lease may still be acted on at `now` (before `valid_until`).
    pub fn is_valid(&self, now: Instant) -> bool {
        now < self.valid_until
    }

    /// Takes over the validity of a successful renewal.
    pub fn apply(&mut self, renewal: &Renewal) {
        self.ttl = renewal.ttl;
        self.validity = renewal.validity;
        self.valid_until = renewal.valid_until;
    }

    /// Takes what an extension of this lease tells about its validity, whatever the outcome:
    /// a renewal's new validity; after a failed one, the cap its sent writes put on the lease
    /// (a master that ran the call set the key's TTL to the call's, which may be shorter than
    /// what the lease had, see [`Refusal::valid_until_cap`]); none left once lost. Returns
    /// whether the lease is still valid at `now`.
    pub fn apply_extension(&mut self, outcome: &ExtendOutcome, now: Instant) -> bool {
        match outcome {
            ExtendOutcome::Extended(renewal) => self.apply(renewal),
            ExtendOutcome::NoQuorum(refusal) => self.cap(refusal.valid_until_cap),
            ExtendOutcome::Lost(_) => self.cap(Some(now)),
        }
        self.is_valid(now)
    }

    /// Brings `valid_until` down to `cap` when that is sooner.
    pub fn cap(&mut self, cap: Option<Instant>) {
        let Some(cap) = cap.filter(|cap| *cap < self.valid_until) else {
            return;
        };
        let cut = self.valid_until - cap;
        self.valid_until = cap;
        self.validity = self.validity.saturating_sub(cut);
    }
}

/// A successful extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The TTL the renewal set.
    pub ttl: Duration,
    /// `ttl − elapsed − drift`, measured from the start of this renewal.
    pub validity: Duration,
    /// When the renewed validity ends.
    pub valid_until: Instant,
}

/// One master's answer to a lock write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeVote {
    /// acquire: granted, with the master's fence counter.
    Granted {
        /// The master's fence counter after the acquisition's `INCR`.
        counter: u64,
    },
    /// acquire: held by another lease (its remaining time when known).
    Refused {
        /// How long the holder's key still lives there, when known.
        holder_remaining: Option<Duration>,
    },
    /// extend: what the master said.
    Extend(ExtendReply),
    /// shadow: set (`true`) or refused because another lease holds the resource.
    Shadow(bool),
    /// No usable answer.
    Failed(CallError),
    /// Still in flight when the outcome was decided.
    NoAnswer,
}

/// Why an acquisition or extension did not succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// A quorum of masters answered, and not enough of them were free.
    Held,
    /// A majority said the lease is not ours any more.
    NotOurs,
    /// Too few masters answered to decide.
    TooFewAnswers,
    /// Granted, but a quorum could not be confirmed at the fencing token.
    FenceNotConfirmed,
    /// Granted, but the round trips ate the whole validity.
    ValidityExpired,
    /// A fair waiter's entry was purged from its queue on a majority (its heartbeats came too
    /// late): it waits no more.
    Dequeued,
}

/// The detail of a failed attempt, per master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Why the call fell short.
    pub cause: Shortfall,
    /// Indexed like the fleet's masters.
    pub votes: Vec<NodeVote>,
    /// Extensions and shadows only: the latest instant the lease may still be counted valid
    /// after this call, `call start + ttl − drift`. The call was sent, so some masters may have
    /// run it, or will, and set the key's TTL to the call's, possibly shorter than before;
    /// a holder that kept its old validity could outlive its keys on a majority.
    /// [`Lease::apply_extension`] takes it. `None` for acquisitions.
    pub valid_until_cap: Option<Instant>,
}

impl Refusal {
    /// A blocking acquisition that waited its whole time in this sidecar's queue.
    pub fn queued() -> Self {
        Self {
            cause: Shortfall::Held,
            votes: Vec::new(),
            valid_until_cap: None,
        }
    }

    /// Whether a master answered that a force release revoked the lease (its tombstone).
    pub fn revoked(&self) -> bool {
        let revoked = NodeVote::Extend(ExtendReply::Revoked);
        self.votes.contains(&revoked)
    }

    /// The soonest a refusing holder's key expires on some master, when any said.
    pub fn holder_remaining(&self) -> Option<Duration> {
        self.votes
            .iter()
            .filter_map(|vote| match vote {
                NodeVote::Refused { holder_remaining } => *holder_remaining,
                _ => None,
            })
            .min()
    }
}

/// The result of an acquisition: expected outcomes are values, not errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The lease, granted by a quorum and valid for its `validity`.
    Acquired(Lease),
    /// Another lease holds the resource.
    Contended(Refusal),
    /// The fleet could not grant: too few masters answered, the fence could not be confirmed,
    /// or validity ran out. Everything written was released.
    NoQuorum(Refusal),
}

impl AcquireOutcome {
    /// The `outcome` label of the acquisition metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Acquired(_) => "acquired",
            Self::Contended(_) => "contended",
            Self::NoQuorum(_) => "no_quorum",
        }
    }

    /// The lease, when granted.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Self::Acquired(lease) => Some(lease),
            _ => None,
        }
    }

    /// The refusal, when not granted.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Acquired(_) => None,
            Self::Contended(refusal) | Self::NoQuorum(refusal) => Some(refusal),
        }
    }
}

/// The result of an extension. Whatever it is, apply it to the lease with
/// [`Lease::apply_extension`]: a failed extension may still shorten the lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtendOutcome {
    /// A quorum extended the lease: apply the renewal to it.
    Extended(Renewal),
    /// A majority answered that the lease is not ours: it is gone, never escalate.
    Lost(Refusal),
    /// Too few masters answered (or validity ran out): the lease may still stand, but no
    /// longer than [`Refusal::valid_until_cap`].
    NoQuorum(Refusal),
}

impl ExtendOutcome {
    /// The refusal of a failed extension.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Extended(_) => None,
            Self::Lost(refusal) | Self::NoQuorum(refusal) => Some(refusal),
        }
    }
}

/// The result of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseOutcome {
    /// Masters where a key of this lease was deleted.
    pub deleted_on: usize,
    /// Masters that answered with a result so far (when [`super::Redlock::release`] returned:
    /// a quorum at least when they could).
    pub answered: usize,
    /// Masters a grant needs (⌊N/2⌋+1).
    pub quorum: usize,
}

impl ReleaseOutcome {
    /// A quorum of masters answered: each of them no longer holds the lease, so no majority
    /// can. The masters that did not answer yet are sent the release again until they do
    /// (or until every key the lease could have left there has expired).
    pub fn confirmed(&self) -> bool {
        self.answered >= self.quorum
    }

    /// Confirmed, and the lease was still held somewhere: this call ended it.
    pub fn released(&self) -> bool {
        self.confirmed() && self.deleted_on > 0
    }
}

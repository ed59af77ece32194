//! What the engine hands back: leases, renewals, per-master votes and the outcome values.

use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::CallError;
use crate::scripts::ExtendReply;
use crate::LeaseId;

/// A granted lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    pub resource: String,
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

    pub fn is_valid(&self, now: Instant) -> bool {
        now < self.valid_until
    }

    /// Takes over the validity of a successful renewal.
    pub fn apply(&mut self, renewal: &Renewal) {
        self.ttl = renewal.ttl;
        self.validity = renewal.validity;
        self.valid_until = renewal.valid_until;
    }
}

/// A successful extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    pub ttl: Duration,
    /// `ttl − elapsed − drift`, measured from the start of this renewal.
    pub validity: Duration,
    pub valid_until: Instant,
}

/// One master's answer to a lock write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeVote {
    /// acquire: granted, with the master's fence counter.
    Granted { counter: u64 },
    /// acquire: held by another lease (its remaining time when known).
    Refused { holder_remaining: Option<Duration> },
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
}

/// The detail of a failed attempt, per master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub cause: Shortfall,
    /// Indexed like the fleet's masters.
    pub votes: Vec<NodeVote>,
}

impl Refusal {
    /// A blocking acquisition that waited its whole time in this sidecar's queue.
    pub fn queued() -> Self {
        Self {
            cause: Shortfall::Held,
            votes: Vec::new(),
        }
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

    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Self::Acquired(lease) => Some(lease),
            _ => None,
        }
    }

    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Acquired(_) => None,
            Self::Contended(refusal) | Self::NoQuorum(refusal) => Some(refusal),
        }
    }
}

/// The result of an extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtendOutcome {
    Extended(Renewal),
    /// A majority answered that the lease is not ours: it is gone, never escalate.
    Lost(Refusal),
    /// Too few masters answered (or validity ran out): the lease may still stand.
    NoQuorum(Refusal),
}

/// The result of a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReleaseOutcome {
    /// Masters where a key of this lease was deleted.
    pub deleted_on: usize,
    /// Masters that answered before the release returned (a quorum at least when they could).
    pub answered: usize,
}

impl ReleaseOutcome {
    /// Whether the lease held anything anywhere that is now gone.
    pub fn released(&self) -> bool {
        self.deleted_on > 0
    }

    /// A quorum answered and one of them deleted the lease: no majority can hold it any more,
    /// so the caller need not wait for the slower masters.
    pub(crate) fn settles(&self, quorum: usize) -> bool {
        self.answered >= quorum && self.released()
    }
}

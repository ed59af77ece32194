//! What the lease table is asked and answers: an acquisition's request and its kind of lock,
//! and the answers to acquisitions, releases and renewals.

use std::time::Duration;

use super::{LeaseState, LeaseView};
use crate::redlock::Permits;
use crate::{Error, LeaseId};

/// An app's request for a lock.
#[derive(Clone, Debug)]
pub struct AcquireRequest {
    /// The resource to lock.
    pub resource: String,
    /// Who will hold it.
    pub owner: String,
    /// `None`: the adaptive TTL.
    pub ttl: Option<Duration>,
    /// How long to wait for a lock that is held (capped by the policy).
    pub wait: Duration,
    /// Whether the manager renews the lease.
    pub auto_renew: bool,
    /// `None`: the policy's idle timeout.
    pub idle_timeout: Option<Duration>,
    /// Which of the resource's locks: its exclusive lock, a permit of its semaphore, or its
    /// read-write lock in one mode.
    pub kind: AcquireKind,
    /// `Some(value)`: a campaign for the leadership of the resource's election, the leader
    /// proclaiming `value` (`kind` is then `Lock`); `None`: not an election.
    pub campaign: Option<String>,
    /// Wait in one queue with the fair waiters of every sidecar on the same lock of the
    /// resource (its lock, semaphore, read-write lock or election; see `redlock::fair`).
    pub fair: bool,
}

/// Which of a resource's locks an acquisition takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AcquireKind {
    /// The resource's exclusive lock.
    #[default]
    Lock,
    /// Permits of the resource's counting semaphore: `count` of its `limit` slots, all or
    /// none, held by one lease.
    Permit(Permits),
    /// The resource's read-write lock, shared with other readers.
    Read {
        /// The write lease of this sidecar this read downgrades (its writer does not keep
        /// the read out).
        beside: Option<LeaseId>,
    },
    /// The resource's read-write lock, alone.
    Write,
}

impl AcquireKind {
    /// A permit's limit.
    pub fn limit(self) -> Option<u32> {
        match self {
            Self::Permit(permits) => Some(permits.limit),
            _ => None,
        }
    }
}

/// The answer to an acquisition.
#[derive(Clone, Debug)]
pub enum Acquired {
    /// The lease, now tracked and (with `auto_renew`) renewed.
    Granted(LeaseView),
    /// Another lease holds the resource (after the wait).
    Held,
    /// Too few masters answered.
    NoQuorum,
    /// A fair waiter's heartbeats came too late: a majority took it out of the queue.
    Dequeued,
    /// The sidecar is shutting down.
    Closing,
}

/// The answer to a release request.
#[derive(Clone, Debug)]
pub struct ReleaseAnswer {
    /// This request saw the release through: a quorum of masters confirmed it. Exactly one
    /// request of a lease ever gets `true`.
    pub released: bool,
    /// The lease's state now: `released`, or `releasing` while a quorum has not confirmed
    /// (the release keeps trying), or how it had ended before.
    pub state: LeaseState,
    /// What ended it, or is ending it (the release's reason while it is releasing).
    pub reason: Option<&'static str>,
}

/// Why a renewal or keepalive was refused.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("unknown lease")]
    Unknown,
    #[error("lease is {:?}", .0.state)]
    Gone(Box<LeaseView>),
    #[error("no quorum")]
    NoQuorum,
    /// A re-entry: [`reentry::MAX_HOLDS`] holds are open on the lease.
    #[error("too many holds")]
    TooManyHolds,
    /// A proclamation on a lease that is no election's.
    #[error("not a campaign's lease")]
    NotACampaign,
    #[error(transparent)]
    Invalid(#[from] Error),
}

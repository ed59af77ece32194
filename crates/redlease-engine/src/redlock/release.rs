//! Release: compare-and-delete on every master, answered once a quorum confirmed it; the
//! masters that did not answer it with a result get it again ([`super::retry`]), and their
//! answers still count: a [`Release`] follows them until a quorum confirmed it or every key the
//! lease could have left has expired.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::calls::{release_call, release_keys_call, release_on};
use super::fanout::fan_out;
use super::{Redlock, ReleaseOutcome};
use crate::keys::{parse_lock_name, validate_resource, LockKind};
use crate::metrics::METRICS;
use crate::{Error, LeaseId};

/// What the masters answered one release so far: written by its fan-out and by its retries,
/// read by whoever follows it ([`Release`]).
pub(crate) struct ReleaseTally {
    progress: watch::Sender<Progress>,
}

/// A release's answers so far.
#[derive(Clone, Debug)]
struct Progress {
    outcome: ReleaseOutcome,
    /// Masters whose result was counted, by index: each counts once.
    counted: Vec<bool>,
    /// The last retry round that went by while masters still owed the release a result.
    round: u64,
}

/// A release under way ([`Redlock::release_followed`]): what the masters answered so far, and
/// the answers still to come from the masters it is sent again to (every 100 ms, to each one
/// with a connection that has not answered it with a result).
pub struct Release {
    progress: watch::Receiver<Progress>,
    give_up_at: Instant,
}

// === impl ReleaseTally ===

impl ReleaseTally {
    fn new(masters: usize, quorum: usize) -> Arc<Self> {
        let progress = Progress {
            outcome: ReleaseOutcome {
                deleted_on: 0,
                answered: 0,
                quorum,
            },
            counted: vec![false; masters],
            round: 0,
        };
        Arc::new(Self {
            progress: watch::channel(progress).0,
        })
    }

    /// Master `index` answered the release with a result; `deleted`: it still held the lease.
    /// A master that is another's very server (`counts` false) answers twice for one and does
    /// not count.
    pub(crate) fn answered(&self, index: usize, counts: bool, deleted: bool) {
        self.progress.send_if_modified(|progress| {
            let Some(counted) = progress.counted.get_mut(index) else {
                return false;
            };
            if !counts || *counted {
                return false;
            }
            *counted = true;
            progress.outcome.answered += 1;
            progress.outcome.deleted_on += usize::from(deleted);
            true
        });
    }

    /// Retry round `round` went by (the release was sent again, or its master had no
    /// connection to send it on).
    pub(crate) fn round_passed(&self, round: u64) {
        self.progress.send_if_modified(|progress| {
            let newer = progress.round < round;
            progress.round = progress.round.max(round);
            newer
        });
    }

    fn outcome(&self) -> ReleaseOutcome {
        self.progress.borrow().outcome
    }
}

// === impl Release ===

impl Release {
    /// What the masters answered so far.
    pub fn outcome(&self) -> ReleaseOutcome {
        self.progress.borrow().outcome
    }

    /// Past this instant every key the lease could have left has expired (the fleet's
    /// quarantine bounds every TTL) and the release is no longer sent: a release a quorum has
    /// not confirmed by then never will be, nor need be.
    pub fn give_up_at(&self) -> Instant {
        self.give_up_at
    }

    /// A quorum confirmed it, or it was given up at `now`.
    pub fn is_over(&self, now: Instant) -> bool {
        self.outcome().confirmed() || now >= self.give_up_at
    }

    /// Waits for news of the release: a master's answer, or one more round of sending it again
    /// to the masters that owe it a result; at the latest until [`Release::give_up_at`]. The
    /// outcome then.
    pub async fn next_round(&mut self) -> ReleaseOutcome {
        let news = tokio::time::timeout_at(self.give_up_at, self.progress.changed()).await;
        if let Ok(Err(_)) = news {
            // Nobody owes it an answer any more (each master answered, or its retry was
            // dropped): nothing more can come before the keys expire.
            tokio::time::sleep_until(self.give_up_at).await;
        }
        self.progress.borrow_and_update().outcome
    }
}

// === impl Redlock ===

impl Redlock {
    /// Deletes lease `id` on `resource` everywhere it stands. The release goes to every
    /// master, down or not, and returns once a quorum answered (no majority can hold the lease
    /// any more: [`ReleaseOutcome::confirmed`]), or once every master that is up answered or
    /// timed out. The slower masters' releases are already enqueued on their connections, ahead
    /// of any later write there, and finish in the background ([`Redlock::settle`] waits for
    /// them); a master that did not answer the release with a result (down, reconnecting, timed
    /// out, an error reply such as `-LOADING` or `-BUSY`) is sent it again until it does or
    /// every key the lease could have left there has expired.
    pub async fn release(&self, resource: &str, id: LeaseId) -> Result<ReleaseOutcome, Error> {
        Ok(self.release_followed(resource, id).await?.outcome())
    }

    /// [`Redlock::release`], returning the release itself: the answers of the masters it is
    /// sent again to keep counting, so a caller can wait ([`Release::next_round`]) until a
    /// quorum confirmed it or it was given up, instead of sending it again itself.
    #[tracing::instrument(level = "debug", skip(self), fields(lease_id = %id))]
    pub async fn release_followed(&self, resource: &str, id: LeaseId) -> Result<Release, Error> {
        // `validate_lock_name`, parsing the name once for its kind too.
        let name = parse_lock_name(resource).ok_or(Error::InvalidResource("unknown lock kind"))?;
        validate_resource(name.resource)?;
        let keyspace = self.fleet.keyspace();
        let now = Instant::now();
        let timeout = self.node_timeout(self.options.max_ttl, now);
        let channel = keyspace.released_channel(resource);
        let call = match name.kind {
            LockKind::Slots(_) => release_keys_call(&keyspace.locks(resource), &channel, id),
            _ => release_call(&keyspace.lock(resource), &channel, id),
        };
        let nodes = self.fleet.nodes();
        let tally = ReleaseTally::new(nodes.len(), self.fleet.quorum());
        let mut progress = tally.progress.subscribe();
        let awaited: Vec<bool> = nodes.iter().map(|n| n.is_up()).collect();
        let (retries, until) = (&self.retries, now + timeout);
        let mut replies = fan_out(&self.tasks, nodes, until, |node, deadline, reply| {
            let (call, tally) = (call.clone(), Arc::clone(&tally));
            release_on(node, call, deadline, retries.clone(), tally, reply)
        });
        let mut waiting = awaited.iter().filter(|up| **up).count();
        while waiting > 0 && !tally.outcome().confirmed() {
            let Some((index, ())) = replies.recv().await else {
                break;
            };
            waiting -= usize::from(awaited[index]);
        }
        METRICS.record_release(now.elapsed());
        progress.borrow_and_update();
        Ok(Release {
            progress,
            give_up_at: now + self.retries.key_lifetime(),
        })
    }
}

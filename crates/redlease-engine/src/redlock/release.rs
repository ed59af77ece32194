//! Release: compare-and-delete on every master, answered once a quorum confirmed it; the
//! masters that did not answer it with a result get it again ([`super::retry`]), and their
//! answers still count: a [`Release`] follows them until a quorum confirmed it or every key the
//! lease could have left has expired.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::calls::{release_call, release_keys_call, release_on};
use super::fanout::fan_out;
use super::{Redlock, ReleaseOutcome};
use crate::keys::{parse_lock_name, validate_resource, LockKind};
use crate::metrics::METRICS;
use crate::{Error, LeaseId};

/// What the masters answered one release so far, and the news of it: written by its fan-out
/// and by its retries, read by whoever follows it ([`Release`]). One lock and one `Notify`: a
/// `watch` channel did the same with eight notifiers woken on every answer, a cost paid by
/// every release.
pub(crate) struct ReleaseTally {
    progress: Mutex<Progress>,
    news: Notify,
}

/// A release's answers so far.
#[derive(Debug)]
struct Progress {
    outcome: ReleaseOutcome,
    /// Masters whose result was counted, by index: each counts once.
    counted: Vec<bool>,
    /// The last retry round that went by while masters still owed the release a result.
    round: u64,
    /// Counts every change, so that a follower tells news from what it saw.
    version: u64,
}

/// A release under way ([`Redlock::release_followed`]): what the masters answered so far, and
/// the answers still to come from the masters it is sent again to (every 100 ms, to each one
/// with a connection that has not answered it with a result).
pub struct Release {
    tally: Arc<ReleaseTally>,
    /// The version of the progress last read.
    seen: u64,
    give_up_at: Instant,
}

// === impl ReleaseTally ===

impl ReleaseTally {
    fn progress(&self) -> MutexGuard<'_, Progress> {
        // Counters set under the lock and never left half-changed: a poisoned one is sound.
        self.progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `change`; a change that changed something is news.
    fn change(&self, change: impl FnOnce(&mut Progress) -> bool) {
        let changed = {
            let mut progress = self.progress();
            let changed = change(&mut progress);
            progress.version += u64::from(changed);
            changed
        };
        if changed {
            self.news.notify_waiters();
        }
    }

    fn new(masters: usize, quorum: usize) -> Arc<Self> {
        let progress = Progress {
            outcome: ReleaseOutcome {
                deleted_on: 0,
                answered: 0,
                quorum,
            },
            counted: vec![false; masters],
            round: 0,
            version: 0,
        };
        Arc::new(Self {
            progress: Mutex::new(progress),
            news: Notify::new(),
        })
    }

    /// Master `index` answered the release with a result; `deleted`: it still held the lease.
    /// A master that is another's very server (`counts` false) answers twice for one and does
    /// not count.
    pub(crate) fn answered(&self, index: usize, counts: bool, deleted: bool) {
        self.change(|progress| {
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
        self.change(|progress| {
            let newer = progress.round < round;
            progress.round = progress.round.max(round);
            newer
        });
    }

    fn outcome(&self) -> ReleaseOutcome {
        self.progress().outcome
    }

    /// Its follower, which has seen the answers so far.
    fn follower(self: &Arc<Self>, give_up_at: Instant) -> Release {
        Release {
            seen: self.progress().version,
            tally: Arc::clone(self),
            give_up_at,
        }
    }
}

// === impl Release ===

impl Release {
    /// What the masters answered so far.
    pub fn outcome(&self) -> ReleaseOutcome {
        self.tally.outcome()
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
    /// outcome then. Once nobody owes it an answer (each master answered, or its retry was
    /// dropped), nothing more comes, and it waits until then.
    pub async fn next_round(&mut self) -> ReleaseOutcome {
        let _ = tokio::time::timeout_at(self.give_up_at, self.news()).await;
        let progress = self.tally.progress();
        self.seen = progress.version;
        progress.outcome
    }

    /// Waits for a change not seen yet.
    async fn news(&self) {
        loop {
            // Made before the check: a change made after it wakes this waiter.
            let notified = self.tally.news.notified();
            if self.tally.progress().version != self.seen {
                return;
            }
            notified.await;
        }
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
        let awaited: Vec<bool> = nodes.iter().map(|n| n.is_up()).collect();
        let (retries, until) = (&self.retries, now + timeout);
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            nodes,
            until,
            |node, deadline, reply| {
                let (call, tally) = (call.clone(), Arc::clone(&tally));
                release_on(node, call, deadline, retries.clone(), tally, reply)
            },
        );
        let mut waiting = awaited.iter().filter(|up| **up).count();
        while waiting > 0 && !tally.outcome().confirmed() {
            let Some((index, ())) = replies.recv().await else {
                break;
            };
            waiting -= usize::from(awaited[index]);
        }
        METRICS.record_release(now.elapsed());
        Ok(tally.follower(now + self.retries.key_lifetime()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_follower_hears_each_answer_once_then_waits_until_the_keys_expired() {
        let tally = ReleaseTally::new(3, 2);
        let give_up_at = Instant::now() + Duration::from_secs(5);
        let mut release = tally.follower(give_up_at);
        assert_eq!(release.news().now_or_never(), None, "nothing new yet");

        tally.answered(0, true, true);
        tally.answered(0, true, true); // counted once
        assert_eq!(release.next_round().await.answered, 1);
        assert_eq!(release.news().now_or_never(), None, "seen already");

        tally.answered(1, true, false);
        drop(tally);
        // An answer before the tally was dropped is still news, at once.
        let outcome = release.next_round().await;
        assert_eq!((outcome.answered, outcome.deleted_on), (2, 1));
        assert!(outcome.confirmed());
        assert_eq!(Instant::now(), give_up_at - Duration::from_secs(5));

        // Nothing new, and nobody left to answer: it waits until the keys expired.
        release.next_round().await;
        assert_eq!(Instant::now(), give_up_at);
    }

    #[tokio::test]
    async fn a_waiting_follower_is_woken_by_an_answer_and_by_a_retry_round() {
        let tally = ReleaseTally::new(3, 2);
        let mut release = tally.follower(Instant::now() + Duration::from_secs(60));
        let waiter = tokio::spawn(async move {
            let first = release.next_round().await;
            let second = release.next_round().await;
            (first.answered, second.answered)
        });
        tokio::task::yield_now().await;
        tally.answered(2, true, true);
        tokio::task::yield_now().await;
        tally.round_passed(1);
        let answered = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert_eq!(answered.unwrap().unwrap(), (1, 1));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_racing_its_follower_on_another_thread_wakes_it() {
        for _ in 0..2_000 {
            let tally = ReleaseTally::new(1, 1);
            let mut release = tally.follower(Instant::now() + Duration::from_secs(60));
            let follower = tokio::spawn(async move { release.next_round().await.answered });
            tally.answered(0, true, true);
            let answered = tokio::time::timeout(Duration::from_secs(5), follower).await;
            assert_eq!(answered.expect("woken").unwrap(), 1);
        }
    }
}

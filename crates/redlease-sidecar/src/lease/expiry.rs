//! The ends of validity of the leases the table does not renew (`auto_renew: false`): one
//! task for them all, rather than a task per lease. Each such lease has one deadline armed
//! here, its `valid_until`; when it passes the lease is reported expired (lost) and its keys
//! released. A renewal that moves the validity later is found when the armed deadline passes
//! (the lease is armed again at its new end); one that moves it sooner arms the sooner end at
//! once. A lease that ends otherwise is left to its armed deadline, which then finds it over.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{renewal, LeaseManager, Step, Tracked};

/// The armed deadlines, soonest first, and the wake-up of their task.
#[derive(Default)]
pub(super) struct Expiries {
    due: Mutex<BinaryHeap<Due>>,
    /// Told when a deadline sooner than every other was armed.
    sooner: Notify,
}

/// One armed deadline. Only the lease's latest (`Tracked::expiry_armed`) counts; an earlier
/// one still queued is dropped when it comes up.
struct Due {
    at: Instant,
    lease: Weak<Tracked>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed: `BinaryHeap` is a max-heap, and the soonest deadline must come first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

// === impl Expiries ===

impl Expiries {
    /// Arms `tracked` at `at`, unless a sooner deadline of it is armed already.
    pub(super) fn arm(&self, tracked: &Arc<Tracked>, at: Instant) {
        {
            let mut armed = tracked.expiry_armed();
            if armed.is_some_and(|armed| armed <= at) {
                return;
            }
            *armed = Some(at);
        }
        self.push(tracked, at);
    }

    fn push(&self, tracked: &Arc<Tracked>, at: Instant) {
        let mut due = self.due();
        let soonest = due.peek().is_none_or(|first| at < first.at);
        due.push(Due {
            at,
            lease: Arc::downgrade(tracked),
        });
        drop(due);
        if soonest {
            self.sooner.notify_one();
        }
    }

    /// The leases whose armed deadline is at or before `now`, taken off.
    fn take_due(&self, now: Instant) -> Vec<Arc<Tracked>> {
        let mut due = self.due();
        let mut leases = Vec::new();
        while due.peek().is_some_and(|first| first.at <= now) {
            // `peek` just found it.
            let Some(first) = due.pop() else { break };
            let Some(tracked) = first.lease.upgrade() else {
                continue;
            };
            // A deadline armed again since (sooner, or later after it came up) is the one
            // that counts.
            let mut armed = tracked.expiry_armed();
            if *armed == Some(first.at) {
                *armed = None;
                drop(armed);
                leases.push(tracked);
            }
        }
        leases
    }

    fn soonest(&self) -> Option<Instant> {
        self.due().peek().map(|first| first.at)
    }

    fn due(&self) -> MutexGuard<'_, BinaryHeap<Due>> {
        // Pushes and pops only: a poisoned heap is still a heap.
        self.due
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Reports each lease without auto-renewal expired when its validity passes, for as long as
/// `manager` lives.
pub(super) async fn expire_leases(manager: Weak<LeaseManager>, expiries: Arc<Expiries>) {
    loop {
        let sooner = expiries.sooner.notified();
        tokio::pin!(sooner);
        // Registered before the look: a sooner deadline armed after it still wakes us.
        sooner.as_mut().enable();
        match expiries.soonest() {
            None => sooner.await,
            Some(at) if at > Instant::now() => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = sooner => {}
                }
            }
            Some(_) => {}
        }
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let now = Instant::now();
        for tracked in expiries.take_due(now) {
            let step = tracked.record().next_step(now);
            match step {
                Step::Expire => renewal::lose(manager.engine(), &tracked, super::EXPIRED),
                // Renewed meanwhile: armed again at its new end.
                Step::Wait(until) if !tracked.record().state.is_ended() => {
                    expiries.arm(&tracked, until);
                }
                // Ended otherwise (its release or loss retired it), or renewed by the table
                // (never: only leases the table does not renew are armed here).
                Step::Wait(_) | Step::Done | Step::Renew | Step::IdleRelease => {}
            }
        }
    }
}

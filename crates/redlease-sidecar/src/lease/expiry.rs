//! The ends of validity of the leases the table does not renew (`auto_renew: false`): one
//! task for them all, rather than a task per lease. Each such lease has one deadline armed
//! here, its `valid_until`; when it passes the lease is reported expired (lost) and its keys
//! released. A renewal that moves the validity later is found when the armed deadline passes
//! (the lease is armed again at its new end); one that moves it sooner arms the sooner end at
//! once. A lease that ends otherwise is left to its armed deadline, which then finds it over;
//! the deadlines of leases no longer armed there are dropped when the heap reaches 4,096,
//! 8,192, … entries and twice the table's leases, so it stays within about four times the
//! table's size (or a few thousand).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{renewal, LeaseManager, Step, Tracked};
use crate::LeaseId;

/// Deadlines kept before stale ones are looked for, whatever the table's size.
const COMPACT_FROM: usize = 4096;
/// How often the task looks whether its table is still there when nothing is armed.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The armed deadlines, soonest first, and the wake-up of their task.
#[derive(Default)]
pub(super) struct Expiries {
    due: Mutex<BinaryHeap<Due>>,
    /// Told when a deadline sooner than every other was armed.
    sooner: Notify,
}

/// One armed deadline. Only the lease's latest (`Tracked::expiry_armed`) counts; an earlier
/// one still queued is dropped when it comes up. The lease is named by its id, looked up in
/// the table when due: an ended lease's memory goes when the table forgets it.
struct Due {
    at: Instant,
    lease: LeaseId,
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
        let lease = tracked.record().lease.id;
        let mut due = self.due();
        let soonest = due.peek().is_none_or(|first| at < first.at);
        due.push(Due { at, lease });
        // Crowded: the task looks for stale deadlines (at 4096, 8192, … of them).
        let crowded = due.len() >= COMPACT_FROM && due.len().is_power_of_two();
        drop(due);
        if soonest || crowded {
            self.sooner.notify_one();
        }
    }

    /// The deadlines at or before `now`, taken off.
    fn take_due(&self, now: Instant) -> Vec<Due> {
        let mut due = self.due();
        let mut taken = Vec::new();
        while due.peek().is_some_and(|first| first.at <= now) {
            taken.extend(due.pop());
        }
        taken
    }

    /// Drops the deadlines that no longer count once they outnumber twice the table's leases.
    fn compact(&self, manager: &LeaseManager) {
        let leases = manager.table().len();
        let stale = {
            let due = self.due();
            due.len() >= COMPACT_FROM.max(2 * leases)
        };
        if !stale {
            return;
        }
        let all = std::mem::take(&mut *self.due());
        // Looked up outside the heap's lock; a deadline armed meanwhile was pushed anew.
        let live: Vec<Due> = all
            .into_vec()
            .into_iter()
            .filter(|entry| armed_at(manager, entry).is_some())
            .collect();
        self.due().extend(live);
    }

    pub(super) fn len(&self) -> usize {
        self.due().len()
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

/// The lease of `entry`, when this deadline is the one armed for it.
fn armed_at(manager: &LeaseManager, entry: &Due) -> Option<Arc<Tracked>> {
    let tracked = manager.find(entry.lease)?;
    let armed = *tracked.expiry_armed() == Some(entry.at);
    armed.then_some(tracked)
}

/// The lease of `entry` disarmed, when this deadline is the one armed for it: looked at and
/// cleared under one lock, so a sooner deadline armed at the same time is never cleared.
fn claim(manager: &LeaseManager, entry: &Due) -> Option<Arc<Tracked>> {
    let tracked = manager.find(entry.lease)?;
    {
        let mut armed = tracked.expiry_armed();
        if *armed != Some(entry.at) {
            return None;
        }
        *armed = None;
    }
    Some(tracked)
}

/// Reports each lease without auto-renewal expired when its validity passes, for as long as
/// `manager` lives.
pub(super) async fn expire_leases(manager: Weak<LeaseManager>, expiries: Arc<Expiries>) {
    loop {
        let sooner = expiries.sooner.notified();
        tokio::pin!(sooner);
        // Registered before the look: a sooner deadline armed after it still wakes us.
        sooner.as_mut().enable();
        let now = Instant::now();
        let wake = match expiries.soonest() {
            // Nothing armed: look again later whether the table is still there.
            None => Some(now + IDLE_LOOK),
            Some(at) if at > now => Some(at),
            Some(_) => None,
        };
        if let Some(wake) = wake {
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = sooner => {}
            }
        }
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let now = Instant::now();
        for entry in expiries.take_due(now) {
            let Some(tracked) = claim(&manager, &entry) else {
                continue;
            };
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
        expiries.compact(&manager);
    }
}

//! The ended leases the table keeps readable: each for the retention period after its end,
//! and never more than `retained_max` of them (the oldest forgotten first), which bounds the
//! table's memory under churn; swept as leases end and on a timer when none does. A lease
//! forgotten takes its re-entry holds' ids with it (see `reentry`).

use std::collections::VecDeque;
use std::sync::{MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::LeaseManager;
use crate::LeaseId;

// === impl LeaseManager ===

impl LeaseManager {
    /// Ended leases kept readable now, at most `retained_max` (a lease is counted once its
    /// task is over, right after its end).
    pub fn retained(&self) -> usize {
        self.retired().len()
    }

    /// The lease `id` has ended and its task is over: it stays readable for the retention
    /// period (no task of its own waits for it), and the leases whose period is over, or the
    /// oldest beyond `retained_max`, are forgotten.
    pub(super) fn retire(&self, id: LeaseId, now: Instant) {
        let mut retired = self.retired();
        retired.push_back((now + self.policy.retention, id));
        self.forget_retired(&mut retired, now);
    }

    /// Forgets the ended leases whose retention is over at `now`, and the oldest of those
    /// beyond `retained_max`.
    fn forget_retired(&self, retired: &mut VecDeque<(Instant, LeaseId)>, now: Instant) {
        // Deadlines are pushed in order (one retention period after each end).
        let expired = retired
            .iter()
            .take_while(|(until, _)| *until <= now)
            .count();
        let beyond_cap = retired.len().saturating_sub(self.policy.retained_max);
        let over = expired.max(beyond_cap);
        if over == 0 {
            return;
        }
        let mut table = self.table();
        for (_, id) in retired.drain(..over) {
            if let Some(tracked) = table.remove(&id) {
                self.forget_holds(&tracked);
            }
        }
    }

    /// Forgets the ended leases whose retention is over, when no lease ends to do it.
    pub(super) fn sweep_retired(&self, now: Instant) {
        let mut retired = self.retired();
        self.forget_retired(&mut retired, now);
    }

    fn retired(&self) -> MutexGuard<'_, VecDeque<(Instant, LeaseId)>> {
        // Pushes and drains only: a poisoned queue is still consistent.
        self.retired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Forgets ended leases past their retention every `interval` while `manager` lives (a
/// sidecar where no lease ends would keep them otherwise).
pub(super) async fn sweep_retired_every(manager: Weak<LeaseManager>, interval: Duration) {
    let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        manager.sweep_retired(Instant::now());
    }
}

//! What the lease table logs: one event macro carrying every lease's fields, and the tally
//! behind the periodic INFO summary. Grants and releases are logged at debug, one line each;
//! a lease without auto-renewal running out at info; losses, degradations and escalations at
//! warn; the summary says every minute how many leases were granted, released, lost and
//! expired, so a busy sidecar's log stays readable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;
use std::time::Duration;

use super::{LeaseManager, LeaseState};
use crate::metrics::{self, METRICS};
use crate::redlock::Lease;

/// One structured log event about a lease, with the fields every lease event carries:
/// resource, owner, lease id, fencing token and TTL.
macro_rules! lease_event {
    ($level:ident, $lease:expr, $message:literal $(, $key:ident = $value:expr)*) => {{
        let lease: &$crate::redlock::Lease = $lease;
        tracing::$level!(
            resource = %lease.resource,
            owner = %lease.owner,
            lease_id = %lease.id,
            fencing_token = lease.fencing_token,
            ttl_ms = lease.ttl.as_millis() as u64,
            $($key = $value,)*
            $message
        );
    }};
}

/// How often the summary is logged.
pub(super) const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// Leases granted, released and lost since the last summary.
#[derive(Debug, Default)]
pub(super) struct Activity {
    granted: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
    expired: AtomicU64,
}

impl Activity {
    pub(super) fn granted(&self) {
        self.granted.fetch_add(1, Ordering::Relaxed);
    }

    fn released(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
    }

    fn lost(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// A lease without auto-renewal ran out, as its caller chose.
    fn expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and logs the end of `lease` (`state` lost or released, for `reason`) after
    /// `held_for`. `chosen`: a lease without auto-renewal that ran out, as its caller chose,
    /// counted in `lock_leases_expired_total` at info rather than as a loss at warn.
    pub(super) fn ended(
        &self,
        lease: &Lease,
        state: LeaseState,
        reason: &'static str,
        chosen: bool,
        held_for: Duration,
    ) {
        METRICS
            .hold_duration
            .record(metrics::seconds(held_for), &[]);
        if state == LeaseState::Lost && chosen {
            METRICS.leases_expired.add(1, &[]);
            lease_event!(info, lease, "lease expired", reason = reason);
            self.expired();
        } else if state == LeaseState::Lost {
            let reason_label = metrics::label("reason", reason);
            METRICS.leases_lost.add(1, &reason_label);
            lease_event!(warn, lease, "lease lost", reason = reason);
            self.lost();
        } else {
            lease_event!(debug, lease, "lease released", reason = reason);
            self.released();
        }
    }

    /// The counts since the last call: granted, released, lost, expired.
    fn take(&self) -> [u64; 4] {
        [&self.granted, &self.released, &self.lost, &self.expired]
            .map(|n| n.swap(0, Ordering::Relaxed))
    }
}

/// Logs the summary every `interval` while `manager` lives, when anything happened or a lease
/// is held.
pub(super) async fn log_summaries(manager: Weak<LeaseManager>, interval: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    loop {
        ticks.tick().await;
        let Some(manager) = manager.upgrade() else {
            return;
        };
        let [granted, released, lost, expired] = manager.activity.take();
        let active = manager.active();
        if granted + released + lost + expired + active as u64 > 0 {
            tracing::info!(
                granted,
                released,
                lost,
                expired,
                active,
                period_s = interval.as_secs(),
                "leases"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each summary counts what happened since the one before.
    #[test]
    fn the_tally_restarts_at_each_summary() {
        let activity = Activity::default();
        activity.granted();
        activity.granted();
        activity.released();
        activity.lost();
        activity.expired();
        assert_eq!(activity.take(), [2, 1, 1, 1]);
        assert_eq!(activity.take(), [0, 0, 0, 0]);
    }
}

//! Shadow escalation policy (pure): whether a failed renewal escalates, and with which shadow
//! TTL and per-master timeout.

use std::time::Duration;

use tokio::time::Instant;

use crate::redlock::Shortfall;

/// Escalate only when the renewal failed for lack of answers (masters slow or unreachable),
/// never when a majority answered that the lease is not ours.
pub(crate) fn should_escalate(cause: Shortfall) -> bool {
    matches!(cause, Shortfall::TooFewAnswers | Shortfall::ValidityExpired)
}

/// Whether a shadow call given `timeout` may go out at `now`: only when every answer it can
/// count lands before the lease's validity ends. A shadow that landed later would bring back
/// a lease already reported lost, after another holder may have come and gone.
pub(crate) fn may_escalate(now: Instant, timeout: Duration, valid_until: Instant) -> bool {
    now + timeout < valid_until
}

/// `ttl × multiplier`, capped (at the restart quarantine, the longest a key may live).
pub(crate) fn shadow_ttl(ttl: Duration, multiplier: u32, cap: Duration) -> Duration {
    ttl.saturating_mul(multiplier).min(cap)
}

/// The escalation's per-master timeout: half the validity the lease has left, so slow masters
/// get far longer than a renewal gives them while an answer still lands before the end.
pub(crate) fn timeout(remaining_validity: Duration) -> Duration {
    (remaining_validity / 2).max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slow or missing masters escalate; "not ours" and contention never do.
    #[test]
    fn only_missing_answers_escalate() {
        assert!(should_escalate(Shortfall::TooFewAnswers));
        assert!(should_escalate(Shortfall::ValidityExpired));
        assert!(!should_escalate(Shortfall::NotOurs));
        assert!(!should_escalate(Shortfall::Held));
        assert!(!should_escalate(Shortfall::FenceNotConfirmed));
    }

    /// A shadow goes out only when its answers can land before the validity ends.
    #[tokio::test(start_paused = true)]
    async fn no_escalation_that_could_land_after_the_validity() {
        let now = Instant::now();
        let until = now + Duration::from_millis(100);
        assert!(may_escalate(now, timeout(until - now), until));
        assert!(!may_escalate(now, Duration::from_millis(100), until));
        assert!(!may_escalate(until, timeout(Duration::ZERO), until));
        let one_ms_left = until - Duration::from_millis(1);
        assert!(!may_escalate(
            one_ms_left,
            timeout(Duration::from_millis(1)),
            until
        ));
    }

    /// The shadow outlives the lock tenfold, never past the cap; the timeout is half the rest.
    #[test]
    fn shadow_ttl_and_timeout_are_bounded() {
        let cap = Duration::from_secs(300);
        assert_eq!(
            shadow_ttl(Duration::from_secs(2), 10, cap),
            Duration::from_secs(20)
        );
        assert_eq!(shadow_ttl(Duration::from_secs(60), 10, cap), cap);
        assert_eq!(
            timeout(Duration::from_millis(900)),
            Duration::from_millis(450)
        );
        assert_eq!(timeout(Duration::ZERO), Duration::from_millis(1));
    }
}

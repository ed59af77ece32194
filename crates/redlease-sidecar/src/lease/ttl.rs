//! Adaptive TTL and the renewal schedule (pure; time and randomness are arguments).
//!
//! `ttl = clamp(quorum_p99 × rtt_multiplier + safety_margin, min_ttl, max_ttl)`: a lease lives
//! a few quorum round trips longer than a renewal needs. Renewal fires at `renew_fraction` of
//! the TTL minus a random jitter, so thousands of leases never renew in step.

use std::time::Duration;

use tokio::time::Instant;

/// How TTLs are chosen when the caller gives none.
#[derive(Clone, Copy, Debug)]
pub struct TtlPolicy {
    /// Shortest TTL a caller may ask for.
    pub min_ttl: Duration,
    /// Longest TTL a caller may ask for.
    pub max_ttl: Duration,
    /// Adaptive TTL: quorum RTT p99 × this + `safety_margin`.
    pub rtt_multiplier: f64,
    /// Added to the RTT term of the adaptive TTL.
    pub safety_margin: Duration,
}

impl TtlPolicy {
    /// The adaptive TTL for the current quorum p99 RTT (`None` before any sample: the floor).
    pub fn adaptive(&self, quorum_rtt_p99: Option<Duration>) -> Duration {
        let rtt = quorum_rtt_p99.unwrap_or(Duration::ZERO);
        let wanted = rtt.mul_f64(self.rtt_multiplier) + self.safety_margin;
        wanted.clamp(self.min_ttl, self.max_ttl.max(self.min_ttl))
    }
}

/// When auto-renewal fires.
#[derive(Clone, Copy, Debug)]
pub struct RenewalSchedule {
    /// Share of the TTL after which a renewal is due (0–1).
    pub fraction: f64,
    /// Largest random amount a renewal is brought forward by.
    pub jitter: Duration,
}

impl RenewalSchedule {
    /// The renewal time of a lease whose TTL started at `from`; `u` in 0..1 picks the jitter.
    /// The jitter never takes more than half of the wait, so a renewal is never due at once.
    pub fn renew_at(&self, from: Instant, ttl: Duration, u: f64) -> Instant {
        let wait = ttl.mul_f64(self.fraction.clamp(0.0, 1.0));
        let jitter = self.jitter.min(wait / 2).mul_f64(u.clamp(0.0, 1.0));
        from + wait - jitter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> TtlPolicy {
        TtlPolicy {
            min_ttl: Duration::from_millis(500),
            max_ttl: Duration::from_secs(30),
            rtt_multiplier: 3.0,
            safety_margin: Duration::from_millis(200),
        }
    }

    /// The adaptive TTL follows the quorum RTT between its bounds.
    #[test]
    fn adaptive_ttl_follows_rtt_within_bounds() {
        let p = policy();
        assert_eq!(p.adaptive(None), Duration::from_millis(500));
        assert_eq!(
            p.adaptive(Some(Duration::from_micros(300))),
            Duration::from_millis(500)
        );
        assert_eq!(
            p.adaptive(Some(Duration::from_millis(200))),
            Duration::from_millis(800)
        );
        assert_eq!(
            p.adaptive(Some(Duration::from_secs(20))),
            Duration::from_secs(30)
        );
    }

    /// Renewals are due at the fraction of the TTL, brought forward by at most the jitter.
    #[tokio::test(start_paused = true)]
    async fn renewals_are_spread_by_jitter() {
        let schedule = RenewalSchedule {
            fraction: 0.5,
            jitter: Duration::from_millis(100),
        };
        let from = Instant::now();
        let ttl = Duration::from_millis(1_000);
        assert_eq!(
            schedule.renew_at(from, ttl, 0.0),
            from + Duration::from_millis(500)
        );
        assert_eq!(
            schedule.renew_at(from, ttl, 1.0),
            from + Duration::from_millis(400)
        );
        let spread: Vec<_> = [0.1, 0.5, 0.9]
            .map(|u| schedule.renew_at(from, ttl, u))
            .to_vec();
        assert!(spread.windows(2).all(|w| w[0] > w[1]));
        let short = Duration::from_millis(100);
        assert_eq!(
            schedule.renew_at(from, short, 1.0),
            from + Duration::from_millis(25)
        );
    }
}

//! A per-master circuit breaker (pure; takes `now`).
//!
//! fred notices a dead connection only through writes timing out, and a black-holed or
//! SIGSTOPped master keeps its socket open, so every lock write to it would wait out the
//! per-node timeout. After `threshold` consecutive failures the breaker opens: lock writes skip
//! the master (it counts as down for the quorum) except one trial every `trial_interval`, whose
//! success closes the breaker again. Releases are never gated (see `Admission`).

use std::time::Duration;

use tokio::time::Instant;

/// Consecutive timeouts or connection errors that open the breaker.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 3;
/// While open, one trial request is let through this often.
pub const DEFAULT_BREAKER_TRIAL_INTERVAL: Duration = Duration::from_millis(250);

/// Liveness of one master as its recent calls saw it.
#[derive(Clone, Debug)]
pub struct Breaker {
    threshold: u32,
    trial_interval: Duration,
    consecutive_failures: u32,
    /// `Some(last trial)` while open.
    open: Option<Instant>,
}

// === impl Breaker ===

impl Breaker {
    /// A closed breaker that opens after `threshold` failures in a row and lets one trial call
    /// through every `trial_interval` while open.
    pub fn new(threshold: u32, trial_interval: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            trial_interval,
            consecutive_failures: 0,
            open: None,
        }
    }

    /// The master answered (even with an error reply): it is alive.
    pub fn record_success(&mut self) {
        self.consecutive_failures = 0;
        self.open = None;
    }

    /// The master timed out or the connection failed.
    pub fn record_failure(&mut self, now: Instant) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        if self.consecutive_failures >= self.threshold && self.open.is_none() {
            self.open = Some(now);
        }
    }

    /// Whether a lock write may go to this master at `now`; counts as the trial when open.
    pub fn admit(&mut self, now: Instant) -> bool {
        match self.open {
            None => true,
            Some(last_trial) if now >= last_trial + self.trial_interval => {
                self.open = Some(now);
                true
            }
            Some(_) => false,
        }
    }

    /// Whether the breaker is open: the master takes no lock writes until a trial succeeds.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }
}

impl Default for Breaker {
    fn default() -> Self {
        Self::new(DEFAULT_BREAKER_THRESHOLD, DEFAULT_BREAKER_TRIAL_INTERVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The breaker opens only after `threshold` failures in a row, and a success resets it.
    #[tokio::test(start_paused = true)]
    async fn breaker_opens_after_consecutive_failures_only() {
        let now = Instant::now();
        let mut breaker = Breaker::new(3, Duration::from_millis(100));
        breaker.record_failure(now);
        breaker.record_failure(now);
        breaker.record_success();
        breaker.record_failure(now);
        breaker.record_failure(now);
        assert!(!breaker.is_open());
        assert!(breaker.admit(now));
        breaker.record_failure(now);
        assert!(breaker.is_open());
        assert!(!breaker.admit(now));
    }

    /// An open breaker lets one trial through per probe interval; a good trial closes it.
    #[tokio::test(start_paused = true)]
    async fn open_breaker_admits_one_trial_per_interval() {
        let start = Instant::now();
        let mut breaker = Breaker::new(1, Duration::from_millis(100));
        breaker.record_failure(start);
        assert!(!breaker.admit(start + Duration::from_millis(99)));
        assert!(breaker.admit(start + Duration::from_millis(100)));
        assert!(!breaker.admit(start + Duration::from_millis(150)));
        assert!(breaker.admit(start + Duration::from_millis(200)));
        breaker.record_success();
        assert!(breaker.admit(start + Duration::from_millis(201)));
        assert!(!breaker.is_open());
    }
}

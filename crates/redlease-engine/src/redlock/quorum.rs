//! Pure quorum and validity arithmetic: the tally of votes, drift, validity and the per-node
//! timeout. No I/O; time is an argument.

use std::time::Duration;

use tokio::time::Instant;

use crate::fleet::quorum_of;

/// Default clock drift allowance, as a fraction of the TTL (Redlock's 1%).
pub const DEFAULT_CLOCK_DRIFT_FACTOR: f64 = 0.01;
/// Fixed part of the drift allowance.
pub const DEFAULT_DRIFT_FLOOR: Duration = Duration::from_millis(2);
/// A grant must leave more validity than this.
pub const DEFAULT_MIN_VALIDITY: Duration = Duration::from_millis(1);
/// Per-node timeout: never less than this (unless the TTL cap is smaller) ...
pub const DEFAULT_NODE_TIMEOUT_FLOOR: Duration = Duration::from_millis(50);
/// ... at least this many times the quorum p99 RTT ...
pub const DEFAULT_NODE_TIMEOUT_RTT_MULTIPLIER: u32 = 10;
/// ... and never more than this fraction of the TTL.
pub const DEFAULT_NODE_TIMEOUT_TTL_FRACTION: f64 = 0.1;

/// Where a fan-out stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Neither side can be decided yet.
    Pending,
    /// A quorum said yes (granted, extended).
    Yes,
    /// A quorum said no (held by another, not ours).
    No,
    /// Every master has voted or can no longer change the result, and no side has a quorum.
    Split,
}

/// Running count of the answers of one fan-out.
#[derive(Clone, Copy, Debug)]
pub struct Tally {
    n: usize,
    /// Masters that said yes.
    pub yes: usize,
    /// Masters that said no (or failed).
    pub no: usize,
    /// Timeouts, connection errors, error replies, masters skipped as down.
    pub failed: usize,
}

// === impl Tally ===

impl Tally {
    /// An empty tally of `n` masters.
    pub fn new(n: usize) -> Self {
        Self {
            n,
            yes: 0,
            no: 0,
            failed: 0,
        }
    }

    /// Masters that have not answered yet.
    pub fn pending(&self) -> usize {
        self.n - self.yes - self.no - self.failed
    }

    /// Masters that answered the question either way.
    pub fn answered(&self) -> usize {
        self.yes + self.no
    }

    /// Won, lost, or not decided yet.
    pub fn verdict(&self) -> Verdict {
        let quorum = quorum_of(self.n);
        if self.yes >= quorum {
            Verdict::Yes
        } else if self.no >= quorum {
            Verdict::No
        } else if self.yes + self.pending() < quorum && self.no + self.pending() < quorum {
            Verdict::Split
        } else {
            Verdict::Pending
        }
    }
}

/// How much of the TTL is set aside for clock drift between masters and us.
#[derive(Clone, Copy, Debug)]
pub struct DriftPolicy {
    /// Drift allowed per unit of TTL (0.01: 1%).
    pub factor: f64,
    /// Drift allowed whatever the TTL.
    pub floor: Duration,
}

impl Default for DriftPolicy {
    fn default() -> Self {
        Self {
            factor: DEFAULT_CLOCK_DRIFT_FACTOR,
            floor: DEFAULT_DRIFT_FLOOR,
        }
    }
}

impl DriftPolicy {
    /// `ttl × factor + floor`.
    pub fn drift(&self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.factor) + self.floor
    }

    /// The instant the lease stops being safe to act on: `start + ttl − drift`, where `start`
    /// is when the first write was sent. `None` when the drift eats the whole TTL.
    pub fn valid_until(&self, start: Instant, ttl: Duration) -> Option<Instant> {
        Some(start + ttl.checked_sub(self.drift(ttl))?)
    }
}

/// `ttl − (now − start) − drift`, when that exceeds `min_validity`; otherwise `None`.
pub fn validity(
    drift: &DriftPolicy,
    start: Instant,
    now: Instant,
    ttl: Duration,
    min_validity: Duration,
) -> Option<Duration> {
    let left = drift.valid_until(start, ttl)?.checked_duration_since(now)?;
    (left > min_validity).then_some(left)
}

/// How long one master may take to answer one lock write.
#[derive(Clone, Copy, Debug)]
pub struct NodeTimeoutPolicy {
    /// Use exactly this, ignoring RTT and TTL (for callers that know their network).
    pub fixed: Option<Duration>,
    /// The timeout is never shorter than this.
    pub floor: Duration,
    /// The timeout is at least this many times the master's p99 RTT.
    pub rtt_multiplier: u32,
    /// ... and at most this fraction of the TTL.
    pub ttl_fraction: f64,
}

impl Default for NodeTimeoutPolicy {
    fn default() -> Self {
        Self {
            fixed: None,
            floor: DEFAULT_NODE_TIMEOUT_FLOOR,
            rtt_multiplier: DEFAULT_NODE_TIMEOUT_RTT_MULTIPLIER,
            ttl_fraction: DEFAULT_NODE_TIMEOUT_TTL_FRACTION,
        }
    }
}

impl NodeTimeoutPolicy {
    /// `min(ttl × ttl_fraction, max(floor, quorum_p99 × rtt_multiplier))`, at least 1 ms.
    pub fn timeout(&self, ttl: Duration, quorum_rtt_p99: Option<Duration>) -> Duration {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        let from_rtt = quorum_rtt_p99.map_or(Duration::ZERO, |p99| p99 * self.rtt_multiplier);
        let cap = ttl.mul_f64(self.ttl_fraction);
        from_rtt
            .max(self.floor)
            .min(cap)
            .max(Duration::from_millis(1))
    }
}

#[cfg(test)]
mod tests;

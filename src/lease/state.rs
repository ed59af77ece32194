//! One tracked lease: its record, its state machine (`held → lost | released`) and the pure
//! decision of what its task does next.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::time::Instant;

use crate::redlock::Lease;

/// Where a lease stands, as the API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    Held,
    Degraded,
    Lost,
    Released,
}

impl LeaseState {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Lost | Self::Released)
    }
}

/// What this sidecar knows about one lease it holds.
#[derive(Clone, Debug)]
pub struct LeaseRecord {
    pub lease: Lease,
    pub state: LeaseState,
    /// When the lease was granted (for the hold-duration metric).
    pub acquired_at: Instant,
    /// Why the lease was lost or released (`expired`, `not_ours`, `idle`, `shutdown`, …).
    pub reason: Option<&'static str>,
    pub auto_renew: bool,
    /// With auto-renewal, the lease is released when the app shows no sign of life this long.
    pub idle_timeout: Duration,
    /// Last sign of life from the app: acquire, keepalive, renew, an event stream closing.
    pub last_seen: Instant,
    /// Open event streams; while one is open the app counts as alive.
    pub watchers: usize,
    /// When the next automatic renewal is due.
    pub renew_at: Instant,
}

/// What the lease's task does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing until this instant (or a wake-up).
    Wait(Instant),
    Renew,
    /// Validity ran out without a successful renewal: lost, at once.
    Expire,
    /// The app went quiet: release the lease.
    IdleRelease,
    /// Lost or released: the task ends.
    Done,
}

impl LeaseRecord {
    /// The next step at `now`. Validity is checked first: a lease never outlives it silently.
    pub fn next_step(&self, now: Instant) -> Step {
        if self.state.is_terminal() {
            return Step::Done;
        }
        if now >= self.lease.valid_until {
            return Step::Expire;
        }
        let mut wake = self.lease.valid_until;
        if self.auto_renew {
            if self.watchers == 0 {
                let idle_at = self.last_seen + self.idle_timeout;
                if now >= idle_at {
                    return Step::IdleRelease;
                }
                wake = wake.min(idle_at);
            }
            if now >= self.renew_at {
                return Step::Renew;
            }
            wake = wake.min(self.renew_at);
        }
        Step::Wait(wake)
    }

    /// The state as of `now`: a lease past its validity is lost even before its task says so.
    pub fn state_at(&self, now: Instant) -> LeaseState {
        if !self.state.is_terminal() && now >= self.lease.valid_until {
            LeaseState::Lost
        } else {
            self.state
        }
    }

    pub fn view(&self, now: Instant) -> LeaseView {
        let remaining = self.lease.remaining_validity(now);
        let expires = SystemTime::now() + remaining;
        let expires_at = expires
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        LeaseView {
            acquired: true,
            lease_id: self.lease.id.to_string(),
            resource: self.lease.resource.clone(),
            owner: self.lease.owner.clone(),
            fencing_token: self.lease.fencing_token,
            ttl_ms: self.lease.ttl.as_millis() as u64,
            validity_ms: remaining.as_millis() as u64,
            expires_at,
            state: self.state_at(now),
            auto_renew: self.auto_renew,
            reason: self.reason,
        }
    }
}

/// A lease as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeaseView {
    pub acquired: bool,
    pub lease_id: String,
    pub resource: String,
    pub owner: String,
    pub fencing_token: u64,
    pub ttl_ms: u64,
    /// Validity left now (0 once it has elapsed).
    pub validity_ms: u64,
    /// When the validity runs out, in Unix milliseconds (this host's clock).
    pub expires_at: u64,
    pub state: LeaseState,
    pub auto_renew: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// What happened to a lease, streamed to the app.
#[derive(Clone, Debug, Serialize)]
pub struct LeaseEvent {
    /// `renewed`, `degraded`, `recovered`, `lost` or `released`.
    pub event: &'static str,
    pub lease: LeaseView,
}

#[cfg(test)]
mod tests;

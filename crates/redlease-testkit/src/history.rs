//! The reusable part of a history checker for locks: what clients were told (a [`Window`] per
//! grant: who believed it held which resource, with which fencing token, from when to when),
//! the writes they made to a fenced [`Register`], the faults in force ([`FaultSpan`]); and, in
//! [`check`], the pure checks over them. Recording a run (who may open, move and cut a window,
//! and when) is the test's own.

pub mod check;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Index of a window in the history.
pub type WindowId = usize;

/// A fenced register per resource: the largest token each has accepted.
#[derive(Default)]
pub struct Register {
    max: HashMap<String, u64>,
}

impl Register {
    /// Accepts a write carrying `token` when it is at least the largest accepted so far.
    pub fn write(&mut self, resource: &str, token: u64) -> bool {
        let max = self.max.entry(resource.to_string()).or_default();
        let accepted = token >= *max;
        if accepted {
            *max = token;
        }
        accepted
    }

    /// The largest token `resource` has accepted (0 before the first write).
    pub fn max(&self, resource: &str) -> u64 {
        self.max.get(resource).copied().unwrap_or(0)
    }
}

/// When one client believed it held one resource.
#[derive(Clone, Debug)]
pub struct Window {
    /// The client's name, for the evidence.
    pub client: String,
    /// The resource it believed it held.
    pub resource: String,
    /// The fencing token of the grant.
    pub token: u64,
    /// When the grant arrived.
    pub start: Instant,
    /// The end of the validity the client was last told, or when it learned of an end or
    /// decided to stop, whichever came first.
    pub end: Instant,
    /// The sidecar (index, generation) that granted it; `None` for library clients.
    pub sidecar: Option<(usize, u64)>,
}

impl Window {
    /// Whether the client believed it held at `at`: from `start` included to `end` excluded.
    pub fn holds(&self, at: Instant) -> bool {
        self.start <= at && at < self.end
    }

    /// Over before it began: the grant arrived after its validity.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// One write to the register.
#[derive(Clone, Debug)]
pub struct Write {
    /// The window whose token was written.
    pub window: WindowId,
    /// When the write was made.
    pub at: Instant,
    /// The writer's window held at that instant.
    pub in_window: bool,
    /// The register took it (the token was at least the largest it had taken).
    pub accepted: bool,
}

/// A fault while it was in force.
#[derive(Clone, Debug)]
pub struct FaultSpan {
    /// What kind of fault, e.g. "fleet born with masters missing".
    pub kind: &'static str,
    /// Which masters or clients, and how.
    pub detail: String,
    /// When it was set.
    pub start: Instant,
    /// When it was undone (or its effects last, such as a quarantine).
    pub end: Instant,
}

/// A sidecar's `expires_at` (Unix ms on this host's wall clock) on the monotonic clock.
pub fn instant_of_wall_ms(ms: u64) -> Instant {
    let now = Instant::now();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let at = Duration::from_millis(ms);
    match at.checked_sub(wall) {
        Some(ahead) => now + ahead,
        None => now.checked_sub(wall - at).unwrap_or(now),
    }
}

//! What one master is to this process right now, in words an operator acts on: up, refusing
//! connections (and the error), refusing TLS or the credentials, quarantined (until when),
//! excluded (why), not yet answering, connected but not yet prepared, or its breaker open.
//! The command line names it for every master that did not vote.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::Node;
use crate::fleet::exclusion::Exclusion;
use crate::fleet::wire::OpenError;

/// How often [`Node::wait_for_status`] looks again.
const LOOK_INTERVAL: Duration = Duration::from_millis(5);

/// What one master is to this process now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    /// It takes lock writes.
    Up,
    /// It answers but takes no votes, and why (quarantined, unborn fleet, evicting, …).
    Excluded(Exclusion),
    /// The last connection attempt failed: refused, reset, unreachable, TLS or credentials.
    Unreachable(OpenError),
    /// No connection attempt has finished yet (a master that accepts TCP and says nothing, or
    /// one slower than the wait).
    NoAnswerYet,
    /// Connected, its preparation (scripts, identity, fence sync) not finished.
    Preparing,
    /// Connected and prepared, but its breaker is open after consecutive failed calls.
    BreakerOpen,
}

impl NodeStatus {
    /// Whether this is what the master answered rather than a wait still going on.
    pub fn is_settled(&self) -> bool {
        !matches!(self, Self::NoAnswerYet | Self::Preparing)
    }
}

impl fmt::Display for NodeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Up => write!(f, "up"),
            Self::Excluded(exclusion) => write!(f, "{exclusion}"),
            Self::Unreachable(OpenError::Unreachable(why)) => {
                write!(f, "cannot connect: {}", why.to_lowercase())
            }
            Self::Unreachable(error) => write!(f, "{error}"),
            Self::NoAnswerYet => write!(f, "no answer: connecting timed out"),
            Self::Preparing => write!(f, "connected, not yet prepared (timed out)"),
            Self::BreakerOpen => write!(f, "breaker open after consecutive failed calls"),
        }
    }
}

// === impl Node ===

impl Node {
    /// What this master is to this process now.
    pub fn status(&self) -> NodeStatus {
        if self.is_up() {
            return NodeStatus::Up;
        }
        if let Some(exclusion) = self.exclusion() {
            return NodeStatus::Excluded(exclusion);
        }
        if self.takes_writes() {
            return NodeStatus::BreakerOpen;
        }
        if self.wire().is_connected() {
            return NodeStatus::Preparing;
        }
        match self.wire().last_failure() {
            Some(failure) => NodeStatus::Unreachable(failure),
            None => NodeStatus::NoAnswerYet,
        }
    }

    /// Waits (until `deadline`) for what the master answers to being connected and prepared:
    /// up, excluded, or a failed connection attempt. A one-shot command reports that rather
    /// than the instant its own connections happen to be at.
    pub async fn wait_for_status(&self, deadline: Instant) -> NodeStatus {
        loop {
            let status = self.status();
            if status.is_settled() || Instant::now() >= deadline {
                return status;
            }
            let look = (Instant::now() + LOOK_INTERVAL).min(deadline);
            tokio::time::sleep_until(look).await;
        }
    }
}

//! Why a master takes no votes, as the fleet view, the logs and the command line tell it.

use std::fmt;

use tokio::time::Instant;

use super::eviction::Evicting;
use super::quarantine::Loss;

/// Why a master that answers takes no lock writes (a master that does not answer is simply
/// down).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exclusion {
    /// The fleet is not born: no master carries its marker, and not every master answered
    /// with no history (see `redlease fleet init`).
    Unborn,
    /// Lost its memory: no votes until `until` (this process's clock).
    Quarantined {
        /// When the quarantine ends.
        until: Instant,
        /// The evidence that the master lost its memory.
        why: Loss,
    },
    /// Its quarantine is over; waiting for its fence counter to be raised from a quorum of
    /// members.
    Rejoining {
        /// Why it was quarantined.
        why: Loss,
    },
    /// `maxmemory` with a policy other than `noeviction`: it may drop lock keys.
    Evicting(Evicting),
    /// It carries the marker of another fleet.
    OtherFleet {
        /// The fleet id its marker names.
        theirs: String,
        /// Ours.
        ours: String,
    },
    /// It carries a marker this redlease cannot read.
    UnreadableMarker(String),
    /// It is the very server another configured master is (one `run_id`).
    Twin {
        /// The index of the master it is the same server as.
        of: usize,
    },
}

impl Exclusion {
    /// Stable text for the fleet view, metrics-free logs and the command line.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unborn => "fleet_unborn",
            Self::Quarantined { .. } => "quarantined",
            Self::Rejoining { .. } => "rejoining",
            Self::Evicting(_) => "evicts_keys",
            Self::OtherFleet { .. } => "other_fleet",
            Self::UnreadableMarker(_) => "unreadable_marker",
            Self::Twin { .. } => "same_server_as_another",
        }
    }

    /// Whether only the operator can lift it (a setting, another fleet, a duplicate entry).
    pub fn needs_operator(&self) -> bool {
        matches!(
            self,
            Self::Evicting(_)
                | Self::OtherFleet { .. }
                | Self::UnreadableMarker(_)
                | Self::Twin { .. }
        )
    }
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unborn => write!(
                f,
                "the fleet is not born: start every master, or run `redlease fleet init`"
            ),
            Self::Quarantined { until, why } => {
                let now = Instant::now();
                let left = until.saturating_duration_since(now).as_millis();
                let wall =
                    crate::wall_clock::rfc3339_utc(crate::wall_clock::wall_time_of(*until, now));
                write!(
                    f,
                    "quarantined until {wall} ({left} ms more; {})",
                    why.as_str()
                )
            }
            Self::Rejoining { why } => write!(
                f,
                "quarantine over ({}); waiting for a quorum of members to raise its fence",
                why.as_str()
            ),
            Self::Evicting(e) => write!(
                f,
                "it may evict lock keys (maxmemory {} bytes, maxmemory-policy {}): set \
                 maxmemory-policy noeviction",
                e.maxmemory, e.policy
            ),
            Self::OtherFleet { theirs, ours } => write!(
                f,
                "it belongs to fleet {theirs}, not to fleet {ours} of the other masters"
            ),
            Self::UnreadableMarker(text) => write!(
                f,
                "it carries a fleet marker this redlease cannot read ({text:?}; see the fleet \
                 set-up in docs/operations.md)"
            ),
            Self::Twin { of } => write!(f, "it is the same redis server as master {of}"),
        }
    }
}

//! Restart quarantine policy (pure; takes `now`): may a master that (re)connected vote?
//!
//! A master restarted without persistence has forgotten every lock and its fence counter.
//! Letting it vote at once could grant a lock still held elsewhere, or a fencing token below
//! one already issued. So a restarted master takes no votes until the longest possible lease
//! (TTL or shadow) has passed since its restart, and its fence counter is raised to the fleet
//! maximum before it votes again (Redlock's "delayed restart", automated).
//!
//! The fleet marker key holds the `run_id` of the server process a redlease process made a
//! member. A restart is seen as a `run_id` other than the one this process saw before, or —
//! whatever this process saw — as a marker naming another process (the server restarted since
//! it was made a member, with some of its data: an RDB snapshot, `appendfsync everysec`); both
//! are dated from the server's uptime. A master lacking the marker while the fleet is marked
//! lost its data at a time nobody can tell (a restart without persistence, `FLUSHALL`): it is
//! quarantined from now. A fresh fleet (no marker anywhere among a quorum) is adopted at once.
//!
//! A process that quarantines a master writes `<prefix>quarantined` (the `run_id`, expiring
//! when the quarantine ends), then the marker as `quarantined:<run_id>`, so every later process
//! serves out the same quarantine ([`carry_over`]) instead of starting its own from its own
//! now; the marker becomes the plain `run_id` only once the fence counter has been raised, at
//! the quarantine's end. The fence is not raised before: a process that still counts the
//! master as a member (it has not seen the memory loss) learns of it from the counter that
//! went back, at its next acquisition there.

use std::time::Duration;

use tokio::time::Instant;

/// Default quarantine: the longest lease (30 s max TTL) times the shadow multiplier (10).
pub const DEFAULT_QUARANTINE: Duration = Duration::from_secs(300);

/// `uptime_in_seconds` is a difference of two whole-second clocks: a server 10 ms old can
/// report 1 s. Uptimes are shortened by this much, so a restart is never dated too early.
pub const UPTIME_RESOLUTION: Duration = Duration::from_secs(1);

/// Who a master says it is (`INFO server`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub run_id: String,
    pub uptime: Duration,
}

/// What a master may do after (re)connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The same server as before, or a member of a fresh fleet: votes at once.
    Member,
    /// Lost its memory: no votes until `until`, then its fence is synced.
    Quarantined { until: Instant },
    /// Lost its memory longer than a quarantine ago: sync its fence, then vote.
    Rejoining,
}

/// Decides the standing of a master that just (re)connected.
///
/// `previous_run_id` is the run id this process saw before (`None` on first contact),
/// `marker` the value of the fleet marker on the master (the `run_id` it was made a member
/// under; `None` when absent), `fleet_marked` whether the fleet has been adopted (some
/// master holds the marker).
pub fn assess(
    previous_run_id: Option<&str>,
    identity: &Identity,
    marker: Option<&str>,
    fleet_marked: bool,
    period: Duration,
    now: Instant,
) -> Standing {
    let restarted_at = || {
        let uptime = identity.uptime.saturating_sub(UPTIME_RESOLUTION);
        now.checked_sub(uptime).unwrap_or(now)
    };
    let run_id = identity.run_id.as_str();
    let lost_memory_at = match (previous_run_id, marker) {
        (Some(previous), _) if previous != run_id => restarted_at(),
        (_, Some(member)) if member != run_id => restarted_at(),
        (_, Some(_)) => return Standing::Member,
        // Data gone, when is unknown (a restart without persistence, FLUSHALL): from now.
        (_, None) if fleet_marked => now,
        (_, None) => return Standing::Member,
    };
    let until = lost_memory_at + period;
    if until > now {
        Standing::Quarantined { until }
    } else {
        Standing::Rejoining
    }
}

/// The marker of a master in a quarantine some process began on the server process `run_id`.
pub fn quarantine_marker(run_id: &str) -> String {
    format!("{QUARANTINE_MARKER}{run_id}")
}

const QUARANTINE_MARKER: &str = "quarantined:";

/// The standing of a master whose marker says a quarantine began on this very server process
/// (`quarantined:<run_id>`): quarantined for what `<prefix>quarantined` has left (`left`, on
/// the server's clock), or, once that expired, rejoining (its fence raised, then it votes).
/// Any other marker leaves `assessed` as it is. Without this, a master quarantined by
/// short-lived processes (a cron job's CLI) would be quarantined again by each of them, never
/// serving the period out.
pub fn carry_over(
    assessed: Standing,
    marker: Option<&str>,
    run_id: &str,
    left: Option<Duration>,
    now: Instant,
) -> Standing {
    let begun_here = marker.and_then(|m| m.strip_prefix(QUARANTINE_MARKER)) == Some(run_id);
    match (begun_here, left) {
        (false, _) => assessed,
        (true, Some(left)) if !left.is_zero() => Standing::Quarantined { until: now + left },
        (true, _) => Standing::Rejoining,
    }
}

/// Reads `run_id` and `uptime_in_seconds` from an `INFO server` reply.
pub fn parse_info(info: &str) -> Option<Identity> {
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    Some(Identity {
        run_id: field("run_id")?.to_string(),
        uptime: Duration::from_secs(field("uptime_in_seconds")?.parse().ok()?),
    })
}

#[cfg(test)]
mod tests;

//! Restart quarantine policy (pure; takes `now`): may a master of a born fleet vote, and if
//! not, until when and why?
//!
//! A master restarted without persistence has forgotten every lock and its fence counter; one
//! back from an older snapshot forgot the latest. Letting it vote at once could grant a lock
//! still held elsewhere, or a fencing token below one already issued. So a master that shows
//! any evidence of a memory loss takes no votes until the longest possible lease (TTL or
//! shadow) has passed since the loss, and its fence counter is raised to the fleet's before
//! it votes again (Redlock's "delayed restart", automated).
//!
//! The evidence ([`Loss`]), each honoured whatever the others say:
//! - its `run_id` differs from the one this process saw before, or its marker names another
//!   server process: a restart, dated from its uptime;
//! - it lacks the marker of a born fleet (unreachable at the birth, or its data went), or
//!   lacks its fence counter, or the counter is below one this process saw from it (here or at
//!   an acquisition's `INCR`): a loss nobody can date, so from now (a master whose marker says
//!   it serves a quarantine keeps the counter its loss left until the end: that is the loss
//!   being served, not a new one);
//! - `<prefix>quarantined` names this server process: a quarantine some process began, served
//!   out to its end; naming another process, a restart since, dated from the uptime.
//!
//! A master whose marker says it serves a quarantine (`quarantined=<run_id>`) and whose record
//! has expired is [`Standing::Rejoining`]: its fence is raised before it votes.

use std::time::Duration;

use tokio::time::Instant;

use super::mark::{FleetMark, Membership};

/// Default quarantine: the longest lease (30 s max TTL) times the shadow multiplier (10).
pub const DEFAULT_QUARANTINE: Duration = Duration::from_secs(300);

/// `uptime_in_seconds` is a difference of two whole-second clocks: a server 10 ms old can
/// report 1 s. Uptimes are shortened by this much, so a restart is never dated too early.
pub const UPTIME_RESOLUTION: Duration = Duration::from_secs(1);

/// Who a master says it is (`INFO server`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The server process's `run_id` (INFO server).
    pub run_id: String,
    /// How long the server process has run (INFO server).
    pub uptime: Duration,
}

/// Why a master is quarantined: each piece of evidence of a memory loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Its `run_id` changed since this process last saw it.
    Restarted,
    /// Its marker (or quarantine record) names another server process.
    MarkerOfAnotherProcess,
    /// It carries no marker of the born fleet: unreachable at the birth, or its data went.
    NoMarker,
    /// Its fence counter is gone.
    NoFenceCounter,
    /// Its fence counter is below one seen from it before.
    CounterWentBack,
    /// A quarantine some process began on this server process is still recorded.
    Recorded,
    /// Its quarantine ended: the fence is raised before it votes.
    Served,
}

impl Loss {
    /// Stable text for logs, the fleet view and the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Restarted => "restarted",
            Self::MarkerOfAnotherProcess => "marker_of_another_process",
            Self::NoMarker => "no_marker",
            Self::NoFenceCounter => "no_fence_counter",
            Self::CounterWentBack => "fence_counter_went_back",
            Self::Recorded => "quarantine_recorded",
            Self::Served => "quarantine_served",
        }
    }
}

/// What a master may do after a preparation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// No evidence of a loss: votes at once.
    Member,
    /// Lost its memory: no votes until `until`, then its fence is synced.
    Quarantined {
        /// When the quarantine ends.
        until: Instant,
        /// The evidence.
        why: Loss,
    },
    /// Lost its memory longer than a quarantine ago: sync its fence, then vote.
    Rejoining {
        /// Why it was quarantined.
        why: Loss,
    },
}

/// What a preparation read of a master of a born fleet, and what this process knows of it.
#[derive(Clone, Debug)]
pub struct Evidence<'a> {
    /// The `run_id` this process saw before (`None` on first contact).
    pub previous_run_id: Option<&'a str>,
    /// The server process as it answers now.
    pub identity: &'a Identity,
    /// The fleet marker, already checked to be of this fleet (`None`: absent).
    pub marker: Option<&'a FleetMark>,
    /// Its fence counter (0: absent).
    pub fence: u64,
    /// The largest fence counter this process saw from it.
    pub floor: u64,
    /// An acquisition's `INCR` showed its counter went back since it was last prepared.
    pub counter_went_back: bool,
    /// `<prefix>quarantined`: the `run_id` it names and what is left of it.
    pub record: Option<(&'a str, Duration)>,
    /// A quarantine this process decided before (a retry after a step failed). It counts only
    /// while it runs: once served, the marker says whether the fence was raised since (by this
    /// process or another) or is still to raise (`quarantined=`).
    pub decided: Option<Instant>,
}

/// Decides the standing of a master from `evidence`, with the fleet's quarantine `period`.
pub fn assess(evidence: &Evidence<'_>, period: Duration, now: Instant) -> Standing {
    let mut losses = Losses::default();
    let run_id = evidence.identity.run_id.as_str();
    let restarted_at = {
        let uptime = evidence.identity.uptime.saturating_sub(UPTIME_RESOLUTION);
        now.checked_sub(uptime).unwrap_or(now)
    };
    if evidence
        .previous_run_id
        .is_some_and(|previous| previous != run_id)
    {
        losses.note(restarted_at + period, Loss::Restarted);
    }
    match evidence.marker.map(|m| m.membership.run_id()) {
        None => losses.note(now + period, Loss::NoMarker),
        Some(named) if named != run_id => {
            losses.note(restarted_at + period, Loss::MarkerOfAnotherProcess)
        }
        Some(_) => {}
    }
    let serving = matches!(
        evidence.marker.map(|m| &m.membership),
        Some(Membership::Quarantined(named)) if named == run_id
    );
    // A master serving a quarantine keeps the counter its loss left until the quarantine's
    // end: a missing or low counter there is that loss, already being served.
    if evidence.fence == 0 && !serving {
        losses.note(now + period, Loss::NoFenceCounter);
    } else if (evidence.fence < evidence.floor && !serving) || evidence.counter_went_back {
        losses.note(now + period, Loss::CounterWentBack);
    }
    match evidence.record {
        Some((named, left)) if named == run_id => losses.note(now + left, Loss::Recorded),
        Some(_) => losses.note(restarted_at + period, Loss::MarkerOfAnotherProcess),
        None => {}
    }
    if let Some(until) = evidence.decided.filter(|until| *until > now) {
        losses.note(until, Loss::Recorded);
    }
    losses.standing(serving, now)
}

/// The evidence found, and the latest quarantine end among it.
#[derive(Default)]
struct Losses {
    latest: Option<(Instant, Loss)>,
    any: Option<Loss>,
}

impl Losses {
    fn note(&mut self, until: Instant, why: Loss) {
        self.any.get_or_insert(why);
        if self.latest.is_none_or(|(end, _)| until > end) {
            self.latest = Some((until, why));
        }
    }

    fn standing(self, serving: bool, now: Instant) -> Standing {
        match (self.latest, self.any) {
            (Some((until, why)), _) if until > now => Standing::Quarantined { until, why },
            (_, Some(why)) => Standing::Rejoining { why },
            _ if serving => Standing::Rejoining { why: Loss::Served },
            _ => Standing::Member,
        }
    }
}

/// Reads `run_id` and `uptime_in_seconds` from an `INFO server` reply.
pub fn parse_info(info: &str) -> Option<Identity> {
    Some(Identity {
        run_id: info_field(info, "run_id")?.to_string(),
        uptime: Duration::from_secs(info_field(info, "uptime_in_seconds")?.parse().ok()?),
    })
}

/// The value of `name` in an `INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
}

#[cfg(test)]
mod tests;

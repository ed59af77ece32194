//! The verdict of a run: the checks over the history, the figures printed as one block, and
//! each failure with its evidence (the windows, tokens, times and the faults around them).

use std::collections::BTreeMap;
use std::time::Duration;

use redlease_testkit::history::check::{self, describe, describe_pair, faults_around, ms};
use redlease_testkit::history::{FaultSpan, Window, Write};
use tokio::time::Instant;

use super::record::{History, Wrote};
use super::sidecar::Frozen;

/// At most this many instances of one failure are shown.
const SHOWN: usize = 10;
/// Fewer grants than this and the run proved nothing.
const MIN_GRANTS: u64 = 20;

pub struct Report {
    /// The run's time zero.
    origin: Instant,
    elapsed: Duration,
    counts: BTreeMap<&'static str, u64>,
    windows: Vec<Window>,
    writes: Vec<Write>,
    spans: Vec<FaultSpan>,
    overlaps: Vec<(usize, usize)>,
    regressions: Vec<(usize, usize)>,
    keys_left: Vec<String>,
    frozen: Option<Frozen>,
}

impl Report {
    pub fn judge(history: &History, keys_left: Vec<String>, frozen: Option<Frozen>) -> Self {
        let (windows, writes, spans) = history.snapshot();
        Self {
            elapsed: history.origin.elapsed(),
            counts: history.counts(),
            overlaps: check::overlaps(&windows),
            regressions: check::regressions(&windows),
            origin: history.origin,
            windows,
            writes,
            spans,
            keys_left,
            frozen,
        }
    }

    fn count(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    pub fn print(&self) {
        let c = |name| self.count(name);
        let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
        for span in &self.spans {
            *faults.entry(span.kind).or_default() += 1;
        }
        let refused_late = self.writes.iter().filter(|w| !w.in_window).count();
        let accepted = self.writes.iter().filter(|w| w.accepted).count();
        eprintln!(
            "history checker, {:.1} s\n  grants {} (sidecars {}, library {}; {} arrived expired), \
             renewals {}, releases {}, cancelled DELETEs {}, lost events {}\n  faults {faults:?}\n  \
             windows {}, writes {} ({accepted} accepted, {refused_late} outside a window), \
             overlaps {}, regressions {}, stale writes {}, keys left {}\n  frozen holder {:?}\n  \
             every count {:?}\n  fault log (ms from the start):\n{}",
            self.elapsed.as_secs_f64(),
            c("grants") + c("library grants"),
            c("grants"),
            c("library grants"),
            c("grants arrived expired"),
            c("renewals") + c("library renewals"),
            c("releases") + c("library releases"),
            c("DELETEs cancelled"),
            c("lost events"),
            self.windows.len(),
            self.writes.len(),
            self.overlaps.len(),
            self.regressions.len(),
            check::stale_writes(&self.writes).len(),
            self.keys_left.len(),
            self.frozen,
            self.counts,
            self.fault_log(),
        );
    }

    fn fault_log(&self) -> String {
        let line = |s: &FaultSpan| {
            let (start, end) = (ms(s.start, self.origin), ms(s.end, self.origin));
            format!("    [{start:>6.0}, {end:>6.0}] {}: {}", s.kind, s.detail)
        };
        self.spans.iter().map(line).collect::<Vec<_>>().join("\n")
    }

    /// Every check that failed, with its evidence.
    pub fn failures(&self) -> Vec<String> {
        let origin = self.origin;
        let pairs = |what: &str, pairs: &[(usize, usize)]| {
            let shown = pairs.iter().take(SHOWN);
            let lines = shown.map(|&p| describe_pair(p, &self.windows, &self.spans, origin));
            format!(
                "{} {what}:\n{}",
                pairs.len(),
                lines.collect::<Vec<_>>().join("\n")
            )
        };
        let mut failures = Vec::new();
        if !self.overlaps.is_empty() {
            failures.push(pairs("overlapping windows", &self.overlaps));
        }
        if !self.regressions.is_empty() {
            failures.push(pairs("token regressions", &self.regressions));
        }
        failures.extend(self.stale_failure());
        if !self.keys_left.is_empty() {
            failures.push(format!("keys left on the masters: {:?}", self.keys_left));
        }
        failures.extend(self.frozen_failure());
        let grants = self.count("grants") + self.count("library grants");
        if grants < MIN_GRANTS {
            failures.push(format!(
                "only {grants} grants: the run exercised too little"
            ));
        }
        failures
    }

    fn stale_failure(&self) -> Option<String> {
        let stale = check::stale_writes(&self.writes);
        if stale.is_empty() {
            return None;
        }
        let origin = self.origin;
        let lines = stale.iter().take(SHOWN).map(|write| {
            let window = &self.windows[write.window];
            format!(
                "  write at {:.1} ms by {}\n  faults around:\n{}",
                ms(write.at, origin),
                describe(window, origin),
                faults_around(&self.spans, window.start, window.end, origin)
            )
        });
        let lines: Vec<String> = lines.collect();
        let n = stale.len();
        Some(format!(
            "{n} writes refused within their window:\n{}",
            lines.join("\n")
        ))
    }

    fn frozen_failure(&self) -> Option<String> {
        match &self.frozen {
            Some(Frozen {
                wrote: Some(Wrote::Rejected),
                overtaken: true,
            }) => None,
            other => Some(format!(
                "the frozen holder's late write was not refused after another holder wrote: \
                 {other:?}"
            )),
        }
    }
}

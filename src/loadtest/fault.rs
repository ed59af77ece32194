//! The `fault` workload: `parallel` through the engine on a local fleet that the load tester
//! started itself, while master 0 is killed (SIGKILL, as a crash) at a third of the run and
//! restarted empty at two thirds. The report adds the availability dip the clients saw.

use std::sync::Arc;
use std::time::Duration;

use redlease_dev::LocalFleet;
use serde::Serialize;
use tokio::time::Instant;

use super::{LoadOptions, Report, Target, TIMELINE_WINDOW};
use crate::redlock::EngineOptions;
use crate::FleetOptions;

/// Run length when `--duration` is not given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(9);
/// The first second (or first half of the time before the kill, if shorter) warms connections
/// and RTT windows up: it is not part of the rate before.
const SKIP_AT_START: Duration = Duration::from_secs(1);
/// A window below this share of the rate before the kill counts as degraded.
const DEGRADED_BELOW: f64 = 0.9;

/// What the clients saw around the kill and the restart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Dip {
    pub killed_at_s: f64,
    pub restarted_at_s: f64,
    /// Completed cycles per second before the kill (warm-up left out: see `SKIP_AT_START`).
    pub before_ops_per_s: f64,
    /// From the kill to the restart.
    pub after_kill: Phase,
    /// From the restart to the end.
    pub after_restart: Phase,
}

/// One phase of a fault run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phase {
    /// Completed cycles per second in the phase.
    pub ops_per_s: f64,
    /// The lowest rate of any 100 ms window of the phase, per second.
    pub min_ops_per_s: f64,
    /// Failed cycles in the phase.
    pub errors: u64,
    /// Time the phase spent in windows below 90% of the rate before the kill.
    pub degraded_s: f64,
}

/// Starts the load on `fleet`, kills master 0 at a third of the run, restarts it at two
/// thirds, and reports the run with its [`Dip`].
pub async fn run(fleet: &mut LocalFleet, options: &LoadOptions) -> Result<Report, String> {
    let target = Target::connect_engine(
        &fleet.urls(),
        &FleetOptions::default(),
        EngineOptions::default(),
    )
    .await
    .map_err(|error| error.to_string())?;
    let target = Arc::new(target);
    let duration = options.duration.unwrap_or(DEFAULT_DURATION);
    let options = LoadOptions {
        duration: Some(duration),
        ops: None,
        rate: None,
        ..options.clone()
    };
    let started = Instant::now();
    let load = super::run(Arc::clone(&target), &options);
    let inject = async {
        tokio::time::sleep_until(started + duration / 3).await;
        let killed = started.elapsed();
        fleet.kill(0).await?;
        tokio::time::sleep_until(started + duration * 2 / 3).await;
        let restarted = started.elapsed();
        fleet.restart(0).await?;
        Ok::<_, redlease_dev::DevError>((killed, restarted))
    };
    let (mut report, injected) = tokio::join!(load, inject);
    target.close().await;
    let (killed, restarted) = injected.map_err(|error| error.to_string())?;
    report.fault = Some(Dip::measure(&report.timeline, killed, restarted));
    Ok(report)
}

// === impl Dip ===

impl Dip {
    /// The dip in `timeline` ((completed, failed) per `TIMELINE_WINDOW`); the last window is
    /// left out (the run ended inside it).
    pub fn measure(timeline: &[[u64; 2]], killed: Duration, restarted: Duration) -> Self {
        let per_second = 1.0 / TIMELINE_WINDOW.as_secs_f64();
        let index = |at: Duration| (at.as_millis() / TIMELINE_WINDOW.as_millis()) as usize;
        let full = &timeline[..timeline.len().saturating_sub(1)];
        let skip = SKIP_AT_START.min(killed / 2);
        let (start, kill, restart) = (index(skip), index(killed), index(restarted));
        let kill = kill.min(full.len());
        let restart = restart.clamp(kill, full.len());
        let before = &full[start.min(kill)..kill];
        let before_rate = mean_completed(before) * per_second;
        let phase = |windows: &[[u64; 2]]| Phase {
            ops_per_s: mean_completed(windows) * per_second,
            min_ops_per_s: windows.iter().map(|w| w[0]).min().unwrap_or(0) as f64 * per_second,
            errors: windows.iter().map(|w| w[1]).sum(),
            degraded_s: windows
                .iter()
                .filter(|w| (w[0] as f64 * per_second) < DEGRADED_BELOW * before_rate)
                .count() as f64
                * TIMELINE_WINDOW.as_secs_f64(),
        };
        Self {
            killed_at_s: killed.as_secs_f64(),
            restarted_at_s: restarted.as_secs_f64(),
            before_ops_per_s: before_rate,
            after_kill: phase(&full[kill..restart]),
            after_restart: phase(&full[restart..]),
        }
    }

    /// Two lines for the human report.
    pub fn lines(&self) -> String {
        let phase = |name: &str, at: f64, p: &Phase| {
            format!(
                "{name} at {at:.1} s: {:.0} ops/s (lowest 100 ms window {:.0}/s), {} errors, {:.1} s below 90%",
                p.ops_per_s, p.min_ops_per_s, p.errors, p.degraded_s
            )
        };
        format!(
            "before: {:.0} ops/s\n{}\n{}",
            self.before_ops_per_s,
            phase("master 0 killed", self.killed_at_s, &self.after_kill),
            phase(
                "master 0 restarted",
                self.restarted_at_s,
                &self.after_restart
            ),
        )
    }
}

fn mean_completed(windows: &[[u64; 2]]) -> f64 {
    if windows.is_empty() {
        return 0.0;
    }
    windows.iter().map(|w| w[0]).sum::<u64>() as f64 / windows.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 cycles per window before the kill, a 3-window dip with failures after it, a
    /// 1-window blip after the restart; the partial last window is left out.
    #[test]
    fn the_dip_is_measured_per_phase() {
        let mut timeline = vec![[100, 0]; 40];
        timeline[20] = [20, 5];
        timeline[21] = [50, 1];
        timeline[22] = [85, 0];
        timeline[30] = [80, 0];
        timeline[39] = [3, 0];
        let dip = Dip::measure(
            &timeline,
            Duration::from_millis(2000),
            Duration::from_millis(3000),
        );
        assert_eq!(dip.before_ops_per_s, 1000.0);
        assert_eq!(dip.after_kill.min_ops_per_s, 200.0);
        assert_eq!(dip.after_kill.errors, 6);
        assert!((dip.after_kill.degraded_s - 0.3).abs() < 1e-9, "{dip:?}");
        assert!((dip.after_restart.degraded_s - 0.1).abs() < 1e-9, "{dip:?}");
        assert_eq!(dip.after_restart.errors, 0);
        assert_eq!(dip.after_restart.min_ops_per_s, 800.0);
    }

    /// A short run leaves out half of the time before the kill, not a whole second.
    #[test]
    fn a_short_run_keeps_a_rate_before_the_kill() {
        let mut timeline = vec![[100, 0]; 30];
        timeline[0] = [10, 0];
        let dip = Dip::measure(&timeline, Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(dip.before_ops_per_s, 1000.0, "windows 5..10 only");
    }
}

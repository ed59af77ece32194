//! The progress line of a load run. On a terminal, one stderr line (elapsed time, cycles done
//! out of the plan, current ops/s, errors) is redrawn with `\r` every [`REDRAW_EVERY`] and
//! erased when the run ends. When stderr is not a terminal (CI, pipes, scripts) nothing is
//! printed. The workers count into a shared [`Tally`]; this module only reads it.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::Cycle;

pub(super) const REDRAW_EVERY: Duration = Duration::from_millis(250);

/// Carriage return, then erase the whole line (ANSI EL 2).
const ERASE_LINE: &str = "\r\x1b[2K";

/// Measured cycles so far, shared by the workers of one run.
#[derive(Debug, Default)]
pub(super) struct Tally {
    cycles: AtomicU64,
    errors: AtomicU64,
}

/// What the run is heading for: a number of cycles, a duration, or both.
#[derive(Clone, Copy, Debug)]
pub(super) struct Goal {
    pub cycles: Option<u64>,
    pub duration: Option<Duration>,
}

/// The redrawing task of one run, if stderr is a terminal. Dropping it stops the redraws
/// (the task erases its line and ends); [`ProgressLine::finish`] also waits for that.
pub(super) struct ProgressLine {
    redraw: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

// === impl Tally ===

impl Tally {
    pub(super) fn count(&self, cycle: &Cycle) {
        self.cycles.fetch_add(1, Ordering::Relaxed);
        if matches!(cycle, Cycle::Failed(_)) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// (cycles, errors) so far.
    fn read(&self) -> (u64, u64) {
        let cycles = self.cycles.load(Ordering::Relaxed);
        (cycles, self.errors.load(Ordering::Relaxed))
    }
}

// === impl ProgressLine ===

impl ProgressLine {
    /// Starts redrawing when stderr is a terminal; otherwise does nothing.
    pub(super) fn start(tally: Arc<Tally>, goal: Goal) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { redraw: None };
        }
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(redraw(tally, goal, Instant::now(), stopped));
        Self {
            redraw: Some((stop, task)),
        }
    }

    /// Stops the redraws and returns once the line is erased.
    pub(super) async fn finish(self) {
        if let Some((stop, task)) = self.redraw {
            drop(stop);
            let _ = task.await;
        }
    }
}

/// Redraws until `stopped` fires or its sender is dropped, then erases the line.
async fn redraw(
    tally: Arc<Tally>,
    goal: Goal,
    started: Instant,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut ticks = tokio::time::interval(REDRAW_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut previous = (started, 0);
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            _ = ticks.tick() => {}
        }
        let now = Instant::now();
        let (cycles, errors) = tally.read();
        // Completed cycles only, like the report's ops/s.
        let completed = cycles.saturating_sub(errors);
        let per_second = per_second(completed.saturating_sub(previous.1), now - previous.0);
        draw(&format!(
            "\r{}\x1b[K",
            line(now - started, cycles, errors, per_second, goal)
        ));
        previous = (now, completed);
    }
    draw(ERASE_LINE);
}

fn per_second(cycles: u64, over: Duration) -> f64 {
    if over.is_zero() {
        return 0.0;
    }
    cycles as f64 / over.as_secs_f64()
}

/// The text of the line, e.g. `load 3.2s/10s  12000/40000 cycles  3750 ops/s  0 errors`.
fn line(elapsed: Duration, cycles: u64, errors: u64, per_second: f64, goal: Goal) -> String {
    let elapsed = elapsed.as_secs_f64();
    let time = match goal.duration {
        Some(duration) => format!("{elapsed:.1}s/{}s", duration.as_secs_f64()),
        None => format!("{elapsed:.1}s"),
    };
    let done = match goal.cycles {
        Some(planned) => format!("{cycles}/{planned}"),
        None => cycles.to_string(),
    };
    format!("load {time}  {done} cycles  {per_second:.0} ops/s  {errors} errors")
}

/// Best effort: a failed write to the terminal is not worth failing the run for.
fn draw(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
    let _ = stderr.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line shows the plan it is measured against: cycles, a duration, or both.
    #[test]
    fn the_line_shows_progress_against_the_plan() {
        let elapsed = Duration::from_millis(3_240);
        let by_cycles = Goal {
            cycles: Some(40_000),
            duration: None,
        };
        assert_eq!(
            line(elapsed, 12_000, 0, 3_750.4, by_cycles),
            "load 3.2s  12000/40000 cycles  3750 ops/s  0 errors"
        );
        let by_time = Goal {
            cycles: None,
            duration: Some(Duration::from_secs(10)),
        };
        assert_eq!(
            line(elapsed, 12_000, 3, 3_750.0, by_time),
            "load 3.2s/10s  12000 cycles  3750 ops/s  3 errors"
        );
        let both = Goal {
            cycles: Some(500),
            duration: Some(Duration::from_millis(1_500)),
        };
        assert!(line(elapsed, 1, 0, 0.0, both).starts_with("load 3.2s/1.5s  1/500 cycles"));
    }

    /// Workers' cycles are counted, failed ones also as errors.
    #[test]
    fn the_tally_counts_cycles_and_errors() {
        let tally = Tally::default();
        tally.count(&Cycle::Done { retried: false });
        tally.count(&Cycle::Done { retried: true });
        tally.count(&Cycle::Failed("held".into()));
        assert_eq!(tally.read(), (3, 1));
    }

    /// The rate is over the last interval; an empty interval is 0, not a division by zero.
    #[test]
    fn the_rate_is_per_second_of_the_interval() {
        assert_eq!(per_second(500, Duration::from_millis(250)), 2_000.0);
        assert_eq!(per_second(5, Duration::ZERO), 0.0);
    }

    /// Off a terminal (as under `cargo test`, whose stderr is captured or piped) the line is
    /// inert and finishing it returns at once.
    #[tokio::test]
    async fn off_a_terminal_nothing_is_started() {
        if std::io::stderr().is_terminal() {
            return;
        }
        let goal = Goal {
            cycles: Some(1),
            duration: None,
        };
        let line = ProgressLine::start(Arc::default(), goal);
        assert!(line.redraw.is_none());
        line.finish().await;
    }
}

//! Busy polling (`runtime.busy_poll_us`): for a short window after a request comes in and after
//! its answer goes out, one task keeps the runtime's thread polling its sockets instead of
//! sleeping, so that the masters' replies and the app's next request find it awake.
//!
//! A sleeping thread is woken by the kernel when bytes arrive for it; on a VM, waking a vCPU
//! that halted costs tens of microseconds, once for each request and each round of replies
//! (`bench/README.md`, "The sidecar hop"). A thread that is still polling takes the bytes at
//! its next look. The price is CPU, spent polling where the thread would have slept: the
//! window after each request's arrival and answer, and all the time while requests keep
//! coming within it.
//!
//! The polling task yields to the runtime on each turn (`tokio::task::yield_now`), which has
//! the runtime look at its sockets and timers without sleeping and run whatever became ready
//! before the task's next turn; every other task runs as it would. The settings allow it only
//! on a runtime of one thread: with several, the worker asleep in the I/O driver holds the
//! sockets, and the polling one could not look at them.

// The real clock, even in a test that pauses tokio's: polling spends real time, and a spell
// would never end on a paused clock that the polling itself keeps from advancing.
#![allow(clippy::disallowed_types)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;

use crate::metrics::METRICS;

/// How often a spell's time so far is added to `sidecar_busy_poll_seconds_total`.
const COUNT_EVERY: Duration = Duration::from_millis(100);

/// The window and the time of the last request's arrival or answer.
pub(crate) struct BusyPoll {
    window: Duration,
    /// Where the marks count from.
    origin: Instant,
    /// When a request last came in or was answered, in nanoseconds since `origin`.
    last_mark: AtomicU64,
    /// The polling task is in a spell (it looks at `last_mark` before it stops).
    polling: AtomicBool,
    /// Starts a spell when the task is not in one.
    start: Notify,
}

impl BusyPoll {
    /// Busy polling for `window` after each mark; none when `window` is zero, or when the
    /// runtime this is called on is not one of one thread (the settings require one, but a
    /// program embedding the sidecar brings its own).
    pub(crate) fn new(window: Duration) -> Option<Arc<Self>> {
        if window.is_zero() {
            return None;
        }
        let flavor = Handle::try_current().map(|runtime| runtime.runtime_flavor());
        if !matches!(flavor, Ok(RuntimeFlavor::CurrentThread)) {
            tracing::warn!("runtime.busy_poll_us needs a runtime of one thread: not polling");
            return None;
        }
        Some(Arc::new(Self {
            window,
            origin: Instant::now(),
            last_mark: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            start: Notify::new(),
        }))
    }

    /// A request came in, or its answer went out: poll for the window from now.
    pub(crate) fn mark(&self) {
        self.last_mark
            .store(self.nanos(Instant::now()), Ordering::SeqCst);
        if !self.polling.load(Ordering::SeqCst) {
            self.start.notify_one();
        }
    }

    /// The polling task: a spell after each mark that finds it idle, lasting until no mark
    /// came for the window. Its time goes to `sidecar_busy_poll_seconds_total` at least every
    /// [`COUNT_EVERY`] of a spell, so that a spell kept up by steady traffic shows as it lasts.
    /// Runs until dropped.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            self.start.notified().await;
            let mut counted = Instant::now();
            self.polling.store(true, Ordering::SeqCst);
            loop {
                loop {
                    let now = Instant::now();
                    if !self.within_window(now) {
                        break;
                    }
                    if now.duration_since(counted) >= COUNT_EVERY {
                        METRICS
                            .busy_poll
                            .add(now.duration_since(counted).as_secs_f64(), &[]);
                        counted = now;
                    }
                    tokio::task::yield_now().await;
                }
                self.polling.store(false, Ordering::SeqCst);
                // A mark between the last look and the flag going down did not start a spell:
                // look once more, now that a mark would.
                if !self.within_window(Instant::now()) {
                    break;
                }
                self.polling.store(true, Ordering::SeqCst);
            }
            METRICS.busy_poll.add(counted.elapsed().as_secs_f64(), &[]);
        }
    }

    fn within_window(&self, now: Instant) -> bool {
        let last = self.last_mark.load(Ordering::SeqCst);
        keeps_polling(last, self.nanos(now), self.window)
    }

    fn nanos(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin).as_nanos();
        u64::try_from(since).unwrap_or(u64::MAX)
    }
}

/// Whether polling goes on at `now` after the last mark at `last` (nanoseconds since one
/// origin): until `window` has passed since it.
fn keeps_polling(last: u64, now: u64, window: Duration) -> bool {
    let window = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX);
    now.saturating_sub(last) < window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_lasts_the_window_after_the_last_mark() {
        let window = Duration::from_micros(100);
        assert!(keeps_polling(1_000, 1_000, window));
        assert!(keeps_polling(1_000, 100_999, window));
        assert!(!keeps_polling(1_000, 101_000, window));
        // A mark stored after the clock was read is no older than it.
        assert!(keeps_polling(2_000, 1_000, window));
    }

    #[test]
    fn no_window_no_polling() {
        assert!(BusyPoll::new(Duration::ZERO).is_none());
    }

    /// Only a runtime of one thread polls: with more, the worker asleep holds the sockets.
    #[test]
    fn only_a_runtime_of_one_thread_polls() {
        let window = Duration::from_micros(100);
        let runtime = |builder: &mut tokio::runtime::Builder| builder.build().unwrap();
        let one = runtime(&mut tokio::runtime::Builder::new_current_thread());
        assert!(one.block_on(async { BusyPoll::new(window) }).is_some());
        let several = runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2));
        assert!(several.block_on(async { BusyPoll::new(window) }).is_none());
        assert!(BusyPoll::new(window).is_none(), "no runtime at all");
    }

    /// A spell ends by itself once no mark comes for the window.
    #[tokio::test(flavor = "current_thread")]
    async fn a_spell_ends_when_marks_stop() {
        let busy = BusyPoll::new(Duration::from_millis(5)).expect("a window");
        let task = tokio::spawn(Arc::clone(&busy).run());
        busy.mark();
        tokio::task::yield_now().await;
        assert!(busy.polling.load(Ordering::SeqCst), "a mark starts a spell");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !busy.polling.load(Ordering::SeqCst),
            "the spell outlived its window"
        );
        task.abort();
    }
}

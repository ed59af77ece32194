//! Busy polling (`runtime.busy_poll_us`, `runtime.busy_poll_after_answer_us`): while a request
//! waits on the masters, and for an optional window after each answer, one task keeps the
//! runtime's thread polling its sockets instead of sleeping, so that the masters' replies (and
//! the app's next request) find it awake; it stops polling where that does not pay.
//!
//! A sleeping thread is woken by the kernel when bytes arrive for it; on a VM, waking a vCPU
//! that halted costs tens of microseconds, once for each request and each round of replies
//! (`bench/README.md`, "The sidecar hop"). A thread that is still polling takes the bytes at
//! its next look. Polling in place of a sleep and a wake-up costs about what they cost, as
//! long as what it waits for comes within the window; so the policy ([`Policy`]) polls only:
//!
//! - from a request's arrival until its answer, for at most the window: no longer than the
//!   masters take to reply, and never while the thread waits for nothing;
//! - while most recent polled requests were answered within the window. Each one answered in
//!   it adds a credit, each one answered after it (masters too far away, or a blocking
//!   acquisition that waits) takes two; with none left, only one request in [`PROBE_EVERY`]
//!   is polled, to find out whether polling pays again.
//!
//! Each turn of the polling task first offers the CPU to any other thread that wants it
//! (`sched_yield`, about a microsecond when none does), so that polling never keeps the app, or
//! a master on the same machine, from running: they run in its turns instead of waiting for
//! the scheduler to take the CPU from a busy thread. Then the task yields to the runtime
//! (`tokio::task::yield_now`), which has the runtime look at its sockets and timers without
//! sleeping and run whatever became ready before the task's next turn; every other task runs
//! as it would. Only a runtime of one thread polls: with several, the worker asleep in the I/O
//! driver holds the sockets, and the polling one could not look at them.

// The real clock, even in a test that pauses tokio's: polling spends real time, and a spell
// would never end on a paused clock that the polling itself keeps from advancing.
#![allow(clippy::disallowed_types)]

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;

use crate::metrics::METRICS;

/// How often a spell's time so far is added to `sidecar_busy_poll_seconds_total`.
const COUNT_EVERY: Duration = Duration::from_millis(100);
/// With no credit left, one request in this many is polled all the same.
pub(crate) const PROBE_EVERY: u32 = 16;
/// The most credit the policy holds: after a long run of requests answered in their window,
/// half this many windows outlasted in a row stop the polling.
const CREDIT_MAX: u32 = 16;
/// The credit a window outlasted takes: polling goes on while over two thirds of the polled
/// requests are answered in their window.
const OUTLASTED_COST: u32 = 2;
/// The credit at start: two windows outlasted (a fresh sidecar's first requests wait for its
/// connections and scripts) do not stop the polling yet.
const INITIAL_CREDIT: u32 = 2 * OUTLASTED_COST;

/// Indices into `METRICS.busy_poll_requests` (the order of `BUSY_POLL_OUTCOMES`).
const ANSWERED_IN_WINDOW: usize = 0;
const OUTLASTED_WINDOW: usize = 1;
const NOT_POLLED: usize = 2;

/// The windows of `runtime.busy_poll_us` and `runtime.busy_poll_after_answer_us`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Windows {
    /// From a request's arrival, while it is in progress.
    pub(crate) request: Duration,
    /// After each answer, for the app's next request.
    pub(crate) after_answer: Duration,
}

/// The shared state of the polling task and the connections' requests.
pub(crate) struct BusyPoll {
    policy: Mutex<Policy>,
    /// There is a request window: requests are counted by whether they were polled.
    request_window: bool,
    /// Starts a spell when the task is not in one.
    start: Notify,
}

/// What a request's arrival decided, handed back with its answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    at: Instant,
    polled: bool,
}

impl BusyPoll {
    /// Busy polling within `windows`; none when both are zero, or when the runtime this is
    /// called on is not one of one thread (the settings require one for a window they were
    /// given, but a program embedding the sidecar brings its own runtime).
    pub(crate) fn new(windows: Windows) -> Option<Arc<Self>> {
        if windows.request.is_zero() && windows.after_answer.is_zero() {
            return None;
        }
        let flavor = Handle::try_current().map(|runtime| runtime.runtime_flavor());
        if !matches!(flavor, Ok(RuntimeFlavor::CurrentThread)) {
            tracing::info!("busy polling needs a runtime of one thread: not polling");
            return None;
        }
        Some(Arc::new(Self {
            policy: Mutex::new(Policy::new(windows)),
            request_window: !windows.request.is_zero(),
            start: Notify::new(),
        }))
    }

    /// A request came in (not an event stream, which waits on nothing in particular).
    pub(crate) fn arrive(&self) -> Arrival {
        let now = Instant::now();
        let (polled, start) = self.policy().arrive(now);
        if start {
            self.start.notify_one();
        }
        if !polled && self.request_window {
            METRICS.busy_poll_requests[NOT_POLLED].add(1);
        }
        Arrival { at: now, polled }
    }

    /// The answer to the request that came in at `arrival` was sent, or given up.
    pub(crate) fn answer(&self, arrival: Arrival) {
        let now = Instant::now();
        let (in_window, start) = self.policy().answer(arrival, now);
        if start {
            self.start.notify_one();
        }
        if let Some(in_window) = in_window {
            let kind = if in_window {
                ANSWERED_IN_WINDOW
            } else {
                OUTLASTED_WINDOW
            };
            METRICS.busy_poll_requests[kind].add(1);
        }
    }

    /// The polling task: a spell whenever a request or an answer starts one, lasting while
    /// the policy keeps polling. Its time goes to `sidecar_busy_poll_seconds_total` at least
    /// every [`COUNT_EVERY`] of a spell, so that a spell kept up by steady traffic shows as it
    /// lasts. Runs until dropped.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            self.start.notified().await;
            let mut counted = Instant::now();
            loop {
                let now = Instant::now();
                if !self.policy().keep_polling(now) {
                    break;
                }
                if now.duration_since(counted) >= COUNT_EVERY {
                    METRICS
                        .busy_poll
                        .add(now.duration_since(counted).as_secs_f64(), &[]);
                    counted = now;
                }
                std::thread::yield_now();
                tokio::task::yield_now().await;
            }
            METRICS.busy_poll.add(counted.elapsed().as_secs_f64(), &[]);
        }
    }

    fn policy(&self) -> MutexGuard<'_, Policy> {
        // Every change leaves the policy consistent: a poisoned one is still usable.
        self.policy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// When to poll: a pure function of the requests' arrivals and answers and of `now`.
#[derive(Debug)]
pub(crate) struct Policy {
    windows: Windows,
    /// Polled requests not answered yet.
    in_progress: u32,
    /// The latest polled request's arrival.
    last_arrival: Option<Instant>,
    /// The latest answer, when answers start a window of their own.
    last_answer: Option<Instant>,
    /// Requests answered in their window lately; polling needs some (see [`PROBE_EVERY`]).
    credit: u32,
    /// Requests that came in with no credit, for the probes.
    uncredited: u32,
    /// The task is in a spell, or has been told to start one.
    polling: bool,
}

impl Policy {
    pub(crate) fn new(windows: Windows) -> Self {
        Policy {
            windows,
            in_progress: 0,
            last_arrival: None,
            last_answer: None,
            credit: INITIAL_CREDIT,
            uncredited: 0,
            polling: false,
        }
    }

    /// A request came in at `now`: whether it is polled, and whether the task must be told
    /// to start a spell.
    pub(crate) fn arrive(&mut self, now: Instant) -> (bool, bool) {
        if self.windows.request.is_zero() {
            return (false, false);
        }
        let polled = if self.credit > 0 {
            true
        } else {
            self.uncredited = self.uncredited.wrapping_add(1);
            self.uncredited.is_multiple_of(PROBE_EVERY)
        };
        if !polled {
            return (false, false);
        }
        self.in_progress += 1;
        self.last_arrival = Some(now);
        (true, self.begin())
    }

    /// The answer to the request of `arrival` went out at `now`: whether it came within its
    /// window (for a polled request), and whether the task must be told to start a spell.
    pub(crate) fn answer(&mut self, arrival: Arrival, now: Instant) -> (Option<bool>, bool) {
        let in_window = arrival.polled.then(|| {
            self.in_progress = self.in_progress.saturating_sub(1);
            let in_window = now.saturating_duration_since(arrival.at) <= self.windows.request;
            self.credit = if in_window {
                (self.credit + 1).min(CREDIT_MAX)
            } else {
                self.credit.saturating_sub(OUTLASTED_COST)
            };
            in_window
        });
        if self.windows.after_answer.is_zero() {
            return (in_window, false);
        }
        self.last_answer = Some(now);
        (in_window, self.begin())
    }

    /// Whether the task polls on at `now`; when not, its spell is over (under the same lock as
    /// the arrivals and answers that start one, so none is missed).
    pub(crate) fn keep_polling(&mut self, now: Instant) -> bool {
        let within = |since: Option<Instant>, window: Duration| {
            since.is_some_and(|at| now.saturating_duration_since(at) < window)
        };
        let waiting = self.in_progress > 0 && within(self.last_arrival, self.windows.request);
        let next = within(self.last_answer, self.windows.after_answer);
        self.polling = waiting || next;
        self.polling
    }

    /// A spell is wanted: whether the task must be told (it is not in one).
    fn begin(&mut self) -> bool {
        !std::mem::replace(&mut self.polling, true)
    }
}

#[cfg(test)]
mod tests;

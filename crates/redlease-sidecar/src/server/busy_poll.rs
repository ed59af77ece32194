//! Busy polling (`runtime.busy_poll_us`, `runtime.busy_poll_after_answer_us`): while a request
//! waits on the masters, and for a window after each answer, one task keeps the runtime's
//! thread polling its sockets instead of sleeping, so that the masters' replies and the app's
//! next request find it awake; it stops polling where that does not pay.
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
//!   is polled, to find out whether polling pays again. A request answered before the
//!   polling took a turn waited on nothing (`/livez`, `/metrics`, a refusal): it leaves the
//!   credit as it is, so that such requests do not keep the polling up for far masters.
//!
//! A spell lasts while a polled request is in progress and the latest one came in less than
//! the window ago: a request that waits long (a blocking acquisition) does not keep it up
//! past the window after the latest arrival.
//!
//! After an answer, the thread polls for the app's next request only while that pays as well,
//! and stops when a request comes: the latest answer polled after before a request (from any
//! connection) adds a credit of its own when that request came within the answer window, and
//! takes four when it came later; with none left only one answer in [`PROBE_EVERY`] is polled
//! after. An app that locks back to back keeps it up; apps
//! whose requests come further apart than the window (steady traffic at moderate rates, an
//! idle app) stop it after a few answers.
//!
//! Each turn of the polling task first offers the CPU to any other thread that wants it
//! (`sched_yield`, about a microsecond when none does), so that polling never keeps the app, or
//! a master on the same machine, from running: they run in its turns instead of waiting for
//! the scheduler to take the CPU from a busy thread. A thread that keeps the CPU for
//! [`CPU_TAKEN`] or more once offered it runs for whole time slices (a CPU-bound neighbour):
//! there, a poller waits a slice for each turn it offers, where a sleeping thread would be
//! woken ahead of the neighbour. Such a turn ends the spell and takes all credit, and each
//! time it happens the probes come half as often (down to one request in
//! [`MAX_PROBE_EVERY`]), until a probe is answered in its window again.
//!
//! Then the task yields to the runtime (`tokio::task::yield_now`), which has the runtime look
//! at its sockets and timers without sleeping and run whatever became ready before the task's
//! next turn; every other task runs as it would. Only a runtime of one thread polls: with
//! several, the worker asleep in the I/O driver holds the sockets, and the polling one could
//! not look at them.

// The real clock, even in a test that pauses tokio's: polling spends real time, and a spell
// would never end on a paused clock that the polling itself keeps from advancing.
#![allow(clippy::disallowed_types)]

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry::metrics::BoundCounter;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;

use crate::metrics::METRICS;

/// How often a spell's time so far is added to `sidecar_busy_poll_seconds_total`.
const COUNT_EVERY: Duration = Duration::from_millis(100);
/// With no credit left, one request in this many is polled all the same.
pub(crate) const PROBE_EVERY: u32 = 16;
/// The rarest probes, after turns that lost the CPU to a CPU-bound neighbour.
pub(crate) const MAX_PROBE_EVERY: u32 = 4096;
/// An offer of the CPU that kept the polling thread off it this long went to a thread that
/// runs for whole time slices (a master or an app answering a request takes tens of µs).
pub(crate) const CPU_TAKEN: Duration = Duration::from_micros(500);
/// The most credit the policy holds: after a long run of requests answered in their window,
/// half this many windows outlasted in a row stop the polling.
const CREDIT_MAX: u32 = 16;
/// The credit a window outlasted takes: polling goes on while over two thirds of the polled
/// requests are answered in their window.
const OUTLASTED_COST: u32 = 2;
/// The credit an answer window outlasted takes (no request came within it): polling after
/// answers goes on while over four fifths of them are followed by a request within it. A
/// window outlasted costs the whole window in CPU, one that pays about what the sleep and
/// wake-up it replaces would: an app that locks back to back keeps it, steady traffic from
/// several apps at moderate rates (a request in the window after most answers, not four in
/// five) stops it.
const NEXT_OUTLASTED_COST: u32 = 4;
/// The credit at start: two windows outlasted (a fresh sidecar's first requests wait for its
/// connections and scripts) do not stop the polling yet.
const INITIAL_CREDIT: u32 = 2 * OUTLASTED_COST;
/// The answer window's credit at start: two windows outlasted (an app setting up between its
/// first requests) do not stop it yet.
const INITIAL_NEXT_CREDIT: u32 = 2 * NEXT_OUTLASTED_COST;

/// Indices into `METRICS.busy_poll_requests` and `METRICS.busy_poll_answers` (the orders of
/// `BUSY_POLL_OUTCOMES` and `BUSY_POLL_ANSWER_OUTCOMES`): what was waited for came within the
/// window, or after it; or nothing was polled.
const IN_WINDOW: usize = 0;
const OUTLASTED_WINDOW: usize = 1;
const NOT_POLLED: usize = 2;

/// Counts a window that paid (`in_window`) or was outlasted, in `outcomes`.
fn count_window(outcomes: &[BoundCounter<u64>; 3], in_window: bool) {
    let outcome = if in_window {
        IN_WINDOW
    } else {
        OUTLASTED_WINDOW
    };
    outcomes[outcome].add(1);
}

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
    /// Starts a spell when the task is not in one.
    start: Notify,
}

/// What a request's arrival decided, handed back with its answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrival {
    at: Instant,
    polled: bool,
    /// The polling task's turns so far when the request came in.
    turns: u64,
    /// Turns that lost the CPU so far when the request came in (see [`Policy::cpu_taken`]).
    cpu_losses: u64,
    /// Whether this request came within the answer window after the latest answer polled
    /// after; `None` when no such answer waited for it.
    next_in_window: Option<bool>,
}

/// What an answer going out decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answered {
    /// For a polled request: whether it was answered within the request window.
    pub(crate) in_window: Option<bool>,
    /// With an answer window: whether the thread polls after this answer.
    pub(crate) polled_after: Option<bool>,
    /// The task must be told to start a spell.
    pub(crate) start: bool,
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
            start: Notify::new(),
        }))
    }

    /// A request came in (not a stream, which waits on nothing in particular). Without a
    /// request window, no request is polled, nor counted as not polled.
    pub(crate) fn arrive(&self) -> Arrival {
        let (arrival, start, request_window) = {
            let mut policy = self.policy();
            let (arrival, start) = policy.arrive(Instant::now());
            (arrival, start, !policy.windows.request.is_zero())
        };
        if start {
            self.start.notify_one();
        }
        if !arrival.polled && request_window {
            METRICS.busy_poll_requests[NOT_POLLED].add(1);
        }
        if let Some(next_in_window) = arrival.next_in_window {
            count_window(&METRICS.busy_poll_answers, next_in_window);
        }
        arrival
    }

    /// The answer to the request that came in at `arrival` was sent, or given up.
    pub(crate) fn answer(&self, arrival: Arrival) {
        let now = Instant::now();
        let answered = self.policy().answer(arrival, now);
        if answered.start {
            self.start.notify_one();
        }
        if answered.polled_after == Some(false) {
            METRICS.busy_poll_answers[NOT_POLLED].add(1);
        }
        if let Some(in_window) = answered.in_window {
            count_window(&METRICS.busy_poll_requests, in_window);
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
                // Offered at `now`: what came between takes microseconds, against CPU_TAKEN.
                std::thread::yield_now();
                if now.elapsed() >= CPU_TAKEN {
                    METRICS.busy_poll_cpu_lost.add(1, &[]);
                    self.policy().cpu_taken();
                    break;
                }
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
    /// Requests answered in their window lately; polling for a request needs some.
    credit: Credit,
    /// Polled answers followed by the next request within the answer window lately; polling
    /// after an answer needs some.
    next_credit: Credit,
    /// The latest answer polled after (when, and `cpu_losses` then), until the next arrival
    /// tells whether that paid.
    watched_answer: Option<(Instant, u64)>,
    /// With no credit, one request (or answer) in this many is polled (after).
    probe_every: u32,
    /// Turns the polling task has taken (each look at `keep_polling`).
    turns: u64,
    /// Turns that lost the CPU to a CPU-bound neighbour so far: a request in progress at such a
    /// loss earns no credit when it is answered.
    cpu_losses: u64,
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
            credit: Credit::new(INITIAL_CREDIT, OUTLASTED_COST),
            next_credit: Credit::new(INITIAL_NEXT_CREDIT, NEXT_OUTLASTED_COST),
            watched_answer: None,
            probe_every: PROBE_EVERY,
            turns: 0,
            cpu_losses: 0,
            polling: false,
        }
    }

    /// A request came in at `now`: what was decided for it (whether it is polled), and
    /// whether the task must be told to start a spell.
    pub(crate) fn arrive(&mut self, now: Instant) -> (Arrival, bool) {
        // The next request has come: the polling after the answers before it is over (the
        // request window, if it polls for this one, takes over).
        self.last_answer = None;
        let judged = self.watched_answer.take().map(|(answered, cpu_losses)| {
            let in_window = now.saturating_duration_since(answered) < self.windows.after_answer;
            (in_window, cpu_losses != self.cpu_losses)
        });
        let next_in_window = judged.map(|(in_window, _)| in_window);
        if let Some((in_window, before_a_loss)) = judged {
            if before_a_loss {
                // Counted, but no credit: the probes stay as spaced as the loss left them.
            } else if in_window {
                self.next_credit.paid(&mut self.probe_every);
            } else {
                self.next_credit.outlasted();
            }
        }
        let polled = !self.windows.request.is_zero() && self.credit.polls(self.probe_every);
        let arrival = Arrival {
            at: now,
            polled,
            turns: self.turns,
            cpu_losses: self.cpu_losses,
            next_in_window,
        };
        if !polled {
            return (arrival, false);
        }
        self.in_progress += 1;
        self.last_arrival = Some(now);
        (arrival, self.begin())
    }

    /// The answer to the request of `arrival` went out at `now`: whether it came within its
    /// window (for a polled request), whether the thread polls after it, and whether the task
    /// must be told to start a spell.
    pub(crate) fn answer(&mut self, arrival: Arrival, now: Instant) -> Answered {
        let in_window = arrival.polled.then(|| {
            self.in_progress = self.in_progress.saturating_sub(1);
            let in_window = now.saturating_duration_since(arrival.at) <= self.windows.request;
            // Answered before the polling took a turn: it waited on nothing.
            let waited = self.turns != arrival.turns;
            // In progress when a turn lost the CPU: whatever it says, the neighbour is there.
            let before_a_loss = self.cpu_losses != arrival.cpu_losses;
            if before_a_loss {
                // No credit, and the probes stay as spaced as the loss left them.
            } else if waited && in_window {
                self.credit.paid(&mut self.probe_every);
            } else if waited {
                self.credit.outlasted();
            }
            in_window
        });
        let mut answered = Answered {
            in_window,
            polled_after: None,
            start: false,
        };
        if self.windows.after_answer.is_zero() {
            return answered;
        }
        let polled_after = self.next_credit.polls(self.probe_every);
        answered.polled_after = Some(polled_after);
        if polled_after {
            // Only the latest answer polled after before a request is judged by it: an
            // earlier one, followed by this answer rather than by a request, is not.
            self.watched_answer = Some((now, self.cpu_losses));
            self.last_answer = Some(now);
            answered.start = self.begin();
        }
        answered
    }

    /// Whether the task polls on at `now`; when not, its spell is over (under the same lock as
    /// the arrivals and answers that start one, so none is missed).
    pub(crate) fn keep_polling(&mut self, now: Instant) -> bool {
        self.turns = self.turns.wrapping_add(1);
        let within = |since: Option<Instant>, window: Duration| {
            since.is_some_and(|at| now.saturating_duration_since(at) < window)
        };
        let waiting = self.in_progress > 0 && within(self.last_arrival, self.windows.request);
        let next = within(self.last_answer, self.windows.after_answer);
        self.polling = waiting || next;
        self.polling
    }

    /// A turn lost the CPU for [`CPU_TAKEN`] or more: the spell is over, both credits gone,
    /// and the probes come half as often.
    pub(crate) fn cpu_taken(&mut self) {
        self.cpu_losses = self.cpu_losses.wrapping_add(1);
        self.polling = false;
        self.credit.clear();
        self.next_credit.clear();
        self.last_answer = None;
        self.probe_every = (self.probe_every * 2).min(MAX_PROBE_EVERY);
    }

    /// A spell is wanted: whether the task must be told (it is not in one).
    fn begin(&mut self) -> bool {
        !std::mem::replace(&mut self.polling, true)
    }
}

/// One window's credit: what it earned lately, and its probes while it has none.
#[derive(Debug)]
struct Credit {
    held: u32,
    /// Requests (or answers) that came with no credit held, for the probes.
    uncredited: u32,
    /// What a window outlasted takes.
    outlasted_cost: u32,
}

impl Credit {
    fn new(held: u32, outlasted_cost: u32) -> Self {
        Credit {
            held,
            uncredited: 0,
            outlasted_cost,
        }
    }

    /// Whether to poll for the next one: with credit held, yes; with none, one in
    /// `probe_every` (see [`PROBE_EVERY`]).
    fn polls(&mut self, probe_every: u32) -> bool {
        if self.held > 0 {
            return true;
        }
        self.uncredited = self.uncredited.wrapping_add(1);
        self.uncredited.is_multiple_of(probe_every)
    }

    /// A window paid: one more credit (up to [`CREDIT_MAX`]), and the probes, should the
    /// credit run out, as frequent as at first.
    fn paid(&mut self, probe_every: &mut u32) {
        self.held = (self.held + 1).min(CREDIT_MAX);
        *probe_every = PROBE_EVERY;
    }

    /// A window was outlasted.
    fn outlasted(&mut self) {
        self.held = self.held.saturating_sub(self.outlasted_cost);
    }

    /// No credit left, and the count toward the next probe from nought.
    fn clear(&mut self) {
        self.held = 0;
        self.uncredited = 0;
    }
}

#[cfg(test)]
mod tests;

//! Running one call per master at once and collecting their answers as they come.
//!
//! The per-master futures are driven inside the caller's own task (no spawn, no cross-task
//! wake-up per answer: such a hop can cost more than the Redis round trip on loopback),
//! joined in one allocation (`join_all`): a wake-up polls every call not finished yet, a few
//! at most, which costs less than a `FuturesUnordered`'s allocation and waker per call.
//! A caller that returns at quorum (or is cancelled) drops its [`Fanout`], which hands the
//! unfinished calls to a tracked task: the slower masters' calls still run to completion, their
//! RTT is recorded, and any clean-up chained after a write (see `acquire_on`) still runs after
//! that write was sent.
//!
//! Answers go into a queue the caller reads after driving the calls, not through a channel:
//! both sides run in the same task, and a channel's wake-up of its own reader would poll that
//! task once more for nothing after every answer.
//!
//! Every call of a fan-out gives up at the same instant, so they share one deadline
//! ([`SharedDeadline`]), passed by the engine's [`DeadlineKeeper`] on its one timer: no timer
//! per master, nor per fan-out. The task driving the joined calls registers with it once per
//! poll ([`Deadline::Shared`]); each call only reads whether it has passed.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::future::join_all;
use futures_util::FutureExt;
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tokio_util::task::TaskTracker;

use crate::fleet::{Deadline, DeadlineKeeper, Node, SharedDeadline};

/// Answers not yet read, as `(node index, answer)`.
type Answers<T> = Arc<Mutex<VecDeque<(usize, T)>>>;

/// The way back from one master's call to the caller.
pub(crate) struct Reply<T> {
    index: usize,
    answers: Answers<T>,
}

impl<T> Reply<T> {
    /// Reports `value` for this master; unread once the caller stopped listening.
    pub(crate) fn send(&self, value: T) {
        lock(&self.answers).push_back((self.index, value));
    }
}

fn lock<T>(answers: &Answers<T>) -> std::sync::MutexGuard<'_, VecDeque<(usize, T)>> {
    // Pushes and pops only: a poisoned queue is still consistent.
    answers
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Every master's call of one fan-out, joined; ready once all have finished.
type Calls = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The calls of one fan-out and the answers they sent.
pub(crate) struct Fanout<T> {
    answers: Answers<T>,
    /// Every master's call still running; `None` once all have finished.
    calls: Option<Calls>,
    /// The calls' deadline, which whoever drives them registers with.
    deadline: Arc<SharedDeadline>,
    tasks: TaskTracker,
    /// Counts this fan-out as in flight for [`TaskTracker::wait`] (the engine's `settle`).
    _in_flight: TaskTrackerToken,
}

impl<T> Fanout<T> {
    /// The next answer, as `(node index, T)`, driving the calls meanwhile; `None` once every
    /// call has finished and its answers were read.
    pub(crate) async fn recv(&mut self) -> Option<(usize, T)> {
        poll_fn(|cx| {
            if let Some(answer) = lock(&self.answers).pop_front() {
                return Poll::Ready(Some(answer));
            }
            let Some(calls) = self.calls.as_mut() else {
                return Poll::Ready(None);
            };
            // Registers this task with every pending call, so any answer wakes it.
            let finished = drive(calls, &self.deadline, cx).is_ready();
            if finished {
                self.calls = None;
            }
            match lock(&self.answers).pop_front() {
                Some(answer) => Poll::Ready(Some(answer)),
                None if finished => Poll::Ready(None),
                None => Poll::Pending,
            }
        })
        .await
    }
}

impl<T> Drop for Fanout<T> {
    fn drop(&mut self) {
        let Some(mut calls) = self.calls.take() else {
            return;
        };
        if drive_now(&mut calls, &self.deadline).is_ready() {
            return;
        }
        // Outside a runtime (it is shutting down) the calls can no longer run: they are dropped.
        // The keeper passes their deadline wherever they run.
        if tokio::runtime::Handle::try_current().is_ok() {
            let deadline = Arc::clone(&self.deadline);
            self.tasks
                .spawn(poll_fn(move |cx| drive(&mut calls, &deadline, cx)));
        }
    }
}

/// Starts `per_node` for every master, each giving up at `until` (passed by `keeper`);
/// answers arrive through [`Fanout::recv`].
pub(crate) fn fan_out<'a, T, F, Fut>(
    tasks: &TaskTracker,
    keeper: &DeadlineKeeper,
    nodes: impl IntoIterator<Item = &'a Arc<Node>>,
    until: Instant,
    per_node: F,
) -> Fanout<T>
where
    T: Send + 'static,
    F: Fn(Arc<Node>, Deadline, Reply<T>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let nodes = nodes.into_iter();
    let n = nodes.size_hint().0;
    let shared = keeper.deadline(until);
    // Room for every master's answers (an acquisition sends two each) without growing.
    let answers: Answers<T> = Arc::new(Mutex::new(VecDeque::with_capacity(2 * n)));
    let calls = nodes.map(|node| {
        let reply = Reply {
            index: node.index(),
            answers: Arc::clone(&answers),
        };
        let deadline = Deadline::Shared(Arc::clone(&shared));
        per_node(Arc::clone(node), deadline, reply)
    });
    let mut calls: Calls = Box::pin(join_all(calls).map(drop));
    // Each call enqueues its command on its first poll: do that now, before the caller waits.
    let finished = drive_now(&mut calls, &shared).is_ready();
    Fanout {
        answers,
        calls: (!finished).then_some(calls),
        deadline: shared,
        tasks: tasks.clone(),
        _in_flight: tasks.token(),
    }
}

/// Polls the calls outside any task, with the no-op waker, which their shared deadline does
/// not keep (the task that polls them next registers its own).
fn drive_now(calls: &mut Calls, deadline: &SharedDeadline) -> Poll<()> {
    drive(calls, deadline, &mut Context::from_waker(Waker::noop()))
}

/// Polls the calls not finished yet, `cx`'s task registered first with their deadline, whose
/// passing then wakes it to poll them again (they only read it); ready once every call has
/// finished.
fn drive(calls: &mut Calls, deadline: &SharedDeadline, cx: &mut Context<'_>) -> Poll<()> {
    // Pending until it passes; the calls see it either way.
    let _ = deadline.poll_passed(cx);
    calls.as_mut().poll(cx)
}

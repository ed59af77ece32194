//! Wake-ups a task gives itself while it polls a connection, kept inside that poll.
//!
//! Driving hyper's client connection in the caller's task (see `http`), the connection's
//! poll is what completes the request's future: it reads the answer and hands it over, which
//! wakes the future's waker, the very task being polled. A task woken during its own poll is
//! run again from the back of the queue, and on tokio's multi-threaded runtime another worker
//! is woken to take it: a hand-off between threads, and a wake-up of a sleeping one, on every
//! answer. [`OwnWakes::poll`] polls with a waker that, while the poll runs, only marks the
//! wake-up; the poll is then repeated at once, and only a wake-up from elsewhere (the socket
//! becoming readable, while the task waits) wakes the task.

use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

/// Polls in a row while each wakes itself, at most; then the task is woken as usual (what a
/// future that keeps waking itself, to yield, asks for). An answer takes two or three.
const ROUNDS: usize = 4;

/// No poll is running: a wake-up goes to the task.
const IDLE: u8 = 0;
/// A poll is running and nothing woke it yet.
const POLLING: u8 = 1;
/// A poll is running and something woke it: it is polled again at once.
const WOKEN: u8 = 2;

/// The waker handed to what [`OwnWakes::poll`] polls: one per connection, so that what it
/// registers (socket readiness, the answer's channel) reaches the task that polls it now.
pub(crate) struct OwnWakes {
    /// [`IDLE`], [`POLLING`] or [`WOKEN`]. Wake-ups only turn `POLLING` into `WOKEN`; the
    /// poll alone leaves `WOKEN`, by polling again, so no wake-up is lost or erased.
    state: AtomicU8,
    /// The task that polled last.
    task: Mutex<Option<Waker>>,
}

impl OwnWakes {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: AtomicU8::new(IDLE),
            task: Mutex::new(None),
        })
    }

    /// Polls `step` for the task of `cx` with this waker, again at once while a poll woke it
    /// (at most [`ROUNDS`] times), until it is ready or waits for something else.
    pub(crate) fn poll<T>(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        mut step: impl FnMut(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        {
            let mut task = self.task();
            if !task.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        let waker = Waker::from(Arc::clone(self));
        let mut inner = Context::from_waker(&waker);
        for _ in 0..ROUNDS {
            // From `IDLE`, or from `WOKEN`: the wake-up is what this round polls for.
            self.state.store(POLLING, SeqCst);
            let poll = {
                let idle_on_panic = IdleOnPanic(&self.state);
                let poll = step(&mut inner);
                std::mem::forget(idle_on_panic);
                poll
            };
            if poll.is_ready() {
                self.state.store(IDLE, SeqCst);
                return poll;
            }
            // Either no wake-up came and later ones go to the task, or one came (`WOKEN`) and
            // is polled for now: `wake_by_ref` changes the state only from `POLLING`.
            if self
                .state
                .compare_exchange(POLLING, IDLE, SeqCst, SeqCst)
                .is_ok()
            {
                return Poll::Pending;
            }
        }
        self.state.store(IDLE, SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn task(&self) -> MutexGuard<'_, Option<Waker>> {
        // Only a waker is stored under it: a poisoned lock still holds a valid one.
        self.task
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Leaves the state `IDLE` when a poll panics, so that later wake-ups reach the task.
struct IdleOnPanic<'a>(&'a AtomicU8);

impl Drop for IdleOnPanic<'_> {
    fn drop(&mut self) {
        self.0.store(IDLE, SeqCst);
    }
}

impl Wake for OwnWakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = self.state.load(SeqCst);
        loop {
            match state {
                POLLING => match self.state.compare_exchange(POLLING, WOKEN, SeqCst, SeqCst) {
                    Ok(_) => return,
                    Err(now) => state = now,
                },
                WOKEN => return,
                _ => {
                    if let Some(task) = self.task().as_ref() {
                        task.wake_by_ref();
                    }
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    /// Counts the task's wake-ups.
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    impl Counter {
        fn wakes(&self) -> usize {
            self.0.load(SeqCst)
        }
    }

    fn counting() -> (Arc<Counter>, Waker) {
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        (Arc::clone(&counter), Waker::from(counter))
    }

    /// A fresh `OwnWakes`, and a task whose wake-ups are counted.
    fn fixture() -> (Arc<OwnWakes>, Arc<Counter>, Waker) {
        let (counter, task) = counting();
        (OwnWakes::new(), counter, task)
    }

    #[test]
    fn a_wake_up_during_the_poll_repolls_at_once_and_does_not_wake_the_task() {
        let (wakes, counter, task) = fixture();
        let mut cx = Context::from_waker(&task);
        let mut polls = 0;
        let poll = wakes.poll(&mut cx, |inner| {
            polls += 1;
            if polls == 1 {
                // What the connection does when it hands the answer over.
                inner.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(polls)
            }
        });
        assert_eq!(poll, Poll::Ready(2));
        assert_eq!(counter.wakes(), 0, "the task was woken by its own poll");
    }

    #[test]
    fn a_wake_up_after_the_poll_wakes_the_task() {
        let (wakes, counter, task) = fixture();
        let mut cx = Context::from_waker(&task);
        let mut registered = None;
        let poll: Poll<()> = wakes.poll(&mut cx, |inner| {
            registered = Some(inner.waker().clone());
            Poll::Pending
        });
        assert!(poll.is_pending());
        assert_eq!(counter.wakes(), 0);
        registered.expect("polled once").wake();
        assert_eq!(counter.wakes(), 1, "a wake-up from elsewhere was lost");
    }

    #[test]
    fn a_poll_that_keeps_waking_itself_yields_to_the_task() {
        let (wakes, counter, task) = fixture();
        let mut cx = Context::from_waker(&task);
        let mut polls = 0;
        let poll: Poll<()> = wakes.poll(&mut cx, |inner| {
            polls += 1;
            inner.waker().wake_by_ref();
            Poll::Pending
        });
        assert!(poll.is_pending());
        assert_eq!(polls, ROUNDS);
        assert_eq!(counter.wakes(), 1, "the task must be polled again");
    }

    #[test]
    fn the_waker_follows_the_task_that_polls_last() {
        let wakes = OwnWakes::new();
        let (first, first_task) = counting();
        let (second, second_task) = counting();
        let mut registered = None;
        let _: Poll<()> = wakes.poll(&mut Context::from_waker(&first_task), |inner| {
            registered = Some(inner.waker().clone());
            Poll::Pending
        });
        let _: Poll<()> = wakes.poll(&mut Context::from_waker(&second_task), |_| Poll::Pending);
        registered.expect("polled once").wake();
        assert_eq!(first.wakes(), 0);
        assert_eq!(second.wakes(), 1);
    }

    /// A wake-up from another thread while the poll runs (the I/O driver on another worker)
    /// is polled for at once, without waking the task.
    #[test]
    fn a_wake_up_from_another_thread_during_the_poll_repolls_at_once() {
        let (wakes, counter, task) = fixture();
        let mut cx = Context::from_waker(&task);
        let ready = Arc::new(AtomicBool::new(false));
        let mut polls = 0;
        let poll = wakes.poll(&mut cx, |inner| {
            polls += 1;
            if ready.load(SeqCst) {
                return Poll::Ready(polls);
            }
            let (waker, ready) = (inner.waker().clone(), Arc::clone(&ready));
            std::thread::spawn(move || {
                ready.store(true, SeqCst);
                waker.wake();
            })
            .join()
            .expect("the waking thread ends");
            Poll::Pending
        });
        assert_eq!(poll, Poll::Ready(2));
        assert_eq!(counter.wakes(), 0);
    }

    /// A poll that panicked leaves later wake-ups going to the task.
    #[test]
    fn after_a_panicking_poll_wake_ups_reach_the_task() {
        let (wakes, counter, task) = fixture();
        let mut registered = None;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut cx = Context::from_waker(&task);
            let _: Poll<()> = wakes.poll(&mut cx, |inner| {
                registered = Some(inner.waker().clone());
                panic!("a poll that panics");
            });
        }));
        assert!(panicked.is_err());
        registered.expect("polled once").wake();
        assert_eq!(counter.wakes(), 1, "a wake-up after the panic was lost");
    }

    /// A wake-up from another thread racing the end of a poll is never lost: either the poll
    /// sees it and polls again, or the task is woken.
    #[test]
    fn a_wake_up_racing_the_end_of_a_poll_is_never_lost() {
        for _ in 0..2_000 {
            let wakes = OwnWakes::new();
            let (counter, task) = counting();
            let ready = Arc::new(AtomicBool::new(false));
            let (registered_tx, registered_rx) = std::sync::mpsc::channel::<Waker>();
            let waker_thread = {
                let ready = Arc::clone(&ready);
                std::thread::spawn(move || {
                    let waker = registered_rx.recv().expect("the poll registers a waker");
                    ready.store(true, SeqCst);
                    waker.wake();
                })
            };
            let mut sent = Some(registered_tx);
            let mut cx = Context::from_waker(&task);
            let seen = wakes.poll(&mut cx, |inner| {
                if let Some(tx) = sent.take() {
                    tx.send(inner.waker().clone()).expect("the thread waits");
                }
                if ready.load(SeqCst) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            });
            waker_thread.join().expect("the waker thread ends");
            let woken = counter.wakes() > 0;
            assert!(
                seen.is_ready() || woken,
                "the value was set and the task was neither re-polled nor woken"
            );
        }
    }
}

//! When a call to a master gives up: after a timeout of its own, or at a deadline shared by
//! every call of one fan-out, which then needs one timer instead of one per master.
//!
//! A shared deadline has no timer of its own: whoever drives the calls (the fan-out, see
//! `redlock::fanout`) sleeps until the instant it chose and then calls
//! [`SharedDeadline::pass`], which wakes every call still waiting: one sleep per fan-out
//! instead of a tokio timer registered and cleared for every master's call.

use std::future::{poll_fn, Future};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

/// When a call gives up.
#[derive(Clone, Debug)]
pub enum Deadline {
    /// This long after the call starts, on a timer of the call's own.
    After(Duration),
    /// Shared with the other calls of a fan-out, whose driver passes it.
    Shared(Arc<SharedDeadline>),
}

impl Deadline {
    /// `call`'s output, or `Err(())` once the deadline has passed (measured from `start` for
    /// [`Deadline::After`]).
    pub async fn run<F: Future>(&self, start: Instant, call: F) -> Result<F::Output, ()> {
        match self {
            Self::After(timeout) => {
                // Boxed: only probes and preparation steps take their own timer; inline, the
                // timer would enlarge every fan-out call's future.
                let timed = Box::pin(tokio::time::timeout_at(start + *timeout, call));
                timed.await.map_err(drop)
            }
            Self::Shared(shared) => {
                let mut call = std::pin::pin!(call);
                poll_fn(|cx| {
                    if let Poll::Ready(output) = call.as_mut().poll(cx) {
                        return Poll::Ready(Ok(output));
                    }
                    shared.poll_passed(cx).map(Err)
                })
                .await
            }
        }
    }
}

/// A deadline several calls wait on, passed by whoever drives them.
#[derive(Debug)]
pub struct SharedDeadline {
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    passed: bool,
    wakers: Vec<Waker>,
}

impl SharedDeadline {
    /// A deadline for about `calls` calls (room for their wakers).
    pub fn new(calls: usize) -> Arc<Self> {
        let waiting = Waiting {
            passed: false,
            wakers: Vec::with_capacity(calls),
        };
        Arc::new(Self {
            waiting: Mutex::new(waiting),
        })
    }

    /// Marks the deadline passed and wakes every call waiting on it.
    pub fn pass(&self) {
        let wakers = {
            let mut waiting = self.lock();
            waiting.passed = true;
            std::mem::take(&mut waiting.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// Ready once passed; until then `cx` is woken when it passes.
    fn poll_passed(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut waiting = self.lock();
        if waiting.passed {
            return Poll::Ready(());
        }
        if !waiting.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            waiting.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // A flag and a list of wakers: consistent whatever a panicking holder left.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call answered before the deadline passes gets its answer; one still waiting when it
    /// passes gives up, woken by `pass` alone (no timer of its own).
    #[tokio::test(start_paused = true)]
    async fn calls_give_up_when_the_shared_deadline_passes() {
        let start = Instant::now();
        let shared = SharedDeadline::new(2);
        let deadline = Deadline::Shared(Arc::clone(&shared));
        assert_eq!(deadline.run(start, async { 7 }).await, Ok(7));

        let (answer, answered) = tokio::sync::oneshot::channel::<u32>();
        let waiting = tokio::spawn({
            let deadline = deadline.clone();
            async move { deadline.run(start, answered).await }
        });
        let never = tokio::spawn({
            let deadline = deadline.clone();
            async move { deadline.run(start, std::future::pending::<()>()).await }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            !waiting.is_finished() && !never.is_finished(),
            "no timer of their own"
        );
        shared.pass();
        assert_eq!(never.await.unwrap(), Err(()));
        assert_eq!(waiting.await.unwrap(), Err(()));
        drop(answer);
        assert_eq!(
            deadline.run(start, async { 8 }).await,
            Ok(8),
            "a ready call still answers"
        );
        assert_eq!(
            deadline.run(start, std::future::pending::<()>()).await,
            Err(()),
            "a passed deadline refuses to wait"
        );
    }

    /// `After` times a call from its own start.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_of_its_own_times_from_the_start() {
        let start = Instant::now();
        let deadline = Deadline::After(Duration::from_millis(5));
        let late = deadline.run(start, std::future::pending::<()>()).await;
        assert_eq!(late, Err(()));
        assert!(Instant::now() >= start + Duration::from_millis(5));
    }
}

//! A future that seldom completes (a server's drain or abort), polled only when it woke its
//! task: each connection's task waits on two such signals beside its connection, and polls
//! that task many times per request. Polled each time, a `CancellationToken`'s future locks
//! the token's tree node and its `Notify` on every poll; through [`Rare`], a poll that the
//! signal did not wake costs one atomic swap and the registration of the task's waker.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// `future`, polled on its first poll and then only after it woke.
pub(super) struct Rare<F> {
    future: Pin<Box<F>>,
    gate: Arc<Gate>,
    /// The waker `future` is polled with: it marks the gate, then wakes the task.
    gate_waker: Waker,
}

/// Whether the inner future woke since it was last polled, and the task to wake for it.
struct Gate {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Marked before the task is woken: the poll this wake causes sees the mark.
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> Rare<F> {
    pub(super) fn new(future: F) -> Self {
        let gate = Arc::new(Gate {
            // Polled on the first poll, which registers its waker.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            future: Box::pin(future),
            gate_waker: Waker::from(Arc::clone(&gate)),
            gate,
        }
    }
}

impl<F: Future> Future for Rare<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Registered before the mark is read: a wake after the read wakes this waker, one
        // before it left the mark.
        this.gate.task.register(cx.waker());
        if !this.gate.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let mut inner = Context::from_waker(&this.gate_waker);
        this.future.as_mut().poll(&mut inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio_util::sync::CancellationToken;

    /// Counts its polls; ready once its token is cancelled.
    struct Counted {
        polls: Arc<AtomicUsize>,
        cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.cancelled.as_mut().poll(cx)
        }
    }

    /// Polled once to register, not again on polls it did not cause, and ready after the
    /// token it waits on is cancelled, whether the cancel came before or after a poll.
    #[tokio::test]
    async fn polls_the_inner_future_only_when_it_woke() {
        let token = CancellationToken::new();
        let polls = Arc::new(AtomicUsize::new(0));
        let mut rare = Rare::new(Counted {
            polls: Arc::clone(&polls),
            cancelled: Box::pin(token.clone().cancelled_owned()),
        });
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..10 {
            assert!(Pin::new(&mut rare).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once, to register");
        token.cancel();
        assert!(Pin::new(&mut rare).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 2);

        let cancelled = CancellationToken::new();
        cancelled.cancel();
        let mut early = Rare::new(cancelled.cancelled_owned());
        assert!(Pin::new(&mut early).poll(&mut cx).is_ready());
    }

    /// The task waiting on it is woken when the signal comes.
    #[tokio::test]
    async fn wakes_the_task_that_waits() {
        let token = CancellationToken::new();
        let waiting = tokio::spawn(Rare::new(token.clone().cancelled_owned()));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        token.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken by the cancel")
            .expect("no panic");
    }
}

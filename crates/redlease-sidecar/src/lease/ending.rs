//! A lease's end, as the engine calls in flight for it wait on it: set once when the lease
//! ends (its release begins, or it is lost), after which a renewal, shadow or proclamation in
//! flight stops waiting, so the release goes out at once.
//!
//! A flag and a `Notify` inside the lease's own record: nothing allocated per lease, where a
//! `CancellationToken` made a tree node of its own, locked again to end and to drop it.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

#[derive(Default)]
pub(crate) struct Ending {
    ended: AtomicBool,
    news: Notify,
}

impl Ending {
    /// Marks the lease ended, once; every waiter wakes.
    pub(crate) fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.news.notify_waiters();
        }
    }

    /// Resolves once the lease has ended (at once if it has).
    pub(crate) async fn ended(&self) {
        loop {
            // Made before the check: an end after it wakes this waiter.
            let notified = self.news.notified();
            if self.ended.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn every_waiter_wakes_when_the_lease_ends_and_later_ones_pass_at_once() {
        let ending = Arc::new(Ending::default());
        assert_eq!(ending.ended().now_or_never(), None);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let ending = Arc::clone(&ending);
                tokio::spawn(async move { ending.ended().await })
            })
            .collect();
        tokio::task::yield_now().await;
        ending.end();
        ending.end();
        for waiter in waiters {
            let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            woken.expect("woken").unwrap();
        }
        assert_eq!(ending.ended().now_or_never(), Some(()));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_end_racing_its_waiter_on_another_thread_wakes_it() {
        for _ in 0..2_000 {
            let ending = Arc::new(Ending::default());
            let waiter = tokio::spawn({
                let ending = Arc::clone(&ending);
                async move { ending.ended().await }
            });
            ending.end();
            let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            woken.expect("woken").unwrap();
        }
    }
}

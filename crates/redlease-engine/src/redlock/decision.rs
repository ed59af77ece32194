//! The engine's decision about a grant — keep it or release it — set once by the acquisition
//! and read by every master's call that wrote the lock (`acquire_on`), which waits for it.
//!
//! One atomic and one `Notify`: set once, read at most once per master, with the engine and
//! the calls usually in one task. A `watch` channel did the same with a lock-guarded value and
//! eight notifiers woken on every send, a cost paid on every acquisition.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// What the engine decided about a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Decision {
    Pending = 0,
    Keep = 1,
    Release = 2,
}

struct Shared {
    decision: AtomicU8,
    decided: Notify,
}

/// The engine's side: sets the decision once. Dropped undecided (the acquisition was
/// dropped), it decides [`Decision::Release`].
pub(super) struct Decide {
    shared: Arc<Shared>,
}

/// A master's call's side: waits for the decision.
#[derive(Clone)]
pub(super) struct Decided {
    shared: Arc<Shared>,
}

/// An undecided grant: the engine's side and the calls' side.
pub(super) fn decision() -> (Decide, Decided) {
    let shared = Arc::new(Shared {
        decision: AtomicU8::new(Decision::Pending as u8),
        decided: Notify::new(),
    });
    let decided = Decided {
        shared: Arc::clone(&shared),
    };
    (Decide { shared }, decided)
}

impl Shared {
    fn load(&self) -> Decision {
        match self.decision.load(Ordering::Acquire) {
            0 => Decision::Pending,
            1 => Decision::Keep,
            // Only `decide` stores, and only these three values.
            _ => Decision::Release,
        }
    }

    /// Decides `decision` unless a decision was made before.
    fn decide(&self, decision: Decision) {
        let undecided = self
            .decision
            .compare_exchange(
                Decision::Pending as u8,
                decision as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if undecided {
            self.decided.notify_waiters();
        }
    }
}

// === impl Decide ===

impl Decide {
    /// Decides once; a later decision changes nothing.
    pub(super) fn send(&self, decision: Decision) {
        self.shared.decide(decision);
    }
}

impl Drop for Decide {
    fn drop(&mut self) {
        self.shared.decide(Decision::Release);
    }
}

// === impl Decided ===

impl Decided {
    /// The decision, once made (never [`Decision::Pending`]).
    pub(super) async fn wait(&self) -> Decision {
        loop {
            // Made before the check: a decision made after it wakes this waiter.
            let notified = self.shared.decided.notified();
            match self.shared.load() {
                Decision::Pending => notified.await,
                decision => return decision,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    #[tokio::test]
    async fn every_waiter_gets_the_first_decision() {
        let (decide, decided) = decision();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let decided = decided.clone();
                tokio::spawn(async move { decided.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        decide.send(Decision::Keep);
        decide.send(Decision::Release);
        for waiter in waiters {
            let decided = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            assert_eq!(decided.expect("woken").unwrap(), Decision::Keep);
        }
        assert_eq!(decided.wait().now_or_never(), Some(Decision::Keep));
    }

    #[tokio::test]
    async fn an_undecided_grant_dropped_is_released() {
        let (decide, decided) = decision();
        let waiter = tokio::spawn(async move { decided.wait().await });
        tokio::task::yield_now().await;
        drop(decide);
        let decided = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert_eq!(decided.expect("woken").unwrap(), Decision::Release);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_decision_racing_its_waiter_on_another_thread_wakes_it() {
        for _ in 0..2_000 {
            let (decide, decided) = decision();
            let waiter = tokio::spawn(async move { decided.wait().await });
            decide.send(Decision::Keep);
            let decided = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            assert_eq!(decided.expect("woken").unwrap(), Decision::Keep);
        }
    }

    #[test]
    fn no_decision_no_answer() {
        let (_decide, decided) = decision();
        assert_eq!(decided.wait().now_or_never(), None);
    }
}

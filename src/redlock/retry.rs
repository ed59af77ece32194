//! Releases a master missed: sent again until the master answers, or until every key the
//! lease could have left there has expired.
//!
//! A release that finds a master down, reconnecting, or too slow to answer in time would
//! otherwise leave the lease's key there until its TTL ran out — up to the shadow TTL for a
//! degraded lease, and on a majority when the release met a reset connection. Sending a
//! release again is harmless: it deletes the key only while it holds this very lease.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::fleet::{Admission, CallError, Deadline, Node};
use crate::scripts::ScriptCall;

/// How often the masters that missed a release are tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// Bound on one retried release's wait for its answer.
const RETRY_TIMEOUT: Duration = Duration::from_secs(1);
/// Releases kept for retrying at most; past it the oldest are dropped (their keys expire).
pub const MAX_PENDING: usize = 100_000;

/// One release a master still has to answer.
struct Pending {
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    /// Past this, every key the release could delete has expired: nothing left to do.
    give_up_at: Instant,
}

/// The releases waiting to be sent again, and the task that sends them.
pub(crate) struct ReleaseRetries {
    pending: Mutex<VecDeque<Pending>>,
    /// Releases dropped because `MAX_PENDING` were already waiting (warned about once per
    /// thousand).
    dropped: AtomicU64,
    /// How long a key of a lease can live at the most (the longest shadow TTL).
    key_lifetime: Duration,
    /// Wakes the retry task when the first release is queued.
    queued: Arc<Notify>,
    /// Wakes `wait_until_settled` after every round.
    emptied: Notify,
    me: Weak<ReleaseRetries>,
    running: Mutex<bool>,
}

// === impl ReleaseRetries ===

impl ReleaseRetries {
    /// `key_lifetime`: the longest any key of a lease can live (the fleet's quarantine, which
    /// bounds the shadow TTL and the max TTL).
    pub(crate) fn new(key_lifetime: Duration) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            pending: Mutex::new(VecDeque::new()),
            dropped: AtomicU64::new(0),
            key_lifetime,
            queued: Arc::new(Notify::new()),
            emptied: Notify::new(),
            me: me.clone(),
            running: Mutex::new(false),
        })
    }

    /// Whether a release that ended with `error` may not have reached the master.
    fn missed(error: &CallError) -> bool {
        matches!(
            error,
            CallError::Down | CallError::Connection(_) | CallError::Timeout
        )
    }

    /// Queues `call` for `node` again when `result` says the master may have missed it.
    pub(crate) fn push_if_missed<T>(
        &self,
        node: &Arc<Node>,
        call: Arc<ScriptCall>,
        result: &Result<T, CallError>,
    ) {
        if result.as_ref().is_err_and(Self::missed) {
            self.push(Arc::clone(node), call);
        }
    }

    /// Queues `call` for `node` to be sent again until it answers.
    pub(crate) fn push(&self, node: Arc<Node>, call: Arc<ScriptCall>) {
        let give_up_at = Instant::now() + self.key_lifetime;
        {
            let mut pending = lock(&self.pending);
            if pending.len() >= MAX_PENDING {
                pending.pop_front();
                let dropped = self.dropped.fetch_add(1, Ordering::Relaxed);
                if dropped.is_multiple_of(1000) {
                    tracing::warn!(
                        pending = pending.len(),
                        dropped = dropped + 1,
                        "too many releases waiting for their masters; dropping the oldest"
                    );
                }
            }
            pending.push_back(Pending {
                node,
                call,
                give_up_at,
            });
        }
        self.start();
        self.queued.notify_one();
    }

    /// Releases still waiting for their masters.
    pub(crate) fn len(&self) -> usize {
        lock(&self.pending).len()
    }

    /// Waits until no release waits for a master it could reach now: releases to masters
    /// without a connection cannot make progress meanwhile (they are still sent later).
    pub(crate) async fn wait_until_settled(&self) {
        loop {
            let round_done = self.emptied.notified();
            let reachable = |p: &Pending| p.node.wire().is_connected();
            if !lock(&self.pending).iter().any(reachable) {
                return;
            }
            let _ = tokio::time::timeout(RETRY_INTERVAL, round_done).await;
        }
    }

    /// Starts the retry task unless it runs (it ends with the engine).
    fn start(&self) {
        let mut running = lock(&self.running);
        if *running || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        *running = true;
        tokio::spawn(retry_forever(self.me.clone()));
    }

    /// Sends every pending release whose master has a connection; keeps those it missed again.
    async fn round(&self) {
        let now = Instant::now();
        let due: Vec<Pending> = {
            let mut pending = lock(&self.pending);
            pending.retain(|p| p.give_up_at > now);
            let (due, later): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|p| p.node.wire().is_connected());
            *pending = later.into();
            due
        };
        let sends = due.into_iter().map(|p| async move {
            let deadline = Deadline::After(RETRY_TIMEOUT);
            let result = p.node.eval::<i64>(&p.call, &deadline, Admission::Always);
            match result.await {
                Err(error) if Self::missed(&error) => Some(p),
                _ => None,
            }
        });
        let missed: Vec<Pending> = futures_util::future::join_all(sends)
            .await
            .into_iter()
            .flatten()
            .collect();
        lock(&self.pending).extend(missed);
        self.emptied.notify_waiters();
    }
}

/// Retries every `RETRY_INTERVAL` while releases are pending; sleeps until one is queued.
async fn retry_forever(retries: Weak<ReleaseRetries>) {
    loop {
        let Some(live) = retries.upgrade() else {
            return;
        };
        if live.len() == 0 {
            let queued = Arc::clone(&live.queued);
            drop(live);
            // The engine (and its retries) may go while this waits: look again now and then.
            let _ = tokio::time::timeout(Duration::from_secs(5), queued.notified()).await;
            continue;
        }
        live.round().await;
        drop(live);
        tokio::time::sleep(RETRY_INTERVAL).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section only moves entries: a poisoned list is still consistent.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

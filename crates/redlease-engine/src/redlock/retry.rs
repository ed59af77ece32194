//! Releases a master did not answer with a result: sent again until it does, or until every
//! key the lease could have left there has expired.
//!
//! A release that finds a master down, reconnecting or too slow to answer in time, or that the
//! master answers with an error reply (`-LOADING` while it replays its dump, `-BUSY` while a
//! script runs too long, `-READONLY`, ...), would otherwise leave the lease's key there until
//! its TTL ran out — up to the shadow TTL for a degraded lease, and on a majority when the
//! release met a reset connection. Sending a release again is harmless: it deletes the key
//! only while it holds this very lease. The answers a release gets here count towards its
//! quorum ([`super::release::Release`]): nobody needs to send the whole release again.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::release::ReleaseTally;
use crate::fleet::{Admission, Deadline, Node};
use crate::scripts::ScriptCall;

/// How often the masters that owe a release its result are tried again.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// Bound on one retried release's wait for its answer.
const RETRY_TIMEOUT: Duration = Duration::from_secs(1);
/// Releases kept for retrying at most; past it the oldest are dropped (their keys expire).
pub(crate) const MAX_PENDING: usize = 100_000;
/// Retried releases in flight at once, over every master.
const RETRY_CONCURRENCY: usize = 1024;

/// One release a master still has to answer with a result.
struct Pending {
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    /// Past this, every key the release could delete has expired: nothing left to do.
    give_up_at: Instant,
    /// Where the master's answer counts, for a release someone follows.
    tally: Option<Arc<ReleaseTally>>,
}

/// The releases still owed a result: those waiting for the next round, and how many the round
/// under way is sending (taken out of `waiting`, the ones that get no result are put back).
#[derive(Default)]
struct Queue {
    waiting: VecDeque<Pending>,
    sending: usize,
}

/// The releases waiting to be sent again, and the task that sends them.
pub(crate) struct ReleaseRetries {
    pending: Mutex<Queue>,
    /// Releases dropped because `MAX_PENDING` were already waiting (warned about once per
    /// thousand).
    dropped: AtomicU64,
    /// How long a key of a lease can live at the most (the longest shadow TTL).
    key_lifetime: Duration,
    /// Rounds made so far.
    rounds: AtomicU64,
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
            pending: Mutex::new(Queue::default()),
            dropped: AtomicU64::new(0),
            key_lifetime,
            rounds: AtomicU64::new(0),
            queued: Arc::new(Notify::new()),
            emptied: Notify::new(),
            me: me.clone(),
            running: Mutex::new(false),
        })
    }

    /// How long after its first send a release is given up: every key it could delete has
    /// expired by then.
    pub(crate) fn key_lifetime(&self) -> Duration {
        self.key_lifetime
    }

    /// Queues `call` for `node` to be sent again until it answers with a result (told to
    /// `tally`, when someone follows the release).
    pub(crate) fn push(
        &self,
        node: Arc<Node>,
        call: Arc<ScriptCall>,
        tally: Option<Arc<ReleaseTally>>,
    ) {
        let give_up_at = Instant::now() + self.key_lifetime;
        {
            let pending = &mut lock(&self.pending).waiting;
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
                tally,
            });
        }
        self.start();
        self.queued.notify_one();
    }

    /// Releases still waiting for their masters' results, those being sent included.
    pub(crate) fn len(&self) -> usize {
        let queue = lock(&self.pending);
        queue.waiting.len() + queue.sending
    }

    /// Waits until no release is being sent or waits for a master it could reach now:
    /// releases to masters without a connection cannot make progress meanwhile (they are still
    /// sent later). A connected master that keeps answering with an error reply keeps this
    /// waiting (looking again after every round, at least every `RETRY_INTERVAL`) until it
    /// answers or the release gives up: callers bound the wait.
    pub(crate) async fn wait_until_settled(&self) {
        loop {
            let round_done = self.emptied.notified();
            if self.settled() {
                return;
            }
            let _ = tokio::time::timeout(RETRY_INTERVAL, round_done).await;
        }
    }

    /// No release is being sent, and none waits for a master with a connection.
    fn settled(&self) -> bool {
        let queue = lock(&self.pending);
        let reachable = |p: &Pending| p.node.wire().is_connected();
        queue.sending == 0 && !queue.waiting.iter().any(reachable)
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

    /// Sends every pending release whose master has a connection; keeps those that got no
    /// result again, and tells every release still waiting that the round went by.
    async fn round(&self) {
        let round = self.rounds.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let due: Vec<Pending> = {
            let mut queue = lock(&self.pending);
            queue.waiting.retain(|p| p.give_up_at > now);
            let (due, later): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut queue.waiting)
                .into_iter()
                .partition(|p| p.node.wire().is_connected());
            queue.waiting = later.into();
            queue.sending = due.len();
            due
        };
        // At most `RETRY_CONCURRENCY` in flight: a master back after a spell down may owe tens
        // of thousands, and sending them all from one poll would hold the runtime's thread
        // (the sidecar's only one) for as long as that takes.
        let sent = futures_util::stream::iter(due.into_iter().map(send))
            .buffer_unordered(RETRY_CONCURRENCY);
        let unanswered: Vec<Pending> = sent.filter_map(std::future::ready).collect().await;
        {
            let mut queue = lock(&self.pending);
            queue.waiting.extend(unanswered);
            queue.sending = 0;
            let followed = queue.waiting.iter().filter_map(|p| p.tally.as_ref());
            followed.for_each(|tally| tally.round_passed(round));
        }
        self.emptied.notify_waiters();
    }
}

/// Sends `pending` again; `Some(pending)` when the master did not answer with a result.
async fn send(pending: Pending) -> Option<Pending> {
    let deadline = Deadline::After(RETRY_TIMEOUT);
    let result = pending
        .node
        .eval::<i64>(&pending.call, &deadline, Admission::Always)
        .await;
    let Ok(deleted) = result else {
        return Some(pending);
    };
    if let Some(tally) = &pending.tally {
        let node = &pending.node;
        tally.answered(node.index(), node.counts_in_quorum(), deleted > 0);
    }
    None
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

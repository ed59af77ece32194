//! Wake-ups for blocking acquisitions: a first-come first-served queue of waiters per
//! resource in this process, and the `released:{resource}` messages every master publishes
//! when a lease is deleted. Only the head of a queue retries; a release message wakes it at once.
//! The retry loop itself is the engine's ([`crate::Redlock::acquire_with_wait`]).
//!
//! A resource's channel is subscribed to only while it has waiters here: an uncontended release
//! then publishes to nobody, and no process wakes for it (a pattern subscription to every
//! release would wake every process for every release).
//!
//! The same connections listen, always, to `<prefix>revocations`, where force releases publish
//! the lease ids they revoke (rare): [`Wakeups::revocations`] hands them to the lease manager
//! or `lock run`, which tell the holder and acknowledge.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use fred::prelude::{ClientLike, EventInterface, PubsubInterface};
use futures_util::future::{BoxFuture, Shared};
use futures_util::FutureExt;
use tokio::sync::futures::Notified;
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use crate::fleet::Fleet;
use crate::{Error, LeaseId};

/// How long a new queue waits for its subscriptions to be confirmed before its first retry
/// (a master that has not confirmed by then may miss that release; the fallback timer covers it).
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_millis(250);
/// Revocations kept for a listener that is behind.
const REVOCATION_BUFFER: usize = 256;

/// The waiters of one resource, and its watchers (an election's observers, which hear its
/// messages but never retry anything).
struct Queue {
    /// Fair (FIFO) mutex: whoever holds it is the one waiter allowed to retry.
    turn: tokio::sync::Mutex<()>,
    /// Signalled on every release message for the resource.
    released: Notify,
    /// Messages heard for the resource so far: a watcher that compares it before and after
    /// its read misses none.
    messages: AtomicU64,
    /// Waiters (not watchers) in the queue: newcomers queue behind them.
    waiters: AtomicUsize,
    /// Completes once every master answered the subscription to the resource's channel:
    /// `true` when all of them confirmed it.
    subscribed: Shared<BoxFuture<'static, bool>>,
}

/// The release listener and the queues.
pub struct Wakeups {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    /// Subscriber connections, one per master (kept alive here).
    clients: Vec<fred::clients::Client>,
    /// `<prefix>released:`
    channel_prefix: String,
    /// `<prefix>revocations`
    revocations_channel: String,
    /// The lease ids force releases revoked, as each master announces them (so once per master).
    revocations: broadcast::Sender<LeaseId>,
    /// Completes once every master answered the first subscription to the revocations channel:
    /// `true` when all of them confirmed it.
    revocations_subscribed: OnceLock<Shared<BoxFuture<'static, bool>>>,
}

/// A place in a resource's queue; the queue (and its subscription) is dropped when its last
/// waiter leaves (the map and the waiters hold the only references to a queue).
pub(crate) struct Waiting {
    hub: Arc<Wakeups>,
    resource: String,
    queue: Arc<Queue>,
    /// A waiter in the queue, rather than a watcher.
    waiter: bool,
}

// === impl Wakeups ===

impl Wakeups {
    /// Opens one subscriber connection per master through `fleet` (which closes them on
    /// quit). Channels are subscribed while they have waiters, and again after each reconnect.
    /// A master that is down misses releases until it comes back; the waiters' timers still
    /// retry meanwhile. Hand the result to [`crate::Redlock::with_wakeups`].
    pub fn connect(fleet: &Fleet) -> Result<Arc<Self>, Error> {
        let clients = fleet.open_subscribers()?;
        let hub = Arc::new(Self {
            queues: Mutex::new(HashMap::new()),
            clients,
            channel_prefix: format!("{}released:", fleet.keyspace().prefix()),
            revocations_channel: fleet.keyspace().revocations_channel(),
            revocations: broadcast::channel(REVOCATION_BUFFER).0,
            revocations_subscribed: OnceLock::new(),
        });
        for client in &hub.clients {
            listen(client, Arc::downgrade(&hub));
            client.connect();
        }
        let channel = hub.revocations_channel.clone();
        let subscribed = hub.send_to_each(move |client| {
            let channel = channel.clone();
            async move { subscribe(&client, vec![channel]).await }
        });
        let subscribed = subscribed.shared();
        // Set once, here, before anyone can read it.
        let _ = hub.revocations_subscribed.set(subscribed.clone());
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(subscribed);
        }
        Ok(hub)
    }

    /// Waits (at most `timeout`) until every master confirmed the subscription to the
    /// revocations channel; `false` when one has not by then. A holder should not start acting
    /// on leases before: a revocation published earlier would reach it only at its next
    /// renewal.
    pub async fn listening_for_revocations(&self, timeout: Duration) -> bool {
        let Some(subscribed) = self.revocations_subscribed.get() else {
            return false;
        };
        matches!(
            tokio::time::timeout(timeout, subscribed.clone()).await,
            Ok(true)
        )
    }

    /// The lease ids force releases revoke from now on, one message per master that announced
    /// it. A receiver that lags misses some: the holder then learns at its next renewal.
    pub fn revocations(&self) -> broadcast::Receiver<LeaseId> {
        self.revocations.subscribe()
    }

    /// Joins the queue of `resource`, creating it (and subscribing to its channel) if needed.
    pub(crate) fn join(self: &Arc<Self>, resource: &str) -> Waiting {
        self.enter(resource, true)
    }

    /// Listens to the messages of `resource` (subscribing to its channel if nobody here does
    /// yet), without queueing: the waiters of `resource` do not count a watcher.
    pub(crate) fn watch(self: &Arc<Self>, resource: &str) -> Waiting {
        self.enter(resource, false)
    }

    fn enter(self: &Arc<Self>, resource: &str, waiter: bool) -> Waiting {
        let mut queues = self.queues();
        let queue = match queues.get(resource) {
            Some(queue) => Arc::clone(queue),
            None => {
                let channel = self.channel(resource);
                let subscribed = self.send_to_each(move |client| {
                    let channel = channel.clone();
                    async move { subscribe(&client, vec![channel]).await }
                });
                let queue = Arc::new(Queue {
                    turn: tokio::sync::Mutex::new(()),
                    released: Notify::new(),
                    messages: AtomicU64::new(0),
                    waiters: AtomicUsize::new(0),
                    subscribed: subscribed.shared(),
                });
                queues.insert(resource.to_string(), Arc::clone(&queue));
                queue
            }
        };
        if waiter {
            queue.waiters.fetch_add(1, Ordering::AcqRel);
        }
        Waiting {
            hub: Arc::clone(self),
            resource: resource.to_string(),
            queue,
            waiter,
        }
    }

    /// Whether this process has waiters queued on `resource` (newcomers then queue behind them).
    pub fn has_waiters(&self, resource: &str) -> bool {
        let queues = self.queues();
        let queue = queues.get(resource);
        queue.is_some_and(|queue| queue.waiters.load(Ordering::Acquire) > 0)
    }

    /// Wakes the head waiter of `resource`, and its watchers.
    pub fn wake(&self, resource: &str) {
        if let Some(queue) = self.queues().get(resource) {
            queue.messages.fetch_add(1, Ordering::AcqRel);
            queue.released.notify_waiters();
        }
    }

    fn channel(&self, resource: &str) -> String {
        format!("{}{resource}", self.channel_prefix)
    }

    /// Starts `command` on every subscriber connection and returns the wait for their answers.
    /// Each command is enqueued on its connection before this returns, so commands sent while
    /// the queue map is locked keep their order (a subscribe never overtakes an unsubscribe).
    /// `true` once every command answered `true`.
    fn send_to_each<F, Fut>(&self, command: F) -> BoxFuture<'static, bool>
    where
        F: Fn(fred::clients::Client) -> Fut,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let calls = self.clients.iter().map(|client| command(client.clone()));
        sent_now(calls)
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<String, Arc<Queue>>> {
        // Inserts and removes only: a poisoned map is still consistent.
        self.queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

// === impl Waiting ===

impl Waiting {
    /// Waits (until `deadline`) to be the head of the queue: the one waiter of this process
    /// allowed to retry, until the returned guard is dropped. `None` at the deadline.
    pub(crate) async fn take_turn(
        &self,
        deadline: Instant,
    ) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        tokio::time::timeout_at(deadline, self.queue.turn.lock())
            .await
            .ok()
    }

    /// Whether every master confirmed the subscription to the resource's channel, waiting for
    /// that at most `SUBSCRIBE_TIMEOUT` (and not past `deadline`). Unconfirmed, a release may
    /// publish to nobody here.
    pub(crate) async fn listening(&self, deadline: Instant) -> bool {
        let confirm_by = deadline.min(Instant::now() + SUBSCRIBE_TIMEOUT);
        let subscribed = self.queue.subscribed.clone();
        matches!(
            tokio::time::timeout_at(confirm_by, subscribed).await,
            Ok(true)
        )
    }

    /// Completes on the next release message for the resource; `enable` it before the attempt
    /// it should follow, so a release during that attempt is not missed.
    pub(crate) fn released(&self) -> Notified<'_> {
        self.queue.released.notified()
    }

    /// Messages heard for the resource so far (each bumps it before waking anyone).
    pub(crate) fn messages(&self) -> u64 {
        self.queue.messages.load(Ordering::Acquire)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut queues = self.hub.queues();
        if self.waiter {
            self.queue.waiters.fetch_sub(1, Ordering::AcqRel);
        }
        // Two references left: the map's and ours. Nobody else waits on this resource.
        if Arc::strong_count(&self.queue) == 2 {
            queues.remove(&self.resource);
            let channel = self.hub.channel(&self.resource);
            let unsubscribed = self.hub.send_to_each(move |client| {
                let channel = channel.clone();
                async move { client.unsubscribe(channel).await.is_ok() }
            });
            // Already enqueued; the answers only need reading, where a runtime still runs.
            if tokio::runtime::Handle::try_current().is_ok() {
                tokio::spawn(unsubscribed);
            }
        }
    }
}

/// Starts every call of `calls` now (each enqueues its command on its first poll) and returns
/// the wait for their answers: `true` once all answered `true`.
fn sent_now<Fut>(calls: impl Iterator<Item = Fut>) -> BoxFuture<'static, bool>
where
    Fut: Future<Output = bool> + Send + 'static,
{
    let mut pending: Vec<BoxFuture<'static, bool>> = Vec::new();
    let mut all_ok = true;
    for call in calls {
        let mut call = call.boxed();
        match (&mut call).now_or_never() {
            Some(ok) => all_ok &= ok,
            None => pending.push(call),
        }
    }
    let answers = futures_util::future::join_all(pending);
    answers
        .map(move |oks| all_ok && oks.into_iter().all(|ok| ok))
        .boxed()
}

async fn subscribe(client: &fred::clients::Client, channels: Vec<String>) -> bool {
    match client.subscribe(channels).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, "cannot subscribe to release messages");
            false
        }
    }
}

/// Routes release messages to the queues and subscribes again after every (re)connection to
/// the channels that have waiters.
fn listen(client: &fred::clients::Client, hub: Weak<Wakeups>) {
    let subscriber = client.clone();
    let on_reconnect = hub.clone();
    client.on_reconnect(move |_server| {
        let subscriber = subscriber.clone();
        // Sent while the queue map is locked, like every subscribe and unsubscribe, so a
        // queue removed meanwhile is unsubscribed after this, not before.
        let resubscribed = on_reconnect.upgrade().map(|hub| {
            let queues = hub.queues();
            let mut channels: Vec<String> = queues.keys().map(|r| hub.channel(r)).collect();
            channels.push(hub.revocations_channel.clone());
            let call = async move { subscribe(&subscriber, channels).await };
            sent_now(std::iter::once(call))
        });
        async move {
            if let Some(resubscribed) = resubscribed {
                resubscribed.await;
            }
            Ok(())
        }
    });
    client.on_message(move |message| {
        if let Some(hub) = hub.upgrade() {
            if let Some(resource) = message.channel.strip_prefix(hub.channel_prefix.as_str()) {
                hub.wake(resource);
            } else if message.channel == hub.revocations_channel {
                let revoked = message.value.as_string().and_then(|id| id.parse().ok());
                if let Some(id) = revoked {
                    // No receiver: nobody here holds leases to tell.
                    let _ = hub.revocations.send(id);
                }
            }
        }
        async { Ok(()) }
    });
}

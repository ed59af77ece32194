//! Wake-ups for blocking acquisitions: the `released:{resource}` messages every master
//! publishes when a lease is deleted, and this sidecar's first-come first-served queue of
//! waiters per resource. Only the head of a queue retries; a release message wakes it at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use fred::prelude::{ClientLike, EventInterface, PubsubInterface};
use tokio::sync::Notify;

use crate::fleet::{build_client, FleetOptions};
use crate::redlock::{retry_delay, EngineOptions};
use crate::Error;

/// How long the head waiter sleeps when no release message comes: until just past the
/// holder's expiry when a master said when that is (an expiry publishes nothing), otherwise
/// the engine's jittered retry delay (`jitter` in 0..1).
pub fn fallback_delay(
    options: &EngineOptions,
    holder_remaining: Option<Duration>,
    jitter: f64,
) -> Duration {
    match holder_remaining {
        Some(left) => left + Duration::from_millis(1),
        None => retry_delay(options, None, jitter),
    }
}

/// The waiters of one resource.
pub struct Queue {
    /// Fair (FIFO) mutex: whoever holds it is the one waiter allowed to retry.
    pub turn: tokio::sync::Mutex<()>,
    /// Signalled on every release message for the resource.
    pub released: Notify,
}

/// The release listener and the queues.
pub struct Wakeups {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    /// Subscriber connections, one per master (kept alive here).
    clients: Vec<fred::clients::Client>,
}

/// A place in a resource's queue; the queue is forgotten when its last waiter leaves.
pub struct Waiting {
    hub: Arc<Wakeups>,
    resource: String,
    pub queue: Arc<Queue>,
}

// === impl Wakeups ===

impl Wakeups {
    /// Subscribes to `<prefix>released:*` on every master (again after each reconnect).
    /// A master that is down is subscribed when it comes back; until then the waiters' timers
    /// still retry.
    pub fn connect(urls: &[String], options: &FleetOptions) -> Result<Arc<Self>, Error> {
        let clients = urls
            .iter()
            .map(|url| build_client(url, options))
            .collect::<Result<Vec<_>, _>>()?;
        let hub = Arc::new(Self {
            queues: Mutex::new(HashMap::new()),
            clients,
        });
        let prefix = format!("{}released:", options.keyspace.prefix());
        for client in &hub.clients {
            listen(client, &prefix, Arc::downgrade(&hub));
            client.connect();
        }
        Ok(hub)
    }

    /// Joins the queue of `resource`.
    pub fn wait(self: &Arc<Self>, resource: &str) -> Waiting {
        let queue = Arc::clone(
            self.queues()
                .entry(resource.to_string())
                .or_insert_with(|| {
                    Arc::new(Queue {
                        turn: tokio::sync::Mutex::new(()),
                        released: Notify::new(),
                    })
                }),
        );
        Waiting {
            hub: Arc::clone(self),
            resource: resource.to_string(),
            queue,
        }
    }

    /// Whether this sidecar has waiters queued on `resource` (newcomers then queue behind them).
    pub fn has_waiters(&self, resource: &str) -> bool {
        self.queues().contains_key(resource)
    }

    /// Wakes the head waiter of `resource`.
    pub fn wake(&self, resource: &str) {
        if let Some(queue) = self.queues().get(resource) {
            queue.released.notify_waiters();
        }
    }

    /// Closes the subscriber connections.
    pub async fn quit(&self) {
        let quits = self.clients.iter().map(|client| client.quit());
        futures_util::future::join_all(quits).await;
    }

    fn queues(&self) -> MutexGuard<'_, HashMap<String, Arc<Queue>>> {
        // Inserts and removes only: a poisoned map is still consistent.
        self.queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut queues = self.hub.queues();
        // Two references left: the map's and ours. Nobody else waits on this resource.
        if Arc::strong_count(&self.queue) == 2 {
            queues.remove(&self.resource);
        }
    }
}

/// Routes release messages to the queues and re-subscribes after every (re)connection.
fn listen(client: &fred::clients::Client, prefix: &str, hub: Weak<Wakeups>) {
    let pattern = format!("{prefix}*");
    let subscriber = client.clone();
    client.on_reconnect(move |_server| {
        let (subscriber, pattern) = (subscriber.clone(), pattern.clone());
        async move {
            if let Err(error) = subscriber.psubscribe(pattern).await {
                tracing::warn!(%error, "cannot subscribe to release messages");
            }
            Ok(())
        }
    });
    let prefix = prefix.to_string();
    client.on_message(move |message| {
        if let (Some(hub), Some(resource)) = (hub.upgrade(), message.channel.strip_prefix(&*prefix))
        {
            hub.wake(resource);
        }
        async { Ok(()) }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a message, the head waiter retries just after the holder's expiry, or after the
    /// jittered delay when no master said.
    #[test]
    fn fallback_waits_for_the_holders_expiry() {
        let options = EngineOptions::default();
        let left = Some(Duration::from_millis(700));
        assert_eq!(
            fallback_delay(&options, left, 0.5),
            Duration::from_millis(701)
        );
        assert_eq!(
            fallback_delay(&options, None, 0.0),
            Duration::from_millis(10)
        );
    }
}

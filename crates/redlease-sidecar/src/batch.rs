//! Gathering the renewals that fall due together into one `extend.lua` call per master, as
//! Redisson's watchdog batches its locks: thousands of held leases cost a few script calls
//! per tick instead of one fan-out each.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::redlock::{ExtendOutcome, Extension, Redlock};
use crate::{Error, LeaseId};

/// Most leases extended by one script call.
pub(crate) const MAX_BATCH: usize = 100;
/// A renewal waits at most 1/`WINDOW_DIVISOR` of its TTL for others to join its batch...
pub(crate) const WINDOW_DIVISOR: u32 = 20;
/// ...and never more than this. Renewals run at half the TTL, so the wait takes at most a
/// tenth of the margin left before expiry.
pub(crate) const MAX_WINDOW: Duration = Duration::from_millis(50);

/// How long a renewal of a lease with `ttl` may wait for its batch.
pub(crate) fn window(ttl: Duration) -> Duration {
    (ttl / WINDOW_DIVISOR).min(MAX_WINDOW)
}

/// The batching front of an engine's `extend`.
pub(crate) struct Renewals {
    engine: Arc<Redlock>,
    queue: mpsc::UnboundedSender<Due>,
}

/// A renewal waiting for its batch.
struct Due {
    /// The latest instant its batch may be sent.
    send_by: Instant,
    extension: Extension,
    answer: oneshot::Sender<Result<ExtendOutcome, Error>>,
}

// === impl Renewals ===

impl Renewals {
    /// Starts the gathering task; it ends when the last handle is dropped.
    pub(crate) fn start(engine: Arc<Redlock>) -> Self {
        let (queue, due) = mpsc::unbounded_channel();
        tokio::spawn(gather(Arc::clone(&engine), due));
        Self { engine, queue }
    }

    pub(crate) fn engine(&self) -> &Arc<Redlock> {
        &self.engine
    }

    /// Extends lease `id` on `resource` to `ttl`, together with the other renewals due within
    /// its [`window`] (shortened to a quarter of the validity left before `valid_until`, so a
    /// retry near expiry is not held back); the outcome is the one `Redlock::extend` would
    /// give.
    pub(crate) async fn extend(
        &self,
        resource: &str,
        id: LeaseId,
        ttl: Duration,
        valid_until: Instant,
    ) -> Result<ExtendOutcome, Error> {
        let (answer, outcome) = oneshot::channel();
        let extension = Extension {
            resource: resource.to_string(),
            id,
            ttl,
        };
        let now = Instant::now();
        let send_by = now + window(ttl).min(valid_until.saturating_duration_since(now) / 4);
        let due = Due {
            send_by,
            extension,
            answer,
        };
        if self.queue.send(due).is_ok() {
            if let Ok(outcome) = outcome.await {
                return outcome;
            }
        }
        // The gathering task is gone (the runtime is shutting down): extend alone.
        self.engine.extend(resource, id, ttl).await
    }
}

/// Takes the first renewal due and lets others join until the earliest `send_by` of the batch
/// (or `MAX_BATCH`), then sends the batch in its own task so the next one gathers meanwhile.
async fn gather(engine: Arc<Redlock>, mut due: mpsc::UnboundedReceiver<Due>) {
    while let Some(first) = due.recv().await {
        let deadline = tokio::time::sleep_until(first.send_by);
        tokio::pin!(deadline);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            tokio::select! {
                next = due.recv() => match next {
                    Some(renewal) => {
                        if renewal.send_by < deadline.deadline() {
                            deadline.as_mut().reset(renewal.send_by);
                        }
                        batch.push(renewal);
                    }
                    None => break,
                },
                _ = &mut deadline => break,
            }
        }
        tokio::spawn(send_batch(Arc::clone(&engine), batch));
    }
}

async fn send_batch(engine: Arc<Redlock>, batch: Vec<Due>) {
    let (extensions, answers): (Vec<Extension>, Vec<_>) = batch
        .into_iter()
        .map(|due| (due.extension, due.answer))
        .unzip();
    let outcomes = engine.extend_many(&extensions).await;
    for (answer, outcome) in answers.into_iter().zip(outcomes) {
        // The renewal's caller may have gone (its lease was released meanwhile).
        let _ = answer.send(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewal waits a twentieth of its TTL for company, 50 ms at most.
    #[test]
    fn the_window_scales_with_the_ttl_and_is_capped() {
        assert_eq!(
            window(Duration::from_millis(500)),
            Duration::from_millis(25)
        );
        assert_eq!(window(Duration::from_secs(1)), Duration::from_millis(50));
        assert_eq!(window(Duration::from_secs(30)), MAX_WINDOW);
        assert_eq!(
            window(Duration::from_millis(10)),
            Duration::from_micros(500)
        );
    }
}

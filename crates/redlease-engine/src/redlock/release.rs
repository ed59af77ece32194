//! Release: compare-and-delete on every master, answered once a quorum confirmed it; the
//! masters that did not answer it with a result get it again ([`super::retry`]).

use tokio::time::Instant;

use super::calls::{release_call, release_on};
use super::fanout::fan_out;
use super::{Redlock, ReleaseOutcome};
use crate::keys::validate_resource;
use crate::metrics::METRICS;
use crate::{Error, LeaseId};

// === impl Redlock ===

impl Redlock {
    /// Deletes lease `id` on `resource` everywhere it stands. The release goes to every
    /// master, down or not, and returns once a quorum answered (no majority can hold the lease
    /// any more: [`ReleaseOutcome::confirmed`]), or once every master that is up answered or
    /// timed out. The slower masters' releases are already enqueued on their connections, ahead
    /// of any later write there, and finish in the background ([`Redlock::settle`] waits for
    /// them); a master that did not answer the release with a result (down, reconnecting, timed
    /// out, an error reply such as `-LOADING` or `-BUSY`) is sent it again until it does or
    /// every key the lease could have left there has expired.
    #[tracing::instrument(skip(self), fields(lease = %id))]
    pub async fn release(&self, resource: &str, id: LeaseId) -> Result<ReleaseOutcome, Error> {
        validate_resource(resource)?;
        let keyspace = self.fleet.keyspace();
        let now = Instant::now();
        let timeout = self.node_timeout(self.options.max_ttl, now);
        let (lock, channel) = (keyspace.lock(resource), keyspace.released_channel(resource));
        let call = release_call(&lock, &channel, id);
        let awaited: Vec<bool> = self.fleet.nodes().iter().map(|n| n.is_up()).collect();
        let until = now + timeout;
        let retries = &self.retries;
        let mut replies = fan_out(
            &self.tasks,
            self.fleet.nodes(),
            until,
            |node, deadline, reply| {
                release_on(node, call.clone(), deadline, retries.clone(), reply)
            },
        );
        let quorum = self.fleet.quorum();
        let mut outcome = ReleaseOutcome {
            deleted_on: 0,
            answered: 0,
            quorum,
        };
        let mut waiting = awaited.iter().filter(|up| **up).count();
        while waiting > 0 && !outcome.confirmed() {
            let Some((index, result)) = replies.recv().await else {
                break;
            };
            waiting -= usize::from(awaited[index]);
            // A master that is another's very server answers twice for one.
            let counts = self.fleet.nodes()[index].counts_in_quorum();
            if let (Ok(deleted), true) = (result, counts) {
                outcome.answered += 1;
                outcome.deleted_on += usize::from(deleted > 0);
            }
        }
        METRICS.record_release(now.elapsed());
        Ok(outcome)
    }
}

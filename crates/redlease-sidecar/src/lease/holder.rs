//! A lease held by this very process rather than by an app over HTTP (`lock run` on the
//! masters): the table renews it as any other lease (batching, schedule, retries, shadow
//! escalation), and the holder follows where its validity ends as the renewals move it, hears
//! at once how it ended, and lets it go once it has stopped acting on it.
//!
//! With [`Revocations::ByTheHolder`] a revoked lease stays on the masters (under the force
//! release's tombstones) until the holder lets it go: only then is the revocation acknowledged
//! and the lease's keys released, so nobody takes the resource while the holder still acts.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::{LeaseEvent, LeaseManager, LeaseState, LeaseView, Tracked};
use crate::redlock::Lease;

/// Who acknowledges a force release's revocation of a lease, which lets others take the
/// resource (see `docs/inventory.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocations {
    /// The table, as soon as the lease is marked lost (`revoked`) and its watchers told; its
    /// keys are released at once. The sidecar's: its app hears it on the event stream, and the
    /// fencing token orders what the app still writes.
    AcknowledgedAtOnce,
    /// The holder, once it stopped acting on the lease ([`Following::let_go`]): till
    /// then the lease is marked lost and its keys stay, so nobody takes the resource before.
    /// `lock run`'s, which stops its command first.
    ByTheHolder,
}

/// A lease of this table followed by a holder in this process.
pub struct Following {
    /// The lease as it was granted: id, resource, owner, fencing token, TTL.
    pub lease: Lease,
    manager: Arc<LeaseManager>,
    tracked: Arc<Tracked>,
    /// Subscribed when the following began: no end is missed.
    events: broadcast::Receiver<LeaseEvent>,
}

/// How a lease held in this process was let go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LetGo {
    /// A quorum of masters confirmed its release.
    Released,
    /// Fewer than a quorum confirmed its release so far; it keeps trying (until every key the
    /// lease could have left has expired, or the process exits).
    Releasing,
    /// It had ended before (lost, whatever keys it had released then; or revoked, the
    /// revocation acknowledged and its keys released now).
    Ended(LeaseView),
}

// === impl LeaseManager ===

impl LeaseManager {
    /// Follows the lease `view` shows (as [`LeaseManager::acquire`] granted it); `None` when
    /// this table does not know it.
    pub fn follow(self: &Arc<Self>, view: &LeaseView) -> Option<Following> {
        let id = view.lease_id;
        let tracked = self.find(id)?;
        let events = tracked.subscribe();
        let lease = tracked.record().lease.clone();
        Some(Following {
            lease,
            manager: Arc::clone(self),
            tracked,
            events,
        })
    }
}

// === impl Following ===

impl Following {
    /// Where the lease's validity ends: moved by every renewal and shadow, shortened by a
    /// renewal that reached some masters without a majority (`docs/safety.md`, "Renewals and
    /// validity").
    pub fn valid_until(&self) -> watch::Receiver<Instant> {
        self.tracked.validity()
    }

    /// Resolves once the lease has ended, lost or released: its state and why (`expired`,
    /// `not_ours`, `revoked`, `invalid`; or a release's reason).
    pub async fn ended(&mut self) -> (LeaseState, &'static str) {
        loop {
            {
                let record = self.tracked.record();
                if record.state.is_terminal() {
                    return (record.state, record.reason.unwrap_or("expired"));
                }
            }
            match self.events.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                // The sender lives in `tracked`, which this holds: never closed.
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }

    /// The holder has stopped acting on the lease: releases it (a lease still held, as a
    /// `DELETE` would: once the release's first attempt is over), or acknowledges its
    /// revocation and releases its keys (a lease revoked while [`Revocations::ByTheHolder`]),
    /// or does nothing more (a lease lost otherwise, whose keys were released then).
    pub async fn let_go(self) -> LetGo {
        let id = self.lease.id;
        let (state, reason) = self.tracked.state_and_reason();
        let by_holder = self.manager.policy.revocations == Revocations::ByTheHolder;
        if state == LeaseState::Lost && reason == Some("revoked") && by_holder {
            self.acknowledge_revocation().await;
        } else if !state.is_terminal() {
            if let Some(answer) = self.manager.release(id, "released").await {
                return match answer.state {
                    LeaseState::Released if answer.released => LetGo::Released,
                    LeaseState::Releasing => LetGo::Releasing,
                    // Ended otherwise: its view no longer changes.
                    _ => LetGo::Ended(self.tracked.view()),
                };
            }
        }
        LetGo::Ended(self.tracked.view())
    }

    /// Acknowledges the revocation (every later announcement of it too), then releases the
    /// lease's keys, after any renewal that was in flight.
    async fn acknowledge_revocation(&self) {
        let engine = self.manager.engine();
        let (resource, id) = (&self.lease.resource, self.lease.id);
        self.tracked
            .holder_acknowledged
            .store(true, Ordering::Release);
        let _op = self.tracked.ops.lock().await;
        engine.acknowledge_revocation(resource, id).await;
        if let Err(error) = engine.release(resource, id).await {
            tracing::error!(%error, lease_id = %id, "release of a revoked lease refused");
        }
    }
}

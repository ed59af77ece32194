//! A leader's proclamation (`POST /v1/leases/{id}/proclaim`): a new value written over the
//! election lease's key on every master, the term kept, taken only once a quorum holds it.
//! The campaign itself is an acquisition ([`super::AcquireRequest::campaign`]), and the
//! leader's lease is renewed, shadowed, released (resigned) and reported lost as any lease.

use std::sync::Arc;

use tokio::time::Instant;

use super::{renewal, LeaseManager, LeaseView, RenewError, Tracked};
use crate::keys::validate_value;
use crate::redlock::ProclaimOutcome;
use crate::LeaseId;

// === impl LeaseManager ===

impl LeaseManager {
    /// The leader of lease `id` proclaims `value` (a sign of life). Refused when the value is
    /// invalid, the lease unknown, ended, or no election's; 503 when too few masters took it
    /// (some may hold the new value: the leader read then shows the value a quorum holds, or
    /// `unknown`); lost when a majority of masters no longer carries the lease.
    pub async fn proclaim(&self, id: LeaseId, value: &str) -> Result<LeaseView, RenewError> {
        validate_value(value)?;
        let tracked = self.find(id).ok_or(RenewError::Unknown)?;
        refusal(&tracked)?;
        // After any renewal or shadow in flight, as a renewal is: one write of the lease at a
        // time on each master, and the record's value follows the masters'.
        let _op = tracked.ops.lock().await;
        refusal(&tracked)?;
        let lease = {
            let mut record = tracked.record();
            record.last_seen = Instant::now();
            record.lease.clone()
        };
        let proclaim = self.engine.proclaim(&lease, value);
        let outcome = tokio::select! {
            outcome = proclaim => outcome?,
            // Ended meanwhile: what was sent touches only a key that is still this lease's,
            // and its release follows on every connection.
            _ = tracked.ending.ended() => return Err(gone(&tracked)),
        };
        match outcome {
            ProclaimOutcome::Proclaimed => {
                let mut record = tracked.record();
                let now = Instant::now();
                if record.state_at(now).is_ended() {
                    return Err(RenewError::Gone(Box::new(record.view(now))));
                }
                record.election = Some(value.to_string());
                Ok(record.view(now))
            }
            ProclaimOutcome::NotOurs(_) => {
                renewal::lose(&self.engine, &tracked, "not_ours");
                Err(gone(&tracked))
            }
            ProclaimOutcome::NoQuorum(_) => Err(RenewError::NoQuorum),
        }
    }
}

/// Why the lease of `tracked` cannot proclaim, if it cannot: ended (410, with the lease as it
/// is), or no election's.
fn refusal(tracked: &Arc<Tracked>) -> Result<(), RenewError> {
    let record = tracked.record();
    let now = Instant::now();
    if record.state_at(now).is_ended() {
        return Err(RenewError::Gone(Box::new(record.view(now))));
    }
    match record.election {
        Some(_) => Ok(()),
        None => Err(RenewError::NotACampaign),
    }
}

fn gone(tracked: &Tracked) -> RenewError {
    RenewError::Gone(Box::new(tracked.view()))
}

//! `lock run` on the masters: keeps the lease renewed while the command runs, publishes its
//! validity after every renewal, and says when it is lost. Every extension's outcome is
//! applied to the lease (a failed one may have shortened it on the masters it reached); the
//! lease is lost when a majority says it is not ours, when an operator's force release revokes
//! it (heard on the masters' revocations channel at once, or found at the next renewal), or
//! when its validity runs out before a renewal succeeds.

use std::fmt;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::redlock::{ExtendOutcome, Lease, Redlock};
use crate::LeaseId;

/// After a renewal that failed, the next try comes within this (sooner near the end of the
/// validity).
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(100);

/// How the lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// A majority of masters hold it no more (expired there, or taken over).
    NotOurs,
    /// An operator's force release revoked it.
    Revoked,
    /// Its validity ran out before a renewal succeeded.
    Expired,
    /// The engine refused to renew it as invalid input.
    Invalid,
}

/// Renews `lease` until it is lost; returns how. Never returns while the lease is valid,
/// unless a force release revoked it. `valid_until` gets the lease's validity after every
/// extension's outcome.
pub async fn keep(
    engine: &Redlock,
    lease: &mut Lease,
    valid_until: &watch::Sender<Instant>,
) -> Loss {
    let revoked = heard_revoked(engine.revocations(), lease.id);
    tokio::select! {
        loss = renew_until_lost(engine, lease, valid_until) => loss,
        () = revoked => Loss::Revoked,
    }
}

/// Completes when a master announces that a force release revoked lease `id`; never without
/// announcements to listen to.
async fn heard_revoked(revocations: Option<broadcast::Receiver<LeaseId>>, id: LeaseId) {
    let Some(mut revocations) = revocations else {
        return std::future::pending().await;
    };
    loop {
        match revocations.recv().await {
            Ok(revoked) if revoked == id => return,
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
        }
    }
}

async fn renew_until_lost(
    engine: &Redlock,
    lease: &mut Lease,
    valid_until: &watch::Sender<Instant>,
) -> Loss {
    let mut failed = false;
    loop {
        let now = Instant::now();
        if !lease.is_valid(now) {
            return Loss::Expired;
        }
        let left = lease.remaining_validity(now);
        let delay = next_renewal(lease.ttl, left, failed, rand::random());
        tokio::time::sleep_until(now + delay).await;
        let extend = engine.extend(&lease.resource, lease.id, lease.ttl);
        let outcome = tokio::select! {
            outcome = extend => outcome,
            // Writes still in flight can only touch keys that are ours, and the release is
            // sent after them on every connection.
            _ = tokio::time::sleep_until(lease.valid_until) => return Loss::Expired,
        };
        let Ok(outcome) = outcome else {
            return Loss::Invalid;
        };
        let still_valid = lease.apply_extension(&outcome, Instant::now());
        valid_until.send_if_modified(|at| {
            let moved = *at != lease.valid_until;
            *at = lease.valid_until;
            moved
        });
        match outcome {
            ExtendOutcome::Lost(refusal) if refusal.revoked() => return Loss::Revoked,
            ExtendOutcome::Lost(_) => return Loss::NotOurs,
            _ if !still_valid => return Loss::Expired,
            ExtendOutcome::Extended(_) => failed = false,
            ExtendOutcome::NoQuorum(_) => failed = true,
        }
    }
}

/// How long to wait before the next renewal: after a success, 40–50 % of the TTL (`jitter`
/// in 0..1 picks where), and never more than half the validity `left`; after a failure, a
/// jittered retry within `RETRY_AFTER_FAILURE` or a quarter of what is left.
pub fn next_renewal(ttl: Duration, left: Duration, failed: bool, jitter: f64) -> Duration {
    let jitter = jitter.clamp(0.0, 1.0);
    if failed {
        return RETRY_AFTER_FAILURE
            .min(left / 4)
            .mul_f64(0.5 + 0.5 * jitter);
    }
    (ttl.min(left) / 2).mul_f64(0.8 + 0.2 * jitter)
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotOurs => "a majority of masters no longer hold it",
            Self::Revoked => "a force release revoked it",
            Self::Expired => "its validity ran out before a renewal succeeded",
            Self::Invalid => "the engine refused to renew it",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Renewals come before half the TTL, jittered, and sooner when little validity is left.
    #[test]
    fn renewals_come_before_half_the_ttl() {
        let ttl = 10_000 * MS;
        assert_eq!(next_renewal(ttl, ttl, false, 0.0), 4_000 * MS);
        assert_eq!(next_renewal(ttl, ttl, false, 1.0), 5_000 * MS);
        assert_eq!(next_renewal(ttl, 2_000 * MS, false, 1.0), 1_000 * MS);
    }

    /// After a failure the retry is quick, and quicker still near the end of validity.
    #[test]
    fn failed_renewals_are_retried_soon() {
        let ttl = 10_000 * MS;
        assert_eq!(next_renewal(ttl, 5_000 * MS, true, 1.0), 100 * MS);
        assert_eq!(next_renewal(ttl, 5_000 * MS, true, 0.0), 50 * MS);
        assert_eq!(next_renewal(ttl, 40 * MS, true, 1.0), 10 * MS);
    }
}

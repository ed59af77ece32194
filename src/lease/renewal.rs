//! The task of one lease: renew it on schedule while the app is alive, report it lost the
//! moment its validity runs out, release it when the app goes quiet.

use std::time::Duration;

use tokio::time::Instant;

use super::{escalation, LeasePolicy, LeaseState, LeaseView, Step, Tracked};
use crate::metrics::{self, METRICS};
use crate::redlock::batch::Renewals;
use crate::redlock::{ExtendOutcome, Redlock, Renewal};
use crate::Error;

/// A renewal that found no quorum is retried this often (or sooner, near the end of validity).
const RETRY_NO_QUORUM: Duration = Duration::from_millis(50);

/// Runs until the lease is lost or released.
pub async fn drive(renewals: &Renewals, policy: &LeasePolicy, tracked: &Tracked) {
    loop {
        let step = tracked.record().next_step(Instant::now());
        match step {
            Step::Done => return,
            Step::Wait(until) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = tracked.wake.notified() => {}
                }
            }
            Step::Expire => {
                tracked.finish(LeaseState::Lost, "expired");
            }
            Step::IdleRelease => release(renewals.engine(), tracked, "idle").await,
            Step::Renew => {
                let ttl = tracked.record().lease.ttl;
                if let Err(error) = renew(renewals, policy, tracked, ttl).await {
                    tracing::error!(%error, "renewal refused its own lease");
                    tracked.finish(LeaseState::Lost, "invalid");
                }
            }
        }
    }
}

/// Extends the lease to `ttl`. `Some(view)` when renewed; `None` when lost (the lease is
/// then marked lost) or when no quorum answered (the next try is scheduled).
pub async fn renew(
    renewals: &Renewals,
    policy: &LeasePolicy,
    tracked: &Tracked,
    ttl: Duration,
) -> Result<Option<LeaseView>, Error> {
    let _op = tracked.ops.lock().await;
    let (resource, id, valid_until) = {
        let record = tracked.record();
        if record.state_at(Instant::now()).is_terminal() {
            return Ok(None);
        }
        (
            record.lease.resource.clone(),
            record.lease.id,
            record.lease.valid_until,
        )
    };
    METRICS.renewal_attempts.add(1, &[]);
    let started = Instant::now();
    let outcome = renewals.extend(&resource, id, ttl, valid_until).await?;
    METRICS
        .renewal_latency
        .record(metrics::seconds(started.elapsed()), &[]);
    if !matches!(outcome, ExtendOutcome::Extended(_)) {
        METRICS.renewal_failures.add(1, &[]);
    }
    match outcome {
        ExtendOutcome::Extended(renewal) => {
            Ok(Some(settle(policy, tracked, &renewal, Shadowed::No)))
        }
        ExtendOutcome::Lost(_) => {
            tracked.finish(LeaseState::Lost, "not_ours");
            Ok(None)
        }
        ExtendOutcome::NoQuorum(refusal) => {
            lease_event!(
                warn,
                &tracked.record().lease,
                "renewal failed",
                cause = tracing::field::debug(refusal.cause)
            );
            if escalation::should_escalate(refusal.cause) {
                if let Some(view) = escalate(renewals.engine(), policy, tracked).await? {
                    return Ok(Some(view));
                }
            }
            let mut record = tracked.record();
            let left = record.lease.remaining_validity(Instant::now());
            record.renew_at = Instant::now() + RETRY_NO_QUORUM.min(left / 4);
            Ok(None)
        }
    }
}

/// One try to keep the resource through a quorum of shadows. `Some(view)` when degraded.
async fn escalate(
    engine: &Redlock,
    policy: &LeasePolicy,
    tracked: &Tracked,
) -> Result<Option<LeaseView>, Error> {
    let (resource, id, owner, ttl, left) = {
        let record = tracked.record();
        let lease = &record.lease;
        let left = lease.remaining_validity(Instant::now());
        (
            lease.resource.clone(),
            lease.id,
            lease.owner.clone(),
            lease.ttl,
            left,
        )
    };
    let shadow_ttl = escalation::shadow_ttl(ttl, policy.shadow_multiplier, policy.shadow_cap);
    let timeout = escalation::timeout(left);
    lease_event!(
        warn,
        &tracked.record().lease,
        "renewal escalated to shadows",
        shadow_ttl_ms = shadow_ttl.as_millis() as u64
    );
    match engine
        .reserve_shadow(&resource, id, &owner, shadow_ttl, timeout)
        .await?
    {
        ExtendOutcome::Extended(shadow) => {
            METRICS.shadow_escalations.add(1, &[]);
            Ok(Some(settle(policy, tracked, &shadow, Shadowed::Yes)))
        }
        ExtendOutcome::Lost(_) => {
            tracked.finish(LeaseState::Lost, "not_ours");
            Ok(None)
        }
        ExtendOutcome::NoQuorum(refusal) => {
            tracing::warn!(lease = %id, resource, cause = ?refusal.cause, "shadow escalation without quorum");
            Ok(None)
        }
    }
}

/// Whether the validity being taken over comes from the lock or from the shadow.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shadowed {
    No,
    Yes,
}

/// Takes over a successful renewal or shadow reservation, tells the watchers (`renewed`,
/// `recovered` after a degraded spell, or `degraded`) and schedules the next renewal on the
/// lock's own TTL, so a degraded lease tries to recover at the usual pace.
fn settle(
    policy: &LeasePolicy,
    tracked: &Tracked,
    renewal: &Renewal,
    shadowed: Shadowed,
) -> LeaseView {
    let mut record = tracked.record();
    if record.state.is_terminal() {
        return record.view(Instant::now());
    }
    let was_degraded = record.state == LeaseState::Degraded;
    let event = if shadowed == Shadowed::Yes {
        // The shadow lends its validity; the lease keeps its own TTL, which the next renewal
        // sets back on the lock key.
        record.lease.validity = renewal.validity;
        record.lease.valid_until = renewal.valid_until;
        record.state = LeaseState::Degraded;
        "degraded"
    } else {
        record.lease.apply(renewal);
        record.state = LeaseState::Held;
        if was_degraded {
            METRICS.shadow_recoveries.add(1, &[]);
            "recovered"
        } else {
            "renewed"
        }
    };
    let ttl = record.lease.ttl;
    record.renew_at = policy
        .schedule
        .renew_at(Instant::now(), ttl, rand::random());
    let view = record.view(Instant::now());
    drop(record);
    let _ = tracked.events.send(super::LeaseEvent {
        event,
        lease: view.clone(),
    });
    tracked.wake.notify_one();
    view
}

/// Releases the lease on the fleet (best effort) and marks it released.
pub async fn release(engine: &Redlock, tracked: &Tracked, reason: &'static str) {
    let _op = tracked.ops.lock().await;
    let (resource, id, terminal) = {
        let record = tracked.record();
        let terminal = record.state.is_terminal();
        (record.lease.resource.clone(), record.lease.id, terminal)
    };
    if terminal {
        return;
    }
    if let Err(error) = engine.release(&resource, id).await {
        tracing::error!(%error, lease = %id, "release refused");
    }
    tracked.finish(LeaseState::Released, reason);
}

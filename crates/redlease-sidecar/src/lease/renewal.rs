//! The task of one lease the table renews: renew it on schedule while the app is alive,
//! report it lost the moment its validity runs out, release it when the app goes quiet; the
//! renewals a caller asks for; and the release itself, whose follow-up runs as a task of its
//! own so that a caller who goes away cannot stop it half done.
//!
//! Rules kept here (`docs/safety.md` states them):
//! - after every extension or shadow call that was sent, whatever its outcome, the lease is
//!   valid no longer than `call start + ttl − drift` (a master that ran it may have shortened
//!   the key), see [`crate::redlock::Lease::apply_extension`]; an extension caps the lease so
//!   before it is sent, which holds even when its caller goes away before the outcome;
//! - an outcome is taken only while the lease is still valid: once its validity has passed it
//!   has been reported lost, and nothing brings it back;
//! - shadows are sent only while `now + timeout < valid_until`;
//! - a lease that ends (released, or lost) has its keys released on every master.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{escalation, LeasePolicy, LeaseState, LeaseView, Revocations, Step, Tracked};
use crate::batch::Renewals;
use crate::metrics::{self, METRICS};
use crate::redlock::{ExtendOutcome, Redlock, Release, Renewal};
use crate::Error;

/// A renewal that found no quorum is retried this often (or sooner, near the end of validity).
const RETRY_NO_QUORUM: Duration = Duration::from_millis(50);

/// Runs until the lease is lost or released.
pub(crate) async fn drive(renewals: &Renewals, policy: &LeasePolicy, tracked: &Arc<Tracked>) {
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
            Step::Expire => lose(renewals.engine(), tracked, "expired"),
            Step::IdleRelease => {
                start_release(renewals.engine(), tracked, "idle");
            }
            Step::Renew => {
                let ttl = tracked.record().lease.ttl;
                if let Err(error) = renew(renewals, policy, tracked, ttl).await {
                    tracing::error!(%error, "renewal refused its own lease");
                    lose(renewals.engine(), tracked, "invalid");
                }
            }
        }
    }
}

/// Extends the lease to `ttl`. `Some(view)` when renewed (or degraded onto shadows); `None`
/// when it ended meanwhile (lost: then marked so) or when no quorum answered (the next try
/// is scheduled).
pub(crate) async fn renew(
    renewals: &Renewals,
    policy: &LeasePolicy,
    tracked: &Arc<Tracked>,
    ttl: Duration,
) -> Result<Option<LeaseView>, Error> {
    let _op = tracked.ops.lock().await;
    let (resource, id, valid_until) = {
        let record = tracked.record();
        if record.state_at(Instant::now()).is_ended() {
            return Ok(None);
        }
        let lease = &record.lease;
        (lease.resource.clone(), lease.id, lease.valid_until)
    };
    // A TTL the engine refuses is never sent: it must not cap the lease either.
    renewals.engine().check_ttl(ttl)?;
    METRICS.renewal_attempts.add(1, &[]);
    let started = Instant::now();
    cap_before_sending(renewals.engine(), policy, tracked, (started, ttl));
    let extend = renewals.extend(&resource, id, ttl, valid_until);
    let outcome = tokio::select! {
        outcome = extend => outcome?,
        // The lease ended meanwhile (released, lost): whatever was sent can only touch keys
        // that are ours, and the release is sent after it on every connection.
        _ = tracked.ending.ended() => return Ok(None),
    };
    METRICS
        .renewal_latency
        .record(metrics::seconds(started.elapsed()), &[]);
    if !matches!(outcome, ExtendOutcome::Extended(_)) {
        METRICS.renewal_failures.add(1, &[]);
    }
    match outcome {
        ExtendOutcome::Extended(renewal) => Ok(take(renewals, policy, tracked, &renewal, false)),
        ExtendOutcome::Lost(refusal) if refusal.revoked() => {
            revoke(renewals.engine(), policy, tracked);
            Ok(None)
        }
        ExtendOutcome::Lost(_) => {
            lose(renewals.engine(), tracked, "not_ours");
            Ok(None)
        }
        ExtendOutcome::NoQuorum(refusal) => {
            let still_valid = {
                let mut record = tracked.record();
                record.lease.cap(refusal.valid_until_cap);
                lease_event!(
                    warn,
                    &record.lease,
                    "renewal failed",
                    cause = tracing::field::debug(refusal.cause)
                );
                record.lease.is_valid(Instant::now())
            };
            // Armed before anything else is awaited: a caller gone during the escalation
            // must not leave the lease armed at an end the cap took away.
            tracked.rearm();
            if !still_valid {
                lose(renewals.engine(), tracked, "expired");
                return Ok(None);
            }
            if escalation::should_escalate(refusal.cause) {
                if let Some(view) = escalate(renewals, policy, tracked).await? {
                    return Ok(Some(view));
                }
            }
            {
                let mut record = tracked.record();
                let left = record.lease.remaining_validity(Instant::now());
                record.renew_at = Instant::now() + RETRY_NO_QUORUM.min(left / 4);
            }
            // The validity may have been cut short, and the next try is soon.
            tracked.rearm();
            Ok(None)
        }
    }
}

/// Before an extension to `ttl` is sent at `start`: a master that runs it sets the key's TTL
/// to `ttl` from then (sooner than the lease's end, for a renewal asking a shorter TTL), so the
/// lease is valid no longer than `start + ttl − drift` whatever becomes of the call — even if
/// its caller goes away before the outcome (which caps it again) arrives. A lease the table
/// renews then has its next renewal brought forward to fit the shorter end, as the outcome
/// would have scheduled it.
fn cap_before_sending(
    engine: &Redlock,
    policy: &LeasePolicy,
    tracked: &Arc<Tracked>,
    (start, ttl): (Instant, Duration),
) {
    let drift = &engine.options().drift;
    let cap = drift.valid_until(start, ttl).unwrap_or(start);
    let shortened = {
        let mut record = tracked.record();
        let before = record.lease.valid_until;
        record.lease.cap(Some(cap));
        let shortened = record.lease.valid_until < before;
        if shortened {
            let due = policy.schedule.renew_at(start, ttl, rand::random());
            record.renew_at = record.renew_at.min(due);
        }
        shortened
    };
    if shortened {
        tracked.rearm();
    }
}

/// One try to keep the resource through a quorum of shadows, only while an answer can still
/// land before the validity ends. `Some(view)` when degraded.
async fn escalate(
    renewals: &Renewals,
    policy: &LeasePolicy,
    tracked: &Arc<Tracked>,
) -> Result<Option<LeaseView>, Error> {
    let now = Instant::now();
    let (resource, id, owner, ttl, valid_until) = {
        let record = tracked.record();
        let lease = &record.lease;
        let (resource, owner) = (lease.resource.clone(), record.shadow_owner());
        (resource, lease.id, owner, lease.ttl, lease.valid_until)
    };
    let left = valid_until.saturating_duration_since(now);
    let timeout = escalation::timeout(left);
    if !escalation::may_escalate(now, timeout, valid_until) {
        return Ok(None);
    }
    let shadow_ttl = escalation::shadow_ttl(ttl, policy.shadow_multiplier, policy.shadow_cap);
    lease_event!(
        warn,
        &tracked.record().lease,
        "renewal escalated to shadows",
        shadow_ttl_ms = shadow_ttl.as_millis() as u64
    );
    let engine = renewals.engine();
    let reserve = engine.reserve_shadow(&resource, id, &owner, shadow_ttl, timeout);
    let outcome = tokio::select! {
        outcome = reserve => outcome?,
        _ = tracked.ending.ended() => return Ok(None),
    };
    match outcome {
        ExtendOutcome::Extended(shadow) => {
            METRICS.shadow_escalations.add(1, &[]);
            Ok(take(renewals, policy, tracked, &shadow, true))
        }
        ExtendOutcome::Lost(_) => {
            lose(engine, tracked, "not_ours");
            Ok(None)
        }
        ExtendOutcome::NoQuorum(refusal) => {
            tracked.record().lease.cap(refusal.valid_until_cap);
            tracing::warn!(lease_id = %id, resource, cause = ?refusal.cause, "shadow escalation without quorum");
            Ok(None)
        }
    }
}

/// Takes a successful renewal (`shadowed`: or shadow reservation) if the lease is still valid
/// now; past its validity the lease has been reported lost, and is marked so instead.
fn take(
    renewals: &Renewals,
    policy: &LeasePolicy,
    tracked: &Arc<Tracked>,
    renewal: &Renewal,
    shadowed: bool,
) -> Option<LeaseView> {
    let view = settle(policy, tracked, renewal, shadowed);
    if view.is_none() {
        lose(renewals.engine(), tracked, "expired");
    }
    view
}

/// Takes over a renewal or shadow reservation, tells the watchers (`renewed`, `recovered`
/// after a degraded spell, or `degraded`) and schedules the next renewal on the lock's own
/// TTL, so a degraded lease tries to recover at the usual pace. `None` (and nothing taken)
/// when the lease has ended or its validity has already passed.
fn settle(
    policy: &LeasePolicy,
    tracked: &Arc<Tracked>,
    renewal: &Renewal,
    shadowed: bool,
) -> Option<LeaseView> {
    let mut record = tracked.record();
    let now = Instant::now();
    if record.state_at(now).is_ended() {
        return None;
    }
    let was_degraded = record.state == LeaseState::Degraded;
    let event = if shadowed {
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
    record.renew_at = policy.schedule.renew_at(now, ttl, rand::random());
    let view = record.view(now);
    drop(record);
    tracked.send_event(super::LeaseEvent {
        event,
        lease: view.clone(),
    });
    tracked.rearm();
    Some(view)
}

/// Marks the lease lost (once) and releases whatever keys it still has, in the background:
/// after the renewal or shadow in flight, on every master, sent again to any master that does
/// not answer it with a result.
pub(crate) fn lose(engine: &Arc<Redlock>, tracked: &Arc<Tracked>, reason: &'static str) {
    if !tracked.finish(LeaseState::Lost, reason) {
        return;
    }
    let (engine, tracked) = (Arc::clone(engine), Arc::clone(tracked));
    tokio::spawn(async move {
        let _op = tracked.ops.lock().await;
        let (resource, id) = tracked.key();
        if let Err(error) = engine.release(&resource, id).await {
            tracing::error!(%error, lease_id = %id, "release of a lost lease refused");
        }
    });
}

/// A force release revoked the lease: lost (`revoked`) at once, watchers told, then the
/// revocation acknowledged (the tombstone deleted and the release published), which lets
/// others take the resource. Acknowledged again for every announcement of it, even once ended:
/// a master the force release reached late still gets its tombstone deleted. With
/// [`Revocations::ByTheHolder`], only marked lost until the holder acknowledged
/// ([`super::holder::Following::let_go`]), which also releases its keys.
pub(crate) fn revoke(engine: &Arc<Redlock>, policy: &LeasePolicy, tracked: &Arc<Tracked>) {
    let by_holder = policy.revocations == Revocations::ByTheHolder;
    if by_holder && !tracked.holder_acknowledged.load(Ordering::Acquire) {
        tracked.finish(LeaseState::Lost, "revoked");
        return;
    }
    lose(engine, tracked, "revoked");
    let (engine, tracked) = (Arc::clone(engine), Arc::clone(tracked));
    tokio::spawn(async move {
        let (resource, id) = tracked.key();
        engine.acknowledge_revocation(&resource, id).await;
    });
}

/// Whether `start_release` began the release or found it under way or over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Begin {
    /// The lease was held: it is now `releasing`, and whoever began it sends its release.
    Started,
    /// Already releasing: its release is under way.
    Joined,
    /// Already lost or released.
    Ended,
}

/// Marks the lease `releasing` (validity 0 from now, renewals stopped) and starts its release
/// task, which follows the release until a quorum of masters confirms it (then `released`) or
/// every key the lease may have left has expired.
pub(crate) fn start_release(
    engine: &Arc<Redlock>,
    tracked: &Arc<Tracked>,
    reason: &'static str,
) -> Begin {
    let begin = tracked.begin_release(reason);
    if begin == Begin::Started {
        let (engine, tracked) = (Arc::clone(engine), Arc::clone(tracked));
        tokio::spawn(async move { release_until_confirmed(&engine, &tracked).await });
    }
    begin
}

/// The release of a lease the caller has just marked `releasing` (`Begin::Started`), sent
/// from the caller's own task: no task and no hand-off for a release a quorum confirms at
/// once. What is left after its first round (a master to send it again to) follows in a task
/// of its own; a caller that goes away before the first round is over leaves the whole
/// release to a task (sent again: a release only deletes this lease's own keys).
pub(crate) async fn release_from_caller(engine: &Arc<Redlock>, tracked: &Arc<Tracked>) {
    let mut unfinished = Unfinished(Some((Arc::clone(engine), Arc::clone(tracked))));
    let follow = first_release_round(engine, tracked).await;
    unfinished.0 = None;
    if let Some(release) = follow {
        let tracked = Arc::clone(tracked);
        tokio::spawn(async move { follow_release(&tracked, release).await });
    }
}

/// A release whose first round its caller did not see to its end: finished by a task.
struct Unfinished(Option<(Arc<Redlock>, Arc<Tracked>)>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some((engine, tracked)) = self.0.take() else {
            return;
        };
        // Outside a runtime (the process is ending) there is nothing left to run it on.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { release_until_confirmed(&engine, &tracked).await });
        }
    }
}

/// Sends the release once, after any renewal or shadow in flight, and follows it: the engine
/// sends it again to every master that did not answer it with a result, and each of its rounds
/// is an attempt the lease's `DELETE`s wait for.
async fn release_until_confirmed(engine: &Redlock, tracked: &Tracked) {
    if let Some(release) = first_release_round(engine, tracked).await {
        follow_release(tracked, release).await;
    }
}

/// The release's first round; `Some(release)` while it is not over (no quorum confirmed it
/// yet, and a key it could have left may still stand).
async fn first_release_round(engine: &Redlock, tracked: &Tracked) -> Option<Release> {
    // After any renewal or shadow in flight (cancelled by `begin_release`): on each master,
    // the release is sent after every write of this lease, and none follows (renewals stop
    // once the lease is releasing), so its retries need not hold the lease's calls.
    let op = tracked.ops.lock().await;
    let (resource, id) = tracked.key();
    let started = engine.release_followed(&resource, id).await;
    drop(op);
    match started {
        Ok(release) => (!release_round_over(tracked, &release)).then_some(release),
        Err(error) => {
            tracing::error!(%error, lease_id = %id, "release refused");
            let reason = tracked.record().reason.unwrap_or("released");
            tracked.finish(LeaseState::Released, reason);
            tracked.release_round_done();
            None
        }
    }
}

/// The release's later rounds, until it is over.
async fn follow_release(tracked: &Tracked, mut release: Release) {
    loop {
        release.next_round().await;
        if release_round_over(tracked, &release) {
            return;
        }
    }
}

/// Counts a round of the release (its `DELETE`s wait for one); whether it is over, and then
/// the lease released.
fn release_round_over(tracked: &Tracked, release: &Release) -> bool {
    let over = release.is_over(Instant::now());
    if over {
        // Given up: no quorum confirmed it, every key the lease could have left has
        // expired. That is what happened, not a release.
        let reason = match release.outcome().confirmed() {
            true => tracked.record().reason.unwrap_or("released"),
            false => "expired",
        };
        tracked.finish(LeaseState::Released, reason);
    }
    tracked.release_round_done();
    over
}

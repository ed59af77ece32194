//! A lease the sidecar does not renew (`auto_renew: false`) is reported expired on its event
//! stream when its validity ends: at the end its last renewal set, sooner or later than the
//! one before, never at an end a renewal moved away from.

use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::held;

/// The first `lost` event of a stream within `limit`, with when it came.
async fn lost_within(
    events: &mut redlease_testkit::sidecar::EventStream,
    limit: Duration,
) -> Option<(Value, Instant)> {
    let until = Instant::now() + limit;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let (name, data) = events.next(left).await?;
        if name == "lost" {
            return Some((data, Instant::now()));
        }
    }
}

/// Granted for 400 ms and not renewed: `lost` with reason `expired` comes at its end, not
/// before it and not much after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_without_auto_renewal_is_reported_expired_at_its_end() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let granted = Instant::now();
    let body = json!({"owner": "cron", "auto_renew": false, "ttl_ms": 400});
    let id = held(&sidecar, "expiry", body).await;
    let mut events = sidecar.events(&id).await;
    let (lost, at) = lost_within(&mut events, Duration::from_secs(3))
        .await
        .expect("no lost event for a lease that ran out");
    assert_eq!(lost["reason"], "expired", "{lost}");
    let after = at - granted;
    assert!(
        after >= Duration::from_millis(300) && after <= Duration::from_millis(900),
        "reported {after:?} after its grant (TTL 400 ms)"
    );
}

/// A renewal to a shorter TTL brings the end forward: `lost` comes at the new end, long
/// before the first one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_to_a_shorter_ttl_brings_the_reported_expiry_forward() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "cron", "auto_renew": false, "ttl_ms": 10_000});
    let id = held(&sidecar, "expiry", body).await;
    let mut events = sidecar.events(&id).await;
    let renewed_at = Instant::now();
    let renew = format!("/v1/leases/{id}/renew");
    let (status, renewed) = sidecar.post_json(&renew, json!({"ttl_ms": 300})).await;
    assert_eq!(status, 200, "{renewed}");
    let (lost, at) = lost_within(&mut events, Duration::from_secs(3))
        .await
        .expect("no lost event at the end of the shorter renewal");
    assert_eq!(lost["reason"], "expired", "{lost}");
    assert!(
        at - renewed_at <= Duration::from_millis(1000),
        "reported {:?} after a renewal for 300 ms",
        at - renewed_at
    );
}

/// A renewal to a longer TTL moves the end away: nothing is reported at the first end, the
/// lease is still held past it, and `lost` comes at the new end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_to_a_longer_ttl_is_not_reported_expired_at_the_first_end() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "cron", "auto_renew": false, "ttl_ms": 300});
    let id = held(&sidecar, "expiry", body).await;
    let renew = format!("/v1/leases/{id}/renew");
    let (status, renewed) = sidecar.post_json(&renew, json!({"ttl_ms": 1500})).await;
    assert_eq!(status, 200, "{renewed}");
    let renewed_at = Instant::now();
    let mut events = sidecar.events(&id).await;
    let early = lost_within(&mut events, Duration::from_millis(700)).await;
    assert!(early.is_none(), "reported lost at the first end: {early:?}");
    let (_, view) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(view["state"], "held", "{view}");
    let (lost, at) = lost_within(&mut events, Duration::from_secs(3))
        .await
        .expect("no lost event at the end of the longer renewal");
    assert_eq!(lost["reason"], "expired", "{lost}");
    let after = at - renewed_at;
    assert!(
        after >= Duration::from_millis(1300) && after <= Duration::from_millis(2200),
        "reported {after:?} after a renewal for 1500 ms"
    );
}

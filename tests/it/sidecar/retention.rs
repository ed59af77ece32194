//! The lease table keeps an ended lease readable for its retention, and then forgets it,
//! whether or not other leases end meanwhile; a lease still held is never forgotten.

use std::sync::Arc;
use std::time::Duration;

use redlease::{Fleet, FleetOptions, LeaseId, Redlock};
use redlease_sidecar::config::in_process_lease_policy;
use redlease_sidecar::{AcquireRequest, Acquired, LeaseManager, LeasePolicy};
use redlease_testkit::assert_eventually;
use redlease_testkit::TestFleet;

fn request(resource: &str) -> AcquireRequest {
    AcquireRequest {
        kind: Default::default(),
        campaign: None,
        fair: false,
        resource: resource.to_string(),
        owner: "retention".to_string(),
        ttl: Some(Duration::from_secs(10)),
        wait: Duration::ZERO,
        auto_renew: false,
        idle_timeout: None,
    }
}

/// A lease table on `fleet` with the in-process policy, as `tune` changes it.
async fn manager(fleet: &TestFleet, tune: impl FnOnce(&mut LeasePolicy)) -> Arc<LeaseManager> {
    let masters = Fleet::connect(&fleet.urls(), &FleetOptions::default())
        .await
        .unwrap();
    let engine = Arc::new(Redlock::new(masters, Default::default()));
    let mut policy = in_process_lease_policy(engine.fleet().quarantine());
    tune(&mut policy);
    LeaseManager::new(engine, policy)
}

fn granted(acquired: Acquired) -> LeaseId {
    match acquired {
        Acquired::Granted(view) => view.lease_id,
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_lease_is_readable_for_its_retention_then_forgotten() {
    let fleet = TestFleet::start(3);
    let manager = manager(&fleet, |policy| {
        policy.retention = Duration::from_millis(400)
    })
    .await;
    let held = granted(manager.acquire(request("held")).await.unwrap());
    let ended = granted(manager.acquire(request("ended")).await.unwrap());
    let answer = manager.release(ended, "released").await.unwrap();
    assert!(answer.released);
    // Readable at once, with how it ended; then, with no other lease ending, forgotten.
    let view = manager.get(ended).expect("readable after its end");
    assert_eq!(view.reason, Some("released"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        manager.get(ended).is_some(),
        "forgotten before its retention"
    );
    assert_eventually!(
        manager.get(ended).is_none(),
        3,
        "an ended lease never forgotten"
    );
    assert!(manager.get(held).is_some(), "a held lease was forgotten");
}

/// With `retained_max` 2, a third ended lease pushes out the oldest; the two newest stay
/// readable, and a held lease is never forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_ended_leases_than_retained_max_stay_readable_oldest_forgotten_first() {
    let fleet = TestFleet::start(3);
    let manager = manager(&fleet, |policy| policy.retained_max = 2).await;
    let held = granted(manager.acquire(request("held")).await.unwrap());
    let mut ended = Vec::new();
    for n in 0..3 {
        let id = granted(
            manager
                .acquire(request(&format!("ended-{n}")))
                .await
                .unwrap(),
        );
        assert!(manager.release(id, "released").await.unwrap().released);
        ended.push(id);
        // Counted against the cap once its task is over: wait for that, so that the leases
        // are retired in the order they ended.
        let retired = (n + 1).min(2);
        assert_eventually!(manager.retained() == retired, 3, "lease {n} never retired");
    }
    // The third pushed out the first.
    assert_eventually!(
        manager.get(ended[0]).is_none(),
        3,
        "the oldest ended lease kept beyond the cap"
    );
    assert!(manager.get(ended[1]).is_some(), "forgotten within the cap");
    assert!(
        manager.get(ended[2]).is_some(),
        "the newest ended lease forgotten"
    );
    assert!(manager.get(held).is_some(), "a held lease was forgotten");
}

/// Leases without auto-renewal released long before their end leave no deadline queued for
/// them once the queue reaches 4,096: it stays within that, or a few times the table's leases (here
/// at most 100 ended ones kept), rather than one per lease granted within a TTL (4,320 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_of_leases_released_early_do_not_pile_up() {
    let fleet = TestFleet::start(3);
    let manager = manager(&fleet, |policy| policy.retained_max = 100).await;
    let cycles = (0..16).map(|worker| {
        let manager = Arc::clone(&manager);
        tokio::spawn(async move {
            for n in 0..270 {
                let resource = format!("churn-{worker}-{n}");
                let id = granted(manager.acquire(request(&resource)).await.unwrap());
                manager.release(id, "released").await.unwrap();
            }
        })
    });
    for cycle in cycles.collect::<Vec<_>>() {
        cycle.await.unwrap();
    }
    assert_eventually!(
        manager.queued_expiries() < 4096,
        3,
        "{} deadlines queued after 4,320 leases released early",
        manager.queued_expiries()
    );
}

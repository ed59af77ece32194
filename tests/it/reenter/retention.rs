//! A hold id answers as long as its lease is kept readable, and no longer: the lease table
//! forgets a lease's holds with the lease.

use std::sync::Arc;
use std::time::Duration;

use redlease::{Fleet, FleetOptions, LeaseId, Redlock};
use redlease_sidecar::config::in_process_lease_policy;
use redlease_sidecar::{AcquireRequest, Acquired, LeaseManager, LeaseState};
use redlease_testkit::assert_eventually;
use redlease_testkit::TestFleet;

/// A lease table on `fleet` whose ended leases stay readable for `retention`.
async fn manager(fleet: &TestFleet, retention: Duration) -> Arc<LeaseManager> {
    let masters = Fleet::connect(&fleet.urls(), &FleetOptions::default())
        .await
        .unwrap();
    let engine = Arc::new(Redlock::new(masters, Default::default()));
    let mut policy = in_process_lease_policy(engine.fleet().quarantine());
    policy.retention = retention;
    LeaseManager::new(engine, policy)
}

async fn granted(manager: &Arc<LeaseManager>, resource: &str) -> LeaseId {
    let request = AcquireRequest {
        kind: Default::default(),
        campaign: None,
        fair: false,
        resource: resource.to_string(),
        owner: "a".to_string(),
        ttl: Some(Duration::from_secs(10)),
        wait: Duration::ZERO,
        auto_renew: false,
        idle_timeout: None,
    };
    match manager.acquire(request).await.unwrap() {
        Acquired::Granted(view) => view.lease_id,
        other => panic!("not granted: {other:?}"),
    }
}

/// After its lease was released a hold's release answers `released: false` (the release
/// closed it) while the lease is readable, then nothing (404) once the lease is forgotten;
/// a hold of a lease still held answers all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_answers_while_its_lease_is_retained_then_not() {
    let fleet = TestFleet::start(3);
    let manager = manager(&fleet, Duration::from_millis(400)).await;
    let (ended, kept) = (
        granted(&manager, "ended").await,
        granted(&manager, "kept").await,
    );
    let ended_hold = manager.reenter(ended, None).await.unwrap().hold_id;
    let kept_hold = manager.reenter(kept, None).await.unwrap().hold_id;
    assert!(manager.release(ended, "released").await.unwrap().released);
    let closed = manager.release_hold(ended_hold).expect("retained");
    assert!(!closed.released);
    assert_eq!(
        (closed.view.state, closed.view.holds),
        (LeaseState::Released, 0)
    );
    assert_eventually!(
        manager.get(ended).is_none(),
        3,
        "the ended lease was never forgotten"
    );
    assert!(
        manager.release_hold(ended_hold).is_none(),
        "a forgotten lease's hold answered"
    );
    let released = manager
        .release_hold(kept_hold)
        .expect("a held lease's hold");
    assert!(released.released);
    assert_eq!(
        (released.view.state, released.view.holds),
        (LeaseState::Held, 0)
    );
}

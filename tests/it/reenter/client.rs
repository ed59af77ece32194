//! `redlease::client`'s re-entry: `LockGuard::reenter` and `Hold::release` against a sidecar
//! on real masters.

use std::time::Duration;

use redlease::client::{Client, ClientError};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;

/// A guard re-entered twice gets two holds with its own token; releasing one keeps the lock
/// (another lock request is refused `Held`) and a second release of it answers `false`; the
/// guard's release frees the lock with a hold still open, which then answers `false` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_reenters_and_its_holds_release_only_themselves() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let client = Client::new(&sidecar.base).unwrap();
    let guard = client
        .lock("job")
        .ttl(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(guard.info().holds, 0);
    let first = guard.reenter().await.unwrap();
    let second = guard.reenter().await.unwrap();
    assert_eq!(first.fencing_token(), guard.fencing_token());
    assert_eq!(second.fencing_token(), guard.fencing_token());
    assert_eq!((first.holds(), second.holds()), (1, 2));
    assert_eq!(first.lease_id(), guard.lease_id());
    assert_ne!(first.hold_id(), second.hold_id());
    assert_ne!(first.hold_id(), guard.lease_id());
    assert_eq!(client.lease(guard.lease_id()).await.unwrap().holds, 2);

    let again = Client::new(&sidecar.base).unwrap();
    let hold_path = format!("/v1/leases/{}", first.hold_id());
    assert!(first.release().await.unwrap());
    assert_eq!(client.lease(guard.lease_id()).await.unwrap().holds, 1);
    let (status, repeated) = sidecar.delete(&hold_path).await;
    assert_eq!(
        (status, &repeated["released"]),
        (200, &serde_json::json!(false))
    );
    let refused = again.lock("job").send().await.unwrap_err();
    assert!(matches!(refused, ClientError::Held { .. }), "{refused:?}");

    assert!(guard.release().await.unwrap());
    assert!(!second.release().await.unwrap());
    let taken = again.lock("job").send().await.unwrap();
    assert_eq!(taken.info().holds, 0);
}

/// A re-entry of a lease that has ended is refused `LeaseLost`, and opens no hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_whose_lease_ended_cannot_reenter() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let client = Client::new(&sidecar.base).unwrap();
    let guard = client.lock("job").send().await.unwrap();
    let (status, _) = sidecar
        .delete(&format!("/v1/leases/{}", guard.lease_id()))
        .await;
    assert_eq!(status, 200);
    let refused = guard.reenter().await.unwrap_err();
    assert!(
        matches!(refused, ClientError::LeaseLost { .. }),
        "{refused:?}"
    );
    assert_eq!(client.lease(guard.lease_id()).await.unwrap().holds, 0);
}

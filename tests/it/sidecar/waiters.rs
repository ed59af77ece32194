//! Blocking acquisitions through sidecars: woken by release messages, in arrival order,
//! subscribed again after a master restarts.

use super::*;

/// Subscribers of `channel` on each master, and pattern subscriptions in all.
fn listeners(fleet: &TestFleet, channel: &str) -> Vec<(i64, i64)> {
    (0..3)
        .map(|i| {
            let numsub = fleet.command(i, &["PUBSUB", "NUMSUB", channel]);
            let Resp::Array(reply) = numsub else {
                panic!("NUMSUB: {numsub:?}")
            };
            (
                reply[1].int(),
                fleet.command(i, &["PUBSUB", "NUMPAT"]).int(),
            )
        })
        .collect()
}

/// A blocking acquisition on another sidecar is granted right after the holder's release,
/// woken by the release message: without it, the waiter would sleep until the holder's
/// lease expired (10 s away). The release channel is subscribed only while someone waits, so
/// uncontended releases wake no sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_blocked_acquisition_on_another_sidecar() {
    let fleet = TestFleet::start(3);
    let holder = TestSidecar::start(&fleet, &[]).await;
    let waiter = std::sync::Arc::new(TestSidecar::start(&fleet, &[]).await);
    let channel = "redlease:released:job";
    let (_, lease) = holder
        .acquire("job", json!({"owner": "a", "ttl_ms": 10000}))
        .await;
    assert_eq!(
        listeners(&fleet, channel),
        vec![(0, 0); 3],
        "nobody waits yet"
    );
    let blocked = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let answer = waiter
                .acquire("job", json!({"owner": "b", "wait_ms": 8000}))
                .await;
            (answer, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        listeners(&fleet, channel),
        vec![(1, 0); 3],
        "the waiter listens"
    );
    let (status, _) = holder
        .delete(&format!("/v1/leases/{}", lease_id(&lease)))
        .await;
    assert_eq!(status, 200);
    let released = Instant::now();
    let ((status, granted), at) = blocked.await.unwrap();
    assert_eq!(
        (status, granted["owner"].as_str()),
        (200, Some("b")),
        "{granted}"
    );
    let delay = at.saturating_duration_since(released);
    assert!(
        delay < Duration::from_millis(250),
        "granted {delay:?} after the release"
    );
    assert_eventually!(
        listeners(&fleet, channel) == vec![(0, 0); 3],
        5,
        "the last waiter left: channel unsubscribed"
    );
}

/// Waiters on one resource inside one sidecar are served first come, first served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_one_sidecar_are_served_in_arrival_order() {
    let fleet = TestFleet::start(3);
    let sidecar = std::sync::Arc::new(TestSidecar::start(&fleet, &[]).await);
    let (_, first) = sidecar
        .acquire("job", json!({"owner": "holder", "ttl_ms": 10000}))
        .await;
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 1..=3 {
        let (sidecar, order) = (sidecar.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let body = json!({"owner": format!("w{n}"), "wait_ms": 8000, "ttl_ms": 10000});
            let (status, lease) = sidecar.acquire("job", body).await;
            assert_eq!(status, 200, "{lease}");
            order.lock().unwrap().push(n);
            tokio::time::sleep(Duration::from_millis(50)).await;
            sidecar
                .delete(&format!("/v1/leases/{}", lease_id(&lease)))
                .await;
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sidecar
        .delete(&format!("/v1/leases/{}", lease_id(&first)))
        .await;
    for waiter in waiters {
        waiter.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [1, 2, 3]);
}

/// A master that restarts while a sidecar has waiters is subscribed again to their channel
/// once the sidecar reconnects, so its release messages keep waking them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_subscribed_again_after_a_master_restarts() {
    let mut fleet = TestFleet::start(3);
    let holder = TestSidecar::start(&fleet, &[]).await;
    let waiter = std::sync::Arc::new(TestSidecar::start(&fleet, &[]).await);
    let channel = "redlease:released:restart-job";
    let (_, lease) = holder
        .acquire("restart-job", json!({"owner": "a", "ttl_ms": 10000}))
        .await;
    let blocked = {
        let waiter = waiter.clone();
        tokio::spawn(async move {
            let body = json!({"owner": "b", "wait_ms": 8000});
            waiter.acquire("restart-job", body).await
        })
    };
    assert_eventually!(
        listeners(&fleet, channel) == vec![(1, 0); 3],
        5,
        "the waiter listens on every master"
    );
    fleet.servers[0].restart();
    assert_eventually!(
        listeners(&fleet, channel)[0] == (1, 0),
        10,
        "the restarted master has the waiter's subscription again"
    );
    holder
        .delete(&format!("/v1/leases/{}", lease_id(&lease)))
        .await;
    let (status, granted) = blocked.await.unwrap();
    assert_eq!(
        (status, granted["owner"].as_str()),
        (200, Some("b")),
        "{granted}"
    );
}

//! Fair waiting for the semaphore, read-write lock and election routes: a purged waiter is
//! answered 409 `dequeued` on each, each kind queues in its own keys, and a semaphore's fair
//! permits follow the queue across two sidecars while masters are frozen and restarted empty.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};

/// Each kind's route, its holder's and its fair waiter's bodies, and its queue's keys.
fn routes() -> [(&'static str, Value, Value, &'static str); 3] {
    let wait = json!({"wait_ms": 10000, "fair": true, "ttl_ms": 5000});
    let with = |mut body: Value, extra: &Value| {
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    [
        (
            "/v1/semaphores/pool/acquire",
            json!({"owner": "h", "limit": 1, "ttl_ms": 5000}),
            with(json!({"owner": "w", "limit": 1}), &wait),
            "pool\u{1f}s",
        ),
        (
            "/v1/rwlocks/doc/acquire",
            json!({"owner": "h", "mode": "write", "ttl_ms": 5000}),
            with(json!({"owner": "w", "mode": "read"}), &wait),
            "doc\u{1f}rw",
        ),
        (
            "/v1/elections/primary/campaign",
            json!({"owner": "h", "value": "a", "ttl_ms": 5000}),
            with(json!({"owner": "w", "value": "b"}), &wait),
            "primary\u{1f}e",
        ),
    ]
}

/// On each kind's route, a fair waiter is queued in that kind's own keys
/// (`<prefix>queue:<resource>\u{1f}<kind>`); taken out of them on a majority, it is answered
/// 409 `dequeued`.
#[tokio::test]
async fn each_route_answers_dequeued_to_a_purged_waiter() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    for (path, hold, wait, queue) in routes() {
        let (status, holder) = sidecar.post_json(path, hold).await;
        assert_eq!(status, 200, "{path}: {holder}");
        let (http, url) = (sidecar.http.clone(), format!("{}{path}", sidecar.base));
        let waiting = tokio::spawn(async move {
            let answer = http.post(url).json(&wait).send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (queue, beats) = (
            format!("redlease:queue:{queue}"),
            format!("redlease:beats:{queue}"),
        );
        for i in 0..2 {
            let deleted = fleet.command(i, &["DEL", &queue, &beats]);
            assert_eq!(format!("{deleted:?}"), "Int(2)", "{path}: master {i}");
        }
        let (status, body) = tokio::time::timeout(Duration::from_secs(3), waiting)
            .await
            .expect("the purged waiter kept waiting")
            .unwrap();
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("dequeued")),
            "{path}: {body}"
        );
        let id = holder["lease_id"].as_str().unwrap();
        sidecar.delete(&format!("/v1/leases/{id}")).await;
    }
}

/// Through two sidecars on five masters, fair waiters of a semaphore of limit 2 queued in turn
/// on either are granted in that order (each token above the one before) and never more than
/// two hold, while one master is frozen and another restarted empty (its queue lost: the
/// waiters' beats put them back). The sidecars run on worker threads, as in `fair`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_follow_the_queue_with_masters_frozen_and_restarted() {
    let mut fleet = TestFleet::start(5);
    let env = [
        ("REDLEASE__FLEET__QUARANTINE_MS", "3000"),
        ("REDLEASE__LEASE__MAX_TTL_MS", "3000"),
    ];
    let sidecars = [
        TestSidecar::start(&fleet, &env).await,
        TestSidecar::start(&fleet, &env).await,
    ];
    let mut holders = Vec::new();
    for owner in ["h0", "h1"] {
        let hold = json!({"owner": owner, "limit": 2, "ttl_ms": 3000});
        let (status, holder) = sidecars[0]
            .post_json("/v1/semaphores/pool/acquire", hold)
            .await;
        assert_eq!(status, 200, "{holder}");
        holders.push(holder["lease_id"].as_str().unwrap().to_string());
    }
    let holding = Arc::new(AtomicUsize::new(2));
    let most = Arc::new(AtomicUsize::new(2));
    let tokens = Arc::new(Mutex::new(vec![0; 6]));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let (http, base) = (sidecars[i % 2].http.clone(), sidecars[i % 2].base.clone());
        let (holding, most, tokens) = (holding.clone(), most.clone(), tokens.clone());
        waiters.push(tokio::spawn(async move {
            let body = json!({
                "owner": format!("w{i}"), "limit": 2, "ttl_ms": 3000, "wait_ms": 30000,
                "fair": true,
            });
            let url = format!("{base}/v1/semaphores/pool/acquire");
            let answer = http.post(url).json(&body).send().await.unwrap();
            let status = answer.status();
            let lease: Value = answer.json().await.unwrap();
            assert_eq!(status, 200, "waiter {i}: {lease}");
            most.fetch_max(holding.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokens.lock().unwrap()[i] = lease["fencing_token"].as_u64().unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            holding.fetch_sub(1, Ordering::SeqCst);
            let url = format!("{base}/v1/leases/{}", lease["lease_id"].as_str().unwrap());
            http.delete(url).send().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    fleet.servers[0].pause();
    fleet.servers[1].restart();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for id in holders {
        holding.fetch_sub(1, Ordering::SeqCst);
        sidecars[0].delete(&format!("/v1/leases/{id}")).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.servers[0].resume();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(40), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert!(
        tokens.is_sorted(),
        "granted out of the queue's order: {tokens:?}"
    );
    assert!(most.load(Ordering::SeqCst) <= 2, "more than 2 permits held");
}

//! Force release as its holder lives it, against real masters: the holder's sidecar told at
//! once (`lost`, `revoked`), waiters woken only after that, a compare on the lease id, and a
//! force release that cannot reach a quorum answering so (API 503, CLI exit 4).

use std::time::Duration;

use redlease_testkit::sidecar::{EventStream, TestSidecar};
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::support::run_redlease;

/// A lease of 20 s without auto-renewal, as the reproduction takes it.
async fn hold(sidecar: &TestSidecar, resource: &str) -> (String, Value) {
    let body = json!({"owner": "holder", "ttl_ms": 20_000, "auto_renew": false});
    let (status, lease) = sidecar.acquire(resource, body).await;
    assert_eq!(status, 200, "{lease}");
    (lease["lease_id"].as_str().unwrap().to_string(), lease)
}

/// The first `lost` event of `events`, and when it was read.
async fn lost_event(events: &mut EventStream) -> (Value, Instant) {
    loop {
        let next = events.next(Duration::from_secs(5)).await;
        let (event, data) = next.expect("no lost event within 5 s");
        if event == "lost" {
            return (data, Instant::now());
        }
    }
}

/// Each master's answer to a force release, in order.
fn answers(forced: &Value) -> Vec<&str> {
    let masters = forced["masters"].as_array().unwrap();
    masters
        .iter()
        .map(|m| m["answer"].as_str().unwrap())
        .collect()
}

fn force_body(extra: Value) -> Value {
    let mut body = json!({"actor": "alice@oncall", "reason": "test"});
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    body
}

/// Force release through sidecar A of a lease held through sidecar B: B reports the lease
/// `lost` (`revoked`) on its event stream within 100 ms and `GET` says so; a waiter blocked
/// on A is granted only after that, with a larger fencing token.
#[tokio::test]
async fn the_holders_sidecar_is_told_at_once_and_waiters_only_after() {
    let fleet = TestFleet::start(3);
    let holder = TestSidecar::start(&fleet, &[]).await;
    let operator = TestSidecar::start(&fleet, &[]).await;
    let (id, lease) = hold(&holder, "fr1").await;
    let mut events = holder.events(&id).await;

    let url = format!("{}/v1/locks/fr1/acquire", operator.base);
    let http = operator.http.clone();
    let waiter = tokio::spawn(async move {
        let body = json!({"owner": "next", "wait_ms": 10_000, "ttl_ms": 5_000});
        let response = http.post(url).json(&body).send().await.unwrap();
        let status = response.status().as_u16();
        let granted_at = Instant::now();
        (status, response.json::<Value>().await.unwrap(), granted_at)
    });
    // Let the waiter queue and try once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());

    let start = Instant::now();
    let path = "/v1/locks/fr1/force-release";
    let force = operator.post_json(path, force_body(json!({})));
    let ((status, forced), (lost, told_at)) = tokio::join!(force, lost_event(&mut events));
    assert_eq!(status, 200, "{forced}");
    assert_eq!(forced["holder_told"], true, "{forced}");
    assert_eq!(forced["confirmed"], true, "{forced}");
    assert_eq!(lost["reason"], "revoked", "{lost}");
    assert_eq!(lost["validity_ms"], 0, "{lost}");
    let took = told_at - start;
    eprintln!("the holder's sidecar was told {took:?} after the force release was sent");
    assert!(took < Duration::from_millis(100), "told after {took:?}");

    let (status, view) = holder.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (view["state"].as_str(), view["reason"].as_str()),
        (Some("lost"), Some("revoked"))
    );
    assert_eq!(view["validity_ms"], 0);

    let (status, next, granted_at) = waiter.await.unwrap();
    assert_eq!(status, 200, "{next}");
    assert!(
        granted_at >= told_at,
        "the waiter was granted before the holder was told"
    );
    assert!(next["fencing_token"].as_u64() > lease["fencing_token"].as_u64());
    // The old lease's release answers what happened to it.
    let (_, released) = holder.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(released["released"], false, "{released}");
}

/// A force release that names a lease revokes only that lease: another lease holding the
/// lock gets 409 `lease_mismatch` (CLI: exit 3) and nothing is written; a malformed id is
/// 400 `invalid_lease_id`; the right id revokes.
#[tokio::test]
async fn a_named_lease_is_revoked_only_if_it_still_holds_the_lock() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let holder = TestSidecar::start(&fleet, &[]).await;
    let (id, _) = hold(&holder, "fr2").await;
    let path = "/v1/locks/fr2/force-release";

    let other = "0123456789abcdef0123456789abcdef";
    let named = force_body(json!({"lease_id": other}));
    let (status, refused) = holder.post_json(path, named).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["reason"], "lease_mismatch");
    let answers = answers(&refused);
    assert_eq!(answers, ["held_by_other"; 3], "{refused}");
    let args = [
        "locks",
        "force-release",
        "fr2",
        "--actor",
        "bob",
        "--reason",
        "test",
        "--lease-id",
        other,
    ];
    let cli = run_redlease(&args, &masters);
    assert_eq!(cli.status.code(), Some(3), "{cli:?}");
    for i in 0..3 {
        let value = fleet.command(i, &["GET", "redlease:lock:fr2"]).bulk();
        assert_eq!(value, Some(format!("{id}|holder")), "master {i}");
        assert_eq!(
            fleet
                .command(i, &["EXISTS", &format!("redlease:revoked:{id}")])
                .int(),
            0
        );
    }
    let (_, view) = holder.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(view["state"], "held");

    let (status, refused) = holder
        .post_json(path, force_body(json!({"lease_id": "xyz"})))
        .await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_lease_id"))
    );

    let (status, forced) = holder
        .post_json(path, force_body(json!({"lease_id": id})))
        .await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(forced["removed"][0]["lease_id"], id.as_str());
    let (_, view) = holder.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(view["reason"], "revoked");
}

/// A force release that reaches one master of three is not confirmed (API 503 `no_quorum`
/// naming each master's answer, CLI exit 4), after re-sending until its deadline; once the
/// masters are back, it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_without_a_quorum_says_so() {
    let mut fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let holder = TestSidecar::start(&fleet, &[]).await;
    let (id, _) = hold(&holder, "fr3").await;
    fleet.servers[1].stop();
    fleet.servers[2].stop();

    let args = [
        "locks",
        "force-release",
        "fr3",
        "--actor",
        "bob",
        "--reason",
        "test",
    ];
    let cli = tokio::task::spawn_blocking(move || run_redlease(&args, &masters));
    let path = "/v1/locks/fr3/force-release";
    let (status, refused) = holder.post_json(path, force_body(json!({}))).await;
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["reason"], "no_quorum");
    assert_eq!(refused["confirmed"], false);
    let answers = answers(&refused);
    assert_eq!(answers[1..], ["no_answer", "no_answer"], "{refused}");
    let cli = cli.await.unwrap();
    let stderr = String::from_utf8_lossy(&cli.stderr);
    assert_eq!(cli.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("masters confirmed"), "{stderr}");

    fleet.servers[1].restart();
    fleet.servers[2].restart();
    let (status, forced) = holder.post_json(path, force_body(json!({}))).await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(forced["masters_answered"], 3, "{forced}");
    // The master that was reached told the holder the first time.
    let (_, view) = holder.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(view["reason"], "revoked");
}

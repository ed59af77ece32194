//! The sidecar through real HTTP against real masters: grants, contention, auto-renewal while
//! the app watches, idle release, loss, shutdown, input checks.

mod crowd;
mod expiry;
mod fast_lane;
mod frozen;
mod retention;
mod waiters;

use std::time::Duration;

use redlease_testkit::assert_eventually;
use redlease_testkit::resp::Resp;
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

fn lease_id(lease: &Value) -> String {
    lease["lease_id"].as_str().unwrap().to_string()
}

/// Blocking acquisitions in progress, as `/metrics` says (`lock_waiting_acquisitions`).
async fn waiting(sidecar: &TestSidecar) -> u64 {
    let (_, text) = sidecar.get("/metrics").await;
    let text = text.as_str().unwrap_or_default().to_string();
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("lock_waiting_acquisitions "));
    line.map_or(0, |n| n.trim().parse().unwrap())
}

/// Acquires `resource` with `body`, insists on a grant, and returns the lease id.
async fn held(sidecar: &TestSidecar, resource: &str, body: Value) -> String {
    let (status, lease) = sidecar.acquire(resource, body).await;
    assert_eq!(status, 200, "{lease}");
    lease_id(&lease)
}

/// A held resource answers 409 with `acquired: false, reason: held` as problem+json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contended_acquire_is_409_held() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let (status, lease) = sidecar
        .acquire("job", json!({"owner": "a", "ttl_ms": 5000}))
        .await;
    assert_eq!(status, 200, "{lease}");
    assert_eq!(
        (lease["state"].as_str(), lease["owner"].as_str()),
        (Some("held"), Some("a"))
    );
    assert!(lease["fencing_token"].as_u64().unwrap() >= 1);
    let (status, refused) = sidecar.acquire("job", json!({"owner": "b"})).await;
    assert_eq!(status, 409);
    assert_eq!(
        (refused["acquired"].clone(), refused["reason"].clone()),
        (json!(false), json!("held"))
    );
}

/// An auto-renewed 1000 ms lease stays held for 5 s while the app keeps its event stream
/// open, renewed several times, at intervals spread by the jitter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_renewed_lease_lives_while_the_app_watches() {
    let fleet = TestFleet::start(3);
    let env = [("REDLEASE__LEASE__IDLE_TIMEOUT_MS", "1000")];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let id = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 1000})).await;
    let mut events = sidecar.events(&id).await;
    let start = Instant::now();
    let mut renewals = Vec::new();
    while start.elapsed() < Duration::from_secs(5) {
        let (name, data) = events
            .next(Duration::from_secs(2))
            .await
            .expect("silence while held");
        assert_eq!(name, "renewed", "{data}");
        renewals.push(start.elapsed());
    }
    assert!(
        renewals.len() >= 8,
        "only {} renewals in 5 s",
        renewals.len()
    );
    let gaps: Vec<u128> = renewals
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    let spread = gaps.iter().max().unwrap() - gaps.iter().min().unwrap();
    assert!(spread >= 10, "renewals in lockstep: {gaps:?}");
    let (_, now) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(now["state"], "held");
    assert!(fleet.lock_keys_on(&[0, 1, 2]).len() >= 2);
}

/// When the app closes its stream, the lease is released within the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_stream_releases_the_lease_after_the_idle_timeout() {
    let fleet = TestFleet::start(3);
    let env = [("REDLEASE__LEASE__IDLE_TIMEOUT_MS", "1000")];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let id = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 1000})).await;
    let mut events = sidecar.events(&id).await;
    // The app reads its stream: a stream nobody reads is no sign of life.
    let reader =
        tokio::spawn(
            async move { while events.next_or_end(Duration::from_secs(10)).await.is_ok() {} },
        );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, watched) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(
        watched["state"], "held",
        "released while the stream was open"
    );
    reader.abort();
    let _ = reader.await; // the stream closes with its reader
    let closed = Instant::now();
    let path = format!("/v1/leases/{id}");
    assert_eventually!(
        sidecar.get(&path).await.1["state"] == "released",
        3,
        "never released"
    );
    assert!(
        closed.elapsed() < Duration::from_millis(1800),
        "released late: {:?}",
        closed.elapsed()
    );
    // The release returns at a quorum; the last master's follows within moments.
    assert_eventually!(fleet.lock_keys_on(&[0, 1, 2]).is_empty(), 2, "keys left");
}

/// With 3 of 5 masters frozen the lease cannot be renewed: the app hears `lost` within the
/// TTL, never silence; after the masters resume the lease stays reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_cannot_renew_is_reported_lost_within_its_ttl() {
    let mut fleet = TestFleet::start(5);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 1000})).await;
    let mut events = sidecar.events(&id).await;
    for i in 0..3 {
        fleet.servers[i].pause();
    }
    let frozen = Instant::now();
    let mut lost = None;
    while let Some((name, data)) = events.next(Duration::from_millis(1500)).await {
        if name == "lost" {
            lost = Some(data);
            break;
        }
    }
    let lost = lost.expect("no lost event: silence while the lease could not be renewed");
    assert!(
        frozen.elapsed() <= Duration::from_millis(1100),
        "lost reported late: {:?}",
        frozen.elapsed()
    );
    assert_eq!(lost["state"], "lost");
    assert_eq!(lost["validity_ms"], 0);
    for i in 0..3 {
        fleet.servers[i].resume();
    }
    let (_, after) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(after["state"], "lost");
}

/// When a majority answers "not yours" (the keys were taken away), the lease is lost at the
/// next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_saying_not_yours_means_lost() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 2000})).await;
    let mut events = sidecar.events(&id).await;
    for i in 0..3 {
        fleet.command(i, &["DEL", "redlease:lock:job"]);
    }
    let (name, data) = events.next(Duration::from_secs(2)).await.expect("silence");
    assert_eq!(
        (name.as_str(), data["reason"].as_str()),
        ("lost", Some("not_ours"))
    );
    let (status, gone) = sidecar.post(&format!("/v1/leases/{id}/renew")).await;
    assert_eq!((status, gone["reason"].as_str()), (410, Some("lease_lost")));
}

/// Shutdown releases every lease: a second sidecar can take the same resources at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_every_lease() {
    let fleet = TestFleet::start(3);
    let mut first = TestSidecar::start(&fleet, &[]).await;
    for resource in ["a", "b", "c"] {
        let (status, _) = first
            .acquire(resource, json!({"owner": "first", "ttl_ms": 20000}))
            .await;
        assert_eq!(status, 200);
    }
    first.shut_down().await;
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
    let second = TestSidecar::start(&fleet, &[]).await;
    for resource in ["a", "b", "c"] {
        let (status, body) = second.acquire(resource, json!({"owner": "second"})).await;
        assert_eq!(status, 200, "{body}");
    }
}

/// Release, keepalive, renew and get follow the contract, including 404 and 410.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_endpoints_follow_the_contract() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = held(
        &sidecar,
        "job",
        json!({"owner": "a", "auto_renew": false, "ttl_ms": 3000}),
    )
    .await;
    let (_, lease) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(lease["auto_renew"], false);
    let (status, kept) = sidecar.post(&format!("/v1/leases/{id}/keepalive")).await;
    assert_eq!((status, kept["state"].as_str()), (200, Some("held")));
    let (status, renewed) = sidecar.post(&format!("/v1/leases/{id}/renew")).await;
    assert_eq!(status, 200, "{renewed}");
    assert!(renewed["validity_ms"].as_u64().unwrap() > 2_500);
    let (status, released) = sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!((status, released["released"].clone()), (200, json!(true)));
    assert_eventually!(fleet.lock_keys_on(&[0, 1, 2]).is_empty(), 2, "keys left");
    let (status, gone) = sidecar.post(&format!("/v1/leases/{id}/renew")).await;
    assert_eq!((status, gone["reason"].as_str()), (410, Some("lease_lost")));
    let unknown = "00000000000000000000000000000000";
    for path in [
        format!("/v1/leases/{unknown}"),
        "/v1/leases/not-an-id".to_string(),
    ] {
        let (status, body) = sidecar.get(&path).await;
        assert_eq!(
            (status, body["reason"].as_str()),
            (404, Some("unknown_lease"))
        );
    }
}

/// A lease without auto-renewal expires and is reported lost, never still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_without_auto_renewal_expires_as_lost() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = held(
        &sidecar,
        "job",
        json!({"owner": "a", "auto_renew": false, "ttl_ms": 300}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(320)).await;
    let (_, after) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(
        (after["state"].as_str(), after["validity_ms"].as_u64()),
        (Some("lost"), Some(0))
    );
}

/// Bad input gets a problem+json with a stable reason and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_stable_reason() {
    let fleet = TestFleet::start(1);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let long = "x".repeat(513);
    let cases = [
        ("job", json!({}), 400, "invalid_owner"),
        ("job", json!({"owner": ""}), 400, "invalid_owner"),
        (
            "job",
            json!({"owner": "a", "ttl_ms": 5}),
            400,
            "invalid_ttl",
        ),
        (
            "job",
            json!({"owner": "a", "ttl_ms": 3_600_000}),
            400,
            "invalid_ttl",
        ),
        (
            "job",
            json!({"owner": "a", "wait_ms": 3_600_000}),
            400,
            "invalid_wait",
        ),
        (
            "job",
            json!({"owner": "a", "idle_timeout_ms": 0}),
            400,
            "invalid_idle_timeout",
        ),
        ("job", json!({"owner": 7}), 422, "invalid_body"),
        ("a%0Ab", json!({"owner": "a"}), 400, "invalid_resource"),
        (
            long.as_str(),
            json!({"owner": "a"}),
            400,
            "invalid_resource",
        ),
    ];
    for (resource, body, status, reason) in cases {
        let (got, problem) = sidecar.acquire(resource, body.clone()).await;
        assert_eq!(
            (got, problem["reason"].as_str()),
            (status, Some(reason)),
            "{body}"
        );
    }
    let url = format!("{}/v1/locks/job/acquire", sidecar.base);
    let huge = format!("{{\"owner\":\"{}\"}}", "x".repeat(70 * 1024));
    let response = sidecar
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["reason"], "body_too_large");
    assert_eq!(fleet.data_keys(0), Vec::<String>::new());
}

/// The fleet view lists every master with credentials masked, the quorum and the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_view_and_health_endpoints() {
    let mut fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let (status, view) = sidecar.get("/v1/fleet").await;
    assert_eq!(status, 200);
    assert_eq!(view["quorum"], 2);
    assert_eq!(view["masters"].as_array().unwrap().len(), 3);
    assert!(view["adaptive_ttl_ms"].as_u64().unwrap() >= 500);
    assert_eq!(sidecar.get("/livez").await.0, 200);
    assert_eq!(sidecar.get("/readyz").await.0, 200);
    fleet.servers[0].stop();
    fleet.servers[1].stop();
    assert_eventually!(
        sidecar.get("/readyz").await.0 == 503,
        5,
        "ready without a quorum"
    );
    assert_eq!(sidecar.get("/livez").await.0, 200);
}

/// Masters too slow for a renewal but answering within the escalation's longer timeout: the
/// lease escalates to a quorum of shadows (`degraded`, validity from the shadow: the lock keys
/// kept for the shadow TTL), then the next renewal sets the lock's own TTL back (`recovered`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_masters_degrade_the_lease_then_it_recovers() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 2000})).await;
    let mut events = sidecar.events(&id).await;
    let (first, _) = events.next(Duration::from_secs(3)).await.unwrap();
    assert_eq!(first, "renewed");
    for i in 0..2 {
        fleet.command(i, &["CLIENT", "PAUSE", "1200", "WRITE"]);
    }
    let (name, degraded) = events.next(Duration::from_secs(3)).await.expect("silence");
    assert_eq!(
        (name.as_str(), degraded["state"].as_str()),
        ("degraded", Some("degraded"))
    );
    assert!(
        degraded["validity_ms"].as_u64().unwrap() > 2_000,
        "validity not from the shadow"
    );
    let shadowed = |i| fleet.command(i, &["PTTL", "redlease:lock:job"]).int() > 2_000;
    assert!(
        (0..3).filter(|&i| shadowed(i)).count() >= 2,
        "no quorum of shadows"
    );
    let (name, recovered) = events.next(Duration::from_secs(3)).await.expect("silence");
    assert_eq!(
        (name.as_str(), recovered["state"].as_str()),
        ("recovered", Some("held"))
    );
    let ttl_back = |i| fleet.command(i, &["PTTL", "redlease:lock:job"]).int() <= 2_000;
    assert_eventually!((0..3).all(ttl_back), 3, "shadow TTL left after recovery");
}

/// Renewals due together share one script call per master: 200 auto-renewed 1 s leases stay
/// held for 3 s (at least 1000 renewals, one per lease every half TTL), yet the master serves
/// far fewer script calls than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_due_together_share_one_script_call_per_master() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let mut ids = Vec::new();
    for i in 0..200 {
        let body = json!({"owner": "batch", "ttl_ms": 1000});
        ids.push(held(&sidecar, &format!("batch-{i}"), body).await);
    }
    let before = fleet.evalsha_calls(0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = fleet.evalsha_calls(0) - before;
    for id in &ids {
        let (status, view) = sidecar.get(&format!("/v1/leases/{id}")).await;
        assert_eq!(
            (status, view["state"].as_str()),
            (200, Some("held")),
            "{view}"
        );
    }
    assert!(
        calls < 250,
        "{calls} script calls on one master for at least 1000 renewals"
    );
}

/// Inputs that would defeat the design are refused before anything is written: an idle
/// timeout past `lease.max_idle_timeout_ms` (a dead app's lease kept for ever), and names
/// with bidirectional overrides or line separators (log lines forged, names passing for
/// others).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_that_defeat_the_design_are_refused() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    for idle in [300_001u64, u64::MAX] {
        let body = serde_json::json!({"owner": "app", "idle_timeout_ms": idle});
        let (status, problem) = sidecar.acquire("job", body).await;
        assert_eq!(status, 400, "{problem}");
        assert_eq!(problem["reason"], "invalid_idle_timeout");
    }
    let (status, problem) = sidecar
        .acquire("job\u{202e}txt", serde_json::json!({"owner": "app"}))
        .await;
    assert_eq!(
        (status, problem["reason"].as_str()),
        (400, Some("invalid_resource"))
    );
    let owner = serde_json::json!({"owner": "app\u{2028}lease_id=0"});
    let (status, problem) = sidecar.acquire("job", owner).await;
    assert_eq!(
        (status, problem["reason"].as_str()),
        (400, Some("invalid_owner"))
    );
    assert!(fleet.lock_keys_on(&[0, 1, 2]).is_empty());
    let body = serde_json::json!({"owner": "app", "idle_timeout_ms": 300_000});
    assert_eq!(sidecar.acquire("job", body).await.0, 200);
}

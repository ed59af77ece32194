//! The safety model's rules, each checked through the sidecar or the engine against real
//! masters with faults injected: releases that tell the truth and survive their caller,
//! leases whose keys go when they end, validity capped by every sent extension, no shadow
//! after the validity.

use std::time::Duration;

use redlease_testkit::assert_eventually;
use redlease_testkit::proxy::{Fault, FaultProxy};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Acquires `resource` with `body`, insists on a grant, and returns the lease.
async fn held(sidecar: &TestSidecar, resource: &str, body: Value) -> Value {
    let (status, lease) = sidecar.acquire(resource, body).await;
    assert_eq!(status, 200, "{lease}");
    lease
}

fn id_of(lease: &Value) -> String {
    lease["lease_id"].as_str().unwrap().to_string()
}

/// With 3 of 5 masters frozen a release cannot be confirmed: DELETE answers 503 `no_quorum`
/// with the lease `releasing` (never `released: true` while a majority may hold the key), and
/// the release keeps trying: once the masters wake, the lease is `released` and no key is left;
/// the next DELETE is told `released: true`, and only that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_a_majority_did_not_confirm_is_not_reported_released() {
    let mut fleet = TestFleet::start(5);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let lease = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 5000})).await;
    let id = id_of(&lease);
    for i in 0..3 {
        fleet.servers[i].pause();
    }
    let (status, body) = sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["reason"], "no_quorum");
    assert_eq!(body["released"], false);
    assert_eq!(body["state"], "releasing");
    let (_, view) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(view["state"], "releasing");
    assert_eq!(
        view["validity_ms"], 0,
        "a lease being released is not valid"
    );
    for i in 0..3 {
        fleet.servers[i].resume();
    }
    let path = format!("/v1/leases/{id}");
    assert_eventually!(
        sidecar.get(&path).await.1["state"] == "released",
        5,
        "the release did not keep trying"
    );
    let all = [0, 1, 2, 3, 4];
    assert_eventually!(fleet.lock_keys_on(&all).is_empty(), 3, "keys left");
    // The client retrying after the 503 is the first to see the release confirmed: it is
    // told `released: true`, and nobody after it.
    let (status, retried) = sidecar.delete(&path).await;
    assert_eq!((status, &retried["released"]), (200, &json!(true)));
    let (status, again) = sidecar.delete(&path).await;
    assert_eq!((status, &again["released"]), (200, &json!(false)));
}

/// A release no quorum confirmed before every key the lease could have left expired ends
/// `released` with reason `expired`: a later DELETE is told `released: false`, `expired`, not
/// `released: true` (true only because the TTL ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_given_up_on_answers_expired() {
    let mut fleet = TestFleet::start(3);
    let short = [
        ("REDLEASE__FLEET__QUARANTINE_MS", "1500"),
        ("REDLEASE__LEASE__MAX_TTL_MS", "1500"),
    ];
    let sidecar = TestSidecar::start(&fleet, &short).await;
    let lease = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 1000})).await;
    let path = format!("/v1/leases/{}", id_of(&lease));
    fleet.servers[0].pause();
    fleet.servers[1].pause();
    let (status, body) = sidecar.delete(&path).await;
    assert_eq!(
        (status, &body["state"]),
        (503, &json!("releasing")),
        "{body}"
    );
    assert_eventually!(
        sidecar.get(&path).await.1["state"] == "released",
        6,
        "the release was never given up"
    );
    let (status, view) = sidecar.get(&path).await;
    assert_eq!(
        (status, &view["reason"]),
        (200, &json!("expired")),
        "{view}"
    );
    let (status, answer) = sidecar.delete(&path).await;
    fleet.servers[0].resume();
    fleet.servers[1].resume();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["released"], false, "{answer}");
    assert_eq!(answer["reason"], "expired", "{answer}");
}

/// Ten concurrent DELETEs of one lease: exactly one answers `released: true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_releases_of_one_lease_report_released_exactly_once() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    for round in 0..5 {
        let resource = format!("job-{round}");
        let lease = held(&sidecar, &resource, json!({"owner": "a", "ttl_ms": 5000})).await;
        let path = format!("/v1/leases/{}", id_of(&lease));
        let deletes = (0..10).map(|_| sidecar.delete(&path));
        let answers = futures_util::future::join_all(deletes).await;
        let trues = answers
            .iter()
            .filter(|(status, body)| *status == 200 && body["released"] == true)
            .count();
        assert_eq!(trues, 1, "round {round}: {answers:?}");
        assert!(answers
            .iter()
            .all(|(status, body)| *status == 200 && body["state"] == "released"));
    }
}

/// An ended lease is not valid: a released lease reads validity 0 with `expires_at` in the
/// past, and keepalive and renew on it answer 410 `lease_lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_lease_has_no_validity_and_refuses_keepalive() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let lease = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 10000})).await;
    let path = format!("/v1/leases/{}", id_of(&lease));
    let (status, _) = sidecar.delete(&path).await;
    assert_eq!(status, 200);
    let (_, view) = sidecar.get(&path).await;
    assert_eq!(view["state"], "released");
    assert_eq!(view["validity_ms"], 0);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        view["expires_at"].as_u64().unwrap() <= now_ms,
        "a released lease says it expires in the future: {view}"
    );
    for action in ["keepalive", "renew"] {
        let (status, body) = sidecar.post(&format!("{path}/{action}")).await;
        assert_eq!((status, body["reason"].as_str()), (410, Some("lease_lost")));
    }
}

/// A DELETE whose client goes away mid-request still releases the lease: it ends
/// `released`, its keys are gone, and it is never renewed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_caller_went_away_still_completes() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let lease = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 2000})).await;
    let path = format!("/v1/leases/{}", id_of(&lease));
    // Two of three masters hold writes for 400 ms: the release cannot finish before the
    // client gives up after 30 ms.
    for i in 0..2 {
        fleet.command(i, &["CLIENT", "PAUSE", "400", "WRITE"]);
    }
    let url = format!("{}{path}", sidecar.base);
    let abandoned = sidecar
        .http
        .delete(url)
        .timeout(Duration::from_millis(30))
        .send()
        .await;
    assert!(abandoned.is_err(), "the DELETE was not abandoned");
    assert_eventually!(
        sidecar.get(&path).await.1["state"] == "released",
        3,
        "an abandoned DELETE left the lease {}",
        sidecar.get(&path).await.1
    );
    assert_eventually!(fleet.lock_keys_on(&[0, 1, 2]).is_empty(), 3, "keys left");
    // Past the lease's renewal time (half its TTL) nothing writes the key back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// Holds writes on two of three masters for `pause_ms`, then asks `path` (a lease) to renew
/// for 2 s and goes away after 50 ms, before the renewal can have an outcome.
async fn abandon_a_renewal_for_2_s(
    fleet: &TestFleet,
    sidecar: &TestSidecar,
    path: &str,
    pause_ms: &str,
) {
    for i in 0..2 {
        fleet.command(i, &["CLIENT", "PAUSE", pause_ms, "WRITE"]);
    }
    let abandoned = sidecar
        .http
        .post(format!("{}{path}/renew", sidecar.base))
        .json(&json!({"ttl_ms": 2000}))
        .timeout(Duration::from_millis(50))
        .send()
        .await;
    assert!(abandoned.is_err(), "the renewal was not abandoned");
}

/// A renewal to a shorter TTL whose client goes away before its outcome still shortens the
/// lease: the masters run it (two of three only once their writes resume, after the renewal
/// gave up on them), their keys then expire 2 s later, and the lease must not be reported
/// held past that — another owner can take the resource then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_renewal_whose_caller_went_away_still_shortens_the_lease() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "a", "ttl_ms": 10_000, "auto_renew": false});
    let lease = held(&sidecar, "job", body).await;
    let path = format!("/v1/leases/{}", id_of(&lease));
    abandon_a_renewal_for_2_s(&fleet, &sidecar, &path, "1000").await;
    let (_, view) = sidecar.get(&path).await;
    let validity = view["validity_ms"].as_u64().unwrap();
    assert!(
        validity <= 2000,
        "still {validity} ms valid after a renewal for 2000 ms: {view}"
    );
    // Every master has run the renewal (the last two at about 1 s) and its 2 s have passed.
    tokio::time::sleep(Duration::from_millis(3300)).await;
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
    let (status, other) = sidecar.acquire("job", json!({"owner": "b"})).await;
    assert_eq!(status, 200, "{other}");
    let (_, view) = sidecar.get(&path).await;
    assert_eq!(view["state"], "lost", "two holders: {view}");
}

/// The same with auto-renewal: the shortened lease is renewed again in time (its next renewal
/// brought forward to fit the shorter end), not lost when the 2 s run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auto_renewed_lease_shortened_by_an_abandoned_renewal_is_renewed_in_time() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "a", "ttl_ms": 10_000});
    let lease = held(&sidecar, "job", body).await;
    let path = format!("/v1/leases/{}", id_of(&lease));
    abandon_a_renewal_for_2_s(&fleet, &sidecar, &path, "500").await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let (_, view) = sidecar.get(&path).await;
    assert_eq!(
        view["state"], "held",
        "lost after an abandoned shorter renewal: {view}"
    );
}

/// A lease lost after its escalation reached only a minority leaves no key behind: the
/// shadows the live minority took are released as soon as the lease is lost, and the late
/// writes the frozen masters run when they wake are released after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_leaves_no_shadow_behind() {
    let mut fleet = TestFleet::start(5);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let lease = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 1000})).await;
    let mut events = sidecar.events(&id_of(&lease)).await;
    for i in 0..3 {
        fleet.servers[i].pause();
    }
    let frozen = Instant::now();
    let mut lost = false;
    while let Some((name, _)) = events.next(Duration::from_millis(2000)).await {
        if name == "lost" {
            lost = true;
            break;
        }
    }
    assert!(lost, "no lost event within {:?}", frozen.elapsed());
    assert_eventually!(
        fleet.lock_keys_on(&[3, 4]).is_empty(),
        1,
        "a lost lease left its keys on the live masters: {:?}",
        fleet.lock_keys_on(&[3, 4])
    );
    for i in 0..3 {
        fleet.servers[i].resume();
    }
    let all = [0, 1, 2, 3, 4];
    assert_eventually!(
        fleet.lock_keys_on(&all).is_empty(),
        3,
        "late writes of a lost lease were left: {:?}",
        fleet.lock_keys_on(&all)
    );
}

/// A proxy in front of every master of `fleet`, in order.
async fn proxies(fleet: &TestFleet) -> Vec<FaultProxy> {
    let starts = fleet.servers.iter().map(|s| FaultProxy::start(s.port()));
    futures_util::future::join_all(starts).await
}

fn urls(proxies: &[FaultProxy]) -> Vec<String> {
    proxies.iter().map(FaultProxy::url).collect()
}

/// A renewal asking a shorter TTL that runs on the masters but reaches them too late — their
/// answers slow, their breakers open, so the shadow that follows is refused — caps the lease
/// at `call start + ttl − drift`: the holder is told its lease ends when the shortened keys
/// may, and is no longer holding it when another client is granted the resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_reaches_a_majority_too_late_caps_the_lease() {
    let fleet = TestFleet::start(3);
    let proxies = proxies(&fleet).await;
    let fast_probe = [("REDLEASE__FLEET__PROBE_INTERVAL_MS", "50")];
    let a = TestSidecar::start_on(urls(&proxies), &fast_probe).await;
    let b = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "a", "ttl_ms": 3000, "auto_renew": false});
    let path = format!("/v1/leases/{}", id_of(&held(&a, "job", body).await));
    for proxy in &proxies[1..] {
        proxy.set_downstream(Fault::Delay(Duration::from_millis(300)));
    }
    // PINGs (every 50 ms, given 50 ms) now time out: both masters' breakers open.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, refused) = a
        .post_json(&format!("{path}/renew"), json!({"ttl_ms": 300}))
        .await;
    // The renewal's call started before this answer came.
    let answered = Instant::now();
    assert_eq!(
        (status, refused["reason"].as_str()),
        (503, Some("no_quorum"))
    );
    let (_, view) = a.get(&path).await;
    let cap = Duration::from_millis(300).saturating_sub(answered.elapsed());
    let validity = Duration::from_millis(view["validity_ms"].as_u64().unwrap());
    assert!(
        validity <= cap,
        "the lease kept {validity:?} of validity after a sent renewal of 300 ms: {view}"
    );
    let contender = json!({"owner": "b", "ttl_ms": 1000, "wait_ms": 3000});
    let (status, granted) = b.acquire("job", contender).await;
    assert_eq!(status, 200, "{granted}");
    let (_, a_now) = a.get(&path).await;
    assert!(
        a_now["state"] != "held" && a_now["state"] != "degraded",
        "two holders: b was granted while a reads {a_now}"
    );
}

/// No shadow is sent once its answers could land after the validity. Every master answers
/// 150 ms late: PINGs (given 200 ms) succeed, so the breakers stay closed, but every renewal
/// (given 100 ms) and every shadow near the end of the validity misses its time, and the
/// lease is lost. Every shadow call left the sidecar before the validity ended, and no key
/// of the lost lease is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shadow_is_sent_after_the_validity() {
    let fleet = TestFleet::start(3);
    let proxies = proxies(&fleet).await;
    let settings = [
        ("REDLEASE__FLEET__PROBE_INTERVAL_MS", "200"),
        ("REDLEASE__LEASE__RENEW_FRACTION", "0.8"),
        ("REDLEASE__LEASE__RENEW_JITTER_MS", "1"),
    ];
    let a = TestSidecar::start_on(urls(&proxies), &settings).await;
    let lease = held(&a, "job", json!({"owner": "a", "ttl_ms": 1000})).await;
    let valid_until_ms = lease["expires_at"].as_u64().unwrap();
    let mut events = a.events(&id_of(&lease)).await;
    for proxy in &proxies {
        proxy.set_downstream(Fault::Delay(Duration::from_millis(150)));
    }
    let mut lost = false;
    while let Some((name, _)) = events.next(Duration::from_millis(2000)).await {
        assert_ne!(name, "renewed", "renewed while every answer came too late");
        if name == "lost" {
            lost = true;
            break;
        }
    }
    assert!(lost, "no lost event");
    let sha = redlease::scripts::SCRIPTS.shadow.sha1().as_bytes().to_vec();
    let shadows: Vec<u64> = proxies.iter().flat_map(|p| p.sent_at(&sha)).collect();
    assert!(!shadows.is_empty(), "the lease never escalated");
    let late: Vec<u64> = shadows
        .iter()
        .filter(|&&at| at > valid_until_ms)
        .map(|at| at - valid_until_ms)
        .collect();
    assert!(
        late.is_empty(),
        "shadows sent this many ms after the validity: {late:?}"
    );
    let all = [0, 1, 2];
    assert_eventually!(
        fleet.lock_keys_on(&all).is_empty(),
        2,
        "keys of a lost lease left: {:?}",
        fleet.lock_keys_on(&all)
    );
}

/// A release that finds a master's connection reset (and the master unreachable for a while)
/// is not dropped: it is sent again once the master is reachable, so the master does not keep
/// the key for its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_reconnect_reaches_the_master_later() {
    let fleet = TestFleet::start(3);
    let proxy = FaultProxy::start(fleet.servers[0].port()).await;
    let mut urls = fleet.urls();
    urls[0] = proxy.url();
    let engine_fleet =
        redlease::Fleet::connect(&urls, &redlease_testkit::fleet::test_fleet_options())
            .await
            .unwrap();
    let _probe = engine_fleet.spawn_probe(Duration::from_millis(50));
    let engine = redlease::Redlock::new(engine_fleet, Default::default());
    let ttl = Duration::from_secs(10);
    let lease = engine.acquire("job", "a", ttl).await.unwrap();
    let lease = lease.lease().expect("granted").clone();
    engine.settle(Duration::from_secs(1)).await;
    assert_eq!(fleet.lock_keys(0).len(), 1);
    proxy.refuse(true);
    proxy.reset_all();
    let node = &engine.fleet().nodes()[0];
    assert_eventually!(
        !node.wire().is_connected(),
        2,
        "the link survived its reset"
    );
    let released = engine.release("job", lease.id).await.unwrap();
    assert!(released.confirmed(), "{released:?}");
    proxy.refuse(false);
    assert_eventually!(
        fleet.lock_keys(0).is_empty(),
        3,
        "the master that was reconnecting kept the released lease's key"
    );
}

/// A lease whose release cannot be confirmed (a majority frozen) answers a renewal at once
/// with 410: the release keeps trying without holding the lease's other requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_being_released_refuses_renewal_at_once() {
    let mut fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let lease = held(&sidecar, "job", json!({"owner": "a", "ttl_ms": 5000})).await;
    let path = format!("/v1/leases/{}", id_of(&lease));
    fleet.servers[0].pause();
    fleet.servers[1].pause();
    let (status, _) = sidecar.delete(&path).await;
    assert_eq!(status, 503);
    let asked = Instant::now();
    let renew_path = format!("{path}/renew");
    let renew = sidecar.post(&renew_path);
    let (status, body) = tokio::time::timeout(Duration::from_secs(2), renew)
        .await
        .expect("a renewal of a releasing lease hung");
    assert_eq!((status, body["reason"].as_str()), (410, Some("lease_lost")));
    assert!(asked.elapsed() < Duration::from_millis(500));
    fleet.servers[0].resume();
    fleet.servers[1].resume();
    assert_eventually!(
        sidecar.get(&path).await.1["state"] == "released",
        5,
        "never released"
    );
}

//! Leader election through the sidecar's HTTP API, on real masters: one leader at a time and
//! its term, the leader read, proclamations and resignation, observers' event streams, and
//! frozen masters. The engine's own tests (the term on every master, the proclamation
//! script, observers fed by the channel) are in `engine`; the CLI's in `cli`, the Rust
//! client's in `client`.

mod cli;
mod client;
mod engine;

use std::time::Duration;

use redlease_testkit::sidecar::{EventStream, TestSidecar};
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Campaigns for `resource` with `body`: status and answer.
async fn campaign(sidecar: &TestSidecar, resource: &str, body: Value) -> (u16, Value) {
    let path = format!("/v1/elections/{resource}/campaign");
    sidecar.post_json(&path, body).await
}

/// The election as `GET /v1/elections/{resource}` answers it (insisting on a 200).
async fn election(sidecar: &TestSidecar, resource: &str) -> Value {
    let (status, view) = sidecar.get(&format!("/v1/elections/{resource}")).await;
    assert_eq!(status, 200, "{view}");
    view
}

/// Opens the observe stream of `resource`.
async fn observe(sidecar: &TestSidecar, resource: &str) -> EventStream {
    let url = format!("{}/v1/elections/{resource}/observe", sidecar.base);
    let response = sidecar.http.get(url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    EventStream::from_response(response)
}

/// The next observed event, insisting on one within `timeout`.
async fn next(events: &mut EventStream, timeout: Duration) -> (String, Value) {
    let event = events.next(timeout).await;
    event.unwrap_or_else(|| panic!("no event within {timeout:?}"))
}

/// The next event that is not `unknown`: a campaign takes the election's lock, then writes
/// its term, so a read between the two may find fewer than a quorum agreeing on the whole
/// value (`unknown`, as the API allows while the leadership changes).
async fn next_known(events: &mut EventStream, timeout: Duration) -> (String, Value) {
    loop {
        let (name, data) = next(events, timeout).await;
        if name != "unknown" {
            return (name, data);
        }
    }
}

fn text(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap().to_string()
}

/// A campaign grants one leader, whose fencing token is its term; a rival with no wait gets
/// 409 `held`; the leader read names the leader, its value and term; a proclamation changes
/// the value and keeps the term; a lock's lease does not proclaim, nor does an ended one;
/// after the resignation the election is vacant, and the next leader's term is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_its_term_rises() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "a", "value": "10.0.0.1:80", "ttl_ms": 5000});
    let (status, leader) = campaign(&sidecar, "db", body).await;
    assert_eq!(status, 200, "{leader}");
    assert_eq!(
        (text(&leader, "resource"), text(&leader, "value")),
        ("db".into(), "10.0.0.1:80".into())
    );
    let term = leader["term"].as_u64().unwrap();
    assert_eq!(leader["fencing_token"].as_u64(), Some(term));
    let id = text(&leader, "lease_id");

    let rival = json!({"owner": "b", "value": "10.0.0.2:80", "wait_ms": 0});
    let (status, refused) = campaign(&sidecar, "db", rival).await;
    assert_eq!(
        (status, text(&refused, "reason")),
        (409, "held".into()),
        "{refused}"
    );
    assert_eq!(refused["acquired"], false);

    let read = election(&sidecar, "db").await;
    assert_eq!(text(&read, "state"), "leader");
    assert_eq!(
        (text(&read, "owner"), text(&read, "lease_id")),
        ("a".into(), id.clone())
    );
    assert_eq!(
        (read["term"].as_u64(), text(&read, "value")),
        (Some(term), "10.0.0.1:80".into())
    );
    assert!(read["validity_ms"].as_u64().unwrap() > 4000, "{read}");

    let proclaim = format!("/v1/leases/{id}/proclaim");
    let (status, lease) = sidecar
        .post_json(&proclaim, json!({"value": "10.0.0.9:80"}))
        .await;
    assert_eq!(status, 200, "{lease}");
    assert_eq!(
        (lease["term"].as_u64(), text(&lease, "value")),
        (Some(term), "10.0.0.9:80".into())
    );
    let read = election(&sidecar, "db").await;
    assert_eq!(
        (read["term"].as_u64(), text(&read, "value")),
        (Some(term), "10.0.0.9:80".into())
    );
    let (status, bad) = sidecar
        .post_json(&proclaim, json!({"value": "a\u{1}b"}))
        .await;
    assert_eq!(
        (status, text(&bad, "reason")),
        (400, "invalid_value".into())
    );

    let (_, lock) = sidecar.acquire("db", json!({"owner": "c"})).await;
    let lock_proclaim = format!("/v1/leases/{}/proclaim", text(&lock, "lease_id"));
    let (status, refused) = sidecar
        .post_json(&lock_proclaim, json!({"value": "x"}))
        .await;
    assert_eq!(
        (status, text(&refused, "reason")),
        (409, "not_a_campaign".into())
    );
    assert!(
        lock.get("term").is_none() && lock.get("value").is_none(),
        "{lock}"
    );

    let (status, resigned) = sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(
        (status, resigned["released"].as_bool()),
        (200, Some(true)),
        "{resigned}"
    );
    assert_eq!(election(&sidecar, "db").await, json!({"state": "vacant"}));
    let (status, gone) = sidecar.post_json(&proclaim, json!({"value": "late"})).await;
    assert_eq!((status, text(&gone, "reason")), (410, "lease_lost".into()));

    let next = json!({"owner": "b", "value": "10.0.0.2:80"});
    let (status, successor) = campaign(&sidecar, "db", next).await;
    assert_eq!(status, 200, "{successor}");
    assert!(successor["term"].as_u64().unwrap() > term, "{successor}");
}

/// An observer sees the leader, the proclaimed value (same term), the vacancy after the
/// resignation, the next leader (a higher term), and that leader's death without a
/// resignation (not renewed) as a vacancy within its TTL and a poll; terms never go down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_change_and_a_dead_leaders_vacancy() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let mut events = observe(&sidecar, "db").await;
    let wait = Duration::from_secs(3);
    assert_eq!(
        next(&mut events, wait).await,
        ("vacant".into(), json!({"state": "vacant"}))
    );

    let (_, first) = campaign(&sidecar, "db", json!({"owner": "a", "value": "one"})).await;
    let (name, seen) = next_known(&mut events, wait).await;
    assert_eq!(
        (name.as_str(), text(&seen, "value")),
        ("leader", "one".into())
    );
    assert_eq!(seen["term"], first["term"]);
    let id = text(&first, "lease_id");
    sidecar
        .post_json(
            &format!("/v1/leases/{id}/proclaim"),
            json!({"value": "two"}),
        )
        .await;
    let (name, seen) = next(&mut events, wait).await;
    assert_eq!(
        (name.as_str(), text(&seen, "value")),
        ("leader", "two".into())
    );
    assert_eq!(seen["term"], first["term"]);
    sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(next(&mut events, wait).await.0, "vacant");

    let ttl = Duration::from_millis(800);
    let body = json!({"owner": "b", "value": "three", "ttl_ms": 800, "auto_renew": false});
    let sent = Instant::now();
    let (status, second) = campaign(&sidecar, "db", body).await;
    assert_eq!(status, 200, "{second}");
    let (name, seen) = next_known(&mut events, wait).await;
    assert_eq!(
        (name.as_str(), seen["term"].clone()),
        ("leader", second["term"].clone())
    );
    assert!(seen["term"].as_u64() > first["term"].as_u64());
    let (name, _) = next(&mut events, wait).await;
    let after = sent.elapsed();
    assert_eq!(name, "vacant");
    let bound = ttl + Duration::from_millis(200) + Duration::from_millis(200);
    eprintln!(
        "a dead leader (TTL 800 ms) seen vacant {} ms after its campaign was sent",
        after.as_millis()
    );
    assert!(after <= bound, "vacant after {after:?}; bound {bound:?}");
}

/// With three masters of five frozen, a campaign answers 503 `no_quorum` and the leader read
/// `unknown`; with two frozen, a campaign is granted and the three live masters carry its
/// term and value, and once the others thaw, the read names the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_masters_give_no_quorum_and_an_unknown_leader() {
    let mut fleet = TestFleet::start(5);
    let env = [("REDLEASE__FLEET__PROBE_INTERVAL_MS", "100")];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    for server in &mut fleet.servers[..3] {
        server.pause();
    }
    let body = json!({"owner": "a", "value": "x", "ttl_ms": 2000});
    let (status, refused) = campaign(&sidecar, "db", body).await;
    assert_eq!(
        (status, text(&refused, "reason")),
        (503, "no_quorum".into()),
        "{refused}"
    );
    assert_eq!(election(&sidecar, "db").await, json!({"state": "unknown"}));
    fleet.servers[0].resume();
    // Master 0 is back once its breaker closes (the probe): wait for a quorum.
    let body = json!({"owner": "a", "value": "x", "ttl_ms": 2000, "wait_ms": 5000});
    let (status, leader) = campaign(&sidecar, "db", body).await;
    assert_eq!(status, 200, "{leader}");
    let stored = format!(
        "{}|a\u{1f}{}\u{1f}x",
        text(&leader, "lease_id"),
        leader["term"].as_u64().unwrap()
    );
    for i in [0, 3, 4] {
        let held = fleet.command(i, &["GET", "redlease:elect:db"]).bulk();
        assert_eq!(held.as_deref(), Some(stored.as_str()), "master {i}");
    }
    let read = election(&sidecar, "db").await;
    assert_eq!(
        (text(&read, "state"), read["term"].clone()),
        ("leader".into(), leader["term"].clone())
    );
    for server in &mut fleet.servers[1..3] {
        server.resume();
    }
}

/// Observe streams share the event streams' cap: past `http.max_event_streams` open, the
/// next answers 429 `too_many_streams`; closing one frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_streams_are_capped_with_the_event_streams() {
    let fleet = TestFleet::start(3);
    let env = [("REDLEASE__HTTP__MAX_EVENT_STREAMS", "2")];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let first = observe(&sidecar, "a").await;
    let _second = observe(&sidecar, "b").await;
    let url = format!("{}/v1/elections/c/observe", sidecar.base);
    let refused = sidecar.http.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(text(&body, "reason"), "too_many_streams");
    drop(first);
    redlease_testkit::assert_eventually!(
        sidecar.http.get(&url).send().await.unwrap().status() == 200,
        3,
        "a closed observe stream kept its place"
    );
}

/// Heartbeats do not starve an observer: with heartbeats every 100 ms (a 400 ms idle timeout)
/// and three masters of five frozen, so that each read of the masters waits out the
/// per-master timeout, reads still end and the observer is told `unknown`, then the leader
/// once the masters thaw. The stream is read all along (by a task of its own), as an observer
/// must be to keep it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_do_not_starve_an_observer_of_slow_reads() {
    let mut fleet = TestFleet::start(5);
    let env = [("REDLEASE__LEASE__IDLE_TIMEOUT_MS", "400")];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    for server in &mut fleet.servers[..3] {
        server.pause();
    }
    let mut events = observe(&sidecar, "db").await;
    let (told, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let reading = tokio::spawn(async move {
        while let Some(event) = events.next(Duration::from_secs(10)).await {
            if told.send(event).is_err() {
                return;
            }
        }
    });
    assert_eq!(next_heard(&mut heard).await.0, "unknown");
    for server in &mut fleet.servers[..3] {
        server.resume();
    }
    let body = json!({"owner": "a", "value": "x", "ttl_ms": 2000, "wait_ms": 5000});
    let (status, leader) = campaign(&sidecar, "db", body).await;
    assert_eq!(status, 200, "{leader}");
    loop {
        let (name, data) = next_heard(&mut heard).await;
        if name == "leader" {
            assert_eq!(data["term"], leader["term"]);
            break;
        }
    }
    reading.abort();
}

/// The next event a reading task passed on, insisting on one within 5 s.
async fn next_heard(
    heard: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
) -> (String, Value) {
    let event = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await;
    event.ok().flatten().expect("no event within 5 s")
}

/// The sidecar's shutdown ends its observe streams, so its drain does not wait out the grace
/// period (5 s) for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_the_observe_streams() {
    let fleet = TestFleet::start(3);
    let mut sidecar = TestSidecar::start(&fleet, &[]).await;
    let mut events = observe(&sidecar, "db").await;
    assert_eq!(next(&mut events, Duration::from_secs(3)).await.0, "vacant");
    let started = Instant::now();
    sidecar.shut_down().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    let ended = events.next_or_end(Duration::from_secs(3)).await;
    assert!(ended.is_err(), "the stream is still open: {ended:?}");
}

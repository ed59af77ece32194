//! Fair waiting across processes on real masters: grants follow the tickets' order across
//! engines and sidecars, a dead waiter delays the queue by at most its heartbeat TTL, a purged
//! waiter learns it, and the queue's keys go with their waiters.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::{AcquireOutcome, EngineOptions, Shortfall};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::json;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);

fn options(heartbeat_ms: u64) -> EngineOptions {
    EngineOptions {
        fair_heartbeat: Duration::from_millis(heartbeat_ms),
        ..EngineOptions::default()
    }
}

/// Six fair waiters of two engines, queued 150 ms apart behind a holder, are granted in the
/// order they queued, each once the one before released; the queue's keys are gone after.
#[tokio::test]
async fn grants_follow_the_queue_across_engines() {
    let fleet = TestFleet::start(3);
    let engines = [
        Arc::new(fleet.engine_with(options(2000)).await),
        Arc::new(fleet.engine_with(options(2000)).await),
    ];
    let holder = engines[0].acquire("job", "holder", TTL).await.unwrap();
    let holder = holder.lease().unwrap().clone();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let (engine, order) = (Arc::clone(&engines[i % 2]), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            let wait = Duration::from_secs(15);
            let outcome = engine.acquire_fair_with_wait("job", &owner, TTL, wait);
            let AcquireOutcome::Acquired(lease) = outcome.await.unwrap() else {
                panic!("waiter {i} not granted");
            };
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(50)).await;
            engine.release("job", lease.id).await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    engines[0].release("job", holder.id).await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
    for engine in &engines {
        engine.settle(Duration::from_secs(2)).await;
    }
    for i in 0..3 {
        let queue = fleet.command(i, &["KEYS", "redlease:*queue*"]).strings();
        let beats = fleet.command(i, &["KEYS", "redlease:beats:*"]).strings();
        assert!(
            queue.is_empty() && beats.is_empty(),
            "master {i}: {queue:?} {beats:?}"
        );
    }
}

/// A waiter whose process went away (its wait cancelled, no more beats) holds the queue up for
/// at most its heartbeat TTL: the waiter behind it is granted soon after.
#[tokio::test]
async fn a_dead_waiter_delays_the_queue_by_at_most_its_heartbeat() {
    let fleet = TestFleet::start(3);
    let engine = Arc::new(fleet.engine_with(options(600)).await);
    let holder = engine.acquire("job", "holder", TTL).await.unwrap();
    let holder = holder.lease().unwrap().clone();
    let dead = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let wait = Duration::from_secs(20);
            let _ = engine
                .acquire_fair_with_wait("job", "dead", TTL, wait)
                .await;
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let live = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let wait = Duration::from_secs(10);
            let outcome = engine
                .acquire_fair_with_wait("job", "live", TTL, wait)
                .await;
            (outcome.unwrap(), Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    dead.abort();
    let released = Instant::now();
    engine.release("job", holder.id).await.unwrap();
    let (outcome, granted_at) = tokio::time::timeout(Duration::from_secs(15), live)
        .await
        .unwrap()
        .unwrap();
    assert!(outcome.lease().is_some(), "{outcome:?}");
    let delay = granted_at - released;
    assert!(
        delay < Duration::from_millis(600 + 500),
        "the dead waiter held the queue {delay:?}"
    );
}

/// A live waiter that a majority purged (its entry gone) learns it at its next beat.
#[tokio::test]
async fn a_purged_waiter_learns_it() {
    let fleet = TestFleet::start(3);
    let engine = Arc::new(fleet.engine_with(options(600)).await);
    let _holder = engine.acquire("job", "holder", TTL).await.unwrap();
    let waiting = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let wait = Duration::from_secs(10);
            engine.acquire_fair_with_wait("job", "w", TTL, wait).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..2 {
        let deleted = fleet.command(i, &["DEL", "redlease:queue:job", "redlease:beats:job"]);
        assert_eq!(format!("{deleted:?}"), "Int(2)", "master {i}");
    }
    let outcome = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the purged waiter kept waiting")
        .unwrap()
        .unwrap();
    match outcome {
        AcquireOutcome::Contended(refusal) => assert_eq!(refusal.cause, Shortfall::Dequeued),
        other => panic!("{other:?}"),
    }
}

/// Through two sidecars, fair waiters queued in turn on either are granted in that order; a
/// plain `held` answer without `fair` is unchanged.
#[tokio::test]
async fn grants_follow_the_queue_across_sidecars() {
    let fleet = TestFleet::start(3);
    let sidecars = [
        TestSidecar::start(&fleet, &[]).await,
        TestSidecar::start(&fleet, &[]).await,
    ];
    let hold = json!({"owner": "holder", "ttl_ms": 5000});
    let (status, holder) = sidecars[0].acquire("job", hold).await;
    assert_eq!(status, 200);
    let (order, waiters) = queue_fair_waiters(&sidecars, 4, 5000, 15000).await;
    let id = holder["lease_id"].as_str().unwrap();
    sidecars[0].delete(&format!("/v1/leases/{id}")).await;
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
}

/// The same across two sidecars on five masters while one master is frozen and another is
/// restarted empty (its queue lost: the waiters' beats put them back): grants still follow
/// the order the waiters queued in. (The sidecars run on worker threads: restarting a master
/// blocks the test's own thread for a while, which must not stall the waiters' heartbeats.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_follow_the_queue_with_masters_frozen_and_restarted() {
    let mut fleet = TestFleet::start(5);
    let env = [
        ("REDLEASE__FLEET__QUARANTINE_MS", "3000"),
        ("REDLEASE__LEASE__MAX_TTL_MS", "3000"),
    ];
    let sidecars = [
        TestSidecar::start(&fleet, &env).await,
        TestSidecar::start(&fleet, &env).await,
    ];
    let hold = json!({"owner": "holder", "ttl_ms": 3000});
    let (status, holder) = sidecars[0].acquire("job", hold).await;
    assert_eq!(status, 200);
    let (order, waiters) = queue_fair_waiters(&sidecars, 6, 3000, 30000).await;
    fleet.servers[0].pause();
    fleet.servers[1].restart();
    // Beats every ~670 ms put the waiters back on master 1.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let id = holder["lease_id"].as_str().unwrap();
    sidecars[0].delete(&format!("/v1/leases/{id}")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.servers[0].resume();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(40), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
}

/// Queues `n` fair waiters of `job` in turn on either sidecar, 150 ms apart (TTL and wait in
/// ms); each records its index once granted, holds 50–100 ms and releases. Answers the order
/// of the grants and the waiters' tasks.
async fn queue_fair_waiters(
    sidecars: &[TestSidecar; 2],
    n: usize,
    ttl_ms: u64,
    wait_ms: u64,
) -> (Arc<Mutex<Vec<usize>>>, Vec<tokio::task::JoinHandle<()>>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..n {
        let sidecar = &sidecars[i % 2];
        let (http, base, order) = (
            sidecar.http.clone(),
            sidecar.base.clone(),
            Arc::clone(&order),
        );
        waiters.push(tokio::spawn(async move {
            let body = json!({
                "owner": format!("w{i}"), "ttl_ms": ttl_ms, "wait_ms": wait_ms, "fair": true,
            });
            let url = format!("{base}/v1/locks/job/acquire");
            let answer = http.post(url).json(&body).send().await.unwrap();
            let status = answer.status();
            let lease: serde_json::Value = answer.json().await.unwrap();
            assert_eq!(status, 200, "waiter {i}: {lease}");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(50 + 50 * (i as u64 % 2))).await;
            let url = format!("{base}/v1/leases/{}", lease["lease_id"].as_str().unwrap());
            http.delete(url).send().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    (order, waiters)
}

/// Two fair waiters of one engine whose tickets are in the other order than the one they
/// began waiting in: the masters' head (the later waiter, its ticket lowered by hand) is
/// granted as soon as the lock is free, not once the other waiter of its process gives up.
#[tokio::test]
async fn the_masters_head_is_not_held_up_by_another_waiter_of_its_process() {
    let fleet = TestFleet::start(3);
    // With the release listener, as a sidecar's engine: one line of waiters per resource.
    let engine = Arc::new(fleet.engine_hearing_releases(options(2000)).await);
    let holder = engine.acquire("job", "holder", TTL).await.unwrap();
    let holder = holder.lease().unwrap().clone();
    let wait = Duration::from_secs(6);
    let first = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            engine
                .acquire_fair_with_wait("job", "first", TTL, wait)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let outcome = engine
                .acquire_fair_with_wait("job", "second", TTL, wait)
                .await;
            (outcome, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Put the second waiter first on every master: ticket 0.
    for i in 0..3 {
        let queued = fleet
            .command(i, &["ZRANGE", "redlease:queue:job", "0", "-1"])
            .strings();
        assert_eq!(queued.len(), 2, "master {i}: {queued:?}");
        fleet.command(i, &["ZADD", "redlease:queue:job", "0", &queued[1]]);
    }
    let freed = Instant::now();
    engine.release("job", holder.id).await.unwrap();
    let (outcome, granted_at) = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .unwrap()
        .unwrap();
    let AcquireOutcome::Acquired(lease) = outcome.unwrap() else {
        panic!("the masters' head was not granted");
    };
    assert_eq!(lease.owner, "second");
    assert!(
        granted_at - freed < Duration::from_millis(1500),
        "the masters' head waited {:?} for another waiter of its process",
        granted_at - freed
    );
    engine.release("job", lease.id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        outcome.lease().is_some(),
        "the first waiter was not granted after: {outcome:?}"
    );
}

/// Script calls master 0 has run so far (`EVAL` and `EVALSHA`, from `INFO commandstats`).
fn script_calls(fleet: &TestFleet) -> u64 {
    let info = fleet.command(0, &["INFO", "commandstats"]).bulk().unwrap();
    info.lines()
        .filter(|line| line.starts_with("cmdstat_eval:") || line.starts_with("cmdstat_evalsha:"))
        .filter_map(|line| {
            let calls = line.split_once("calls=")?.1;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Four fair waiters of an engine that hears releases (as a sidecar's), queued behind a lock
/// held for 10 s: the head sleeps until the holder's expiry or a release, and the three behind
/// it retry at an eighth of the heartbeat, not at the retry pace (10–100 ms). Over 3 s a
/// master runs about 3 × 12 of their attempts and 4 × 4.5 beats, where the retry pace would
/// run some 160 attempts. The queue still moves at once on a release.
#[tokio::test]
async fn waiters_behind_the_head_do_not_poll_at_the_retry_pace() {
    let fleet = TestFleet::start(3);
    let engine = Arc::new(fleet.engine_hearing_releases(options(2000)).await);
    let holder = engine.acquire("job", "holder", Duration::from_secs(10));
    let holder = holder.await.unwrap().lease().unwrap().clone();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let engine = Arc::clone(&engine);
        waiters.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            let wait = Duration::from_secs(20);
            let outcome = engine.acquire_fair_with_wait("job", &owner, TTL, wait);
            let lease = outcome.await.unwrap().lease().cloned().expect("granted");
            engine.release("job", lease.id).await.unwrap();
            Instant::now()
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = script_calls(&fleet);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = script_calls(&fleet) - before;
    eprintln!("script calls on master 0 in 3 s with 4 fair waiters: {calls}");
    assert!(calls < 80, "{calls} script calls in 3 s");
    let released = Instant::now();
    engine.release("job", holder.id).await.unwrap();
    for waiter in waiters {
        let done = tokio::time::timeout(Duration::from_secs(10), waiter);
        let done = done.await.unwrap().unwrap();
        assert!(
            done - released < Duration::from_secs(3),
            "the queue took {:?} to drain",
            done - released
        );
    }
}

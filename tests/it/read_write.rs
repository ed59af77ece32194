//! Read-write locks on real masters: readers share and a writer excludes them, a waiting
//! writer keeps new readers out, a writer that stops waiting withdraws, downgrade keeps the
//! holder covered, upgrade is refused, and each mode's keys are the lock's own.

use std::time::Duration;

use redlease::keys::{parse_lock_name, LockKind};
use redlease::redlock::read_write::{RwMode, RwRequest, INTENT_TTL};
use redlease::{AcquireOutcome, Lease, Redlock};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::json;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);

fn request(owner: &str, mode: RwMode) -> RwRequest<'_> {
    RwRequest {
        resource: "doc",
        owner,
        ttl: TTL,
        mode,
        beside: None,
    }
}

/// Reader `owner`'s lease, granted at once.
async fn reading(engine: &Redlock, owner: &str) -> Lease {
    granted(
        engine
            .acquire_rw(request(owner, RwMode::Read))
            .await
            .unwrap(),
    )
}

/// Writer `w` with a 20 s TTL: an intent it leaves stands that long unless withdrawn.
fn long_write() -> RwRequest<'static> {
    RwRequest {
        ttl: Duration::from_secs(20),
        ..request("w", RwMode::Write)
    }
}

/// One attempt of a new reader, `r2`, now.
async fn new_reader(engine: &Redlock) -> AcquireOutcome {
    engine
        .acquire_rw(request("r2", RwMode::Read))
        .await
        .unwrap()
}

/// Whether a new reader is refused now.
async fn a_reader_is_kept_out(engine: &Redlock) -> bool {
    matches!(new_reader(engine).await, AcquireOutcome::Contended(_))
}

fn granted(outcome: AcquireOutcome) -> Lease {
    match outcome {
        AcquireOutcome::Acquired(lease) => lease,
        other => panic!("not granted: {other:?}"),
    }
}

/// Two readers share the lock; a writer is refused until both are gone, then holds it alone;
/// its token is above every earlier reader's.
#[tokio::test]
async fn readers_share_and_a_writer_excludes_them() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let r1 = reading(&engine, "r1").await;
    let r2 = reading(&engine, "r2").await;
    for reader in [&r1, &r2] {
        let kind = parse_lock_name(&reader.resource).unwrap().kind;
        assert!(matches!(kind, LockKind::Reader(_)), "{kind:?}");
    }
    assert_ne!(r1.resource, r2.resource, "two readers, two reader slots");
    let refused = engine
        .acquire_rw(request("w", RwMode::Write))
        .await
        .unwrap();
    assert!(
        matches!(refused, AcquireOutcome::Contended(_)),
        "{refused:?}"
    );
    // The exclusive lock of the same resource is another lock.
    assert!(engine
        .acquire("doc", "x", TTL)
        .await
        .unwrap()
        .lease()
        .is_some());

    engine.release(&r1.resource, r1.id).await.unwrap();
    let still = engine
        .acquire_rw(request("w", RwMode::Write))
        .await
        .unwrap();
    assert!(
        still.lease().is_none(),
        "a writer beside a reader: {still:?}"
    );
    engine.release(&r2.resource, r2.id).await.unwrap();
    let w = granted(
        engine
            .acquire_rw(request("w", RwMode::Write))
            .await
            .unwrap(),
    );
    assert_eq!(parse_lock_name(&w.resource).unwrap().kind, LockKind::Writer);
    assert!(w.fencing_token > r2.fencing_token && w.fencing_token > r1.fencing_token);
    let reader = engine
        .acquire_rw(request("r3", RwMode::Read))
        .await
        .unwrap();
    assert!(
        reader.lease().is_none(),
        "a reader beside a writer: {reader:?}"
    );
    let writer = engine
        .acquire_rw(request("w2", RwMode::Write))
        .await
        .unwrap();
    assert!(writer.lease().is_none(), "two writers: {writer:?}");
    engine.settle(Duration::from_secs(2)).await;
    for i in 0..3 {
        let keys = fleet.command(i, &["KEYS", "redlease:rw:doc:*"]).strings();
        assert_eq!(keys, ["redlease:rw:doc:w"], "master {i}");
    }
}

/// A writer waiting for a reader keeps new readers out (its intent), and is granted once the
/// reader leaves, before any newcomer.
#[tokio::test]
async fn a_waiting_writer_is_not_starved_by_new_readers() {
    let fleet = TestFleet::start(3);
    let engine = std::sync::Arc::new(fleet.engine().await);
    let r1 = reading(&engine, "r1").await;
    let waiting = {
        let engine = std::sync::Arc::clone(&engine);
        tokio::spawn(async move {
            let wait = Duration::from_secs(4);
            let outcome = engine.acquire_rw_with_wait(request("w", RwMode::Write), wait);
            (outcome.await.unwrap(), Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        a_reader_is_kept_out(&engine).await,
        "a reader overtook a waiting writer"
    );
    let released_at = Instant::now();
    engine.release(&r1.resource, r1.id).await.unwrap();
    let (outcome, granted_at) = waiting.await.unwrap();
    let w = granted(outcome);
    assert!(w.fencing_token > r1.fencing_token);
    assert!(
        granted_at - released_at < Duration::from_secs(1),
        "the writer waited {:?} after the reader left",
        granted_at - released_at
    );
    engine.settle(Duration::from_secs(2)).await;
    for i in 0..3 {
        let intent = fleet.command(i, &["EXISTS", "redlease:rw:doc:wi"]);
        assert_eq!(
            format!("{intent:?}"),
            "Int(0)",
            "master {i}: the intent stayed"
        );
    }
}

/// A writer that stops waiting ungranted withdraws its intent: readers come in at once.
#[tokio::test]
async fn a_writer_that_gives_up_lets_readers_in() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let _r1 = reading(&engine, "r1").await;
    let wait = Duration::from_millis(300);
    let gave_up = engine
        .acquire_rw_with_wait(request("w", RwMode::Write), wait)
        .await
        .unwrap();
    assert!(gave_up.lease().is_none());
    let r2 = new_reader(&engine).await;
    assert!(
        r2.lease().is_some(),
        "the intent outlived its writer's wait: {r2:?}"
    );
}

/// A reader of another process, kept out by a waiting writer's intent (which would stand for
/// the writer's 20 s TTL), is let in as soon as the writer gives up: withdrawing the intent
/// announces it, as a release does.
#[tokio::test]
async fn a_reader_kept_out_by_an_intent_hears_it_withdrawn() {
    let fleet = TestFleet::start(3);
    let (writers, readers) = (
        fleet.engine_hearing_releases(Default::default()).await,
        fleet.engine_hearing_releases(Default::default()).await,
    );
    let _r1 = reading(&readers, "r1").await;
    let long = long_write();
    let writer = writers.acquire_rw_with_wait(long, Duration::from_millis(600));
    let reader = async {
        // Once the writer's intent stands.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        let outcome = readers
            .acquire_rw_with_wait(request("r2", RwMode::Read), Duration::from_secs(5))
            .await
            .unwrap();
        (outcome, started.elapsed())
    };
    let (gave_up, (outcome, waited)) = tokio::join!(writer, reader);
    assert!(gave_up.unwrap().lease().is_none());
    assert!(
        outcome.lease().is_some(),
        "the reader was not let in: {outcome:?}"
    );
    assert!(
        waited < Duration::from_millis(1500),
        "the reader waited {waited:?} for an intent withdrawn after 600 ms"
    );
}

/// A waiting writer whose caller goes away (its wait dropped) withdraws its intent from every
/// master at once: a reader comes in right after, not once the intent's 20 s have passed.
#[tokio::test]
async fn a_waiting_writer_whose_caller_went_away_withdraws_its_intent() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let _r1 = reading(&engine, "r1").await;
    let long = long_write();
    let waiting = engine.acquire_rw_with_wait(long, Duration::from_secs(5));
    let abandoned = tokio::time::timeout(Duration::from_millis(300), waiting).await;
    assert!(
        abandoned.is_err(),
        "the writer's wait answered: {abandoned:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r2 = new_reader(&engine).await;
    assert!(
        r2.lease().is_some(),
        "the intent outlived its writer's caller: {r2:?}"
    );
}

/// A waiting writer whose process died (its wait neither answered nor dropped: nothing of it
/// runs again) keeps new readers out only until its intent expires, `INTENT_TTL` after its
/// last attempt, not for its 20 s TTL.
#[tokio::test]
async fn a_dead_waiting_writer_keeps_readers_out_for_the_intent_ttl_at_most() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let _r1 = reading(&engine, "r1").await;
    let mut waiting = Box::pin(engine.acquire_rw_with_wait(long_write(), Duration::from_secs(30)));
    let polled = tokio::time::timeout(Duration::from_millis(300), &mut waiting).await;
    assert!(polled.is_err(), "the writer's wait answered: {polled:?}");
    // Its process is gone: no withdrawal, no further attempt.
    std::mem::forget(waiting);
    let died = Instant::now();
    assert!(a_reader_is_kept_out(&engine).await, "the intent stood");
    let r2 = engine
        .acquire_rw_with_wait(request("r2", RwMode::Read), Duration::from_secs(10))
        .await
        .unwrap();
    assert!(r2.lease().is_some(), "{r2:?}");
    let kept = died.elapsed();
    assert!(
        kept < INTENT_TTL + Duration::from_secs(1),
        "readers were kept out {kept:?} by a dead writer's intent"
    );
}

/// A live waiting writer sets its intent again at least every `INTENT_REFRESH`, even when it
/// listens for releases (as in a sidecar) and the reader it waits for has 10 s left, and even
/// with a TTL (300 ms) shorter than that pause: readers are kept out for as long as it waits,
/// well past `INTENT_TTL`.
#[tokio::test]
async fn a_live_waiting_writer_keeps_its_intent_past_the_intent_ttl() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine_hearing_releases(Default::default()).await;
    let engine = std::sync::Arc::new(engine);
    let reader = RwRequest {
        ttl: Duration::from_secs(10),
        ..request("r1", RwMode::Read)
    };
    let r1 = granted(engine.acquire_rw(reader).await.unwrap());
    let waiting = {
        let engine = std::sync::Arc::clone(&engine);
        tokio::spawn(async move {
            let short = RwRequest {
                ttl: Duration::from_millis(300),
                ..request("w", RwMode::Write)
            };
            let outcome = engine.acquire_rw_with_wait(short, Duration::from_secs(10));
            outcome.await.unwrap()
        })
    };
    let start = Instant::now();
    while start.elapsed() < INTENT_TTL * 2 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(
            a_reader_is_kept_out(&engine).await,
            "a reader came in {:?} into the writer's wait",
            start.elapsed()
        );
    }
    engine.release(&r1.resource, r1.id).await.unwrap();
    let w = granted(waiting.await.unwrap());
    engine.release(&w.resource, w.id).await.unwrap();
}

/// A waiting writer granted by a quorum while one master still held a reader (there alone, a
/// minority's leftover) leaves no intent on that master: it would keep every reader out there
/// for the intent's TTL once the write is released.
#[tokio::test]
async fn a_granted_writer_leaves_no_intent_on_a_master_that_refused_it() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let ghost = "0123456789abcdef0123456789abcdef|ghost";
    fleet.command(2, &["SET", "redlease:rw:doc:r0", ghost, "PX", "20000"]);
    let long = long_write();
    let write = engine.acquire_rw_with_wait(long, Duration::from_secs(2));
    let write = granted(write.await.unwrap());
    engine.settle(Duration::from_secs(2)).await;
    let intent = fleet.command(2, &["EXISTS", "redlease:rw:doc:wi"]);
    assert_eq!(format!("{intent:?}"), "Int(0)", "the intent stayed");
    engine.release(&write.resource, write.id).await.unwrap();
}

/// Through the sidecar: a write lease downgrades to a read (another reader joins, a writer
/// does not), the write lease ends released; an owner holding a read cannot upgrade.
#[tokio::test]
async fn downgrade_keeps_the_holder_covered_and_upgrade_is_refused() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = |owner: &str, mode: &str| json!({"owner": owner, "mode": mode, "ttl_ms": 5000});
    let (status, write) = sidecar
        .post_json("/v1/rwlocks/doc/acquire", body("a", "write"))
        .await;
    assert_eq!(status, 200, "{write}");
    assert_eq!(write["mode"], "write");
    let id = write["lease_id"].as_str().unwrap();
    let (status, read) = sidecar.post(&format!("/v1/leases/{id}/downgrade")).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(
        (read["mode"].as_str(), read["owner"].as_str()),
        (Some("read"), Some("a"))
    );
    assert!(read["fencing_token"].as_u64() > write["fencing_token"].as_u64());
    let (_, old) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(old["state"], "released", "{old}");
    let (status, other) = sidecar
        .post_json("/v1/rwlocks/doc/acquire", body("b", "read"))
        .await;
    assert_eq!(
        status, 200,
        "another reader beside the downgraded one: {other}"
    );
    let (status, refused) = sidecar
        .post_json("/v1/rwlocks/doc/acquire", body("c", "write"))
        .await;
    assert_eq!((status, refused["reason"].as_str()), (409, Some("held")));
    let (status, upgrade) = sidecar
        .post_json("/v1/rwlocks/doc/acquire", body("a", "write"))
        .await;
    assert_eq!(
        (status, upgrade["reason"].as_str()),
        (409, Some("upgrade_refused"))
    );
    let read_id = read["lease_id"].as_str().unwrap();
    let (status, not_writer) = sidecar
        .post(&format!("/v1/leases/{read_id}/downgrade"))
        .await;
    assert_eq!(
        (status, not_writer["reason"].as_str()),
        (409, Some("not_a_writer"))
    );
    let (status, bad) = sidecar
        .post_json(
            "/v1/rwlocks/doc/acquire",
            json!({"owner": "d", "mode": "exclusive"}),
        )
        .await;
    assert_eq!(
        (status, bad["reason"].as_str()),
        (400, Some("invalid_mode"))
    );
}

/// `lock run --mode read` lets two commands read at once, each with `REDLEASE_MODE`, while a
/// `--mode write` is not run (exit 3); the Rust client downgrades a write to a read.
#[tokio::test]
async fn lock_run_reads_together_and_the_client_downgrades() {
    use std::process::{Command, Stdio};
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let run = |mode: &str, script: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_redlease"));
        command
            .args([
                "lock", "run", "doc", "--mode", mode, "--", "sh", "-c", script,
            ])
            .env("REDLEASE__MASTERS", &masters)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    let readers: Vec<_> = (0..2)
        .map(|_| run("read", "echo $REDLEASE_MODE; sleep 2").spawn().unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let writer = run("write", "echo ran").output().unwrap();
    assert_eq!(writer.status.code(), Some(3), "{writer:?}");
    assert!(writer.stdout.is_empty(), "a writer ran beside readers");
    for reader in readers {
        let out = tokio::task::spawn_blocking(move || reader.wait_with_output().unwrap())
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "read");
    }

    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let client = redlease::client::Client::new(&sidecar.base).unwrap();
    let write = client
        .rwlock("doc", redlease::client::RwMode::Write)
        .owner("a")
        .send()
        .await
        .unwrap();
    assert_eq!(write.mode(), Some("write"));
    let read = write.downgrade().await.map_err(|(error, _)| error).unwrap();
    assert_eq!(read.mode(), Some("read"));
    let other = client
        .rwlock("doc", redlease::client::RwMode::Read)
        .owner("b")
        .send()
        .await
        .unwrap();
    let (Ok(_), Ok(_)) = (read.release().await, other.release().await) else {
        panic!("releases failed");
    };
}

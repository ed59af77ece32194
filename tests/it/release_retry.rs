//! Releases a master answers with an error reply (`-BUSY` while a script runs too long) are
//! sent again until it answers them with a result, against real masters.

use std::thread::JoinHandle;
use std::time::Duration;

use redlease::{EngineOptions, FleetOptions, LeaseId};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::{test_fleet_options, TestEngine};
use redlease_testkit::resp::{Resp, RespConn};
use redlease_testkit::TestFleet;
use tokio::time::Instant;

/// Far longer than each test: a key a release left behind outlives every wait here.
const TTL: Duration = Duration::from_secs(20);
/// How long the busy master runs its script (and answers `-BUSY` to everything else).
const BUSY_FOR: Duration = Duration::from_millis(1500);
/// Spins on the server's clock for `ARGV[1]` microseconds, then returns 1: it ends by itself.
const BUSY_SCRIPT: &str = "local t = redis.call('TIME') \
    while true do \
      local n = redis.call('TIME') \
      if (n[1] - t[1]) * 1000000 + (n[2] - t[2]) > tonumber(ARGV[1]) then break end \
    end \
    return 1";

/// An engine whose releases are retried for longer than `TTL` (the retries give up after
/// the fleet's quarantine, which bounds every TTL).
async fn long_lived_engine(fleet: &TestFleet) -> TestEngine {
    let options = EngineOptions {
        max_ttl: TTL,
        ..EngineOptions::default()
    };
    let fleet_options = FleetOptions {
        quarantine: Duration::from_secs(30),
        ..test_fleet_options()
    };
    let engine = fleet.engine_custom(options, fleet_options).await;
    engine.all_up().await;
    engine
}

/// Takes "job" on every master and returns its lease id once each master holds the key.
async fn held_everywhere(fleet: &TestFleet, engine: &TestEngine) -> LeaseId {
    let outcome = engine.acquire("job", "a", TTL).await.unwrap();
    let id = outcome.lease().expect("granted").id;
    assert!(engine.settle(Duration::from_secs(2)).await);
    for i in 0..fleet.servers.len() {
        assert_eq!(fleet.lock_keys(i).len(), 1, "master {i} missed the grant");
    }
    id
}

/// Runs `BUSY_SCRIPT` on master `i` from a connection of its own, and returns once the master
/// answers `-BUSY`; the thread answers the script's reply when it ends.
fn keep_busy(fleet: &TestFleet, i: usize) -> JoinHandle<Resp> {
    let threshold = fleet.command(i, &["CONFIG", "SET", "busy-reply-threshold", "10"]);
    assert_eq!(threshold, Resp::Simple("OK".into()));
    let mut conn = RespConn::connect(fleet.servers[i].port()).unwrap();
    conn.set_read_timeout(BUSY_FOR + Duration::from_secs(5));
    let micros = BUSY_FOR.as_micros().to_string();
    let script = std::thread::spawn(move || conn.command(&["EVAL", BUSY_SCRIPT, "0", &micros]));
    let start = Instant::now();
    while !matches!(fleet.command(i, &["PING"]), Resp::Error(e) if e.starts_with("BUSY")) {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "master {i} never answered -BUSY"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    script
}

/// EVALSHA calls master `i` refused without running them (`-BUSY` among them).
fn rejected_evalsha(fleet: &TestFleet, i: usize) -> u64 {
    let info = fleet.command(i, &["INFO", "commandstats"]).bulk();
    let info = info.unwrap_or_default();
    let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:"));
    let field = line.and_then(|l| {
        l.split([':', ','])
            .find(|f| f.starts_with("rejected_calls="))
    });
    field.map_or(0, |f| f["rejected_calls=".len()..].parse().unwrap())
}

/// A release master 0 answers `-BUSY` is confirmed by the others and sent to master 0 again
/// (every 100 ms, not in a hot loop) until it answers: its key goes once the script ends,
/// long before its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_answered_busy_is_sent_again_until_the_master_deletes_the_key() {
    let fleet = TestFleet::start(3);
    let engine = long_lived_engine(&fleet).await;
    let id = held_everywhere(&fleet, &engine).await;
    let script = keep_busy(&fleet, 0);
    let released = engine.release("job", id).await.unwrap();
    assert!(
        !script.is_finished(),
        "the script ended before the release reached master 0"
    );
    assert!(released.confirmed(), "{released:?}");
    assert_eq!(released.deleted_on, 2, "{released:?}");
    assert_eq!(script.join().unwrap(), Resp::Int(1));
    assert_eventually!(
        fleet.lock_keys(0).is_empty(),
        3,
        "master 0 kept the key of a release it answered -BUSY: {:?}",
        fleet.lock_keys(0)
    );
    let rejected = rejected_evalsha(&fleet, 0);
    assert!(
        (2..=30).contains(&rejected),
        "master 0 refused {rejected} EVALSHA while busy for {BUSY_FOR:?}"
    );
    assert!(fleet.lock_keys_on(&[1, 2]).is_empty());
}

/// While a connected master answers a release `-BUSY`, the release stays pending and `settle`
/// says so, returning at its timeout; once the master answers, it settles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_returns_at_its_timeout_while_a_master_answers_busy() {
    let fleet = TestFleet::start(3);
    let engine = long_lived_engine(&fleet).await;
    let id = held_everywhere(&fleet, &engine).await;
    let script = keep_busy(&fleet, 0);
    assert!(engine.release("job", id).await.unwrap().confirmed());
    let start = Instant::now();
    let settled = engine.settle(Duration::from_millis(300)).await;
    let waited = start.elapsed();
    assert!(
        !settled,
        "settled while master 0 still owed the release a result"
    );
    assert!(
        waited < Duration::from_millis(800),
        "settle overran its timeout: {waited:?}"
    );
    assert!(!script.is_finished(), "the script ended too soon to tell");
    assert_eq!(script.join().unwrap(), Resp::Int(1));
    assert!(
        engine.settle(Duration::from_secs(3)).await,
        "the release was not settled once master 0 answered"
    );
    assert!(fleet.lock_keys(0).is_empty(), "{:?}", fleet.lock_keys(0));
}

/// A release two of three masters answer `-BUSY` is not confirmed when it returns, and never
/// while they are busy; followed, it is confirmed by the answers its retries get once their
/// scripts end, each master counted once, without anyone sending the release again whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_release_is_confirmed_by_the_answers_its_retries_get() {
    let fleet = TestFleet::start(3);
    let engine = long_lived_engine(&fleet).await;
    let id = held_everywhere(&fleet, &engine).await;
    let scripts = [keep_busy(&fleet, 0), keep_busy(&fleet, 1)];
    let busy_since = Instant::now();
    let mut release = engine.release_followed("job", id).await.unwrap();
    let first = release.outcome();
    assert!(!first.confirmed(), "confirmed by one master: {first:?}");
    assert_eq!((first.answered, first.deleted_on), (1, 1), "{first:?}");
    let mut rounds = 0;
    while !release.outcome().confirmed() {
        let outcome = release.next_round().await;
        rounds += 1;
        if !outcome.confirmed() {
            assert!(
                busy_since.elapsed() < BUSY_FOR + Duration::from_secs(3),
                "still unconfirmed long after the masters were free: {outcome:?}"
            );
        }
    }
    assert!(
        busy_since.elapsed() >= BUSY_FOR - Duration::from_millis(100),
        "confirmed while a majority was busy"
    );
    assert!(rounds >= 2, "followed without rounds: {rounds}");
    let confirmed = release.outcome();
    assert!((2..=3).contains(&confirmed.answered), "{confirmed:?}");
    assert_eq!(confirmed.deleted_on, confirmed.answered, "{confirmed:?}");
    for script in scripts {
        assert_eq!(script.join().unwrap(), Resp::Int(1));
    }
    assert_eventually!(
        fleet.lock_keys_on(&[0, 1, 2]).is_empty(),
        3,
        "keys left: {:?}",
        fleet.lock_keys_on(&[0, 1, 2])
    );
}

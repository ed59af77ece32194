//! The engine while masters are stopped, frozen (SIGSTOP) or restarted.

use std::time::Duration;

use redlease::AcquireOutcome;
use redlease::NodeTimeoutPolicy;
use redlease::{EngineOptions, Shortfall};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::QUARANTINE;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(10);
/// Leases that fit in the test fleets' restart quarantine.
const SHORT_TTL: Duration = Duration::from_millis(800);

fn short_leases() -> EngineOptions {
    EngineOptions {
        max_ttl: QUARANTINE,
        ..EngineOptions::default()
    }
}

fn fixed_timeout(timeout: Duration) -> EngineOptions {
    EngineOptions {
        node_timeout: NodeTimeoutPolicy {
            fixed: Some(timeout),
            ..NodeTimeoutPolicy::default()
        },
        ..EngineOptions::default()
    }
}

/// With 2 of 5 masters stopped, the remaining 3 still grant, and release cleans them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stopped_masters_of_five_still_grant() {
    let mut fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    fleet.servers[0].stop();
    fleet.servers[1].stop();
    let outcome = engine.acquire("job", "a", TTL).await.unwrap();
    let lease = outcome.lease().expect("3 of 5 masters are a quorum");
    assert!(engine.release("job", lease.id).await.unwrap().released());
    assert_eq!(fleet.lock_keys_on(&[2, 3, 4]), Vec::<String>::new());
}

/// With 3 of 5 masters stopped there is no quorum, and the live masters keep nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_stopped_masters_of_five_mean_no_quorum_and_nothing_left() {
    let mut fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    for i in 0..3 {
        fleet.servers[i].stop();
    }
    let outcome = engine.acquire("job", "a", TTL).await.unwrap();
    let AcquireOutcome::NoQuorum(refusal) = outcome else {
        panic!("granted without a quorum: {outcome:?}");
    };
    assert_eq!(refusal.cause, Shortfall::TooFewAnswers);
    assert_eq!(fleet.lock_keys_on(&[3, 4]), Vec::<String>::new());
}

/// A frozen master does not hold up a grant the others can give: the engine returns at
/// quorum, long before that master's (here deliberately long) timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_does_not_delay_a_quorum_grant() {
    let mut fleet = TestFleet::start(3);
    let engine = fleet
        .engine_with(fixed_timeout(Duration::from_secs(5)))
        .await;
    engine.all_up().await;
    fleet.servers[0].pause();
    let start = Instant::now();
    let outcome = engine.acquire("job", "a", TTL).await.unwrap();
    let elapsed = start.elapsed();
    assert!(outcome.lease().is_some(), "{outcome:?}");
    assert!(
        elapsed < Duration::from_secs(2),
        "waited {elapsed:?} for a frozen master"
    );
    fleet.servers[0].resume();
}

/// When the quorum needs frozen masters, the acquisition ends at the per-node timeout with
/// no quorum — it is never stalled by them — and their late writes are released once they wake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_masters_cost_at_most_the_node_timeout() {
    let mut fleet = TestFleet::start(3);
    let timeout = Duration::from_millis(300);
    let engine = fleet.engine_with(fixed_timeout(timeout)).await;
    engine.all_up().await;
    fleet.servers[0].pause();
    fleet.servers[1].pause();
    let start = Instant::now();
    let outcome = engine.acquire("job", "a", TTL).await.unwrap();
    let elapsed = start.elapsed();
    assert!(
        matches!(outcome, AcquireOutcome::NoQuorum(_)),
        "{outcome:?}"
    );
    assert!(
        elapsed >= timeout,
        "gave up before the timeout: {elapsed:?}"
    );
    assert!(
        elapsed < timeout * 4,
        "stalled past the node timeout: {elapsed:?}"
    );
    assert_eq!(fleet.lock_keys(2), Vec::<String>::new());

    fleet.servers[0].resume();
    fleet.servers[1].resume();
    let all = [0, 1, 2];
    assert_eventually!(
        fleet.lock_keys_on(&all).is_empty(),
        5,
        "late writes were not released"
    );
}

/// Masters restarted with empty memory, one after another (each once the one before has
/// rejoined: with three masters, a second loss during a quarantine leaves no quorum of members
/// to raise a fence from), are quarantined and rejoin with their fence raised; tokens keep
/// increasing across every restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_masters_rejoin_and_tokens_keep_increasing() {
    let mut fleet = TestFleet::start(3);
    let engine = fleet.engine_with(short_leases()).await;
    let mut last = 0;
    for round in 0..6 {
        let all_up = || engine.fleet().nodes().iter().all(|n| n.is_up());
        assert_eventually!(all_up(), 5, "round {round}: a master never rejoined");
        fleet.servers[round % 3].restart();
        let outcome = engine
            .acquire_with_wait("job", "a", SHORT_TTL, Duration::from_secs(5))
            .await;
        let lease = outcome
            .unwrap()
            .lease()
            .cloned()
            .expect("granted after restart");
        assert!(
            lease.fencing_token > last,
            "token went from {last} to {}",
            lease.fencing_token
        );
        last = lease.fencing_token;
        engine.release("job", lease.id).await.unwrap();
    }
}

/// A blocking acquisition is granted once the holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_acquisition_waits_for_the_holder() {
    let fleet = TestFleet::start(3);
    let engine = std::sync::Arc::new(fleet.engine().await);
    let held = engine
        .acquire("job", "a", TTL)
        .await
        .unwrap()
        .lease()
        .cloned()
        .unwrap();
    let waiter = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine
                .acquire_with_wait("job", "b", TTL, Duration::from_secs(5))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    engine.release("job", held.id).await.unwrap();
    let outcome = waiter.await.unwrap().unwrap();
    let lease = outcome.lease().expect("granted after release");
    assert_eq!(lease.owner, "b");
    assert!(lease.fencing_token > held.fencing_token);
}

/// A restarted master takes no votes during its quarantine (it forgot the lock), then rejoins
/// with its fence counter raised to the fleet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_master_takes_no_votes_during_quarantine() {
    let mut fleet = TestFleet::start(3);
    let engine = fleet.engine_with(short_leases()).await;
    let held = engine.acquire("job", "a", SHORT_TTL).await.unwrap();
    let token = held.lease().unwrap().fencing_token;
    fleet.servers[0].restart();
    let node = &engine.fleet().nodes()[0];
    assert_eventually!(
        node.is_quarantined(Instant::now()),
        5,
        "restart not noticed"
    );
    assert!(!node.is_up());

    let contender = engine.acquire("job", "b", SHORT_TTL).await.unwrap();
    assert!(
        matches!(contender, AcquireOutcome::Contended(_)),
        "{contender:?}"
    );
    assert_eq!(
        fleet.lock_keys(0),
        Vec::<String>::new(),
        "a quarantined master voted"
    );

    engine.all_up().await;
    assert!(!node.is_quarantined(Instant::now()));
    assert!(fleet.fence(0) >= token, "rejoined without its fence raised");
}

/// A master that loses its memory while connected (FLUSHALL: no reconnect, no NOSCRIPT) gives
/// away a held lock on its next SET NX; its fence counter going back voids that vote, so it
/// cannot complete a second majority, and it is quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_lost_its_memory_while_connected_does_not_vote() {
    let fleet = TestFleet::start(5);
    let engine = fleet.engine_with(short_leases()).await;
    let held = engine.acquire("job", "a", SHORT_TTL).await.unwrap();
    let token = held.lease().expect("granted").fencing_token;
    engine.settle(Duration::from_secs(2)).await;
    // The holder's majority is now masters 0, 1 and 2; master 0 then forgets it.
    for i in [3, 4] {
        fleet.command(i, &["DEL", "redlease:lock:job"]);
    }
    fleet.command(0, &["FLUSHALL"]);

    let contender = engine.acquire("job", "b", SHORT_TTL).await.unwrap();
    let refusal = contender.refusal().expect("a second majority was granted");
    assert_eq!(
        refusal.votes[0],
        redlease::NodeVote::Failed(redlease::CallError::LostMemory)
    );
    assert_eq!(fleet.lock_keys_on(&[0, 3, 4]), Vec::<String>::new());
    let node = &engine.fleet().nodes()[0];
    assert_eventually!(node.is_quarantined(Instant::now()), 5, "not quarantined");
    engine.all_up().await;
    assert!(fleet.fence(0) > token, "rejoined without its fence raised");
}

/// A process that first meets a master lacking the fleet marker, while the others have it,
/// treats it as restarted `uptime` ago and quarantines it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_missing_the_fleet_marker_is_quarantined_on_first_contact() {
    let mut fleet = TestFleet::start(3);
    drop(fleet.engine().await);
    fleet.servers[2].restart();
    let engine = fleet.engine_with(short_leases()).await;
    let node = &engine.fleet().nodes()[2];
    let run_id = fleet.run_id(2);
    assert_eventually!(node.run_id() == Some(run_id.clone()), 5, "never identified");
    assert!(node.is_quarantined(Instant::now()));
    assert!(engine.fleet().nodes()[0].is_up());
    engine.all_up().await;
    assert_eq!(fleet.command(2, &["EXISTS", "redlease:fleet"]).int(), 1);
}

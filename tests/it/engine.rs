//! The engine against a healthy fleet: grants, contention, foreign leases, validity, clean-up.

use std::time::Duration;

use redlease::{AcquireOutcome, ExtendOutcome, LeaseId};
use redlease::{EngineOptions, Extension, NodeVote, Shortfall};
use redlease_testkit::assert_eventually;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);

/// A grant writes the lease on a quorum, and its release removes it from every master.
#[tokio::test]
async fn acquire_then_release_leaves_nothing_behind() {
    let fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    let outcome = engine.acquire("job", "worker-1", TTL).await.unwrap();
    let lease = outcome.lease().unwrap().clone();
    assert_eq!(
        (lease.resource.as_str(), lease.owner.as_str()),
        ("job", "worker-1")
    );
    assert!(lease.fencing_token >= 1);
    assert!(lease.validity > Duration::ZERO && lease.validity < TTL);
    let holding = (0..5).filter(|&i| !fleet.lock_keys(i).is_empty()).count();
    assert!(holding >= 3, "lease on only {holding} masters");

    let released = engine.release("job", lease.id).await.unwrap();
    assert!(released.released());
    assert!(released.answered >= 3, "returned before a quorum answered");
    assert!(engine.settle(Duration::from_secs(2)).await);
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2, 3, 4]), Vec::<String>::new());
}

/// A second acquisition of a held resource is contended, learns when the holder expires, and
/// leaves the holder's quorum as it was (every master holds the holder's lease or nothing).
#[tokio::test]
async fn a_held_resource_is_contended() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let first = engine.acquire("job", "a", TTL).await.unwrap();
    let AcquireOutcome::Contended(refusal) = engine.acquire("job", "b", TTL).await.unwrap() else {
        panic!("expected contention");
    };
    assert_eq!(refusal.cause, Shortfall::Held);
    assert!(refusal.holder_remaining().unwrap() <= TTL);
    engine.settle(Duration::from_secs(2)).await;
    let holder = first.lease().unwrap().id.value_for("a");
    let values: Vec<Option<String>> = (0..3)
        .map(|i| fleet.command(i, &["GET", "redlease:lock:job"]).bulk())
        .collect();
    let held = values
        .iter()
        .filter(|v| v.as_deref() == Some(holder.as_str()))
        .count();
    assert!(held >= 2, "holder lost its quorum: {values:?}");
    assert!(values
        .iter()
        .all(|v| v.is_none() || v.as_deref() == Some(holder.as_str())));
}

/// Releasing or extending someone else's lease changes nothing on any master.
#[tokio::test]
async fn foreign_release_and_extend_change_nothing() {
    let fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    let lease = engine
        .acquire("job", "a", TTL)
        .await
        .unwrap()
        .lease()
        .unwrap()
        .clone();
    engine.settle(Duration::from_secs(2)).await;
    let stranger = LeaseId::random();

    let released = engine.release("job", stranger).await.unwrap();
    assert!(!released.released());
    let extended = engine
        .extend("job", stranger, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(extended, ExtendOutcome::Lost(_)), "{extended:?}");

    for i in 0..5 {
        let value = fleet.command(i, &["GET", "redlease:lock:job"]).bulk();
        assert_eq!(value, Some(lease.id.value_for("a")), "master {i}");
        let pttl = fleet.command(i, &["PTTL", "redlease:lock:job"]).int();
        assert!(
            pttl <= TTL.as_millis() as i64,
            "extended by a stranger on master {i}"
        );
    }
}

/// Our own extension renews every master and reports validity from its own start.
#[tokio::test]
async fn extend_renews_our_lease_everywhere() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let lease = engine
        .acquire("job", "a", Duration::from_secs(1))
        .await
        .unwrap();
    let id = lease.lease().unwrap().id;
    engine.settle(Duration::from_secs(2)).await;
    let start = Instant::now();
    let ExtendOutcome::Extended(renewal) = engine.extend("job", id, TTL).await.unwrap() else {
        panic!("extension refused");
    };
    assert!(renewal.valid_until <= start + TTL);
    assert!(renewal.validity > Duration::from_secs(4));
    for i in 0..3 {
        assert!(fleet.command(i, &["PTTL", "redlease:lock:job"]).int() > 4_000);
    }
}

/// `extend_many` judges every lease alone, in order, and sends one call per master for leases
/// that share a per-master timeout; a short lease (smaller timeout) goes in a call of its own
/// instead of shortening the long ones' timeout.
#[tokio::test]
async fn extend_many_judges_each_lease_and_groups_by_timeout() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let (short, long) = (Duration::from_millis(100), Duration::from_secs(5));
    let mut ids = Vec::new();
    for resource in ["a", "b", "c"] {
        let outcome = engine.acquire(resource, "o", long).await.unwrap();
        ids.push(outcome.lease().unwrap().id);
    }
    engine.settle(Duration::from_secs(2)).await;
    let extension = |resource: &str, id, ttl| Extension {
        resource: resource.to_string(),
        id,
        ttl,
    };
    let before = fleet.evalsha_calls(0);
    let batch = [
        extension("a", ids[0], long),
        extension("b", ids[1], short),
        extension("c", ids[2], long),
        extension("d", LeaseId::random(), long),
        extension("", ids[0], long),
    ];
    let outcomes = engine.extend_many(&batch).await;
    assert_eq!(
        fleet.evalsha_calls(0) - before,
        2,
        "one call for the 5 s leases, one for the 100 ms lease"
    );
    assert!(
        matches!(outcomes[0], Ok(ExtendOutcome::Extended(_))),
        "{:?}",
        outcomes[0]
    );
    assert!(
        matches!(outcomes[1], Ok(ExtendOutcome::Extended(_))),
        "{:?}",
        outcomes[1]
    );
    assert!(
        matches!(outcomes[2], Ok(ExtendOutcome::Extended(_))),
        "{:?}",
        outcomes[2]
    );
    assert!(
        matches!(outcomes[3], Ok(ExtendOutcome::Lost(_))),
        "not ours: {:?}",
        outcomes[3]
    );
    assert!(outcomes[4].is_err(), "an invalid entry gets its own error");
    assert!(fleet.command(0, &["PTTL", "redlease:lock:b"]).int() <= 100);
    assert!(fleet.command(0, &["PTTL", "redlease:lock:c"]).int() > 4_000);
}

/// A lease's validity is never reported positive once it has elapsed.
#[tokio::test]
async fn validity_is_never_positive_after_it_elapsed() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let ttl = Duration::from_millis(200);
    let lease = engine
        .acquire("job", "a", ttl)
        .await
        .unwrap()
        .lease()
        .unwrap()
        .clone();
    assert!(lease.remaining_validity(Instant::now()) <= ttl);
    tokio::time::sleep_until(lease.valid_until).await;
    assert_eq!(lease.remaining_validity(Instant::now()), Duration::ZERO);
    assert!(!lease.is_valid(Instant::now()));
}

/// When the masters answer only after the TTL has passed, the grant is refused and released,
/// never reported with a positive validity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_slower_than_its_ttl_is_refused() {
    let fleet = TestFleet::start(3);
    let options = EngineOptions {
        node_timeout: redlease::NodeTimeoutPolicy {
            fixed: Some(Duration::from_secs(2)),
            ..Default::default()
        },
        ..EngineOptions::default()
    };
    let engine = fleet.engine_with(options).await;
    engine.all_up().await;
    for i in 0..3 {
        fleet.command(i, &["CLIENT", "PAUSE", "400", "ALL"]);
    }
    let outcome = engine
        .acquire("job", "a", Duration::from_millis(200))
        .await
        .unwrap();
    let AcquireOutcome::NoQuorum(refusal) = outcome else {
        panic!("a grant outlived its TTL: {outcome:?}");
    };
    assert_eq!(refusal.cause, Shortfall::ValidityExpired);
    assert!(refusal
        .votes
        .iter()
        .all(|v| matches!(v, NodeVote::Granted { .. } | NodeVote::NoAnswer)));
    assert_eventually!(
        fleet.lock_keys_on(&[0, 1, 2]).is_empty(),
        5,
        "abandoned grant left keys"
    );
}

/// Thousands of contended acquire+release cycles leave no key on any master: every release
/// reaches each master after that master's own write, the late ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_cycles_leave_no_key_behind() {
    let fleet = TestFleet::start(5);
    let engine = std::sync::Arc::new(fleet.engine().await);
    let workers = (0..8).map(|w| {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut granted = 0;
            for round in 0..250 {
                let resource = format!("r{}", (w + round) % 4);
                let outcome = engine.acquire(&resource, "load", TTL).await.unwrap();
                if let Some(lease) = outcome.lease() {
                    granted += 1;
                    engine.release(&resource, lease.id).await.unwrap();
                }
            }
            granted
        })
    });
    let granted: usize = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .map(Result::unwrap)
        .sum();
    assert!(granted > 100, "only {granted} of 2000 attempts granted");
    assert!(engine.settle(Duration::from_secs(5)).await);
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2, 3, 4]), Vec::<String>::new());
}

/// An acquisition dropped mid-flight (its caller went away) releases whatever it wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquisition_releases_what_it_wrote() {
    let fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    engine.all_up().await;
    for round in 0..200 {
        let budget = Duration::from_micros(50 + (round % 10) * 100);
        let attempt = tokio::time::timeout(budget, engine.acquire("job", "a", TTL)).await;
        if let Ok(Ok(outcome)) = attempt {
            if let Some(lease) = outcome.lease() {
                engine.release("job", lease.id).await.unwrap();
            }
        }
    }
    assert!(engine.settle(Duration::from_secs(5)).await);
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2, 3, 4]), Vec::<String>::new());
}

/// Invalid input is an error before anything is sent.
#[tokio::test]
async fn invalid_input_is_refused_before_any_write() {
    let fleet = TestFleet::start(1);
    let engine = fleet.engine().await;
    assert!(engine.acquire("", "a", TTL).await.is_err());
    assert!(engine.acquire("a\u{0}b", "a", TTL).await.is_err());
    assert!(engine.acquire(&"x".repeat(513), "a", TTL).await.is_err());
    assert!(engine.acquire("job", "", TTL).await.is_err());
    assert!(engine
        .acquire("job", "a", Duration::from_millis(1))
        .await
        .is_err());
    assert!(engine
        .acquire("job", "a", Duration::from_secs(31))
        .await
        .is_err());
    assert_eq!(fleet.data_keys(0), Vec::<String>::new());
}

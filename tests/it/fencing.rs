//! Fencing tokens across successive holders while the granting majority changes.

use std::time::Duration;

use redlease::EngineOptions;
use redlease::{AcquireOutcome, FleetOptions, Lease};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(2);

/// The lease of a grant whose token exceeds `last`, which then becomes that token.
fn granted_above(outcome: &AcquireOutcome, last: &mut u64, round: usize) -> Lease {
    let lease = outcome.lease().cloned();
    let lease = lease.unwrap_or_else(|| panic!("round {round}: {outcome:?}"));
    let token = lease.fencing_token;
    assert!(token > *last, "round {round}: token {token} after {last}");
    *last = token;
    lease
}

/// Tokens strictly increase across 50 acquisitions while a different pair of the 5 masters is
/// frozen (SIGSTOP) each time, so each grant comes from a different majority with diverging
/// counters; lagging granted masters are raised to the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_while_frozen_masters_rotate() {
    let mut fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    let mut last = 0;
    for round in 0..50 {
        engine.all_up().await;
        let frozen = [round % 5, (round + 1) % 5];
        for &i in &frozen {
            fleet.servers[i].pause();
        }
        let outcome = engine.acquire("payments", "job", TTL).await.unwrap();
        let lease = granted_above(&outcome, &mut last, round);
        let live: Vec<usize> = (0..5).filter(|i| !frozen.contains(i)).collect();
        let at_token = live.iter().filter(|&&i| fleet.fence(i) >= last).count();
        assert_eq!(
            at_token, 3,
            "round {round}: the granting majority does not hold the token"
        );
        engine.release("payments", lease.id).await.unwrap();
        for &i in &frozen {
            fleet.servers[i].resume();
        }
    }
}

/// Tokens strictly increase while a different pair of the 5 masters is killed and restarted
/// empty before each acquisition: the pair sits out its quarantine (taking no votes), the other
/// three grant, and the pair rejoins with its fence raised to the fleet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_while_masters_restart_empty() {
    let mut fleet = TestFleet::start(5);
    let quarantine = Duration::from_millis(300);
    let options = EngineOptions {
        max_ttl: quarantine,
        ..EngineOptions::default()
    };
    let fleet_options = FleetOptions {
        quarantine,
        longest_ttl: quarantine,
        ..test_fleet_options()
    };
    let engine = fleet.engine_custom(options, fleet_options).await;
    let ttl = Duration::from_millis(250);
    let mut last = 0;
    for round in 0..10 {
        let restarted = [round % 5, (round + 1) % 5];
        for &i in &restarted {
            fleet.servers[i].restart();
        }
        for &i in &restarted {
            let run_id = fleet.run_id(i);
            let node = &engine.fleet().nodes()[i];
            let noticed = || node.run_id().as_ref() == Some(&run_id);
            assert_eventually!(noticed(), 5, "round {round}: restart of {i} not noticed");
        }
        let wait = Duration::from_secs(2);
        let outcome = engine
            .acquire_with_wait("payments", "job", ttl, wait)
            .await
            .unwrap();
        let lease = granted_above(&outcome, &mut last, round);
        for &i in &restarted {
            // Past its quarantine (a slow spell of the machine) a master has rejoined with its
            // fence raised and may vote: only a quarantined one must not have.
            let quarantined = engine.fleet().nodes()[i].is_quarantined(Instant::now());
            if quarantined {
                assert_eq!(
                    fleet.lock_keys(i),
                    Vec::<String>::new(),
                    "round {round}: master {i} voted while quarantined"
                );
            }
        }
        engine.release("payments", lease.id).await.unwrap();
        engine.all_up().await;
        for &i in &restarted {
            assert!(
                fleet.fence(i) >= last,
                "round {round}: master {i} rejoined below the token"
            );
        }
    }
}

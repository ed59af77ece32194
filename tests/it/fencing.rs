//! Fencing tokens across successive holders while the granting majority changes.

use std::time::Duration;

use crate::support::TestFleet;

const TTL: Duration = Duration::from_secs(2);

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
        let lease = outcome
            .lease()
            .cloned()
            .unwrap_or_else(|| panic!("round {round}: {outcome:?}"));
        assert!(
            lease.fencing_token > last,
            "round {round}: {} after {last}",
            lease.fencing_token
        );
        last = lease.fencing_token;
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

/// Tokens strictly increase while masters are killed and restarted empty, two at a time, in
/// rotation: successive live majorities always intersect, and restarted masters are raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_while_masters_restart_empty() {
    let mut fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    let mut last = 0;
    for round in 0..20 {
        let down = [round % 5, (round + 1) % 5];
        for &i in &down {
            fleet.servers[i].stop();
        }
        let outcome = engine.acquire("payments", "job", TTL).await.unwrap();
        let lease = outcome
            .lease()
            .cloned()
            .unwrap_or_else(|| panic!("round {round}: {outcome:?}"));
        assert!(
            lease.fencing_token > last,
            "round {round}: {} after {last}",
            lease.fencing_token
        );
        last = lease.fencing_token;
        engine.release("payments", lease.id).await.unwrap();
        for &i in &down {
            fleet.servers[i].restart();
        }
        engine.all_up().await;
    }
}

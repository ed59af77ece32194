//! Fair waiting for the kinds beyond the exclusive lock, on real masters: a semaphore's
//! permits, a read-write lock's readers and writers and an election's candidates are granted
//! in the order their waiters queued across engines, the kind's bound still holding; the
//! routes and their faults are in `http`.

mod http;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::redlock::read_write::{RwMode, RwRequest};
use redlease::redlock::Permits;
use redlease::{AcquireOutcome, Lease};
use redlease_testkit::fleet::TestEngine;
use redlease_testkit::TestFleet;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(15);

fn granted(outcome: AcquireOutcome) -> Lease {
    match outcome {
        AcquireOutcome::Acquired(lease) => lease,
        other => panic!("not granted: {other:?}"),
    }
}

fn rw(owner: &str, mode: RwMode) -> RwRequest<'_> {
    RwRequest {
        resource: "doc",
        owner,
        ttl: TTL,
        mode,
        beside: None,
    }
}

/// When one waiter was granted and when it released.
#[derive(Clone, Copy, Debug)]
struct Window {
    token: u64,
    granted: Instant,
    released: Instant,
}

/// Holds `lease` for `hold`, then releases it: its window.
async fn hold_then_release(engine: &TestEngine, lease: Lease, hold: Duration) -> Window {
    let granted = Instant::now();
    tokio::time::sleep(hold).await;
    let released = Instant::now();
    engine.release(&lease.resource, lease.id).await.unwrap();
    Window {
        token: lease.fencing_token,
        granted,
        released,
    }
}

/// Joins waiters, each within 30 s, answering their windows in the order they queued.
async fn join_all(waiters: Vec<JoinHandle<Window>>) -> Vec<Window> {
    let mut windows = Vec::new();
    for waiter in waiters {
        let window = tokio::time::timeout(Duration::from_secs(30), waiter);
        windows.push(window.await.unwrap().unwrap());
    }
    windows
}

/// Queues fair waiters of the read-write lock, 200 ms apart in the order given; each holds
/// what it is granted for 400 ms, then releases it.
async fn queue_rw(
    engine: &Arc<TestEngine>,
    waiters: [(&'static str, RwMode); 3],
) -> Vec<JoinHandle<Window>> {
    let mut queued = Vec::new();
    for (owner, mode) in waiters {
        let engine = Arc::clone(engine);
        queued.push(tokio::spawn(async move {
            let outcome = engine.acquire_rw_fair_with_wait(rw(owner, mode), WAIT);
            let lease = granted(outcome.await.unwrap());
            hold_then_release(&engine, lease, Duration::from_millis(400)).await
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    queued
}

/// Waiters of a semaphore of limit 2 on two engines, queued 150 ms apart behind two holders,
/// are granted in the order they queued (each grant's token above the one before: a grant
/// writes the fence counter, and the waiter behind is let try only once the one ahead left
/// the queue), the first two side by side once the holders are gone, never more than two
/// holding.
#[tokio::test]
async fn permits_follow_the_queue_across_engines() {
    let fleet = TestFleet::start(3);
    let engines = [
        Arc::new(fleet.engine().await),
        Arc::new(fleet.engine().await),
    ];
    let mut holders = Vec::new();
    for owner in ["h0", "h1"] {
        let permit = engines[0].acquire_permit("pool", owner, TTL, 2).await;
        holders.push(granted(permit.unwrap()));
    }
    let holding = Arc::new(AtomicUsize::new(2));
    let most = Arc::new(AtomicUsize::new(2));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let engine = Arc::clone(&engines[i % 2]);
        let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
        waiters.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            let outcome =
                engine.acquire_permit_fair_with_wait("pool", &owner, TTL, Permits::one(2), WAIT);
            let lease = granted(outcome.await.unwrap());
            let granted = Instant::now();
            let now_holding = holding.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now_holding, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            holding.fetch_sub(1, Ordering::SeqCst);
            let released = Instant::now();
            engine.release(&lease.resource, lease.id).await.unwrap();
            Window {
                token: lease.fencing_token,
                granted,
                released,
            }
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for holder in holders {
        holding.fetch_sub(1, Ordering::SeqCst);
        engines[0]
            .release(&holder.resource, holder.id)
            .await
            .unwrap();
    }
    let windows = join_all(waiters).await;
    let tokens: Vec<u64> = windows.iter().map(|w| w.token).collect();
    assert!(
        tokens.is_sorted(),
        "granted out of the queue's order: {tokens:?}"
    );
    assert!(most.load(Ordering::SeqCst) <= 2, "more than 2 permits held");
    // Side by side: the second was let in beside the first as soon as it left the queue.
    assert!(windows[1].granted < windows[0].released, "{windows:?}");
}

/// A holder takes one permit of two; a fair waiter for both queues, then one for one permit,
/// on another engine. The free slot does not go to the second waiter, queued after: the first
/// is granted both once the holder left, and the second only once they are released.
#[tokio::test]
async fn a_waiter_for_several_permits_is_not_passed_by_a_smaller_one() {
    let fleet = TestFleet::start(3);
    let engines = [
        Arc::new(fleet.engine().await),
        Arc::new(fleet.engine().await),
    ];
    let holder = granted(
        engines[0]
            .acquire_permit("pool", "h", TTL, 2)
            .await
            .unwrap(),
    );
    let mut waiters = Vec::new();
    for (i, count) in [2, 1].into_iter().enumerate() {
        let engine = Arc::clone(&engines[i]);
        waiters.push(tokio::spawn(async move {
            let permits = Permits { limit: 2, count };
            let owner = format!("w{count}");
            let outcome = engine.acquire_permit_fair_with_wait("pool", &owner, TTL, permits, WAIT);
            let lease = granted(outcome.await.unwrap());
            hold_then_release(&engine, lease, Duration::from_millis(300)).await
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One slot has been free all along: only the queue keeps the second waiter out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = Instant::now();
    engines[0]
        .release(&holder.resource, holder.id)
        .await
        .unwrap();
    let [both, one] = join_all(waiters).await[..] else {
        unreachable!("two waiters")
    };
    assert!(both.granted >= left, "granted beside the holder: {both:?}");
    assert!(
        both.released <= one.granted,
        "the smaller request passed the larger: {both:?} {one:?}"
    );
    assert!(both.token < one.token);
}

/// A reader holds; fair waiters queue in turn: a writer W, then readers R1 and R2. W is granted
/// first (though R1 and R2 could share the lock with the reader: strict FIFO), and R1 and R2
/// only once W released, side by side.
#[tokio::test]
async fn a_queued_writer_goes_before_the_readers_queued_after_it() {
    let fleet = TestFleet::start(3);
    let engine = Arc::new(fleet.engine().await);
    let r0 = granted(engine.acquire_rw(rw("r0", RwMode::Read)).await.unwrap());
    let waiters = queue_rw(
        &engine,
        [
            ("w", RwMode::Write),
            ("r1", RwMode::Read),
            ("r2", RwMode::Read),
        ],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    engine.release(&r0.resource, r0.id).await.unwrap();
    let [w, r1, r2] = join_all(waiters).await[..] else {
        unreachable!("three waiters")
    };
    assert!(
        w.token < r1.token && r1.token < r2.token,
        "{w:?} {r1:?} {r2:?}"
    );
    assert!(
        w.released <= r1.granted,
        "R1 beside the writer: {w:?} {r1:?}"
    );
    assert!(r2.granted < r1.released, "R2 not beside R1: {r1:?} {r2:?}");
}

/// A writer holds; fair waiters queue in turn: R1, then a writer W2, then R3. R1 is granted
/// when the writer releases, and R3, which could share the lock with R1, waits behind W2.
#[tokio::test]
async fn a_reader_queued_behind_a_writer_does_not_pass_it() {
    let fleet = TestFleet::start(3);
    let engine = Arc::new(fleet.engine().await);
    let w0 = granted(engine.acquire_rw(rw("w0", RwMode::Write)).await.unwrap());
    let waiters = queue_rw(
        &engine,
        [
            ("r1", RwMode::Read),
            ("w2", RwMode::Write),
            ("r3", RwMode::Read),
        ],
    )
    .await;
    engine.release(&w0.resource, w0.id).await.unwrap();
    let [r1, w2, r3] = join_all(waiters).await[..] else {
        unreachable!("three waiters")
    };
    assert!(
        r1.token < w2.token && w2.token < r3.token,
        "{r1:?} {w2:?} {r3:?}"
    );
    assert!(r1.released <= w2.granted && w2.released <= r3.granted);
}

/// Candidates of two engines, queued 150 ms apart behind a leader, become leader in the order
/// they queued, each with a higher term than the one before.
#[tokio::test]
async fn candidates_lead_in_the_order_they_queued() {
    let fleet = TestFleet::start(3);
    let engines = [
        Arc::new(fleet.engine().await),
        Arc::new(fleet.engine().await),
    ];
    let leader = engines[0].campaign("primary", "l", "10.0.0.1", TTL).await;
    let leader = granted(leader.unwrap());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5 {
        let (engine, order) = (Arc::clone(&engines[i % 2]), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let (owner, value) = (format!("c{i}"), format!("10.0.1.{i}"));
            let outcome = engine.campaign_fair_with_wait("primary", &owner, &value, TTL, WAIT);
            let lease = granted(outcome.await.unwrap());
            order.lock().unwrap().push((i, lease.fencing_token));
            let granted = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let released = Instant::now();
            engine.release(&lease.resource, lease.id).await.unwrap();
            Window {
                token: lease.fencing_token,
                granted,
                released,
            }
        }));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    engines[0]
        .release(&leader.resource, leader.id)
        .await
        .unwrap();
    join_all(waiters).await;
    let order = order.lock().unwrap().clone();
    let indices: Vec<usize> = order.iter().map(|&(i, _)| i).collect();
    assert_eq!(indices, [0, 1, 2, 3, 4], "{order:?}");
    assert!(
        order.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "{order:?}"
    );
    assert!(leader.fencing_token < order[0].1);
}

//! The fair variants of the kinds' acquisition scripts (`fair_head.lua` in front of
//! `semaphore_acquire.lua` and `rw_acquire.lua`), on a real master: only the head of the
//! queue is let try, then the kind's script decides; dead heads are purged first.

use std::time::Duration;

use redlease::scripts::SCRIPTS;
use redlease::LeaseId;

use super::{Master, FENCE};

const QUEUE: &str = "redlease:queue:pool\u{1f}s";
const BEATS: &str = "redlease:beats:pool\u{1f}s";
const SLOTS: &str = "redlease:sem:pool:";

/// Queues `waiter` with `ticket` and a heartbeat TTL of `ttl_ms`.
async fn enqueue(master: &Master, waiter: &str, ticket: u64, ttl_ms: u64) {
    let (ticket, ttl) = (ticket.to_string(), ttl_ms.to_string());
    let args = [waiter, ticket.as_str(), ttl.as_str(), "enqueue"];
    let queued = master
        .eval(&SCRIPTS.fair_enqueue, &[QUEUE, BEATS], &args)
        .await;
    assert_eq!(queued, Ok(1));
}

/// A permit of `pool` (limit 2, one permit, slots 0 then 1) for `waiter` by the fair variant.
async fn permit(master: &Master, waiter: &str) -> Result<Vec<i64>, String> {
    let value = LeaseId::random().value_for("o");
    let args = [
        waiter,
        SLOTS,
        value.as_str(),
        "5000",
        "2",
        "64",
        "1",
        "0",
        "1",
    ];
    let keys = [FENCE, QUEUE, BEATS];
    master
        .eval_as(&SCRIPTS.semaphore_acquire_fair, &keys, &args)
        .await
}

/// Only the head takes a slot (a waiter behind it, or not queued, is refused with nothing
/// written); once the head left, the next one takes the other slot beside it.
#[tokio::test]
async fn only_the_head_of_the_queue_takes_a_permit() {
    let master = Master::start().await;
    let (a, b, c) = (LeaseId::random(), LeaseId::random(), LeaseId::random());
    let (a, b, c) = (a.to_string(), b.to_string(), c.to_string());
    enqueue(&master, &a, 1, 5000).await;
    enqueue(&master, &b, 2, 5000).await;
    assert_eq!(permit(&master, &b).await, Ok(vec![-1, -1]));
    assert_eq!(permit(&master, &c).await, Ok(vec![-1, -1]));
    let written = master.cmd(&["KEYS", "redlease:sem:*"]).strings();
    assert!(written.is_empty(), "{written:?}");
    let granted = permit(&master, &a).await.unwrap();
    assert_eq!(granted[0], 0, "{granted:?}");
    let leave = [a.as_str(), "redlease:released:pool\u{1f}s"];
    let left = master
        .eval(&SCRIPTS.fair_leave, &[QUEUE, BEATS], &leave)
        .await;
    assert_eq!(left, Ok(1));
    let granted = permit(&master, &b).await.unwrap();
    assert_eq!(granted[0], 1, "beside the first: {granted:?}");
    let short = permit(&master, "f00").await;
    assert!(short.is_err_and(|e| e.contains("waiter id")));
}

/// A head whose heartbeat deadline passed is purged by the next attempt, which the waiter
/// behind it then makes as the head.
#[tokio::test]
async fn a_dead_head_is_purged_by_the_next_attempt() {
    let master = Master::start().await;
    let (dead, live) = (LeaseId::random().to_string(), LeaseId::random().to_string());
    enqueue(&master, &dead, 1, 50).await;
    enqueue(&master, &live, 2, 5000).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let granted = permit(&master, &live).await.unwrap();
    assert!(granted[0] >= 0, "{granted:?}");
    let score = master.cmd(&["ZSCORE", QUEUE, &dead]);
    assert_eq!(format!("{score:?}"), "Bulk(None)", "the dead head is gone");
}

/// The read-write lock's fair variant: a reader behind a queued writer is refused on a free
/// lock; the writer at the head takes it.
#[tokio::test]
async fn a_reader_behind_a_queued_writer_is_refused_on_a_free_lock() {
    let master = Master::start().await;
    let (queue, beats) = ("redlease:queue:doc\u{1f}rw", "redlease:beats:doc\u{1f}rw");
    let (w, r) = (LeaseId::random().to_string(), LeaseId::random().to_string());
    for (waiter, ticket) in [(&w, "1"), (&r, "2")] {
        let args = [waiter.as_str(), ticket, "5000", "enqueue"];
        let queued = master
            .eval(&SCRIPTS.fair_enqueue, &[queue, beats], &args)
            .await;
        assert_eq!(queued, Ok(1));
    }
    let attempt = |waiter: String, mode: &'static str| {
        let value = LeaseId::random().value_for("o");
        let master = &master;
        async move {
            let args = [
                waiter.as_str(),
                "redlease:rw:doc:",
                value.as_str(),
                "5000",
                mode,
                "64",
                "",
                "",
                "2000",
                "0",
            ];
            let keys = [FENCE, queue, beats];
            let reply: Vec<i64> = master
                .eval_as(&SCRIPTS.rw_acquire_fair, &keys, &args)
                .await
                .unwrap();
            reply
        }
    };
    assert_eq!(attempt(r.clone(), "read").await, vec![-1, -1]);
    assert_eq!(attempt(w.clone(), "write").await[0], 0);
}

/// The exclusive lock's fair variant (`fair_head.lua` then `lock_acquire.lua`): a waiter
/// behind the head is refused on a free lock with nothing written; the head takes it and the
/// fence counter moves; a held lock refuses the next head with its PTTL.
#[tokio::test]
async fn only_the_head_of_the_queue_takes_the_lock() {
    let master = Master::start().await;
    let (queue, beats) = ("redlease:queue:job", "redlease:beats:job");
    let lock = "redlease:lock:job";
    let (a, b) = (LeaseId::random().to_string(), LeaseId::random().to_string());
    for (waiter, ticket) in [(&a, "1"), (&b, "2")] {
        let args = [waiter.as_str(), ticket, "5000", "enqueue"];
        let queued = master
            .eval(&SCRIPTS.fair_enqueue, &[queue, beats], &args)
            .await;
        assert_eq!(queued, Ok(1));
    }
    let attempt = |waiter: String| {
        let value = LeaseId::random().value_for("o");
        let master = &master;
        async move {
            let args = [waiter.as_str(), lock, value.as_str(), "5000"];
            master
                .eval_as::<Vec<i64>>(&SCRIPTS.lock_acquire_fair, &[FENCE, queue, beats], &args)
                .await
                .unwrap()
        }
    };
    assert_eq!(attempt(b.clone()).await, vec![-1, -1], "behind the head");
    assert_eq!(master.get(lock), None, "nothing written");
    let granted = attempt(a.clone()).await;
    assert_eq!(granted[0], 0, "{granted:?}");
    assert!(master.get(lock).is_some());
    let leave = [a.as_str(), "redlease:released:job"];
    let left = master
        .eval(&SCRIPTS.fair_leave, &[queue, beats], &leave)
        .await;
    assert_eq!(left, Ok(1));
    let held = attempt(b).await;
    assert_eq!(held[0], -1, "the lock is held: {held:?}");
    assert!((4_000..=5_000).contains(&held[1]), "its PTTL: {held:?}");
}

//! `rw_acquire.lua`'s write preference on a real master: a waiting writer kept out by readers
//! leaves its intent, with the intent TTL it is given; one kept out by another writer does
//! not, so the readers waiting for that writer are not starved by writers.

use redlease::scripts::SCRIPTS;
use redlease::LeaseId;

use super::{Master, FENCE};

const BASE: &str = "redlease:rw:doc:";
const INTENT: &str = "redlease:rw:doc:wi";

/// One attempt of `mode` for a new lease; `intent` is a waiting writer's wait id or "".
async fn attempt(master: &Master, mode: &str, intent: &str) -> Vec<i64> {
    let value = LeaseId::random().value_for("o");
    let args = [
        BASE,
        value.as_str(),
        "20000",
        mode,
        "64",
        "",
        intent,
        "3000",
        "0",
    ];
    master
        .eval_as(&SCRIPTS.rw_acquire, &[FENCE], &args)
        .await
        .unwrap()
}

/// A waiting writer refused because a reader stands leaves its intent, for the intent TTL it
/// passed (not its own 20 s), and a reader is then refused beside it; one refused because
/// another writer holds the lock leaves none.
#[tokio::test]
async fn a_waiting_writer_leaves_its_intent_behind_readers_only() {
    let m = Master::start().await;
    assert_eq!(attempt(&m, "read", "").await[0], 0, "a reader");
    let waiting = LeaseId::random().to_string();
    assert_eq!(attempt(&m, "write", &waiting).await[0], -1);
    assert_eq!(m.get(INTENT), Some(waiting.clone()), "kept out by a reader");
    let pttl = m.pttl(INTENT);
    assert!(
        (2_000..=3_000).contains(&pttl),
        "the intent's own TTL: {pttl}"
    );
    assert_eq!(
        attempt(&m, "read", "").await[0],
        -1,
        "no reader beside an intent"
    );
    let readers = m.cmd(&["KEYS", "redlease:rw:doc:r*"]).strings();
    let mut gone = vec!["DEL", INTENT];
    gone.extend(readers.iter().map(String::as_str));
    m.cmd(&gone);
    assert_eq!(attempt(&m, "write", "").await[0], 0, "a writer");
    assert_eq!(attempt(&m, "write", &waiting).await[0], -1);
    assert_eq!(m.get(INTENT), None, "kept out by a writer: no intent");
}

//! `rw_acquire.lua`'s write preference on a real master: a waiting writer's intent is set,
//! with the intent TTL it is given, whether readers or another writer keep it out.

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

/// A waiting writer refused because another writer holds the lock leaves its intent, for the
/// intent TTL it passed (not its own TTL); so does one refused by a reader; a reader is then
/// refused beside the intent.
#[tokio::test]
async fn a_waiting_writer_leaves_its_intent_behind_a_writer_or_readers() {
    let m = Master::start().await;
    assert_eq!(attempt(&m, "write", "").await[0], 0, "the first writer");
    let waiting = LeaseId::random().to_string();
    assert_eq!(attempt(&m, "write", &waiting).await[0], -1);
    assert_eq!(m.get(INTENT), Some(waiting.clone()), "kept out by a writer");
    let pttl = m.pttl(INTENT);
    assert!(
        (2_000..=3_000).contains(&pttl),
        "the intent's own TTL: {pttl}"
    );
    m.cmd(&["DEL", "redlease:rw:doc:w", INTENT]);
    assert_eq!(attempt(&m, "read", "").await[0], 0, "a reader");
    assert_eq!(attempt(&m, "write", &waiting).await[0], -1);
    assert_eq!(m.get(INTENT), Some(waiting), "kept out by a reader");
    assert_eq!(
        attempt(&m, "read", "").await[0],
        -1,
        "no reader beside an intent"
    );
}

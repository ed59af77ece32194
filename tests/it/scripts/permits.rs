//! The scripts of a lease holding several permits of a semaphore, on a real master: its
//! acquisition takes all the permits it asks for or none; its release, renewal, shadow and
//! acknowledgement touch every slot key it names; a stray claim's release keeps the slots
//! given.

use redlease::scripts::SCRIPTS;
use redlease::LeaseId;

use super::{Master, FENCE};

const SLOTS: &str = "redlease:sem:pool:";
const CHANNEL: &str = "redlease:released:pool\u{1f}s";

fn slot(n: u32) -> String {
    format!("{SLOTS}{n}")
}

/// `permits` of `pool` (limit 4) for lease `id`, offering the slots in `order`.
async fn take(master: &Master, id: LeaseId, permits: u32, order: &[&str]) -> Vec<i64> {
    let (value, permits) = (id.value_for("o"), permits.to_string());
    let mut args = vec![SLOTS, value.as_str(), "5000", "4", "64", permits.as_str()];
    args.extend_from_slice(order);
    master
        .eval_as(&SCRIPTS.semaphore_acquire, &[FENCE], &args)
        .await
        .unwrap()
}

/// The first free slots of the order are taken, all at once with one counter; a lease asking
/// more than are free writes nothing and is told the soonest expiry; the limit is written on
/// each slot.
#[tokio::test]
async fn an_acquisition_takes_all_its_permits_or_none() {
    let m = Master::start().await;
    let (a, b, c) = (LeaseId::random(), LeaseId::random(), LeaseId::random());
    let granted = take(&m, a, 2, &["2", "3", "0", "1"]).await;
    assert_eq!(granted, [2, 2, 3], "slots 2 and 3, counter 2");
    for n in [2, 3] {
        assert_eq!(
            m.get(&slot(n)),
            Some(format!("{}\u{1f}4", a.value_for("o")))
        );
    }
    let refused = take(&m, b, 3, &["0", "1", "2", "3"]).await;
    assert_eq!(refused[0], -1, "two free, three asked: {refused:?}");
    assert!((4_000..=5_000).contains(&refused[1]), "{refused:?}");
    assert_eq!(m.get(&slot(0)), None, "nothing written");
    assert_eq!(m.get(&slot(1)), None, "nothing written");
    assert_eq!(m.get(FENCE).as_deref(), Some("2"), "no INCR when refused");
    let granted = take(&m, c, 2, &["3", "1", "2", "0"]).await;
    assert_eq!(
        granted,
        [1, 3, 0],
        "the free ones in the order given: {granted:?}"
    );
    let bad = m
        .eval_as::<Vec<i64>>(
            &SCRIPTS.semaphore_acquire,
            &[FENCE],
            &[SLOTS, &c.value_for("o"), "5000", "4", "64", "5", "0"],
        )
        .await;
    assert!(
        bad.is_err_and(|e| e.contains("permits")),
        "more than the limit"
    );
}

/// A release names every slot key of the lease: it deletes each one holding the lease and
/// leaves another lease's slot alone; a stray claim's release keeps the slots listed.
#[tokio::test]
async fn releases_cover_every_slot_and_keep_the_slots_given() {
    let m = Master::start().await;
    let (a, b) = (LeaseId::random(), LeaseId::random());
    take(&m, a, 3, &["0", "1", "2", "3"]).await;
    take(&m, b, 1, &["3"]).await;
    let id = a.to_string();
    let stray = [SLOTS, id.as_str(), "64", CHANNEL, "0", "2"];
    let deleted = m
        .eval(&SCRIPTS.semaphore_release, &[], &stray)
        .await
        .unwrap();
    assert_eq!(deleted, 1, "slot 1 alone");
    assert!(m.get(&slot(0)).is_some() && m.get(&slot(2)).is_some());
    assert_eq!(m.get(&slot(1)), None);
    let keys = [slot(0), slot(2), slot(3)];
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let released = m
        .eval(&SCRIPTS.release, &keys, &[&id, CHANNEL])
        .await
        .unwrap();
    assert_eq!(released, 1);
    assert_eq!((m.get(&slot(0)), m.get(&slot(2))), (None, None));
    assert!(m.get(&slot(3)).is_some(), "another lease's slot stays");
    let again = m
        .eval(&SCRIPTS.release, &keys, &[&id, CHANNEL])
        .await
        .unwrap();
    assert_eq!(again, 0, "nothing of ours is left");
}

/// A renewal answers one code per slot key; a shadow reserves every slot or none (a slot held
/// by another lease refuses it, writing nothing); an acknowledgement deletes the lease's
/// tombstone on any of its slots.
#[tokio::test]
async fn renewals_shadows_and_acknowledgements_cover_every_slot() {
    let m = Master::start().await;
    let (a, b) = (LeaseId::random(), LeaseId::random());
    take(&m, a, 2, &["0", "1"]).await;
    let id = a.to_string();
    let codes: Vec<i64> = m
        .eval_as(
            &SCRIPTS.extend,
            &[&slot(0), &slot(1), &slot(2)],
            &[&id, "9000", &id, "9000", &id, "9000"],
        )
        .await
        .unwrap();
    assert_eq!(codes, [1, 1, 0]);
    assert!(m.pttl(&slot(1)) > 8_000);
    let revoked = format!("redlease:revoked:{id}");
    let shadow = |keys: Vec<String>| {
        let value = a.value_for("o");
        let m = &m;
        let id = id.clone();
        async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let args = [id.as_str(), value.as_str(), "20000"];
            m.eval(&SCRIPTS.shadow, &keys, &args).await.unwrap()
        }
    };
    m.cmd(&["DEL", &slot(1)]);
    assert_eq!(shadow(vec![slot(0), slot(1), revoked.clone()]).await, 1);
    assert!(m.pttl(&slot(0)) > 19_000 && m.pttl(&slot(1)) > 19_000);
    take(&m, b, 1, &["2"]).await;
    assert_eq!(
        shadow(vec![slot(0), slot(3), slot(2), revoked.clone()]).await,
        0
    );
    assert_eq!(m.get(&slot(3)), None, "a refused shadow writes nothing");
    let tombstone = format!("revoked:{id}");
    m.cmd(&["SET", &slot(1), &tombstone]);
    let acknowledged = m
        .eval(&SCRIPTS.acknowledge, &[&slot(0), &slot(1)], &[&id, CHANNEL])
        .await
        .unwrap();
    assert_eq!(acknowledged, 1);
    assert_eq!(m.get(&slot(1)), None, "the tombstone is gone");
    assert!(
        m.get(&slot(0)).is_some(),
        "the lease's own value is not a tombstone"
    );
}

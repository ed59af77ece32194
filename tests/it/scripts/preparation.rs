//! The preparation's scripts against a real master, on keys of their own: `birth.lua` writes
//! only on a master without history, `mark.lua` writes only on a master still as read and not
//! serving a recorded quarantine (and never lowers a counter), `quarantine.lua` writes the
//! record and the marker together and keeps a longer record.

use redlease::scripts::SCRIPTS;

use super::Master;

const MARKER: &str = "p:fleet";
const FENCE: &str = "p:fence";
const RECORD: &str = "p:quarantined";
const KEYS: [&str; 3] = [MARKER, FENCE, RECORD];

/// A birth writes counter 1 and the marker on a master with none of the three keys, and
/// nothing where any of them is.
#[tokio::test]
async fn a_birth_writes_only_where_there_is_no_history() {
    let m = Master::start().await;
    assert_eq!(m.eval(&SCRIPTS.birth, &KEYS, &["born"]).await, Ok(1));
    assert_eq!(
        (m.get(MARKER), m.get(FENCE)),
        (Some("born".into()), Some("1".into()))
    );
    assert_eq!(m.eval(&SCRIPTS.birth, &KEYS, &["again"]).await, Ok(0));
    assert_eq!(m.get(MARKER), Some("born".into()));
    m.cmd(&["DEL", MARKER, FENCE]);
    m.cmd(&["SET", RECORD, "r", "PX", "60000"]);
    assert_eq!(
        m.eval(&SCRIPTS.birth, &KEYS, &["born"]).await,
        Ok(0),
        "a record is history"
    );
    assert_eq!(m.get(MARKER), None);
}

/// The end of a preparation: raised and marked while the master is as read; -1 when the
/// marker or the counter changed (lower) since; -2 while a quarantine is recorded; a counter
/// above the target is kept.
#[tokio::test]
async fn a_mark_writes_only_on_the_master_as_read() {
    let m = Master::start().await;
    m.cmd(&["SET", MARKER, "m1"]);
    m.cmd(&["SET", FENCE, "5"]);
    let mark = |read: &'static str, least: &'static str, target: &'static str| {
        let m = &m;
        async move {
            m.eval(&SCRIPTS.mark, &KEYS, &[read, least, target, "m2"])
                .await
        }
    };
    assert_eq!(mark("m0", "5", "7").await, Ok(-1), "another marker");
    assert_eq!(
        mark("m1", "6", "7").await,
        Ok(-1),
        "a counter below the one read"
    );
    assert_eq!(mark("", "0", "7").await, Ok(-1), "read absent, now present");
    m.cmd(&["SET", RECORD, "r", "PX", "60000"]);
    assert_eq!(mark("m1", "5", "7").await, Ok(-2));
    assert_eq!(
        (m.get(MARKER), m.get(FENCE)),
        (Some("m1".into()), Some("5".into()))
    );
    m.cmd(&["DEL", RECORD]);
    assert_eq!(mark("m1", "5", "7").await, Ok(7));
    assert_eq!(
        (m.get(MARKER), m.get(FENCE)),
        (Some("m2".into()), Some("7".into()))
    );
    m.cmd(&["SET", MARKER, "m1"]);
    assert_eq!(mark("m1", "5", "3").await, Ok(7), "never lowered");
    assert!(mark("m1", "x", "3").await.is_err());
}

/// The record (expiring) and the marker are written together; a longer record of the same
/// server is kept, a shorter one or another server's replaced.
#[tokio::test]
async fn a_quarantine_is_recorded_with_its_marker() {
    let m = Master::start().await;
    let record = |run_id: &'static str, left: &'static str| {
        let m = &m;
        async move {
            let keys = [RECORD, MARKER];
            m.eval(&SCRIPTS.quarantine, &keys, &[run_id, left, "q"])
                .await
        }
    };
    assert_eq!(record("r", "60000").await, Ok(1));
    assert_eq!(
        (m.get(RECORD), m.get(MARKER)),
        (Some("r".into()), Some("q".into()))
    );
    assert!(m.pttl(RECORD) > 59_000);
    assert_eq!(record("r", "1000").await, Ok(1));
    assert!(
        m.pttl(RECORD) > 59_000,
        "a longer record of the same server is kept"
    );
    assert_eq!(record("s", "1000").await, Ok(1));
    assert_eq!(m.get(RECORD), Some("s".into()));
    assert!(m.pttl(RECORD) <= 1000);
    assert!(record("s", "0").await.is_err());
}

//! What each master is sent, on a real master: the acquisition's plain commands (through the
//! node, as the engine sends them) and each Lua script (EVALSHA with reload).

use std::sync::Arc;
use std::time::Duration;

use fred::types::scripts::Script;
use redlease::fleet::{Deadline, Node};
use redlease::scripts::{AcquireCommands, AcquireReply, SCRIPTS};
use redlease::CallError;
use redlease::{Fleet, LeaseId};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::resp::{Resp, RespConn};
use redlease_testkit::RedisServer;

mod fair;
mod permits;
mod preparation;
mod read_write;

const LOCK: &str = "redlease:lock:r";
const FENCE: &str = "redlease:fence";
const CHANNEL: &str = "redlease:released:r";
const TIMEOUT: Duration = Duration::from_secs(2);

struct Master {
    server: RedisServer,
    fleet: Arc<Fleet>,
}

impl Master {
    /// One master, prepared (it takes lock writes).
    async fn start() -> Self {
        let server = RedisServer::start();
        let fleet = Fleet::connect(&[server.url()], &test_fleet_options())
            .await
            .unwrap();
        let master = Self { server, fleet };
        assert_eventually!(master.node().is_up(), 5, "master never prepared");
        master
    }

    fn node(&self) -> &Arc<Node> {
        &self.fleet.nodes()[0]
    }

    async fn eval(&self, script: &Script, keys: &[&str], args: &[&str]) -> Result<i64, String> {
        self.eval_as(script, keys, args).await
    }

    async fn eval_as<R: fred::types::FromValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<R, String> {
        let client = self.node().client();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let reply = script
            .evalsha_with_reload::<R, _, _>(client, keys, args)
            .await;
        reply.map_err(|e| e.details().to_string())
    }

    /// The acquisition's `SET NX PX` + `INCR` (+ `PTTL` when refused), as the engine sends it.
    async fn acquire(&self, id: LeaseId, ttl_ms: u64) -> Result<AcquireReply, CallError> {
        let commands = AcquireCommands::new(LOCK.into(), &id.value_for("owner"), ttl_ms, FENCE);
        self.node()
            .acquire(&commands, &Deadline::After(TIMEOUT))
            .await
    }

    async fn granted(&self, id: LeaseId, ttl_ms: u64) -> u64 {
        match self.acquire(id, ttl_ms).await {
            Ok(AcquireReply::Granted { counter }) => counter,
            other => panic!("not granted: {other:?}"),
        }
    }

    async fn refused(&self, id: LeaseId) -> Option<Duration> {
        match self.acquire(id, 5000).await {
            Ok(AcquireReply::Refused { holder_remaining }) => holder_remaining,
            other => panic!("not refused: {other:?}"),
        }
    }

    async fn raise(&self, target: &str) -> Result<i64, String> {
        self.eval(&SCRIPTS.raise_fence, &[FENCE], &[target]).await
    }

    async fn release(&self, id: LeaseId) -> Result<i64, String> {
        let id = id.to_string();
        self.eval(&SCRIPTS.release, &[LOCK], &[&id, CHANNEL]).await
    }

    /// extend.lua for one lease: its one code.
    async fn extend(&self, id: LeaseId, ttl_ms: &str) -> Result<i64, String> {
        let id = id.to_string();
        let codes: Vec<i64> = self
            .eval_as(&SCRIPTS.extend, &[LOCK], &[&id, ttl_ms])
            .await?;
        assert_eq!(codes.len(), 1, "one code per lease");
        Ok(codes[0])
    }

    async fn shadow(&self, id: LeaseId) -> Result<i64, String> {
        let (id_text, value) = (id.to_string(), id.value_for("owner"));
        let args = [id_text.as_str(), value.as_str(), "20000"];
        let revoked = format!("redlease:revoked:{id_text}");
        self.eval(&SCRIPTS.shadow, &[LOCK, &revoked], &args).await
    }

    fn fence_at_least(&self, floor: u64) -> bool {
        let fence = self.get(FENCE).and_then(|v| v.parse::<u64>().ok());
        fence.is_some_and(|f| f >= floor)
    }

    fn get(&self, key: &str) -> Option<String> {
        self.cmd(&["GET", key]).bulk()
    }

    fn pttl(&self, key: &str) -> i64 {
        self.cmd(&["PTTL", key]).int()
    }

    fn cmd(&self, args: &[&str]) -> Resp {
        redlease_testkit::resp::command(self.server.port(), args)
    }
}

/// An acquisition sets the lock with its TTL and answers the fence counter, one up per
/// attempt (a prepared master starts at 1).
#[tokio::test]
async fn acquire_grants_and_counts_the_fence() {
    let m = Master::start().await;
    assert_eq!(m.get(FENCE).as_deref(), Some("1"), "prepared at 1");
    let a = LeaseId::random();
    assert_eq!(m.granted(a, 5000).await, 2);
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert!((4_000..=5_000).contains(&m.pttl(LOCK)));
    m.cmd(&["DEL", LOCK]);
    assert_eq!(m.granted(LeaseId::random(), 5000).await, 3);
}

/// A refused acquisition leaves the holder alone, tells its remaining time, and still counts
/// the fence (counters only grow).
#[tokio::test]
async fn acquire_refuses_another_lease_with_its_remaining_time() {
    let m = Master::start().await;
    let a = LeaseId::random();
    m.granted(a, 5000).await;
    let left = m.refused(LeaseId::random()).await.unwrap();
    assert!(left > Duration::from_millis(4_000), "{left:?}");
    assert!(left <= Duration::from_millis(5_000), "{left:?}");
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert_eq!(m.get(FENCE).as_deref(), Some("3"));

    m.cmd(&["PERSIST", LOCK]);
    assert_eq!(m.refused(LeaseId::random()).await, None, "no expiry");
}

/// A shadow (the lock key kept for the shadow TTL) refuses acquisitions like any lock.
#[tokio::test]
async fn acquire_respects_a_shadow() {
    let m = Master::start().await;
    let other = LeaseId::random();
    assert_eq!(m.shadow(other).await, Ok(1));
    let left = m.refused(LeaseId::random()).await.unwrap();
    assert!(left > Duration::from_secs(19), "{left:?}");
    assert_eq!(m.get(LOCK), Some(other.value_for("owner")));
}

/// A master that lost its memory while connected (FLUSHALL: no reconnect, no NOSCRIPT for a
/// plain command) is caught by its fence counter going back: the vote fails and the master
/// takes no writes until it has been prepared again (after its quarantine).
#[tokio::test]
async fn a_fence_counter_that_went_back_fails_the_vote() {
    let m = Master::start().await;
    for _ in 0..3 {
        m.granted(LeaseId::random(), 5000).await;
        m.cmd(&["DEL", LOCK]);
    }
    m.cmd(&["FLUSHALL"]);
    let vote = m.acquire(LeaseId::random(), 5000).await;
    assert_eq!(vote, Err(CallError::LostMemory));
    assert_eq!(
        m.acquire(LeaseId::random(), 5000).await,
        Err(CallError::Down)
    );
    // Its SET did run: the engine releases such a write when it abandons the grant.
    m.cmd(&["DEL", LOCK]);
    assert_eventually!(m.node().is_up(), 5, "never prepared again");
    let member = m.get("redlease:fleet").unwrap();
    let mark = redlease::FleetMark::parse(&member).expect("a fleet marker");
    assert_eq!(
        mark.membership.run_id().len(),
        40,
        "the marker holds the server's run_id: {member}"
    );
    assert!(
        m.fence_at_least(1),
        "prepared with a fence counter of at least 1"
    );
    let vote = m.acquire(LeaseId::random(), 5000).await;
    assert!(matches!(vote, Ok(AcquireReply::Granted { .. })), "{vote:?}");
}

/// raise_fence.lua only ever raises the counter, and refuses non-integers.
#[tokio::test]
async fn raise_fence_is_a_max_assign() {
    let m = Master::start().await;
    assert_eq!(m.raise("5").await, Ok(5));
    assert_eq!(m.raise("3").await, Ok(5));
    assert_eq!(m.raise("9").await, Ok(9));
    assert_eq!(m.get(FENCE).as_deref(), Some("9"));
    for bad in ["-1", "x", "2.5", ""] {
        assert!(m.raise(bad).await.is_err(), "{bad}");
    }
    assert_eq!(m.get(FENCE).as_deref(), Some("9"));
}

/// release.lua deletes only our lease and announces only a real release.
#[tokio::test]
async fn release_deletes_only_our_lease_and_announces_it() {
    let m = Master::start().await;
    let a = LeaseId::random();
    m.granted(a, 5000).await;
    let mut subscriber = RespConn::connect(m.server.port()).unwrap();
    subscriber.command(&["SUBSCRIBE", CHANNEL]);

    assert_eq!(m.release(LeaseId::random()).await, Ok(0));
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert_eq!(m.release(a).await, Ok(1));
    assert_eq!(m.cmd(&["EXISTS", LOCK]).int(), 0);
    let message = subscriber.read().unwrap();
    let expected = ["message", CHANNEL, &a.to_string()].map(|s| Some(s.to_string()));
    assert_eq!(message, Resp::Array(expected.map(Resp::Bulk).to_vec()));

    assert_eq!(m.release(a).await, Ok(0));
    subscriber.set_read_timeout(Duration::from_millis(200));
    assert!(
        subscriber.read().is_err(),
        "a release that deleted nothing announced itself"
    );
    let error = m.eval(&SCRIPTS.release, &[LOCK], &["short", CHANNEL]).await;
    assert!(error.unwrap_err().contains("lease id"));
}

/// extend.lua: extends our lock (a shadow too, back to the lock's own TTL) and leaves others'
/// alone.
#[tokio::test]
async fn extend_covers_ours_shadowed_absent_and_foreign() {
    let m = Master::start().await;
    let a = LeaseId::random();
    assert_eq!(m.extend(a, "9000").await, Ok(0), "absent");

    m.granted(a, 1000).await;
    assert_eq!(m.extend(a, "9000").await, Ok(1), "extended");
    assert!(m.pttl(LOCK) > 8_000);

    assert_eq!(m.shadow(a).await, Ok(1));
    assert!(m.pttl(LOCK) > 19_000, "shadowed");
    assert_eq!(m.extend(a, "7000").await, Ok(1), "recovered");
    assert!((6_000..=7_000).contains(&m.pttl(LOCK)));

    let b = LeaseId::random();
    assert_eq!(m.extend(b, "9000").await, Ok(-1), "held by another");
    assert!(m.pttl(LOCK) <= 7_000);
    assert!(m.extend(a, "0").await.is_err());
}

/// One extend.lua call renews many leases, each judged alone, and a bad entry anywhere
/// refuses the whole call before anything is written.
#[tokio::test]
async fn extend_renews_a_batch_and_checks_every_entry_first() {
    let m = Master::start().await;
    let (a, b, c) = (LeaseId::random(), LeaseId::random(), LeaseId::random());
    let lock = |r: &str| format!("redlease:lock:{r}");
    m.cmd(&["SET", &lock("a"), &a.value_for("o"), "PX", "1000"]);
    let foreign = LeaseId::random().value_for("x");
    m.cmd(&["SET", &lock("b"), &foreign, "PX", "1000"]);
    m.cmd(&["SET", &lock("c"), &c.value_for("o"), "PX", "60000"]);
    let (la, lb, lc, ld) = (lock("a"), lock("b"), lock("c"), lock("d"));
    let keys = [&*la, &*lb, &*lc, &*ld];
    let (ia, ib, ic, id) = (
        a.to_string(),
        b.to_string(),
        c.to_string(),
        LeaseId::random().to_string(),
    );

    let bad_ttl = [&*ia, "9000", &*ib, "9000", &*ic, "0", &*id, "9000"];
    let error = m
        .eval_as::<Vec<i64>>(&SCRIPTS.extend, &keys, &bad_ttl)
        .await;
    assert!(error.unwrap_err().contains("ttl"));
    assert!(
        m.pttl(&la) <= 1000,
        "nothing written before every entry was checked"
    );
    let odd = m
        .eval_as::<Vec<i64>>(&SCRIPTS.extend, &keys[..2], &bad_ttl[..3])
        .await;
    assert!(odd.is_err(), "a lease id and a ttl per key");

    let args = [&*ia, "9000", &*ib, "9000", &*ic, "8000", &*id, "9000"];
    let codes: Vec<i64> = m.eval_as(&SCRIPTS.extend, &keys, &args).await.unwrap();
    assert_eq!(
        codes,
        vec![1, -1, 1, 0],
        "extended, held by another, shadow set back, absent"
    );
    assert!(m.pttl(&la) > 8_000);
    assert!(m.pttl(&lb) <= 1_000, "another lease's lock is left alone");
    assert!((7_000..=8_000).contains(&m.pttl(&lc)));
}

/// shadow.lua reserves only where the lock is ours or free, and only ever lengthens ours.
#[tokio::test]
async fn shadow_is_set_only_where_the_lock_is_ours_or_free() {
    let m = Master::start().await;
    let a = LeaseId::random();
    assert_eq!(m.shadow(a).await, Ok(1), "free");
    assert!((19_000..=20_000).contains(&m.pttl(LOCK)));
    m.cmd(&["DEL", LOCK]);
    m.granted(a, 5000).await;
    assert_eq!(m.shadow(a).await, Ok(1), "ours");
    assert!(m.pttl(LOCK) > 19_000, "lengthened to the shadow TTL");
    m.cmd(&["PEXPIRE", LOCK, "60000"]);
    assert_eq!(m.shadow(a).await, Ok(1), "ours, longer already");
    assert!(m.pttl(LOCK) > 59_000, "never shortened");
    let b = LeaseId::random();
    assert_eq!(m.shadow(b).await, Ok(0), "held by a");
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
}

/// force_release.lua revokes whatever lease holds the lock: a tombstone with the lock's TTL in
/// its place (renewals then answer `revoked`, -2), the lease marked revoked so shadow.lua
/// refuses it even where the lock is free; acknowledge.lua deletes only that tombstone. With a
/// lease id it revokes only that lease; told the holder is gone, it deletes at once.
#[tokio::test]
async fn a_force_released_lease_is_revoked_and_cannot_come_back() {
    let m = Master::start().await;
    let force = |expected: &str, outright: &str| {
        [
            "redlease:released:job".to_string(),
            "redlease:revoked:".to_string(),
            "60000".to_string(),
            "redlease:revocations".to_string(),
            expected.to_string(),
            outright.to_string(),
        ]
    };
    let run = |args: [String; 6], lock: &'static str| {
        let m = &m;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let reply: fred::types::Value = m
                .eval_as(&SCRIPTS.force_release, &[lock], &args)
                .await
                .unwrap();
            let parts = reply.into_array();
            let code = parts[0].as_i64().unwrap();
            (code, parts[1].as_string(), parts[2].as_i64().unwrap())
        }
    };
    let a = LeaseId::random();
    m.granted(a, 5000).await;
    let other = LeaseId::random().to_string();
    let (code, value, _) = run(force(&other, "0"), LOCK).await;
    assert_eq!(
        (code, value),
        (-1, Some(a.value_for("owner"))),
        "another lease named"
    );
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")), "nothing written");

    let (code, value, pttl) = run(force("", "0"), LOCK).await;
    assert_eq!((code, value), (1, Some(a.value_for("owner"))));
    assert!(
        (4_000..=5_000).contains(&pttl),
        "the lock's TTL kept: {pttl}"
    );
    let tombstone = format!("revoked:{a}");
    assert_eq!(m.get(LOCK), Some(tombstone.clone()));
    let revoked = format!("redlease:revoked:{a}");
    assert!((59_000..=60_000).contains(&m.pttl(&revoked)));
    assert_eq!(
        m.extend(a, "9000").await,
        Ok(-2),
        "a renewal sees the revocation"
    );
    let (code, value, _) = run(force(&a.to_string(), "0"), LOCK).await;
    assert_eq!(
        (code, value),
        (3, Some(tombstone.clone())),
        "already revoked"
    );
    assert_eq!(
        m.shadow(a).await,
        Ok(0),
        "a shadow cannot replace the tombstone"
    );

    let b = LeaseId::random();
    let ack = |id: LeaseId| {
        let m = &m;
        async move {
            let id = id.to_string();
            let args = [id.as_str(), "redlease:released:job"];
            m.eval_as::<i64>(&SCRIPTS.acknowledge, &[LOCK], &args)
                .await
                .unwrap()
        }
    };
    assert_eq!(ack(b).await, 0, "another lease's acknowledgement");
    assert_eq!(m.get(LOCK), Some(tombstone));
    assert_eq!(ack(a).await, 1);
    assert_eq!(m.get(LOCK), None);
    assert_eq!(
        m.shadow(a).await,
        Ok(0),
        "revoked, even where the lock is free"
    );
    assert_eq!(m.get(LOCK), None);
    assert_eq!(m.shadow(b).await, Ok(1), "another lease is not revoked");

    let (code, value, _) = run(force("", "1"), LOCK).await;
    assert_eq!(
        (code, value),
        (2, Some(b.value_for("owner"))),
        "deleted at once"
    );
    assert_eq!(m.get(LOCK), None);
    let (code, value, _) = run(force("", "0"), "redlease:lock:none").await;
    assert_eq!((code, value), (0, None));
}

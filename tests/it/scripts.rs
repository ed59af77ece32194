//! Each Lua script, called directly (EVALSHA with reload) on a real master.

use std::time::Duration;

use fred::types::scripts::Script;
use redlease::scripts::SCRIPTS;
use redlease::{Fleet, FleetOptions, LeaseId};

use crate::support::resp::{Resp, RespConn};
use crate::support::RedisServer;

const LOCK: &str = "redlease:lock:r";
const SHADOW: &str = "redlease:shadow:r";
const FENCE: &str = "redlease:fence";
const CHANNEL: &str = "redlease:released:r";

struct Master {
    server: RedisServer,
    fleet: std::sync::Arc<Fleet>,
}

impl Master {
    async fn start() -> Self {
        let server = RedisServer::start();
        let fleet = Fleet::connect(&[server.url()], &FleetOptions::default())
            .await
            .unwrap();
        Self { server, fleet }
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
        let client = self.fleet.nodes()[0].client();
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let reply = script
            .evalsha_with_reload::<R, _, _>(client, keys, args)
            .await;
        reply.map_err(|e| e.details().to_string())
    }

    async fn acquire(&self, id: LeaseId, ttl_ms: &str) -> Result<i64, String> {
        let id_text = id.to_string();
        let args = [id_text.as_str(), "owner", ttl_ms];
        self.eval(&SCRIPTS.acquire, &[LOCK, SHADOW, FENCE], &args)
            .await
    }

    async fn raise(&self, target: &str) -> Result<i64, String> {
        self.eval(&SCRIPTS.raise_fence, &[FENCE], &[target]).await
    }

    async fn release(&self, id: LeaseId) -> Result<i64, String> {
        let id = id.to_string();
        self.eval(&SCRIPTS.release, &[LOCK, SHADOW], &[&id, CHANNEL])
            .await
    }

    /// extend.lua for one lease: its one code.
    async fn extend(&self, id: LeaseId, ttl_ms: &str) -> Result<i64, String> {
        let id = id.to_string();
        let codes: Vec<i64> = self
            .eval_as(&SCRIPTS.extend, &[LOCK, SHADOW], &[&id, ttl_ms])
            .await?;
        assert_eq!(codes.len(), 1, "one code per lease");
        Ok(codes[0])
    }

    async fn shadow(&self, id: LeaseId) -> Result<i64, String> {
        let (id_text, value) = (id.to_string(), id.value_for("owner"));
        let args = [id_text.as_str(), value.as_str(), "20000"];
        self.eval(&SCRIPTS.shadow, &[LOCK, SHADOW], &args).await
    }

    fn get(&self, key: &str) -> Option<String> {
        self.cmd(&["GET", key]).bulk()
    }

    fn pttl(&self, key: &str) -> i64 {
        self.cmd(&["PTTL", key]).int()
    }

    fn cmd(&self, args: &[&str]) -> Resp {
        crate::support::resp::command(self.server.port(), args)
    }
}

/// acquire.lua sets the lock with its TTL and returns the master's fence counter, one up per grant.
#[tokio::test]
async fn acquire_grants_and_counts_the_fence() {
    let m = Master::start().await;
    let a = LeaseId::random();
    assert_eq!(m.acquire(a, "5000").await, Ok(1));
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert!((4_000..=5_000).contains(&m.pttl(LOCK)));
    m.cmd(&["DEL", LOCK]);
    assert_eq!(m.acquire(LeaseId::random(), "5000").await, Ok(2));
}

/// acquire.lua refuses while another lease holds the lock, answering the holder's remaining time.
#[tokio::test]
async fn acquire_refuses_another_lease_with_its_remaining_time() {
    let m = Master::start().await;
    let a = LeaseId::random();
    m.acquire(a, "5000").await.unwrap();
    let refused = m.acquire(LeaseId::random(), "5000").await.unwrap();
    assert!((-5_000..=-4_000).contains(&refused), "{refused}");
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert_eq!(m.get(FENCE).as_deref(), Some("1"));
}

/// acquire.lua respects a shadow held by another lease.
#[tokio::test]
async fn acquire_respects_a_foreign_shadow() {
    let m = Master::start().await;
    let other = LeaseId::random().value_for("other");
    m.cmd(&["SET", SHADOW, &other, "PX", "5000"]);
    let refused = m.acquire(LeaseId::random(), "5000").await.unwrap();
    assert!(refused <= 0);
    assert_eq!(m.get(LOCK), None);
}

/// acquire.lua refuses a malformed lease id or TTL before writing anything (the TTL is
/// checked by SET itself, the first write).
#[tokio::test]
async fn acquire_rejects_malformed_arguments_without_writing() {
    let m = Master::start().await;
    for id in ["short", "", &"0".repeat(33)] {
        let error = m
            .eval(
                &SCRIPTS.acquire,
                &[LOCK, SHADOW, FENCE],
                &[id, "owner", "5000"],
            )
            .await;
        assert!(error.unwrap_err().contains("lease id"), "{id}");
    }
    for ttl in ["0", "-5", "abc", "1.5", ""] {
        let error = m.acquire(LeaseId::random(), ttl).await;
        assert!(error.is_err(), "{ttl}: {error:?}");
    }
    let keys = m.cmd(&["KEYS", "*"]).strings();
    assert_eq!(
        keys,
        ["redlease:fleet"],
        "only the fleet marker, no lock or fence"
    );
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

/// release.lua deletes only our lease's keys and announces only a real release.
#[tokio::test]
async fn release_deletes_only_our_lease_and_announces_it() {
    let m = Master::start().await;
    let a = LeaseId::random();
    m.acquire(a, "5000").await.unwrap();
    m.cmd(&["SET", SHADOW, &a.value_for("owner"), "PX", "5000"]);
    let mut subscriber = RespConn::connect(m.server.port()).unwrap();
    subscriber.command(&["SUBSCRIBE", CHANNEL]);

    assert_eq!(m.release(LeaseId::random()).await, Ok(0));
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert_eq!(m.release(a).await, Ok(2));
    assert_eq!(m.cmd(&["EXISTS", LOCK, SHADOW]).int(), 0);
    let message = subscriber.read().unwrap();
    let expected = ["message", CHANNEL, &a.to_string()].map(|s| Some(s.to_string()));
    assert_eq!(message, Resp::Array(expected.map(Resp::Bulk).to_vec()));

    assert_eq!(m.release(a).await, Ok(0));
    subscriber.set_read_timeout(Duration::from_millis(200));
    assert!(
        subscriber.read().is_err(),
        "a release that deleted nothing announced itself"
    );
}

/// extend.lua: extends our lock, restores it from our shadow, and leaves others' alone.
#[tokio::test]
async fn extend_covers_ours_restored_absent_and_foreign() {
    let m = Master::start().await;
    let a = LeaseId::random();
    assert_eq!(m.extend(a, "9000").await, Ok(0), "absent");

    m.acquire(a, "1000").await.unwrap();
    m.cmd(&["SET", SHADOW, &a.value_for("owner"), "PX", "60000"]);
    assert_eq!(m.extend(a, "9000").await, Ok(1), "extended");
    assert!(m.pttl(LOCK) > 8_000);
    assert_eq!(
        m.get(SHADOW),
        None,
        "our shadow is dropped once the lock is renewed"
    );

    m.cmd(&["DEL", LOCK]);
    m.cmd(&["SET", SHADOW, &a.value_for("owner"), "PX", "60000"]);
    assert_eq!(m.extend(a, "7000").await, Ok(2), "restored");
    assert_eq!(m.get(LOCK), Some(a.value_for("owner")));
    assert!((6_000..=7_000).contains(&m.pttl(LOCK)));
    assert_eq!(m.get(SHADOW), None);

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
    let shadow = |r: &str| format!("redlease:shadow:{r}");
    m.cmd(&["SET", &lock("a"), &a.value_for("o"), "PX", "1000"]);
    m.cmd(&[
        "SET",
        &lock("b"),
        &LeaseId::random().value_for("x"),
        "PX",
        "1000",
    ]);
    m.cmd(&["SET", &shadow("c"), &c.value_for("o"), "PX", "60000"]);
    let (la, sa, lb, sb, lc, sc, ld, sd) = (
        lock("a"),
        shadow("a"),
        lock("b"),
        shadow("b"),
        lock("c"),
        shadow("c"),
        lock("d"),
        shadow("d"),
    );
    let keys = [&*la, &*sa, &*lb, &*sb, &*lc, &*sc, &*ld, &*sd];
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
        .eval_as::<Vec<i64>>(&SCRIPTS.extend, &keys[..3], &bad_ttl[..3])
        .await;
    assert!(odd.is_err(), "keys and arguments come in pairs");

    let args = [&*ia, "9000", &*ib, "9000", &*ic, "8000", &*id, "9000"];
    let codes: Vec<i64> = m.eval_as(&SCRIPTS.extend, &keys, &args).await.unwrap();
    assert_eq!(
        codes,
        vec![1, -1, 2, 0],
        "extended, held by another, restored, absent"
    );
    assert!(m.pttl(&la) > 8_000);
    assert!(m.pttl(&lb) <= 1_000, "another lease's lock is left alone");
    assert_eq!(m.get(&lc), Some(c.value_for("o")));
    assert!((7_000..=8_000).contains(&m.pttl(&lc)));
    assert_eq!(m.get(&sc), None);
}

/// shadow.lua reserves only where the lock is ours or free.
#[tokio::test]
async fn shadow_is_set_only_where_the_lock_is_ours_or_free() {
    let m = Master::start().await;
    let a = LeaseId::random();
    assert_eq!(m.shadow(a).await, Ok(1), "free");
    assert!((19_000..=20_000).contains(&m.pttl(SHADOW)));
    m.cmd(&["DEL", SHADOW]);
    m.acquire(a, "5000").await.unwrap();
    assert_eq!(m.shadow(a).await, Ok(1), "ours");
    let b = LeaseId::random();
    assert_eq!(m.shadow(b).await, Ok(0), "lock and shadow held by a");
    m.cmd(&["DEL", LOCK]);
    assert_eq!(m.shadow(b).await, Ok(0), "shadow held by a");
    assert_eq!(m.get(SHADOW), Some(a.value_for("owner")));
}

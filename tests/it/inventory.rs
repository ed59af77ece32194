//! The lock inventory and the audited force release, through two sidecars and the command
//! line, against real masters.

use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};

/// Runs `redlease ARGS` against `masters`: exit code and stdout parsed as JSON.
fn redlease(args: &[&str], masters: &str) -> (i32, Value) {
    let (code, value, _) = redlease_with_log(args, masters);
    (code, value)
}

/// As `redlease`, with its stderr.
fn redlease_with_log(args: &[&str], masters: &str) -> (i32, Value, String) {
    let output = crate::support::run_redlease(args, masters);
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    let printed = value != Value::Null || stdout.trim().is_empty();
    assert!(printed, "{stdout} {stderr}");
    (output.status.code().unwrap(), value, stderr)
}

fn resources(page: &Value) -> Vec<String> {
    let locks = page["locks"].as_array().unwrap();
    locks
        .iter()
        .map(|lock| lock["resource"].as_str().unwrap().to_string())
        .collect()
}

/// Locks taken through two sidecars and the CLI are listed exactly, in name order, in pages
/// linked by `next`; a lock on only a minority of masters is listed with no quorum holder.
#[tokio::test]
async fn inventory_lists_exactly_the_locks_held_under_a_prefix() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let one = TestSidecar::start(&fleet, &[]).await;
    let two = TestSidecar::start(&fleet, &[]).await;
    let owner = json!({"owner": "app", "ttl_ms": 20000});
    let (status, held_by_one) = one.acquire("jobs:a", owner.clone()).await;
    assert_eq!(status, 200, "{held_by_one}");
    assert_eq!(two.acquire("jobs:b", owner.clone()).await.0, 200);
    assert_eq!(one.acquire("other:x", owner.clone()).await.0, 200);
    let (code, cli) = redlease(
        &[
            "lock", "acquire", "jobs:c", "--owner", "cron", "--ttl-ms", "20000",
        ],
        &masters,
    );
    assert_eq!(code, 0, "{cli}");
    // A minority lock: written by hand on one master of three.
    let value = format!("{}|stray", "0".repeat(32));
    fleet.command(0, &["SET", "redlease:lock:jobs:d", &value, "PX", "20000"]);

    let (status, page) = two.get("/v1/locks?prefix=jobs:&limit=2").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(resources(&page), ["jobs:a", "jobs:b"]);
    assert_eq!(page["next"], "jobs:b");
    assert_eq!(page["complete"], true);
    let first = &page["locks"][0];
    assert_eq!(first["holder"]["lease_id"], held_by_one["lease_id"]);
    assert_eq!(first["holder"]["owner"], "app");
    assert_eq!(first["holder"]["masters"], 3);
    assert_eq!(first["masters_holding"], 3);
    assert!(
        first["holder"].get("fencing_token").is_none(),
        "sidecar two does not hold it"
    );

    let (_, rest) = two.get("/v1/locks?prefix=jobs:&limit=2&after=jobs:b").await;
    assert_eq!(resources(&rest), ["jobs:c", "jobs:d"]);
    assert_eq!(rest["next"], Value::Null);
    assert_eq!(rest["locks"][0]["holder"]["owner"], "cron");
    assert_eq!(rest["locks"][1]["holder"], Value::Null, "{rest}");
    assert_eq!(rest["locks"][1]["masters_holding"], 1);

    // One lock, every master: the sidecar that holds it knows the fencing token.
    let (status, shown) = one.get("/v1/locks/jobs:a").await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(
        shown["holder"]["fencing_token"],
        held_by_one["fencing_token"]
    );
    assert_eq!(shown["quorum"], 2);
    let masters_view = shown["masters"].as_array().unwrap();
    assert_eq!(masters_view.len(), 3);
    for master in masters_view {
        assert_eq!(master["held"], true);
        assert_eq!(master["lease_id"], held_by_one["lease_id"]);
        assert!(master["pttl_ms"].as_u64().unwrap() > 10_000, "{master}");
    }
    let (_, stray) = one.get("/v1/locks/jobs:d").await;
    assert_eq!(stray["holder"], Value::Null);
    assert_eq!(stray["masters"][1]["held"], false);

    // The command line sees the same.
    let (code, listed) = redlease(&["locks", "list", "--prefix", "jobs:", "--json"], &masters);
    assert_eq!(code, 0);
    assert_eq!(resources(&listed), ["jobs:a", "jobs:b", "jobs:c", "jobs:d"]);
    let (code, shown) = redlease(&["locks", "show", "jobs:b", "--json"], &masters);
    assert_eq!(code, 0);
    assert_eq!(shown["holder"]["owner"], "app");

    // Bad input is refused with a stable reason.
    let (status, refused) = one.get("/v1/locks?limit=0").await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_limit"))
    );
    let (status, refused) = one.get("/v1/locks?limit=1001").await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_limit"))
    );
    let (status, refused) = one.get("/v1/locks?prefix=%01").await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_prefix"))
    );
}

/// Glob characters in a prefix match only themselves.
#[tokio::test]
async fn a_prefix_is_not_a_pattern() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let owner = json!({"owner": "app"});
    assert_eq!(sidecar.acquire("a*b", owner.clone()).await.0, 200);
    assert_eq!(sidecar.acquire("axb", owner.clone()).await.0, 200);
    let (_, page) = sidecar.get("/v1/locks?prefix=a%2A").await;
    assert_eq!(resources(&page), ["a*b"]);
}

/// Without an actor and a reason nothing changes; with both the lock is gone at once from
/// every master, the holder's sidecar reports its lease lost (`not_ours`), every master keeps
/// one audit record, and `redlease audit` shows it once.
#[tokio::test]
async fn force_release_is_refused_without_actor_and_reason_and_audited_with_them() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let holder = TestSidecar::start(&fleet, &[]).await;
    let operator = TestSidecar::start(&fleet, &[]).await;
    let (status, lease) = holder
        .acquire("billing", json!({"owner": "job-7", "ttl_ms": 1000}))
        .await;
    assert_eq!(status, 200, "{lease}");
    let id = lease["lease_id"].as_str().unwrap().to_string();
    let mut events = holder.events(&id).await;

    let path = "/v1/locks/billing/force-release";
    let (status, refused) = operator.post_json(path, json!({"reason": "stuck"})).await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_actor"))
    );
    let (status, refused) = operator.post_json(path, json!({"actor": "alice"})).await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_reason"))
    );
    let (code, _) = redlease(
        &["locks", "force-release", "billing", "--actor", "alice"],
        &masters,
    );
    assert_eq!(code, 64);
    for i in 0..3 {
        assert_eq!(fleet.lock_keys(i), ["redlease:lock:billing"], "master {i}");
        assert_eq!(fleet.command(i, &["EXISTS", "redlease:audit"]).int(), 0);
    }

    let body = json!({"actor": "alice", "reason": "job-7 died"});
    let (status, forced) = operator.post_json(path, body).await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(forced["confirmed"], true);
    assert_eq!(forced["masters_removed"], 3);
    assert_eq!(forced["audits_recorded"], 3);
    assert_eq!(forced["removed"][0]["lease_id"], id.as_str());
    assert_eq!(forced["removed"][0]["owner"], "job-7");
    // The holder's sidecar heard the revocation and acknowledged it before the answer.
    assert_eq!(forced["holder_told"], true, "{forced}");
    for i in 0..3 {
        assert!(fleet.lock_keys(i).is_empty(), "master {i}");
        assert_eq!(fleet.command(i, &["XLEN", "redlease:audit"]).int(), 1);
    }
    // Free at once: another owner takes it without waiting for the TTL.
    let (status, next) = operator.acquire("billing", json!({"owner": "job-8"})).await;
    assert_eq!(status, 200, "{next}");
    assert!(next["fencing_token"].as_u64() > lease["fencing_token"].as_u64());

    // The holder was told: its lease is lost, revoked.
    let lost = loop {
        let (event, data) = events.next(Duration::from_secs(3)).await.expect("no event");
        if event == "lost" {
            break data;
        }
    };
    assert_eq!(lost["reason"], "revoked");

    let (code, audit) = redlease(&["audit", "--json"], &masters);
    assert_eq!(code, 0, "{audit}");
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["resource"], "billing");
    assert_eq!(records[0]["actor"], "alice");
    assert_eq!(records[0]["reason"], "job-7 died");
    assert_eq!(records[0]["masters"], 3);
    assert_eq!(records[0]["holders"][0], format!("{id}|job-7"));
    assert_eq!(records[0]["audit_id"], forced["audit_id"]);

    // Counted (the registry is this test process's: other tests may add to it).
    let url = format!("{}/metrics", operator.base);
    let metrics = reqwest::get(url).await.unwrap().text().await.unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("lock_force_releases_total "));
    let count: f64 = line
        .and_then(|l| l.split(' ').nth(1)?.parse().ok())
        .unwrap_or(0.0);
    assert!(count >= 1.0, "{metrics}");
}

/// The CLI's force release of a lock whose holder is gone (`--holder-gone`: nobody listens
/// for the revocation) frees it at once; with a master stopped it still deletes and records
/// on the others, and says how many answered, removed and recorded.
#[tokio::test]
async fn cli_force_release_reports_the_masters_it_reached() {
    let mut fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    // The first acquire gives birth to the fleet: every master answers with no history.
    let (code, lease) = redlease(
        &[
            "lock", "acquire", "nightly", "--owner", "cron", "--ttl-ms", "20000",
        ],
        &masters,
    );
    assert_eq!(code, 0, "{lease}");
    // The grant needed two masters; a third still starting may have missed it.
    let held_on_live = fleet.lock_keys_on(&[0, 1]).len();
    fleet.servers[2].stop();
    let args = [
        "locks",
        "force-release",
        "nightly",
        "--actor",
        "bob",
        "--reason",
        "test",
        "--holder-gone",
    ];
    let (code, forced, log) = redlease_with_log(&args, &masters);
    assert_eq!(code, 0, "{forced}");
    assert_eq!(forced["masters_answered"], 2, "{log}");
    assert_eq!(forced["masters_removed"], held_on_live);
    assert_eq!(forced["audits_recorded"], 2);
    assert!(fleet.lock_keys_on(&[0, 1]).is_empty());
    let (code, again, log) = redlease_with_log(
        &[
            "lock", "acquire", "nightly", "--owner", "cron-2", "--ttl-ms", "5000",
        ],
        &masters,
    );
    assert_eq!(code, 0, "{again} {log}");
    let (_, audit) = redlease(&["audit", "--since", "1h", "--json"], &masters);
    assert_eq!(audit["records"].as_array().unwrap().len(), 1, "{audit}");
}

/// A force-released lease cannot be brought back by its holder's shadow reservation, which
/// would otherwise set it again wherever the lock is free (deleted at once with
/// `holder_gone`), nor renewed over its tombstone (revoked, the holder not listening).
#[tokio::test]
async fn a_force_released_lease_stays_released_despite_its_shadows() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let ttl = Duration::from_secs(10);
    let lease = match engine.acquire("report", "job", ttl).await.unwrap() {
        redlease::AcquireOutcome::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    let gone = redlease::ForceOptions {
        holder_gone: true,
        ..Default::default()
    };
    let forced = engine.force_release("report", "ops", "test", &gone);
    let forced = forced.await.unwrap();
    assert_eq!(forced.masters_removed, 3);
    assert_eq!(forced.holder_told, None);
    let shadow = engine
        .reserve_shadow(
            "report",
            lease.id,
            "job",
            Duration::from_millis(500),
            ttl / 10,
        )
        .await
        .unwrap();
    assert!(
        matches!(shadow, redlease::ExtendOutcome::Lost(_)),
        "{shadow:?}"
    );
    assert!(fleet.lock_keys_on(&[0, 1, 2]).is_empty());

    let lease = match engine.acquire("report-2", "job", ttl).await.unwrap() {
        redlease::AcquireOutcome::Acquired(lease) => lease,
        other => panic!("{other:?}"),
    };
    let revoke = redlease::ForceOptions::default();
    let forced = engine.force_release("report-2", "ops", "test", &revoke);
    let forced = forced.await.unwrap();
    // Nobody listens for this engine's leases: the tombstones stay until the keys expire.
    assert_eq!(forced.holder_told, Some(false));
    assert!(forced.free_at_ms > forced.time_ms + 8_000, "{forced:?}");
    for i in 0..3 {
        let value = fleet.command(i, &["GET", "redlease:lock:report-2"]).bulk();
        assert_eq!(value, Some(format!("revoked:{}", lease.id)), "master {i}");
    }
    let renewed = engine.extend("report-2", lease.id, ttl).await.unwrap();
    match renewed {
        redlease::ExtendOutcome::Lost(refusal) => assert!(refusal.revoked(), "{refusal:?}"),
        other => panic!("{other:?}"),
    }
}

//! How a fleet is born and how a master's standing is decided, against real masters: a fleet
//! born with masters down cannot grant twice, the first cron job leaves no healthy master
//! quarantined, every piece of data-loss evidence quarantines, evicting masters and masters of
//! another fleet are refused, fence sync reads members only, and the quarantine is the fleet's.

use std::time::Duration;

use redlease::{
    BirthRule, EngineOptions, Error, Exclusion, Fleet, FleetMark, FleetOptions, Loss, Redlock,
};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::{RedisServer, TestFleet};
use serde_json::Value;
use tokio::time::Instant;

use crate::support::run_redlease;

/// `redlease ARGS` on `masters`: exit code and stdout's JSON (`Null` when there is none).
fn cli(args: &[&str], masters: &str) -> (i32, Value) {
    let output = run_redlease(args, masters);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (output.status.code().unwrap_or(-1), json)
}

fn acquire(resource: &str, masters: &str) -> (i32, Value) {
    let args = ["lock", "acquire", resource, "--ttl-ms", "30000"];
    cli(&args, masters)
}

fn options(quarantine: Duration) -> FleetOptions {
    FleetOptions {
        quarantine,
        longest_ttl: quarantine,
        ..test_fleet_options()
    }
}

fn exclusion_of(fleet: &Fleet, i: usize) -> Option<Exclusion> {
    fleet.nodes()[i].exclusion()
}

/// Five masters never used; masters 1 and 2 frozen during the first CLI acquire; then they
/// resume, master 5 restarts empty and masters 3 and 4 freeze: the second acquire must not be
/// granted with the same fencing token (it was, when a quorum of blank answers made a fleet).
/// Then the same with the operator's birth of the fleet without masters 1 and 2.
#[test]
fn a_fleet_born_with_masters_down_never_grants_twice() {
    for operator_birth in [false, true] {
        let mut fleet = TestFleet::start(5);
        let masters = fleet.urls().join(",");
        fleet.servers[0].pause();
        fleet.servers[1].pause();
        if operator_birth {
            let args = ["fleet", "init", "--allow-missing"];
            let (code, born) = cli(&args, &masters);
            assert_eq!(code, 0, "{born}");
            assert_eq!(born["born"], true);
        }
        let (first_code, first) = acquire("A", &masters);
        assert_eq!(first_code, if operator_birth { 0 } else { 4 }, "{first}");
        fleet.servers[0].resume();
        fleet.servers[1].resume();
        fleet.servers[4].restart();
        fleet.servers[2].pause();
        fleet.servers[3].pause();
        let (second_code, second) = acquire("A", &masters);
        fleet.servers[2].resume();
        fleet.servers[3].resume();
        assert_eq!(second_code, 4, "granted twice: {first} then {second}");
    }
}

/// The fleet's first process is a cron job that exits as soon as it can: every master it
/// heard is marked, so with two of five frozen afterwards every acquisition still succeeds
/// (a master left unmarked was quarantined for 5 minutes, and then 6 of 10 failed).
#[test]
fn the_first_cron_job_leaves_no_healthy_master_quarantined() {
    let mut fleet = TestFleet::start(5);
    let masters = fleet.urls().join(",");
    let (code, lease) = acquire("first", &masters);
    assert_eq!(code, 0, "{lease}");
    for i in 0..5 {
        let marker = fleet.command(i, &["GET", "redlease:fleet"]).bulk();
        let parsed = marker.as_deref().and_then(FleetMark::parse);
        assert!(parsed.is_some(), "master {i} left unmarked: {marker:?}");
    }
    fleet.servers[1].pause();
    fleet.servers[3].pause();
    let granted = (0..10)
        .filter(|round| acquire(&format!("job-{round}"), &masters).0 == 0)
        .count();
    fleet.servers[1].resume();
    fleet.servers[3].resume();
    assert_eq!(granted, 10, "{granted} of 10 acquisitions granted");
}

/// A connected process sees master 0 go back to an older dump (`DEBUG RELOAD NOSAVE`: same
/// `run_id`, the marker still there, the counter lower): the master takes no vote for the
/// quarantine — it rejoined at once when the marker named its own `run_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_reloaded_from_an_older_dump_is_quarantined() {
    let mut fleet = TestFleet::start(3);
    fleet.servers[0] = RedisServer::start_with(|command| {
        command.args(["--enable-debug-command", "local"]);
    });
    let engine = engine(&fleet, Duration::from_secs(3)).await;
    engine.all_up().await;
    fleet.command(0, &["SAVE"]);
    cycle(&engine, 5).await;
    fleet.command(0, &["DEBUG", "RELOAD", "NOSAVE"]);
    let _ = engine.acquire("job", "a", Duration::from_millis(500)).await;
    assert_out_for_the_quarantine(&engine, 0, Loss::CounterWentBack).await;
}

/// The fence counter deleted (or evicted) while the marker stays: the connected process
/// quarantines the master, and so does a process meeting it for the first time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_fence_counter_quarantines_the_master() {
    let fleet = TestFleet::start(3);
    let engine = engine(&fleet, Duration::from_secs(3)).await;
    engine.all_up().await;
    cycle(&engine, 3).await;
    fleet.command(0, &["DEL", "redlease:fence"]);
    let newcomer = Fleet::connect(&fleet.urls(), &options(Duration::from_secs(3))).await;
    let newcomer = newcomer.unwrap();
    let why = exclusion_of(&newcomer, 0);
    assert!(
        matches!(
            why,
            Some(Exclusion::Quarantined {
                why: Loss::NoFenceCounter,
                ..
            })
        ),
        "a newcomer lets master 0 vote: {why:?}"
    );
    let _ = engine.acquire("job", "a", Duration::from_millis(500)).await;
    assert_out_for_the_quarantine(&engine, 0, Loss::CounterWentBack).await;
}

/// A master that may evict keys takes no votes and says why; set to `noeviction`, it joins;
/// set to evict again while it votes, it is taken out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_master_is_refused() {
    let mut fleet = TestFleet::start(3);
    fleet.servers[2] = RedisServer::start_with(|command| {
        command.args(["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"]);
    });
    let engine = engine(&fleet, Duration::from_secs(1)).await;
    let node = &engine.fleet().nodes()[2];
    assert_eventually!(node.exclusion().is_some(), 3, "master 2 never refused");
    match node.exclusion() {
        Some(Exclusion::Evicting(evicting)) => assert_eq!(evicting.policy, "volatile-lru"),
        other => panic!("master 2 is {other:?}"),
    }
    assert!(!node.is_up());
    fleet.command(2, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    assert_eventually!(node.is_up(), 3, "master 2 never joined with noeviction");
    // Set to evict while it votes: the probe takes it out.
    fleet.command(2, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let evicting = || matches!(node.exclusion(), Some(Exclusion::Evicting(_)));
    assert_eventually!(
        evicting() && !node.is_up(),
        3,
        "master 2 votes while it may evict"
    );
}

/// The last token landed on masters 0, 1 and 3 only (2 and 4 missed it); 0 and 1 then restart
/// empty and 3
/// freezes, and a new process (which never saw their counters) comes. At the end of their
/// quarantine the only counters left are the lower ones of 2 and 4 and the zeros of each
/// other: a sync from those would let tokens go back. Only a quorum of current members may
/// raise a fence, so no token at or below the last one is ever issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_sync_reads_a_quorum_of_members_only() {
    let mut fleet = TestFleet::start(5);
    let engine = engine(&fleet, Duration::from_secs(1)).await;
    engine.all_up().await;
    cycle(&engine, 3).await;
    let missed = [(2, fleet.fence(2)), (4, fleet.fence(4))];
    fleet.servers[2].pause();
    fleet.servers[4].pause();
    let mut last = 0;
    for _ in 0..5 {
        let outcome = engine.acquire("job", "a", Duration::from_millis(500)).await;
        let lease = outcome
            .unwrap()
            .lease()
            .cloned()
            .expect("granted on 0, 1, 3");
        last = lease.fencing_token;
        engine.release("job", lease.id).await.unwrap();
    }
    engine.settle(Duration::from_secs(1)).await;
    engine.fleet().quit(Duration::from_millis(100)).await;
    drop(engine);
    fleet.servers[2].resume();
    fleet.servers[4].resume();
    // Their INCRs were only delayed: put their counters back where a master that missed those
    // grants (down, not frozen) would have them.
    for (i, counter) in missed {
        fleet.command(i, &["SET", "redlease:fence", &counter.to_string()]);
    }
    fleet.servers[0].restart();
    fleet.servers[1].restart();
    fleet.servers[3].pause();
    let engine = self::engine(&fleet, Duration::from_secs(1)).await;
    // No attempt until the quarantine is over and a sync could have run: every attempt INCRs
    // the counters of the masters that answer, which would hide a sync from low counters.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let outcome = engine.acquire("job", "b", Duration::from_millis(300)).await;
        if let Some(lease) = outcome.unwrap().lease().cloned() {
            assert!(
                lease.fencing_token > last,
                "token {} after {last}",
                lease.fencing_token
            );
            engine.release("job", lease.id).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fleet.servers[3].resume();
}

/// The quarantine is the fleet's, written at its birth: a process configured otherwise uses
/// it, and one whose longest TTL exceeds it refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quarantine_is_the_fleets_own() {
    let fleet = TestFleet::start(3);
    let born = Fleet::connect(&fleet.urls(), &options(Duration::from_secs(5))).await;
    assert_eq!(born.unwrap().quarantine(), Duration::from_secs(5));
    let shorter = Fleet::connect(&fleet.urls(), &options(Duration::from_secs(2))).await;
    assert_eq!(
        shorter.unwrap().quarantine(),
        Duration::from_secs(5),
        "the fleet's, not its own"
    );
    let longer = Fleet::connect(&fleet.urls(), &options(Duration::from_secs(10))).await;
    match longer {
        Err(Error::QuarantineTooShort {
            quarantine_ms: 5000,
            longest_ttl_ms: 10000,
            ..
        }) => {}
        other => panic!(
            "a process with longer TTLs started: {:?}",
            other.map(|_| ())
        ),
    }
    let masters = fleet.urls().join(",");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("REDLEASE__MASTERS", &masters)
        .env("REDLEASE__FLEET__QUARANTINE_MS", "600000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the sidecar started: {stderr}");
    assert!(stderr.contains("5000 ms"), "{stderr}");
}

/// Masters of another fleet are refused at start-up, naming both; an operator's birth of a
/// fleet that has history is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_fleets_master_and_a_second_birth_are_refused() {
    let one = TestFleet::start(2);
    let two = TestFleet::start(1);
    let _ = Fleet::connect(&one.urls(), &options(Duration::from_secs(1)))
        .await
        .unwrap();
    let _ = Fleet::connect(&two.urls(), &options(Duration::from_secs(1)))
        .await
        .unwrap();
    let mixed = [one.urls(), two.urls()].concat();
    match Fleet::connect(&mixed, &options(Duration::from_secs(1))).await {
        Err(Error::TwoFleets {
            fleet, other_fleet, ..
        }) => assert_ne!(fleet, other_fleet),
        other => panic!("masters of two fleets accepted: {:?}", other.map(|_| ())),
    }
    let init = FleetOptions {
        birth: BirthRule::Init {
            allow_missing: false,
        },
        ..options(Duration::from_secs(1))
    };
    match Fleet::connect(&one.urls(), &init).await {
        Err(Error::BirthRefused(why)) => assert!(why.contains("history"), "{why}"),
        other => panic!("a second birth went ahead: {:?}", other.map(|_| ())),
    }
}

async fn engine(fleet: &TestFleet, quarantine: Duration) -> redlease_testkit::fleet::TestEngine {
    let engine = EngineOptions {
        max_ttl: quarantine,
        ..EngineOptions::default()
    };
    fleet.engine_custom(engine, options(quarantine)).await
}

async fn cycle(engine: &Redlock, times: usize) {
    for _ in 0..times {
        let outcome = engine.acquire("job", "a", Duration::from_millis(500)).await;
        let lease = outcome.unwrap().lease().cloned().expect("granted");
        engine.release("job", lease.id).await.unwrap();
    }
}

/// Master `i` takes no votes for most of its quarantine (3 s), quarantined for `why`.
async fn assert_out_for_the_quarantine(engine: &Redlock, i: usize, why: Loss) {
    let node = &engine.fleet().nodes()[i];
    let quarantined =
        || matches!(node.exclusion(), Some(Exclusion::Quarantined { why: w, .. }) if w == why);
    assert_eventually!(
        quarantined(),
        2,
        "master {i} not quarantined: {:?}",
        node.exclusion()
    );
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        assert!(!node.is_up(), "master {i} votes during its quarantine");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two of three masters restart empty at once: when their quarantine ends, no quorum of
/// members remembers the last token, so they wait rather than vote with counters that went
/// back. The operator brings them back with `redlease fleet rejoin --fence-at`, and the next
/// token is above that floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_without_a_quorum_of_members_wait_for_the_operator() {
    let mut fleet = TestFleet::start(3);
    let engine = engine(&fleet, Duration::from_secs(1)).await;
    engine.all_up().await;
    cycle(&engine, 3).await;
    fleet.servers[0].restart();
    fleet.servers[1].restart();
    let nodes = engine.fleet().nodes();
    let rejoining = |i: usize| matches!(nodes[i].exclusion(), Some(Exclusion::Rejoining { .. }));
    assert_eventually!(
        rejoining(0) && rejoining(1),
        5,
        "{:?}",
        nodes[0].exclusion()
    );
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(
            !nodes[0].is_up() && !nodes[1].is_up(),
            "a master votes without its fence"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let masters = fleet.urls().join(",");
    let (code, report) = cli(&["fleet", "rejoin", "--fence-at", "5000"], &masters);
    assert_eq!(code, 0, "{report}");
    engine.all_up().await;
    let outcome = engine.acquire("job", "a", Duration::from_millis(500)).await;
    let lease = outcome.unwrap().lease().cloned().expect("granted");
    assert!(lease.fencing_token > 5000, "token {}", lease.fencing_token);
}

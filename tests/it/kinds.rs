//! A history checker for the lock kinds beyond the exclusive lock: two sidecars and two
//! library clients take permits of one counting semaphore on five masters behind fault
//! proxies, while masters are slowed, black-holed, frozen, killed and restarted empty. Every
//! client records when it was told it held which slot (its windows); at the end the checker
//! finds at most `limit` permits valid at every instant, no two windows of one slot
//! overlapping, and each slot's tokens rising in grant order. The same lab and faults check
//! an election (`election`): one leader at a time, rising terms, observers' terms never
//! going back; a read-write lock: no writer's window overlapping another lease's, the
//! writers' tokens rising; re-entry: one lock's windows never overlapping, every hold
//! carrying its lease's token, no hold's release or stale release freeing anything; and fair
//! waiting (`fair`): no request granted before one queued clearly earlier.
//!
//! This file owns the lab (fleet, proxies, sidecars, engines), the faults and the semaphore's,
//! read-write lock's and re-entry's tests; the clients are in `clients`, the recording and the
//! sweeps in `record`.

mod clients;
mod election;
mod fair;
mod record;

use std::sync::Arc;
use std::time::Duration;

use redlease::{EngineOptions, Fleet, FleetOptions, ProbeGuard, Redlock, Wakeups};
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::history::check;
use redlease_testkit::proxy::{Fault, FaultProxy};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::clients::{Kind, LibraryClient, SidecarClient};
use self::record::Record;
use redlease::redlock::read_write::RwMode;

/// Restart quarantine of every client; no lease or shadow outlives it.
const QUARANTINE: Duration = Duration::from_secs(3);
/// The semaphore every client takes permits of, and its limit.
const SEMAPHORE: &str = "pool";
const LIMIT: u32 = 4;
/// The read-write lock the clients of its run read and write.
const RW_LOCK: &str = "doc";

/// Settings of both sidecars, as `REDLEASE__…` pairs.
const SIDECAR_ENV: [(&str, &str); 4] = [
    ("REDLEASE__FLEET__QUARANTINE_MS", "3000"),
    ("REDLEASE__LEASE__MAX_TTL_MS", "3000"),
    ("REDLEASE__FLEET__PROBE_INTERVAL_MS", "100"),
    ("REDLEASE__FLEET__CONNECT_TIMEOUT_MS", "1000"),
];

/// A library client's engine and the probe that keeps its breakers current.
pub struct LibraryEngine {
    pub engine: Redlock,
    _probe: ProbeGuard,
}

/// A library client's engine on the masters at `urls`; with `wakeups`, its blocking
/// acquisitions try again on release messages (as a sidecar's do) rather than at random
/// intervals only.
async fn library_engine(urls: &[String], wakeups: bool) -> Arc<LibraryEngine> {
    let options = FleetOptions {
        quarantine: QUARANTINE,
        ..test_fleet_options()
    };
    // The proxies are up and the fleet is born: connecting cannot fail.
    let fleet = Fleet::connect(urls, &options).await.unwrap();
    let probe = fleet.spawn_probe(Duration::from_millis(50));
    let engine_options = EngineOptions {
        max_ttl: QUARANTINE,
        ..EngineOptions::default()
    };
    let mut engine = Redlock::new(fleet, engine_options);
    if wakeups {
        let connected = Wakeups::connect(engine.fleet()).unwrap();
        engine = engine.with_wakeups(connected);
    }
    Arc::new(LibraryEngine {
        engine,
        _probe: probe,
    })
}

/// Five masters behind fault proxies, and two sidecars on the proxies.
struct Lab {
    fleet: TestFleet,
    proxies: Vec<FaultProxy>,
    /// The proxies' URLs, which every client is given.
    urls: Vec<String>,
    sidecars: Vec<TestSidecar>,
}

impl Lab {
    async fn start() -> Self {
        redlease_testkit::fleet::init_test_logs();
        let fleet = TestFleet::start(5);
        let starts = fleet.servers.iter().map(|s| FaultProxy::start(s.port()));
        let proxies = futures_util::future::join_all(starts).await;
        let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
        let mut sidecars = Vec::new();
        for _ in 0..2 {
            sidecars.push(TestSidecar::start_on(urls.clone(), &SIDECAR_ENV).await);
        }
        Self {
            fleet,
            proxies,
            urls,
            sidecars,
        }
    }
}

/// The faults of every kinds' history, in the calling test's own thread (a restarted master
/// is tied to it), each recorded: a slowed majority, a black-holed master, a frozen one, a
/// killed one, and two restarted empty; about 10 s.
async fn inject_faults(fleet: &mut TestFleet, proxies: &[FaultProxy], record: &Record) {
    let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));
    pause(1500).await;
    for proxy in &proxies[..3] {
        proxy.set_both(Fault::Delay(Duration::from_millis(40)));
    }
    record.fault("slow majority: masters 0-2 delayed 40 ms");
    pause(2000).await;
    proxies[..3].iter().for_each(|p| p.set_both(Fault::Pass));
    proxies[4].set_both(Fault::BlackholeDrop);
    record.fault("master 4 black-holed");
    pause(2000).await;
    proxies[4].set_both(Fault::Pass);
    fleet.servers[0].pause();
    record.fault("master 0 frozen");
    pause(1500).await;
    fleet.servers[0].resume();
    fleet.servers[1].stop();
    record.fault("master 1 killed");
    pause(1500).await;
    fleet.servers[1].restart();
    record.fault("master 1 restarted empty");
    pause(1500).await;
    fleet.servers[2].restart();
    record.fault("master 2 restarted empty");
}

/// The clients of one run, until `stop_at`: on each sidecar an auto-renewed client of
/// `sidecar_kinds[0]` and one renewing by hand of `sidecar_kinds[1]`; a library client of
/// each of `library_kinds` (hearing releases when `wakeups`).
async fn spawn_clients(
    lab: &Lab,
    record: &Arc<Record>,
    stop_at: Instant,
    sidecar_kinds: [Kind; 2],
    (library_kinds, wakeups): ([Kind; 2], bool),
) -> Vec<JoinHandle<()>> {
    let mut clients = Vec::new();
    for (i, sidecar) in lab.sidecars.iter().enumerate() {
        for (auto_renew, kind) in [true, false].into_iter().zip(sidecar_kinds) {
            let client = SidecarClient {
                name: format!("s{i}-{}", if auto_renew { "auto" } else { "manual" }),
                base: sidecar.base.clone(),
                http: reqwest::Client::new(),
                record: Arc::clone(record),
                auto_renew,
                stop_at,
                kind,
            };
            clients.push(tokio::spawn(client.run()));
        }
    }
    for (i, kind) in library_kinds.into_iter().enumerate() {
        let client = LibraryClient {
            name: format!("lib-{i}"),
            engine: library_engine(&lab.urls, wakeups).await,
            record: Arc::clone(record),
            stop_at,
            kind,
        };
        clients.push(tokio::spawn(client.run()));
    }
    clients
}

/// Waits for every client (each stops by itself once its run is over).
async fn join_clients(clients: Vec<JoinHandle<()>>) {
    for client in clients {
        tokio::time::timeout(Duration::from_secs(15), client)
            .await
            .expect("a client did not stop")
            .unwrap();
    }
}

/// Two sidecar clients (one auto-renewed taking one permit, one renewing by hand taking two at
/// once) on each of two sidecars and two library clients (one of each) take permits of a
/// semaphore of limit 4 for 14 s, while a majority is slowed, one master black-holed, one
/// frozen, one killed and one restarted empty: at no instant were more than four permits
/// valid, no slot had two holders at once, and each slot's tokens rose with every grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_never_exceed_the_limit_under_faults() {
    let mut lab = Lab::start().await;
    let record = Arc::new(Record::new());
    let stop_at = Instant::now() + Duration::from_secs(14);
    let clients = spawn_clients(
        &lab,
        &record,
        stop_at,
        [Kind::Permit(1), Kind::Permit(2)],
        ([Kind::Permit(2), Kind::Permit(1)], true),
    )
    .await;
    inject_faults(&mut lab.fleet, &lab.proxies, &record).await;
    join_clients(clients).await;
    let windows = record::per_slot(&record.windows());
    let counts = record.counts();
    eprintln!("semaphore history: {} windows; {counts:?}", windows.len());
    eprintln!("faults: {:?}", record.faults());
    let overlaps = check::overlaps(&windows);
    let regressions = check::regressions(&windows);
    let most = record::most_at_once(&windows);
    assert!(
        overlaps.is_empty(),
        "slots held twice at once: {overlaps:?}"
    );
    assert!(
        regressions.is_empty(),
        "slot tokens went back: {regressions:?}"
    );
    assert!(most <= LIMIT as usize, "{most} permits valid at once");
    let slots_in_range = windows.iter().all(|w| {
        let slot = w
            .resource
            .rsplit('#')
            .next()
            .and_then(|s| s.parse::<u32>().ok());
        slot.is_some_and(|slot| slot < LIMIT)
    });
    assert!(slots_in_range, "a slot outside the limit");
    for (who, least) in [("sidecar grants", 8), ("library grants", 5)] {
        let granted = counts.get(who).copied().unwrap_or(0);
        assert!(granted >= least, "too few {who} to judge: {counts:?}");
    }
    // Two permits wait for two free slots at once, which single permits taken as soon as they
    // free can deny for long: counted over both kinds of client.
    let several: u64 = [
        "sidecar grants of several permits",
        "library grants of several permits",
    ]
    .iter()
    .map(|who| counts.get(*who).copied().unwrap_or(0))
    .sum();
    assert!(
        several >= 4,
        "too few grants of several permits to judge: {counts:?}"
    );
    assert_eq!(
        most, LIMIT as usize,
        "the limit was never reached: no contention"
    );
}

/// Readers and writers of one read-write lock (on each sidecar an auto-renewed reader and a
/// writer renewing by hand; a library reader and writer) for 14 s under the kinds' faults: no
/// writer's window overlapped any other lease's, readers did share the lock and were not
/// starved, and the writers' tokens rose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_overlaps_nothing_under_faults() {
    let mut lab = Lab::start().await;
    let record = Arc::new(Record::new());
    let stop_at = Instant::now() + Duration::from_secs(14);
    let (read, write) = (Kind::Rw(RwMode::Read), Kind::Rw(RwMode::Write));
    let clients = spawn_clients(&lab, &record, stop_at, [read, write], ([read, write], true)).await;
    inject_faults(&mut lab.fleet, &lab.proxies, &record).await;
    join_clients(clients).await;
    let windows = record.windows();
    eprintln!(
        "read-write history: {} windows; {:?}\nfaults: {:?}",
        windows.len(),
        record.counts(),
        record.faults()
    );
    let conflicts = record::writer_conflicts(&windows);
    assert!(
        conflicts.is_empty(),
        "a writer beside another lease: {conflicts:?}"
    );
    let writers: Vec<_> = windows
        .iter()
        .filter(|w| w.resource.ends_with("/write"))
        .cloned()
        .collect();
    let regressions = check::regressions(&writers);
    assert!(
        regressions.is_empty(),
        "writer tokens went back: {regressions:?}"
    );
    assert!(
        writers.len() >= 5,
        "too few writes to judge: {}",
        writers.len()
    );
    let readers: Vec<_> = windows
        .iter()
        .filter(|w| w.resource.ends_with("/read"))
        .cloned()
        .collect();
    let shared = record::most_at_once(&readers);
    eprintln!(
        "readers: {} windows, at most {shared} at once",
        readers.len()
    );
    assert!(shared >= 2, "readers never shared the lock");
    // Writers pause between their holds: readers get about as many turns (11–19 windows
    // against 10–11 writers' in six runs). A writer's intent left while it waited behind
    // another writer starved them (4–5 windows against 12–16 in two of three runs).
    assert!(
        readers.len() * 2 >= writers.len(),
        "readers starved: {} windows against {} writers'",
        readers.len(),
        writers.len()
    );
    let counts = record.counts();
    for (who, least) in [("sidecar grants", 4), ("library grants", 3)] {
        let granted = counts.get(who).copied().unwrap_or(0);
        assert!(granted >= least, "too few {who} to judge: {counts:?}");
    }
}

/// Two sidecar clients on each of two sidecars take one lock and re-enter it while they hold
/// it, replaying the releases of their earlier leases and holds while they hold a newer one;
/// two library clients take the same lock plainly; all for 14 s under the kinds' faults. No
/// two windows of the lock overlapped, tokens rose, every re-entry carried its lease's token,
/// no hold's release released its lease, and no stale release released anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_keeps_the_token_and_stale_releases_free_nothing_under_faults() {
    let mut lab = Lab::start().await;
    let record = Arc::new(Record::new());
    let stop_at = Instant::now() + Duration::from_secs(14);
    let clients = spawn_clients(
        &lab,
        &record,
        stop_at,
        [Kind::Reentry; 2],
        ([Kind::Reentry; 2], true),
    )
    .await;
    inject_faults(&mut lab.fleet, &lab.proxies, &record).await;
    join_clients(clients).await;
    let windows = record.windows();
    let counts = record.counts();
    eprintln!(
        "re-entry history: {} windows; {counts:?}\nfaults: {:?}",
        windows.len(),
        record.faults()
    );
    let overlaps = check::overlaps(&windows);
    let regressions = check::regressions(&windows);
    assert!(
        overlaps.is_empty(),
        "the lock held twice at once: {overlaps:?}"
    );
    assert!(regressions.is_empty(), "tokens went back: {regressions:?}");
    let count = |what| counts.get(what).copied().unwrap_or(0);
    assert_eq!(count("reentries with another token"), 0, "{counts:?}");
    assert_eq!(
        count("hold releases that released the lease"),
        0,
        "{counts:?}"
    );
    assert_eq!(count("stale releases that released"), 0, "{counts:?}");
    assert!(
        count("reentries") >= 5,
        "too few re-entries to judge: {counts:?}"
    );
    assert!(
        count("stale releases replayed") >= 5,
        "too few replays: {counts:?}"
    );
}

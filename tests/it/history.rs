//! A history checker: two sidecars and two library clients contend for three resources on five
//! masters behind fault proxies, on a fleet born with two masters missing, while a schedule of
//! faults runs (slow majority, blackholed minority, masters restarted empty and from a
//! snapshot, FLUSHALL, an older dump reloaded, a fence counter deleted, keys evicted, a sidecar
//! restarted, a frozen holder, connections reset). Every client records when it was told it holds what
//! (its windows) and writes its fencing token to a fenced register while it believes so; at
//! the end the checker judges everything clients were told.
//!
//! This file owns the run: the lab (fleet, proxies, sidecars, engines), the clients, the wind
//! down and the test. The recording is in `record`, the verdict in `report`, the faults in
//! `schedule`, the clients in `sidecar` and `library`; the windows, the fenced register and
//! the pure checks are the testkit's (`redlease_testkit::history`).

mod library;
mod pace;
mod record;
mod report;
mod schedule;
mod sidecar;

use std::sync::Arc;
use std::time::Duration;

use redlease_testkit::proxy::{Fault, FaultProxy};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::{RedisServer, TestFleet};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::library::{LibraryClient, LibraryEngine};
use self::pace::{Rng, Stop};
use self::record::History;
use self::report::Report;
use self::sidecar::{SidecarClient, SidecarSlot};
use redlease::{BirthRule, Fleet, FleetOptions};

/// Restart quarantine of every client; no lease or shadow outlives it.
const QUARANTINE: Duration = Duration::from_secs(3);
/// The clients stop by then whatever happens (the schedule takes about 60 s).
const HARD_STOP: Duration = Duration::from_secs(85);
/// How long the clients have to finish their last lease once told to stop.
const FINISH: Duration = Duration::from_secs(15);

/// Settings of both sidecars, as `REDLEASE__…` pairs.
fn sidecar_env() -> [(&'static str, &'static str); 5] {
    [
        ("REDLEASE__FLEET__QUARANTINE_MS", "3000"),
        ("REDLEASE__LEASE__MAX_TTL_MS", "3000"),
        ("REDLEASE__FLEET__PROBE_INTERVAL_MS", "100"),
        ("REDLEASE__FLEET__CONNECT_TIMEOUT_MS", "1000"),
        ("REDLEASE__SHUTDOWN__GRACE_MS", "3000"),
    ]
}

/// Everything the run drives. The test's own thread owns the fleet (a restarted master is
/// tied to the thread that started it), so the schedule runs in the test body.
pub struct Lab {
    fleet: TestFleet,
    proxies: Vec<FaultProxy>,
    /// The proxies' URLs: what every client connects to.
    urls: Vec<String>,
    sidecars: Vec<TestSidecar>,
    slots: Vec<Arc<SidecarSlot>>,
    libraries: Vec<Arc<LibraryEngine>>,
    history: Arc<History>,
    http: reqwest::Client,
    stop: Arc<Stop>,
}

impl Lab {
    async fn start() -> Self {
        redlease_testkit::fleet::init_test_logs();
        let mut fleet = TestFleet::start(5);
        // Master 1 reloads an older dump in the schedule.
        fleet.servers[1] = RedisServer::start_with(|command| {
            command.args(["--enable-debug-command", "local"]);
        });
        let starts = fleet.servers.iter().map(|s| FaultProxy::start(s.port()));
        let proxies = futures_util::future::join_all(starts).await;
        let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
        let history = Arc::new(History::new());
        born_without(&proxies, &urls, &history, [3, 4]).await;
        let mut sidecars = Vec::new();
        for _ in 0..2 {
            sidecars.push(TestSidecar::start_on(urls.clone(), &sidecar_env()).await);
        }
        let slots = (0..2)
            .map(|i| SidecarSlot::new(i, sidecars[i].base.clone()))
            .collect();
        let mut libraries = Vec::new();
        for _ in 0..2 {
            libraries.push(LibraryEngine::connect(&urls, QUARANTINE).await);
        }
        Self {
            fleet,
            proxies,
            urls,
            sidecars,
            slots,
            libraries,
            history,
            http: reqwest::Client::new(),
            stop: Arc::new(Stop::new(HARD_STOP)),
        }
    }

    fn sidecar_client(&self, name: String, sidecar: usize, seed: u64) -> SidecarClient {
        SidecarClient {
            name,
            slot: Arc::clone(&self.slots[sidecar]),
            history: Arc::clone(&self.history),
            http: self.http.clone(),
            rng: Rng::new(seed),
            stop: Arc::clone(&self.stop),
        }
    }

    /// The client the schedule freezes: one of sidecar 0.
    fn client_to_freeze(&self) -> SidecarClient {
        self.sidecar_client("frozen".to_string(), 0, 99)
    }

    /// Sidecar 0: two auto-renewed clients and one renewing by hand; sidecar 1: one and two;
    /// two library clients.
    fn spawn_clients(&self) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        let plan = [(0, "auto"), (0, "auto"), (0, "manual")];
        let plan = plan
            .into_iter()
            .chain([(1, "auto"), (1, "manual"), (1, "manual")]);
        for (seed, (sidecar, kind)) in plan.enumerate() {
            let client =
                self.sidecar_client(format!("s{sidecar}-{kind}-{seed}"), sidecar, seed as u64);
            tasks.push(match kind {
                "auto" => tokio::spawn(client.auto_renewed()),
                _ => tokio::spawn(client.manually_renewed()),
            });
        }
        for (i, engine) in self.libraries.iter().enumerate() {
            let client = LibraryClient {
                name: format!("lib-{i}"),
                engine: Arc::clone(engine),
                history: Arc::clone(&self.history),
                rng: Rng::new(50 + i as u64),
                stop: Arc::clone(&self.stop),
            };
            tasks.push(tokio::spawn(client.run()));
        }
        tasks
    }

    /// Every fault undone, the library engines' releases settled; then the lock keys still on
    /// any master once they have had 3 s plus the quarantine to go.
    async fn wind_down(&self) -> Vec<String> {
        for proxy in &self.proxies {
            proxy.set_both(Fault::Pass);
            proxy.refuse(false);
        }
        for library in &self.libraries {
            library.engine.settle(Duration::from_secs(3)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(3) + QUARANTINE;
        loop {
            let keys = self.lock_keys();
            if keys.is_empty() || Instant::now() >= deadline {
                return keys;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn lock_keys(&self) -> Vec<String> {
        let masters = 0..self.fleet.servers.len();
        let keys = masters.flat_map(|i| self.fleet.lock_keys(i).into_iter().map(move |k| (i, k)));
        keys.map(|(i, key)| format!("master {i}: {key}")).collect()
    }
}

/// The operator gives birth to the fleet (`fleet init --allow-missing`) while the masters
/// behind `missing` are cut off: they carry no marker when they come, and every process
/// quarantines them once.
async fn born_without(
    proxies: &[FaultProxy],
    urls: &[String],
    history: &History,
    missing: [usize; 2],
) {
    let start = Instant::now();
    missing
        .iter()
        .for_each(|&i| proxies[i].set_both(Fault::Blackhole));
    let options = FleetOptions {
        birth: BirthRule::Init {
            allow_missing: true,
        },
        quarantine: QUARANTINE,
        longest_ttl: QUARANTINE,
        connect_timeout: Duration::from_secs(1),
        ..FleetOptions::default()
    };
    let fleet = Fleet::connect(urls, &options).await.unwrap();
    fleet.settle_preparations(Duration::from_secs(1)).await;
    fleet.quit(Duration::from_millis(100)).await;
    missing
        .iter()
        .for_each(|&i| proxies[i].set_both(Fault::Pass));
    let detail = format!("masters {missing:?} cut off at the birth, quarantined after");
    history.fault(
        "fleet born with masters missing",
        detail,
        start,
        Instant::now() + QUARANTINE,
    );
}

/// On a fleet born with two masters missing, under slow and blackholed masters, masters
/// restarted empty or from a snapshot, flushed, reloaded from an older dump, their fence
/// counter deleted or their keys evicted, a sidecar restarted and a frozen holder, no two clients were ever told they held one
/// resource at once, tokens grew with every grant, no holder within its validity was refused
/// by the fenced register (the frozen one, past it, was), and no lock key was left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_never_hold_one_resource_at_once_under_faults() {
    let mut lab = Lab::start().await;
    let clients = lab.spawn_clients();
    let frozen = schedule::run(&mut lab).await;
    lab.stop.now();
    let finished = tokio::time::timeout(FINISH, futures_util::future::join_all(clients));
    for result in finished.await.unwrap() {
        result.unwrap();
    }
    let frozen = match frozen {
        Some(task) => Some(tokio::time::timeout(FINISH, task).await.unwrap().unwrap()),
        None => None,
    };
    let keys_left = lab.wind_down().await;
    let report = Report::judge(&lab.history, keys_left, frozen);
    report.print();
    let failures = report.failures();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

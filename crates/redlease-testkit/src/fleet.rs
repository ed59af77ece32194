//! A fleet of real masters for one test, with an engine on it and inspection helpers.
//! When a test panics, every master's log is printed next to the panic.

use std::ops::Deref;
use std::time::Duration;

use redlease_engine::{EngineOptions, Fleet, FleetOptions, ProbeGuard, Redlock, Wakeups};

use crate::resp;
use crate::RedisServer;

/// Real masters for one test; prints every master's log if the test panics.
pub struct TestFleet {
    /// The masters, in the order their URLs are given to engines and sidecars.
    pub servers: Vec<RedisServer>,
}

impl TestFleet {
    /// Starts `n` masters. First installs the sidecar's exporter as the global meter provider,
    /// as the sidecar does before it records: the engine's instruments are made once per
    /// process, from the provider global at that moment, and the tests' sidecars export them.
    pub fn start(n: usize) -> Self {
        redlease_sidecar::metrics::install();
        Self {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    /// Every master's `redis://127.0.0.1:<port>`.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// An engine with default options, connected to every master.
    pub async fn engine(&self) -> TestEngine {
        self.engine_with(EngineOptions::default()).await
    }

    /// An engine whose fleet PINGs every master every 50 ms (so breakers close promptly).
    pub async fn engine_with(&self, options: EngineOptions) -> TestEngine {
        self.engine_custom(options, test_fleet_options()).await
    }

    /// An engine with `options`, on a fleet connected with `fleet` (and probed every 50 ms).
    pub async fn engine_custom(&self, options: EngineOptions, fleet: FleetOptions) -> TestEngine {
        init_test_logs();
        // A fleet that cannot be reached fails the test here.
        let fleet = Fleet::connect(&self.urls(), &fleet).await.unwrap();
        let probe = fleet.spawn_probe(Duration::from_millis(50));
        TestEngine {
            engine: Redlock::new(fleet, options),
            _probe: probe,
        }
    }

    /// An engine with `options` that hears releases on the masters' channels, as a sidecar's
    /// does: its blocking acquisitions retry on release messages, and its plain waiters of a
    /// lock line up in one queue (default fleet options, no probe).
    pub async fn engine_hearing_releases(&self, options: EngineOptions) -> Redlock {
        init_test_logs();
        let fleet = Fleet::connect(&self.urls(), &FleetOptions::default())
            .await
            .unwrap();
        // The fleet is connected: its subscriber connections can be made.
        let wakeups = Wakeups::connect(&fleet).unwrap();
        Redlock::new(fleet, options).with_wakeups(wakeups)
    }

    /// Every `redlease:` lock key on master `i` (a shadow is a lock key too).
    pub fn lock_keys(&self, i: usize) -> Vec<String> {
        let port = self.servers[i].port();
        resp::command(port, &["KEYS", "redlease:lock:*"]).strings()
    }

    /// Lock keys on every running master listed in `live`.
    pub fn lock_keys_on(&self, live: &[usize]) -> Vec<String> {
        live.iter().flat_map(|&i| self.lock_keys(i)).collect()
    }

    /// Every key on master `i` except the fleet marker and the fence counter: what lock
    /// operations may leave behind.
    pub fn data_keys(&self, i: usize) -> Vec<String> {
        let keys = self.command(i, &["KEYS", "*"]).strings();
        let bookkeeping = ["redlease:fleet", "redlease:fence"];
        keys.into_iter()
            .filter(|k| !bookkeeping.contains(&k.as_str()))
            .collect()
    }

    /// Runs one command on master `i`.
    pub fn command(&self, i: usize, args: &[&str]) -> resp::Resp {
        resp::command(self.servers[i].port(), args)
    }

    /// The `run_id` of master `i`'s current process.
    pub fn run_id(&self, i: usize) -> String {
        // Every redis-server reports its run_id under INFO server.
        let info = self.command(i, &["INFO", "server"]).bulk().unwrap();
        let line = info.lines().find(|l| l.starts_with("run_id:")).unwrap();
        line.trim_end()["run_id:".len()..].to_string()
    }

    /// EVALSHA calls master `i` has served so far (0 before the first).
    pub fn evalsha_calls(&self, i: usize) -> u64 {
        let info = self.command(i, &["INFO", "commandstats"]).bulk();
        let info = info.unwrap_or_default();
        let line = info.lines().find(|l| l.starts_with("cmdstat_evalsha:"));
        let calls = line.and_then(|l| l.split(['=', ',']).nth(1));
        // INFO counters are integers; a malformed one fails the test.
        calls.map_or(0, |n| n.parse().unwrap())
    }

    /// The fence counter on master `i` (0 before the first grant).
    pub fn fence(&self, i: usize) -> u64 {
        let value = self.command(i, &["GET", "redlease:fence"]).bulk();
        // The fence counter is an integer written by INCR; anything else fails the test.
        value.map_or(0, |v| v.parse().unwrap())
    }
}

/// The engine under test, with the fleet's background probe.
pub struct TestEngine {
    engine: Redlock,
    _probe: ProbeGuard,
}

impl TestEngine {
    /// Waits until every master takes lock writes again.
    pub async fn all_up(&self) {
        let nodes = self.engine.fleet().nodes();
        crate::assert_eventually!(nodes.iter().all(|n| n.is_up()), 10, "masters not back up");
    }
}

impl Deref for TestEngine {
    type Target = Redlock;

    fn deref(&self) -> &Redlock {
        &self.engine
    }
}

/// Logs of the code under test, filtered by `RUST_LOG`, into the test's captured output (once
/// per test binary; later calls do nothing).
pub fn init_test_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Fleet settings for tests: a restarted master is quarantined for 1 s (tests that restart
/// masters keep their TTLs below that, as production settings must).
pub fn test_fleet_options() -> FleetOptions {
    FleetOptions {
        quarantine: QUARANTINE,
        longest_ttl: QUARANTINE,
        ..FleetOptions::default()
    }
}

/// The restart quarantine of [`test_fleet_options`].
pub const QUARANTINE: Duration = Duration::from_secs(1);

impl Drop for TestFleet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (i, server) in self.servers.iter().enumerate() {
                eprintln!(
                    "----- master {i} ({}) log -----\n{}",
                    server.url(),
                    server.log()
                );
            }
        }
    }
}

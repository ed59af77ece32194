//! The election's history: two campaigners on each of two sidecars and two library
//! campaigners contend for one election's leadership on the kinds' lab, under its faults,
//! while observers (one observe stream per sidecar, and a library observer) record what they
//! are told. At the end: no two leaders' windows overlap, terms rise with every grant, and no
//! observer is told a term lower than one it was told before.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::redlock::election::DEFAULT_OBSERVE_POLL;
use redlease::{EngineOptions, Fleet, FleetOptions, Leadership, Redlock, Wakeups};
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::history::check;
use redlease_testkit::sidecar::EventStream;
use tokio::time::Instant;

use super::clients::Kind;
use super::record::Record;
use super::{inject_faults, join_clients, spawn_clients, Lab, QUARANTINE};

/// The election every client campaigns in (and the windows' resource).
pub const ELECTION: &str = "leader";

/// One event an observer was told: the state and, for a leader, its term.
type Told = (String, Option<u64>);

/// What each observer (one per stream: a stream opened again is another) was told, in order.
#[derive(Default)]
struct Observed {
    streams: Mutex<BTreeMap<String, Vec<Told>>>,
}

impl Observed {
    fn told(&self, stream: &str, state: &str, term: Option<u64>) {
        let mut streams = self.streams.lock().unwrap();
        let told = streams.entry(stream.to_string()).or_default();
        told.push((state.to_string(), term));
    }

    /// Streams whose terms went down: (stream, the earlier term, the later one).
    fn regressions(&self) -> Vec<(String, u64, u64)> {
        let streams = self.streams.lock().unwrap();
        let mut found = Vec::new();
        for (stream, told) in streams.iter() {
            let terms: Vec<u64> = told.iter().filter_map(|(_, term)| *term).collect();
            for pair in terms.windows(2).filter(|pair| pair[1] < pair[0]) {
                found.push((stream.clone(), pair[0], pair[1]));
            }
        }
        found
    }

    /// Events told, by state, over every stream; and how many streams there were.
    fn counts(&self) -> (BTreeMap<String, usize>, usize) {
        let streams = self.streams.lock().unwrap();
        let mut counts = BTreeMap::new();
        for (state, _) in streams.values().flatten() {
            *counts.entry(state.clone()).or_default() += 1;
        }
        (counts, streams.len())
    }

    /// Distinct leader terms told.
    fn terms(&self) -> Vec<u64> {
        let streams = self.streams.lock().unwrap();
        let mut terms: Vec<u64> = streams.values().flatten().filter_map(|e| e.1).collect();
        terms.sort_unstable();
        terms.dedup();
        terms
    }
}

/// Follows the election through a sidecar's observe stream until `stop_at`, opening it again
/// when it breaks (each opening a stream of its own).
async fn observe_sidecar(name: String, base: String, observed: Arc<Observed>, stop_at: Instant) {
    let http = reqwest::Client::new();
    let url = format!("{base}/v1/elections/{ELECTION}/observe");
    let mut opened = 0;
    while Instant::now() < stop_at {
        let Ok(response) = http.get(&url).send().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        opened += 1;
        let stream = format!("{name}#{opened}");
        let mut events = EventStream::from_response(response);
        while Instant::now() < stop_at {
            let left = stop_at.saturating_duration_since(Instant::now());
            match events.next_or_end(left).await {
                Ok(Some((state, data))) => observed.told(&stream, &state, data["term"].as_u64()),
                Ok(None) => break,
                Err(_) => break,
            }
        }
    }
}

/// Follows the election with the engine's observer (its own fleet, with wake-ups).
async fn observe_library(urls: Vec<String>, observed: Arc<Observed>, stop_at: Instant) {
    let options = FleetOptions {
        quarantine: QUARANTINE,
        ..test_fleet_options()
    };
    let fleet = Fleet::connect(&urls, &options).await.unwrap();
    let _probe = fleet.spawn_probe(Duration::from_millis(50));
    let wakeups = Wakeups::connect(&fleet).unwrap();
    let engine_options = EngineOptions {
        max_ttl: QUARANTINE,
        ..EngineOptions::default()
    };
    let engine = Arc::new(Redlock::new(fleet, engine_options).with_wakeups(wakeups));
    let mut observer = engine.observe(ELECTION, DEFAULT_OBSERVE_POLL).unwrap();
    while let Ok(told) = tokio::time::timeout_at(stop_at, observer.next()).await {
        let term = told.leader().map(|leader| leader.term);
        observed.told("library", told.state(), term);
        if let Leadership::Leader(leader) = &told {
            assert!(!leader.validity.is_zero());
        }
    }
}

/// Two campaigners (one auto-renewed, one renewing by hand) on each of two sidecars and two
/// library campaigners contend for one election for 14 s under the kinds' faults (a slowed
/// majority, a black-holed master, a frozen one, a killed one, two restarted empty), each
/// leader proclaiming once: no two leaders' windows overlapped, each leader's term (its
/// fencing token) was larger than the one before, and no observer — two sidecars' observe
/// streams and a library observer — was told a term lower than one it had been told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_rising_terms_under_faults() {
    let mut lab = Lab::start().await;
    let record = Arc::new(Record::new());
    let observed = Arc::new(Observed::default());
    let stop_at = Instant::now() + Duration::from_secs(14);
    let leaders = ([Kind::Leadership; 2], true);
    let mut clients = spawn_clients(&lab, &record, stop_at, [Kind::Leadership; 2], leaders).await;
    for (i, sidecar) in lab.sidecars.iter().enumerate() {
        let watch = observe_sidecar(
            format!("s{i}"),
            sidecar.base.clone(),
            Arc::clone(&observed),
            stop_at,
        );
        clients.push(tokio::spawn(watch));
    }
    let watch = observe_library(lab.urls.clone(), Arc::clone(&observed), stop_at);
    clients.push(tokio::spawn(watch));
    inject_faults(&mut lab.fleet, &lab.proxies, &record).await;
    join_clients(clients).await;
    let windows = record.windows();
    let counts = record.counts();
    let (told, streams) = observed.counts();
    let observed_terms = observed.terms();
    let tokens: Vec<u64> = windows.iter().map(|w| w.token).collect();
    let unheld = observed_terms
        .iter()
        .filter(|t| !tokens.contains(t))
        .count();
    eprintln!(
        "election history: {} leader windows; {counts:?}",
        windows.len()
    );
    eprintln!(
        "observers: {streams} streams told {told:?}; {} distinct terms, {unheld} of them no \
         client recorded a window for",
        observed_terms.len()
    );
    eprintln!("faults: {:?}", record.faults());
    let overlaps = check::overlaps(&windows);
    let regressions = check::regressions(&windows);
    let backwards = observed.regressions();
    assert!(overlaps.is_empty(), "two leaders at once: {overlaps:?}");
    assert!(regressions.is_empty(), "terms went back: {regressions:?}");
    assert!(
        backwards.is_empty(),
        "an observer was told a lower term: {backwards:?}"
    );
    // One leader at a time among six campaigners: fewer grants than a semaphore's.
    for (who, least) in [
        ("sidecar grants", 4),
        ("library grants", 3),
        ("proclamations", 5),
    ] {
        let granted = counts.get(who).copied().unwrap_or(0);
        assert!(granted >= least, "too few {who} to judge: {counts:?}");
    }
    assert!(windows.len() >= 12, "too few leaders to judge: {counts:?}");
    assert!(
        told.get("leader").copied().unwrap_or(0) >= 20,
        "observers told too little: {told:?}"
    );
}

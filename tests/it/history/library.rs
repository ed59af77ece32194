//! Clients of the library: an engine of their own on the fault proxies, acquiring (with a
//! wait), extending with `Lease::apply_extension` (alternately shorter and longer than the
//! lease has) and releasing; a window runs from the grant's return to `lease.valid_until`.

use std::sync::Arc;
use std::time::Duration;

use redlease::ProbeGuard;
use redlease::{AcquireOutcome, Fleet, FleetOptions, Redlock};
use redlease::{EngineOptions, ExtendOutcome, Lease};
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::history::{Window, WindowId};
use tokio::time::Instant;

use super::pace::{extension_cap, write_for, Rng, Stop, MAX_ROUNDS, MAX_STEPS};
use super::record::History;

const TTL: Duration = Duration::from_millis(1000);
const WAIT: Duration = Duration::from_millis(800);
/// A held lease is extended this often.
const EXTEND_EVERY: Duration = Duration::from_millis(250);

/// An engine with its fleet's probe, as `TestFleet::engine_custom` builds one, on `urls`.
pub struct LibraryEngine {
    pub engine: Redlock,
    _probe: ProbeGuard,
}

impl LibraryEngine {
    pub async fn connect(urls: &[String], quarantine: Duration) -> Arc<Self> {
        let options = FleetOptions {
            quarantine,
            ..test_fleet_options()
        };
        let fleet = Fleet::connect(urls, &options).await.unwrap();
        let probe = fleet.spawn_probe(Duration::from_millis(50));
        let engine_options = EngineOptions {
            max_ttl: quarantine,
            ..EngineOptions::default()
        };
        Arc::new(Self {
            engine: Redlock::new(fleet, engine_options),
            _probe: probe,
        })
    }
}

/// One library client.
pub struct LibraryClient {
    pub name: String,
    pub engine: Arc<LibraryEngine>,
    pub history: Arc<History>,
    pub rng: Rng,
    pub stop: Arc<Stop>,
}

impl LibraryClient {
    pub async fn run(mut self) {
        for _ in 0..MAX_ROUNDS {
            if self.stop.stopped() {
                return;
            }
            let resource = self.rng.resource();
            let engine = &self.engine.engine;
            let outcome = engine.acquire_with_wait(resource, &self.name, TTL, WAIT);
            let label = match outcome.await {
                Ok(AcquireOutcome::Acquired(lease)) => {
                    self.hold(lease).await;
                    continue;
                }
                Ok(AcquireOutcome::Contended(_)) => "library acquisitions refused: held",
                Ok(AcquireOutcome::NoQuorum(_)) => "library acquisitions refused: no quorum",
                Err(_) => "library acquisitions failed",
            };
            self.history.count(label);
            tokio::time::sleep(self.rng.ms(10, 40)).await;
        }
    }

    /// Holds `lease` for a while, writing and extending, then releases it.
    async fn hold(&mut self, mut lease: Lease) {
        let arrival = Instant::now();
        let window = Window {
            client: self.name.clone(),
            resource: lease.resource.clone(),
            token: lease.fencing_token,
            start: arrival,
            end: lease.valid_until,
            sidecar: None,
        };
        if window.is_empty() {
            self.history.count("grants arrived expired");
        }
        let id = self.history.open(window).unwrap();
        self.history.count("library grants");
        let until = arrival + self.rng.ms(150, 900);
        for step in 0..MAX_STEPS {
            let holds = write_for(&self.history, id, EXTEND_EVERY).await;
            if !holds || Instant::now() >= until {
                break;
            }
            let ttl = Duration::from_millis(if step % 2 == 0 { 700 } else { 1500 });
            if !self.extend(&mut lease, id, ttl).await {
                break;
            }
        }
        self.history.cut(id, Instant::now());
        let label = match self.engine.engine.release(&lease.resource, lease.id).await {
            Ok(outcome) if outcome.confirmed() => "library releases",
            Ok(_) => "library releases unconfirmed",
            Err(_) => "library releases failed",
        };
        self.history.count(label);
    }

    /// Extends to `ttl` and takes what the outcome says; `false` once the lease is over.
    async fn extend(&mut self, lease: &mut Lease, id: WindowId, ttl: Duration) -> bool {
        let sent = Instant::now();
        self.history.cap(id, sent, extension_cap(sent, ttl));
        let extended = self
            .engine
            .engine
            .extend(&lease.resource, lease.id, ttl)
            .await;
        let at = Instant::now();
        let Ok(outcome) = extended else {
            self.history.count("library extensions failed");
            self.history.cut(id, at);
            return false;
        };
        let valid = lease.apply_extension(&outcome, at);
        self.history.count(match outcome {
            ExtendOutcome::Extended(_) => "library renewals",
            ExtendOutcome::Lost(_) => "library extensions lost",
            ExtendOutcome::NoQuorum(_) => "library extensions short of a quorum",
        });
        let holds = self.history.update(id, at, lease.valid_until);
        holds && valid
    }
}

//! The engine's metrics — names, units, buckets and labels in this one place — recorded
//! through the OpenTelemetry API on the global meter provider as it is when the engine first
//! records (install yours with `opentelemetry::global::set_meter_provider` before connecting a
//! fleet; the sidecar installs a Prometheus exporter). Labels are bounded: `outcome` and `node`
//! (a master's index in the configured list); never a resource name.
//!
//! Latencies are recorded in **seconds**. Instruments carry their unit for OpenTelemetry; the
//! sidecar's exporter adds no unit suffix, so `lock_acquisition_latency_bucket` is the name its
//! dashboards use. Counters get `_total` there.

use std::sync::LazyLock;
use std::time::Duration;

use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram, Meter};
use opentelemetry::KeyValue;

/// The name of the meter every redlease instrument comes from.
pub const METER_NAME: &str = "redlease";

/// Bucket bounds (seconds) for command and lock latencies: 50 µs … 30 s.
pub const LATENCY_BUCKETS: [f64; 19] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Every value of the `outcome` label of the acquisition metrics.
pub const OUTCOMES: [&str; 3] = ["acquired", "contended", "no_quorum"];

/// The engine's instruments, created once per process.
pub static METRICS: LazyLock<Metrics> =
    LazyLock::new(|| Metrics::new(&opentelemetry::global::meter(METER_NAME)));

/// The engine's instruments (see `docs/operations.md` for each series).
pub struct Metrics {
    /// `lock_acquisition_latency` (s), label `outcome`: acquired | contended | no_quorum.
    pub acquisition_latency: Histogram<f64>,
    /// `lock_acquisition_attempts_total`, label `outcome`.
    pub acquisition_attempts: Counter<u64>,
    /// `redis_command_rtt` (s), label `node`.
    pub command_rtt: Histogram<f64>,
    /// `lock_force_releases_total`: force releases run by this process.
    pub force_releases: Counter<u64>,
    /// `lock_fence_raises_total`: granted masters raised to the fencing token.
    pub fence_raises: Counter<u64>,
    /// `redis_master_quarantines_total`, label `node`.
    pub quarantines: Counter<u64>,
    /// `lock_acquisition_latency` and `lock_acquisition_attempts_total` bound to each of
    /// [`OUTCOMES`], and `lock_release_latency`: recorded on every acquisition and release,
    /// so bound once (OpenTelemetry's bound instruments skip the per-record label lookup,
    /// which hashes the labels on every record).
    hot: HotPath,
}

/// Instruments of the lock hot path, bound to their label values once.
struct HotPath {
    acquisition_latency: [BoundHistogram<f64>; 3],
    acquisition_attempts: [BoundCounter<u64>; 3],
    release_latency: BoundHistogram<f64>,
}

impl Metrics {
    /// Records one acquisition attempt with `outcome` (one of [`OUTCOMES`]) that took `elapsed`.
    pub fn record_acquisition(&self, outcome: &str, elapsed: Duration) {
        match OUTCOMES.iter().position(|known| *known == outcome) {
            Some(i) => {
                self.hot.acquisition_latency[i].record(seconds(elapsed));
                self.hot.acquisition_attempts[i].add(1);
            }
            None => {
                let outcome = label("outcome", outcome.to_string());
                self.acquisition_latency.record(seconds(elapsed), &outcome);
                self.acquisition_attempts.add(1, &outcome);
            }
        }
    }

    /// Records one release that took `elapsed`.
    pub fn record_release(&self, elapsed: Duration) {
        self.hot.release_latency.record(seconds(elapsed));
    }

    /// `redis_command_rtt` bound to master `node` (each node keeps its own).
    pub fn command_rtt_for(&self, node: usize) -> BoundHistogram<f64> {
        self.command_rtt.bind(&label("node", node as i64))
    }

    fn new(meter: &Meter) -> Self {
        let latency = |name: &'static str, help: &'static str| latency(meter, name, help);
        let counter = |name: &'static str, help: &'static str| {
            meter.u64_counter(name).with_description(help).build()
        };
        let acquisition_latency = latency(
            "lock_acquisition_latency",
            "Time to acquire a lock (seconds), by outcome",
        );
        let acquisition_attempts = counter(
            "lock_acquisition_attempts",
            "Acquisition attempts, by outcome",
        );
        let release_latency = latency("lock_release_latency", "Time to release a lease (seconds)");
        let by_outcome = |outcome: &str| label("outcome", outcome.to_string());
        let hot = HotPath {
            acquisition_latency: OUTCOMES
                .map(|outcome| acquisition_latency.bind(&by_outcome(outcome))),
            acquisition_attempts: OUTCOMES
                .map(|outcome| acquisition_attempts.bind(&by_outcome(outcome))),
            release_latency: release_latency.bind(&[]),
        };
        let metrics = Self {
            acquisition_latency,
            acquisition_attempts,
            command_rtt: latency(
                "redis_command_rtt",
                "Round trip of each command to each master (seconds), by node",
            ),
            force_releases: counter(
                "lock_force_releases",
                "Force releases: leases revoked or locks deleted by an operator, audited",
            ),
            fence_raises: counter(
                "lock_fence_raises",
                "Granted masters raised to the fencing token",
            ),
            quarantines: counter(
                "redis_master_quarantines",
                "Masters quarantined after a restart, by node",
            ),
            hot,
        };
        metrics.start_counters_at_zero();
        metrics
    }

    /// A counter is exported only once touched; queries like
    /// `rate(lock_fence_raises_total[5m])` need the series before the first event.
    fn start_counters_at_zero(&self) {
        for counter in [&self.fence_raises, &self.force_releases] {
            counter.add(0, &[]);
        }
        for outcome in OUTCOMES {
            self.acquisition_attempts.add(0, &label("outcome", outcome));
        }
    }
}

/// A latency histogram (seconds) with [`LATENCY_BUCKETS`].
pub fn latency(meter: &Meter, name: &'static str, help: &'static str) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit("s")
        .with_description(help)
        .with_boundaries(LATENCY_BUCKETS.to_vec())
        .build()
}

/// A bounded label.
pub fn label(key: &'static str, value: impl Into<opentelemetry::Value>) -> [KeyValue; 1] {
    [KeyValue::new(key, value)]
}

/// Records `elapsed` in seconds.
pub fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}

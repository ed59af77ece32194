//! Every metric redlease exports — names, units, buckets and labels in this one place —
//! recorded through OpenTelemetry instruments and exposed in Prometheus text format by
//! [`render`]. Labels are bounded: `outcome`, `reason`, `node` (a master's index in the
//! configured list); never a resource name.
//!
//! Latencies are recorded in **seconds**. Instruments carry their unit for OpenTelemetry, but
//! the exporter adds no unit suffix, so `lock_acquisition_latency_bucket` is the name
//! dashboards and alerts use. Counters get `_total`.

pub mod process;

use std::sync::LazyLock;
use std::time::Duration;

use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Gauge, Histogram, Meter, MeterProvider as _,
    ObservableCounter, ObservableGauge,
};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::SdkMeterProvider;
#[cfg(feature = "sidecar")]
use prometheus::{Encoder, Registry, TextEncoder};

/// Bucket bounds (seconds) for command and lock latencies: 50 µs … 30 s.
const LATENCY_BUCKETS: [f64; 19] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Bucket bounds (seconds) for how long locks are held: 10 ms … 1 h.
const HOLD_BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Every value of the `outcome` label of the acquisition metrics.
pub const OUTCOMES: [&str; 3] = ["acquired", "contended", "no_quorum"];

/// Every value of the `reason` label of `lock_leases_lost_total`.
pub const LOST_REASONS: [&str; 3] = ["expired", "not_ours", "invalid"];

/// Outcomes of an event stream's check of its reader: it proved the app alive (`read`), the
/// app had not read (`unread`), or the connection could not be checked (`unchecked`).
pub const CHECK_OUTCOMES: [&str; 3] = ["read", "unread", "unchecked"];

/// The instruments, created once per process.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Every instrument (see `docs/operations.md` for each series). The lease table's are recorded
/// only by the sidecar.
#[cfg_attr(not(feature = "sidecar"), allow(dead_code))]
pub struct Metrics {
    /// Where the Prometheus exporter puts what [`render`] prints.
    #[cfg(feature = "sidecar")]
    registry: Registry,
    /// Kept alive so the instruments keep exporting.
    _provider: SdkMeterProvider,
    /// `lock_acquisition_latency` (s), label `outcome`: acquired | contended | no_quorum.
    pub acquisition_latency: Histogram<f64>,
    /// `lock_acquisition_attempts_total`, label `outcome`.
    pub acquisition_attempts: Counter<u64>,
    /// `lock_renewal_latency` (s).
    pub renewal_latency: Histogram<f64>,
    /// `lock_renewal_attempts_total` (no labels: divided by the failures in alerts).
    pub renewal_attempts: Counter<u64>,
    /// `lock_renewal_failures_total` (no labels).
    pub renewal_failures: Counter<u64>,
    /// `lock_hold_duration` (s): from grant to release or loss.
    pub hold_duration: Histogram<f64>,
    /// `redis_command_rtt` (s), label `node`.
    pub command_rtt: Histogram<f64>,
    /// `lock_shadow_escalations_total`: renewals retried as shadow reservations that held.
    pub shadow_escalations: Counter<u64>,
    /// `lock_shadow_recoveries_total`: degraded leases restored by a renewal.
    pub shadow_recoveries: Counter<u64>,
    /// `lock_leases_lost_total`, label `reason`: expired | not_ours | invalid.
    pub leases_lost: Counter<u64>,
    /// `lock_force_releases_total`: force releases run by this process.
    pub force_releases: Counter<u64>,
    /// `lock_fence_raises_total`: granted masters raised to the fencing token.
    pub fence_raises: Counter<u64>,
    /// `redis_master_quarantines_total`, label `node`.
    pub quarantines: Counter<u64>,
    /// `lock_active_leases`: leases held or degraded by this sidecar.
    pub active_leases: Gauge<u64>,
    /// `lock_adaptive_ttl` (s): the TTL a lease gets when its caller names none.
    pub adaptive_ttl: Gauge<f64>,
    /// `lock_quorum_rtt_p99` (s): p99 RTT of the ⌊N/2⌋+1-th fastest master.
    pub quorum_rtt_p99: Gauge<f64>,
    /// `redis_masters_up`: masters taking lock writes.
    pub masters_up: Gauge<u64>,
    /// `redis_masters_quarantined`.
    pub masters_quarantined: Gauge<u64>,
    /// `redis_masters_refused`: masters that answer but take no votes until the operator acts
    /// (they may evict keys, belong to another fleet, carry an unreadable marker, or are
    /// another master's very server).
    pub masters_refused: Gauge<u64>,
    /// `redis_masters_quorum`: votes a grant needs (⌊N/2⌋+1).
    pub masters_quorum: Gauge<u64>,
    /// `lock_oldest_lease_age` (s): how long the oldest lease still held has been held.
    pub oldest_lease_age: Gauge<f64>,
    /// `lock_event_stream_checks_total`: checks of event-stream readers, by `outcome` (one of
    /// [`CHECK_OUTCOMES`]).
    pub stream_checks: Counter<u64>,
    /// `lock_waiting_acquisitions`: blocking acquisitions in progress (read at scrape).
    pub waiting_acquisitions: Gauge<u64>,
    /// `lock_waiters_refused_total`: blocking acquisitions refused over `http.max_waiters`.
    pub waiters_refused: Counter<u64>,
    /// `lock_acquisition_latency` and `lock_acquisition_attempts_total` bound to each of
    /// [`OUTCOMES`], and `lock_release_latency`: recorded on every acquisition and release,
    /// so bound once (OpenTelemetry's bound instruments skip the per-record label lookup,
    /// which hashes the labels on every record).
    hot: HotPath,
    /// `process_cpu_seconds_total` (s): user + system CPU time of this process, read at scrape.
    _process_cpu: ObservableCounter<f64>,
    /// `process_resident_memory_bytes`: resident memory of this process, read at scrape.
    _process_memory: ObservableGauge<u64>,
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

    fn new() -> Self {
        #[cfg(feature = "sidecar")]
        let (registry, provider) = exported_provider();
        // The engine alone exports nothing: the instruments record into no reader.
        #[cfg(not(feature = "sidecar"))]
        let provider = SdkMeterProvider::builder().build();
        let meter = provider.meter("redlease");
        let metrics = Self::with_instruments(
            #[cfg(feature = "sidecar")]
            registry,
            &meter,
            provider.clone(),
        );
        metrics.start_counters_at_zero();
        metrics
    }

    /// A counter is exported only once touched; queries like
    /// `rate(lock_renewal_failures_total[5m])` need the series before the first failure.
    fn start_counters_at_zero(&self) {
        for counter in [
            &self.renewal_attempts,
            &self.renewal_failures,
            &self.shadow_escalations,
            &self.shadow_recoveries,
            &self.fence_raises,
            &self.force_releases,
            &self.waiters_refused,
        ] {
            counter.add(0, &[]);
        }
        for outcome in OUTCOMES {
            self.acquisition_attempts.add(0, &label("outcome", outcome));
        }
        for reason in LOST_REASONS {
            self.leases_lost.add(0, &label("reason", reason));
        }
        for outcome in CHECK_OUTCOMES {
            self.stream_checks.add(0, &label("outcome", outcome));
        }
    }

    fn with_instruments(
        #[cfg(feature = "sidecar")] registry: Registry,
        meter: &Meter,
        provider: SdkMeterProvider,
    ) -> Self {
        let latency = |name: &'static str, help: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(help)
                .with_boundaries(LATENCY_BUCKETS.to_vec())
                .build()
        };
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
        Self {
            acquisition_latency,
            acquisition_attempts,
            renewal_latency: latency("lock_renewal_latency", "Time to renew a lease (seconds)"),
            renewal_attempts: counter("lock_renewal_attempts", "Lease renewals attempted"),
            renewal_failures: counter(
                "lock_renewal_failures",
                "Lease renewals that did not extend the lock",
            ),
            hold_duration: meter
                .f64_histogram("lock_hold_duration")
                .with_unit("s")
                .with_description("How long leases were held, grant to release or loss (seconds)")
                .with_boundaries(HOLD_BUCKETS.to_vec())
                .build(),
            command_rtt: latency(
                "redis_command_rtt",
                "Round trip of each command to each master (seconds), by node",
            ),
            shadow_escalations: counter(
                "lock_shadow_escalations",
                "Renewals escalated to a shadow reservation that held",
            ),
            shadow_recoveries: counter(
                "lock_shadow_recoveries",
                "Degraded leases restored by a renewal",
            ),
            leases_lost: counter("lock_leases_lost", "Leases lost, by reason"),
            force_releases: counter(
                "lock_force_releases",
                "Force releases: locks deleted whatever lease held them, audited",
            ),
            fence_raises: counter(
                "lock_fence_raises",
                "Granted masters raised to the fencing token",
            ),
            quarantines: counter(
                "redis_master_quarantines",
                "Masters quarantined after a restart, by node",
            ),
            active_leases: meter
                .u64_gauge("lock_active_leases")
                .with_description("Leases held or degraded by this sidecar")
                .build(),
            adaptive_ttl: meter
                .f64_gauge("lock_adaptive_ttl")
                .with_unit("s")
                .with_description("TTL given to leases whose caller names none (seconds)")
                .build(),
            quorum_rtt_p99: meter
                .f64_gauge("lock_quorum_rtt_p99")
                .with_unit("s")
                .with_description("p99 RTT of the quorum-th fastest master (seconds)")
                .build(),
            masters_up: meter
                .u64_gauge("redis_masters_up")
                .with_description("Masters taking lock writes")
                .build(),
            masters_quarantined: meter
                .u64_gauge("redis_masters_quarantined")
                .with_description("Masters in restart quarantine")
                .build(),
            masters_refused: meter
                .u64_gauge("redis_masters_refused")
                .with_description("Masters refused until the operator acts (eviction, another fleet, a duplicate)")
                .build(),
            masters_quorum: meter
                .u64_gauge("redis_masters_quorum")
                .with_description("Masters a grant needs")
                .build(),
            oldest_lease_age: meter
                .f64_gauge("lock_oldest_lease_age")
                .with_unit("s")
                .with_description(
                    "Age of the oldest lease held or degraded by this sidecar (seconds)",
                )
                .build(),
            stream_checks: counter(
                "lock_event_stream_checks",
                "Checks that an event stream's app reads what it is sent, by outcome",
            ),
            waiting_acquisitions: meter
                .u64_gauge("lock_waiting_acquisitions")
                .with_description("Blocking acquisitions (wait_ms > 0) in progress")
                .build(),
            waiters_refused: counter(
                "lock_waiters_refused",
                "Blocking acquisitions refused: http.max_waiters were waiting",
            ),
            _process_cpu: meter
                .f64_observable_counter("process_cpu_seconds")
                .with_unit("s")
                .with_description("User and system CPU time of this process (seconds)")
                .with_callback(|observer| {
                    if let Some(cpu) = process::cpu_time() {
                        observer.observe(cpu.as_secs_f64(), &[]);
                    }
                })
                .build(),
            _process_memory: meter
                .u64_observable_gauge("process_resident_memory_bytes")
                .with_description("Resident memory of this process (bytes)")
                .with_callback(|observer| {
                    if let Some(bytes) = process::resident_bytes() {
                        observer.observe(bytes, &[]);
                    }
                })
                .build(),
            hot,
            #[cfg(feature = "sidecar")]
            registry,
            _provider: provider,
        }
    }
}

/// A bounded label.
pub fn label(key: &'static str, value: impl Into<opentelemetry::Value>) -> [KeyValue; 1] {
    [KeyValue::new(key, value)]
}

/// Records `elapsed` in seconds.
pub fn seconds(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64()
}

/// A meter provider whose instruments the Prometheus exporter reads into the registry.
#[cfg(feature = "sidecar")]
fn exported_provider() -> (Registry, SdkMeterProvider) {
    let registry = Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .without_units()
        .without_target_info()
        .scope_info_enabled(false)
        .build();
    let provider = match exporter {
        Ok(exporter) => SdkMeterProvider::builder().with_reader(exporter).build(),
        Err(error) => {
            tracing::error!(%error, "metrics exporter unavailable; metrics are dropped");
            SdkMeterProvider::builder().build()
        }
    };
    (registry, provider)
}

/// Every metric in Prometheus text format.
#[cfg(feature = "sidecar")]
pub fn render() -> String {
    let families = METRICS.registry.gather();
    let mut out = Vec::new();
    if let Err(error) = TextEncoder::new().encode(&families, &mut out) {
        tracing::error!(%error, "cannot encode metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

//! The sidecar's metrics: its Prometheus exporter, installed as OpenTelemetry's global meter
//! provider so the engine's instruments (`redlease_engine::metrics`) land in the same
//! registry, and the instruments of the lease table, the API and the process — names, units,
//! buckets and labels in this one place. Labels are bounded: `outcome`, `reason`; never a
//! resource name. [`render`] prints everything in Prometheus text format.

use std::sync::LazyLock;

use opentelemetry::metrics::{BoundCounter, Counter, Gauge, Histogram, Meter, MeterProvider as _};
use opentelemetry::metrics::{ObservableCounter, ObservableGauge};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, Registry, TextEncoder};
pub use redlease_engine::metrics::{label, latency, seconds, METER_NAME};

use crate::process;

/// Bucket bounds (seconds) for how long locks are held: 10 ms … 1 h.
const HOLD_BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Every value of the `reason` label of `lock_leases_lost_total`.
pub const LOST_REASONS: [&str; 4] = ["expired", "not_ours", "revoked", "invalid"];

/// Outcomes of an event stream's check of its reader: it proved the app alive (`read`), the
/// app had not read (`unread`), or the connection could not be checked (`unchecked`).
pub const CHECK_OUTCOMES: [&str; 3] = ["read", "unread", "unchecked"];

/// Outcomes of a re-entry (`POST /v1/leases/{id}/reenter`): a hold opened (`entered`), or
/// refused for want of a quorum (`no_quorum`), because the lease had ended (`lease_lost`), or
/// over the cap of open holds (`too_many_holds`).
pub const REENTRY_OUTCOMES: [&str; 4] = ["entered", "no_quorum", "lease_lost", "too_many_holds"];

/// Outcomes of a request under busy polling: polled and answered within its window
/// (`answered_in_window`), polled and answered after it or never (`outlasted_window`), or not
/// polled because the requests before it did not pay (`not_polled`).
pub const BUSY_POLL_OUTCOMES: [&str; 3] = ["answered_in_window", "outlasted_window", "not_polled"];

/// Outcomes of an answer under busy polling: polled after, and the next request came within
/// the answer window (`next_request_in_window`); polled after, and it came later
/// (`outlasted_window`); or not polled after because the answers before it did not pay
/// (`not_polled`).
pub const BUSY_POLL_ANSWER_OUTCOMES: [&str; 3] =
    ["next_request_in_window", "outlasted_window", "not_polled"];

/// The exporter's registry and provider, made and installed as the global provider once.
static EXPORTER: LazyLock<(Registry, SdkMeterProvider)> = LazyLock::new(|| {
    let (registry, provider) = exported_provider();
    opentelemetry::global::set_meter_provider(provider.clone());
    (registry, provider)
});

/// The sidecar's instruments, created once per process (after [`install`]).
pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let meter = EXPORTER.1.meter(METER_NAME);
    Metrics::new(&meter)
});

/// Installs the Prometheus exporter as the global meter provider. Call it before the engine
/// records anything (before connecting a fleet): instruments made earlier record into the
/// provider that was global then. Calling it again does nothing.
pub fn install() {
    LazyLock::force(&EXPORTER);
    LazyLock::force(&METRICS);
    LazyLock::force(&redlease_engine::metrics::METRICS);
}

/// The instruments of the lease table, the API and the process (see `docs/operations.md`).
pub struct Metrics {
    /// `lock_renewal_latency` (s).
    pub renewal_latency: Histogram<f64>,
    /// `lock_renewal_attempts_total` (no labels: divided by the failures in alerts).
    pub renewal_attempts: Counter<u64>,
    /// `lock_renewal_failures_total` (no labels).
    pub renewal_failures: Counter<u64>,
    /// `lock_hold_duration` (s): from grant to release or loss.
    pub hold_duration: Histogram<f64>,
    /// `lock_shadow_escalations_total`: renewals retried as shadow reservations that held.
    pub shadow_escalations: Counter<u64>,
    /// `lock_shadow_recoveries_total`: degraded leases restored by a renewal.
    pub shadow_recoveries: Counter<u64>,
    /// `lock_leases_lost_total`, label `reason`: one of [`LOST_REASONS`]. Leases lost while
    /// their app wanted them; a lease without auto-renewal running out is not one of them.
    pub leases_lost: Counter<u64>,
    /// `lock_leases_expired_total`: leases without auto-renewal that ran out, as their caller
    /// chose (reported `lost` with reason `expired` by the API, but no loss to page on).
    pub leases_expired: Counter<u64>,
    /// `lock_active_leases`: leases held or degraded by this sidecar.
    pub active_leases: Gauge<u64>,
    /// `lock_retained_leases`: ended leases kept readable (at most `lease.retained_max`).
    pub retained_leases: Gauge<u64>,
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
    /// `lock_reentries_total`: re-entries of a lease, by `outcome` (one of
    /// [`REENTRY_OUTCOMES`]).
    pub reentries: Counter<u64>,
    /// `sidecar_busy_poll_seconds_total` (s): time of the runtime's busy-polling spells, the
    /// requests served meanwhile included (`runtime.busy_poll_us`,
    /// `runtime.busy_poll_after_answer_us`).
    pub busy_poll: Counter<f64>,
    /// `sidecar_busy_poll_requests_total`: requests under busy polling, bound to each
    /// `outcome` of [`BUSY_POLL_OUTCOMES`], in its order.
    pub busy_poll_requests: [BoundCounter<u64>; 3],
    /// `sidecar_busy_poll_answers_total`: answers under busy polling
    /// (`runtime.busy_poll_after_answer_us`), bound to each `outcome` of
    /// [`BUSY_POLL_ANSWER_OUTCOMES`], in its order: `not_polled` as an answer goes out, the
    /// others as a request judges the latest answer polled after before it.
    pub busy_poll_answers: [BoundCounter<u64>; 3],
    /// `sidecar_busy_poll_cpu_lost_total`: busy-polling turns that kept the runtime's thread
    /// off the CPU for 500 µs or more (a CPU-bound neighbour): each ends the spell and the
    /// polling's credit.
    pub busy_poll_cpu_lost: Counter<u64>,
    /// `process_cpu_seconds_total` (s): user + system CPU time of this process, read at scrape.
    _process_cpu: ObservableCounter<f64>,
    /// `process_resident_memory_bytes`: resident memory of this process, read at scrape.
    _process_memory: ObservableGauge<u64>,
}

impl Metrics {
    fn new(meter: &Meter) -> Self {
        let counter = |name: &'static str, help: &'static str| {
            meter.u64_counter(name).with_description(help).build()
        };
        let u64_gauge = |name: &'static str, help: &'static str| {
            meter.u64_gauge(name).with_description(help).build()
        };
        let seconds_gauge = |name: &'static str, help: &'static str| {
            let gauge = meter.f64_gauge(name).with_unit("s");
            gauge.with_description(help).build()
        };
        let metrics = Self {
            renewal_latency: latency(
                meter,
                "lock_renewal_latency",
                "Time to renew a lease (seconds)",
            ),
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
            shadow_escalations: counter(
                "lock_shadow_escalations",
                "Renewals escalated to a shadow reservation that held",
            ),
            shadow_recoveries: counter(
                "lock_shadow_recoveries",
                "Degraded leases restored by a renewal",
            ),
            leases_lost: counter(
                "lock_leases_lost",
                "Leases lost while their app wanted them, by reason",
            ),
            leases_expired: counter(
                "lock_leases_expired",
                "Leases without auto-renewal that ran out, as their caller chose",
            ),
            active_leases: u64_gauge(
                "lock_active_leases",
                "Leases held or degraded by this sidecar",
            ),
            retained_leases: u64_gauge(
                "lock_retained_leases",
                "Ended leases kept readable, at most lease.retained_max",
            ),
            adaptive_ttl: seconds_gauge(
                "lock_adaptive_ttl",
                "TTL given to leases whose caller names none (seconds)",
            ),
            quorum_rtt_p99: seconds_gauge(
                "lock_quorum_rtt_p99",
                "p99 RTT of the quorum-th fastest master (seconds)",
            ),
            masters_up: u64_gauge("redis_masters_up", "Masters taking lock writes"),
            masters_quarantined: u64_gauge(
                "redis_masters_quarantined",
                "Masters in restart quarantine",
            ),
            masters_refused: u64_gauge(
                "redis_masters_refused",
                "Masters refused until the operator acts (eviction, another fleet, a duplicate)",
            ),
            masters_quorum: u64_gauge("redis_masters_quorum", "Masters a grant needs"),
            oldest_lease_age: seconds_gauge(
                "lock_oldest_lease_age",
                "Age of the oldest lease held or degraded by this sidecar (seconds)",
            ),
            stream_checks: counter(
                "lock_event_stream_checks",
                "Checks that an event stream's app reads what it is sent, by outcome",
            ),
            waiting_acquisitions: u64_gauge(
                "lock_waiting_acquisitions",
                "Blocking acquisitions (wait_ms > 0) in progress",
            ),
            waiters_refused: counter(
                "lock_waiters_refused",
                "Blocking acquisitions refused: http.max_waiters were waiting",
            ),
            reentries: counter(
                "lock_reentries",
                "Re-entries of a lease by its id, by outcome",
            ),
            busy_poll: meter
                .f64_counter("sidecar_busy_poll_seconds")
                .with_unit("s")
                .with_description("Time of busy-polling spells (runtime.busy_poll_*)")
                .build(),
            busy_poll_requests: {
                let requests = counter(
                    "sidecar_busy_poll_requests",
                    "Requests under busy polling, by outcome",
                );
                BUSY_POLL_OUTCOMES.map(|outcome| requests.bind(&label("outcome", outcome)))
            },
            busy_poll_answers: {
                let answers = counter(
                    "sidecar_busy_poll_answers",
                    "Answers under busy polling, by outcome",
                );
                BUSY_POLL_ANSWER_OUTCOMES.map(|outcome| answers.bind(&label("outcome", outcome)))
            },
            busy_poll_cpu_lost: counter(
                "sidecar_busy_poll_cpu_lost",
                "Busy-polling turns that lost the CPU for 500 µs or more to another thread",
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
        };
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
            &self.leases_expired,
            &self.waiters_refused,
            &self.busy_poll_cpu_lost,
        ] {
            counter.add(0, &[]);
        }
        self.busy_poll.add(0.0, &[]);
        for counter in self
            .busy_poll_requests
            .iter()
            .chain(&self.busy_poll_answers)
        {
            counter.add(0);
        }
        for reason in LOST_REASONS {
            self.leases_lost.add(0, &label("reason", reason));
        }
        for outcome in CHECK_OUTCOMES {
            self.stream_checks.add(0, &label("outcome", outcome));
        }
        for outcome in REENTRY_OUTCOMES {
            self.reentries.add(0, &label("outcome", outcome));
        }
    }
}

/// A meter provider whose instruments the Prometheus exporter reads into the registry.
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
pub fn render() -> String {
    let families = EXPORTER.0.gather();
    let mut out = Vec::new();
    if let Err(error) = TextEncoder::new().encode(&families, &mut out) {
        tracing::error!(%error, "cannot encode metrics");
    }
    String::from_utf8(out).unwrap_or_default()
}

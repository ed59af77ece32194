//! The figures of a load run: merged histograms, a human table and one JSON object.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{LoadOptions, WorkerRecord, Workload};

/// Microsecond histogram from 1 µs to 60 s, 3 significant digits.
pub(super) fn histogram() -> Histogram<u64> {
    // The bounds are constants within what HdrHistogram accepts (low ≥ 1, high ≥ 2 × low).
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// One workload's result (`--json` prints it as one object).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub workload: Workload,
    /// `masters` (library engine) or `sidecar` (HTTP).
    pub target: &'static str,
    pub clients: usize,
    /// Completed acquire+release cycles (warm-up excluded).
    pub ops: u64,
    pub duration_s: f64,
    pub ops_per_s: f64,
    /// Cycle latency percentiles, in µs: from the scheduled send time in open loop (sojourn),
    /// from the actual send in closed loop.
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// Service time p99 (from the actual send), in µs; equals p99_us in closed loop.
    pub service_p99_us: u64,
    pub errors: u64,
    /// Cycles whose first attempt found the resource held.
    pub contention_retries: u64,
    /// Open-loop rate (cycles/s over all clients), when one was given.
    pub rate: Option<f64>,
}

impl Report {
    pub(super) fn merge(
        options: &LoadOptions,
        clients: usize,
        records: Vec<WorkerRecord>,
        elapsed: Duration,
        target: &'static str,
    ) -> Self {
        let (mut latency, mut service) = (histogram(), histogram());
        let (mut ops, mut errors, mut retries) = (0, 0, 0);
        for record in records {
            // Same bounds everywhere, so adding cannot fail.
            let _ = latency.add(&record.latency);
            let _ = service.add(&record.service);
            ops += record.ops;
            errors += record.errors;
            retries += record.retries;
        }
        let seconds = elapsed.as_secs_f64().max(1e-9);
        Self {
            workload: options.workload,
            target,
            clients,
            ops,
            duration_s: seconds,
            ops_per_s: ops as f64 / seconds,
            p50_us: latency.value_at_quantile(0.5),
            p90_us: latency.value_at_quantile(0.9),
            p99_us: latency.value_at_quantile(0.99),
            p999_us: latency.value_at_quantile(0.999),
            max_us: latency.max(),
            service_p99_us: service.value_at_quantile(0.99),
            errors,
            contention_retries: retries,
            rate: options.rate,
        }
    }

    /// The header of [`Report::table_row`].
    pub fn table_header() -> String {
        format!(
            "{:<11} {:<8} {:>7} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}",
            "workload",
            "target",
            "clients",
            "ops",
            "ops/s",
            "p50 µs",
            "p90 µs",
            "p99 µs",
            "p99.9 µs",
            "max µs",
            "errors",
            "retries"
        )
    }

    pub fn table_row(&self) -> String {
        format!(
            "{:<11} {:<8} {:>7} {:>8} {:>9.0} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8}",
            format!("{:?}", self.workload).to_lowercase(),
            self.target,
            self.clients,
            self.ops,
            self.ops_per_s,
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.p999_us,
            self.max_us,
            self.errors,
            self.contention_retries
        )
    }
}

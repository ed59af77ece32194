//! The figures of a load run: merged histograms, a human table and one JSON object.

use std::fmt;
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
#[derive(Clone, Serialize)]
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
    /// Why the first failed cycle failed, when one did (warm-up included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Cycles whose first attempt found the resource held.
    pub contention_retries: u64,
    /// Open-loop rate (cycles/s over all clients), when one was given.
    pub rate: Option<f64>,
    /// The merged cycle latency histogram (µs) the percentiles above come from, failed cycles
    /// included; for `--hdr-out` and `--plot`, not part of the JSON.
    #[serde(skip)]
    pub latency: Histogram<u64>,
    /// (completed, failed) cycles per `TIMELINE_WINDOW` from the start of the run.
    #[serde(skip)]
    pub timeline: Vec<[u64; 2]>,
    /// The `fault` workload's availability dip.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<super::fault::Dip>,
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
        let mut timeline: Vec<[u64; 2]> = Vec::new();
        let mut first_error = None;
        for record in records {
            first_error = first_error.or(record.first_error);
            if timeline.len() < record.timeline.len() {
                timeline.resize(record.timeline.len(), [0, 0]);
            }
            for (merged, window) in timeline.iter_mut().zip(&record.timeline) {
                merged[0] += window[0];
                merged[1] += window[1];
            }
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
            first_error,
            contention_retries: retries,
            rate: options.rate,
            latency,
            timeline,
            fault: None,
        }
    }

    /// Every measured cycle failed (and there was one).
    pub fn all_failed(&self) -> bool {
        self.ops == 0 && self.errors > 0
    }

    /// One line naming the run, e.g. `parallel workload, masters, 16 clients, 1000 ops`.
    pub fn title(&self) -> String {
        let workload = format!("{:?}", self.workload).to_lowercase();
        let clients = match self.clients {
            1 => "1 client".to_string(),
            n => format!("{n} clients"),
        };
        format!(
            "{workload} workload, {}, {clients}, {} ops",
            self.target, self.ops
        )
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

/// Every field but the histogram, which would print its tens of thousands of counters.
impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Report")
            .field("workload", &self.workload)
            .field("target", &self.target)
            .field("clients", &self.clients)
            .field("ops", &self.ops)
            .field("duration_s", &self.duration_s)
            .field("ops_per_s", &self.ops_per_s)
            .field("p50_us", &self.p50_us)
            .field("p90_us", &self.p90_us)
            .field("p99_us", &self.p99_us)
            .field("p999_us", &self.p999_us)
            .field("max_us", &self.max_us)
            .field("service_p99_us", &self.service_p99_us)
            .field("errors", &self.errors)
            .field("contention_retries", &self.contention_retries)
            .field("rate", &self.rate)
            .field("latency_samples", &self.latency.len())
            .field("fault", &self.fault)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_report(workload: Workload, clients: usize) -> Report {
        let options = LoadOptions {
            workload,
            clients,
            resources: 1,
            ops: Some(0),
            duration: None,
            rate: None,
            warmup: 0,
            ttl: Duration::from_secs(1),
            wait: Duration::from_secs(1),
            hold: Duration::ZERO,
        };
        Report::merge(
            &options,
            clients,
            Vec::new(),
            Duration::from_secs(1),
            "masters",
        )
    }

    /// The title names the run, in the singular for one client.
    #[test]
    fn the_title_names_workload_target_clients_and_ops() {
        let sequential = empty_report(Workload::Sequential, 1);
        assert_eq!(
            sequential.title(),
            "sequential workload, masters, 1 client, 0 ops"
        );
        let parallel = empty_report(Workload::Parallel, 16);
        assert_eq!(
            parallel.title(),
            "parallel workload, masters, 16 clients, 0 ops"
        );
    }

    /// Debug output (used in test failure messages) summarizes the histogram, and the JSON
    /// leaves it out.
    #[test]
    fn the_histogram_stays_out_of_debug_and_json() {
        let report = empty_report(Workload::Parallel, 2);
        let debug = format!("{report:?}");
        assert!(
            debug.len() < 500 && debug.contains("latency_samples: 0,"),
            "{debug}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("latency").is_none() && json.get("p99_us").is_some());
        assert!(json.get("timeline").is_none() && json.get("fault").is_none());
    }
}

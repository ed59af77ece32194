//! The `renewal` workload: a sidecar holds `leases` auto-renewed leases for a while; the
//! report gives renewals per second, their latency, failures and losses, and what holding
//! them cost the sidecar (CPU share of one core, resident memory over time), all read from the
//! sidecar's own `/metrics` before and after.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use serde::Serialize;
use tokio::time::Instant;

use crate::client::{Client, LeaseState, LockGuard};

/// The sidecar's memory and CPU series (see `metrics::process`).
const RSS: &str = "process_resident_memory_bytes";
const CPU: &str = "process_cpu_seconds_total";

/// Measured time when `--duration` is not given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Requests in flight while acquiring, checking and releasing the leases.
const CONCURRENCY: usize = 32;
/// Leases are first held this long before measuring, so the first renewals are under way.
const SETTLE: Duration = Duration::from_secs(2);

/// What to hold, for how long.
#[derive(Clone, Debug)]
pub struct RenewalOptions {
    pub leases: usize,
    pub duration: Duration,
    pub ttl: Duration,
}

/// The result of a renewal run (`--json` prints it as one object).
#[derive(Clone, Debug, Serialize)]
pub struct RenewalReport {
    pub workload: &'static str,
    pub target: &'static str,
    pub leases: usize,
    pub ttl_ms: u64,
    pub duration_s: f64,
    /// Renewals in the measured window.
    pub ops: u64,
    pub ops_per_s: f64,
    /// Renewal latency percentiles in µs, interpolated within the sidecar's histogram buckets
    /// (as Prometheus' `histogram_quantile`); `max_us` is the upper bound of the highest
    /// bucket that saw a renewal.
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// Renewal failures plus leases lost in the window, plus leases not held at the end.
    pub errors: u64,
    pub renewal_failures: u64,
    pub leases_lost: u64,
    pub held_at_end: usize,
    /// The sidecar's CPU time over the window, as a percentage of one core.
    pub cpu_percent: Option<f64>,
    /// The sidecar's resident memory, sampled every second of the window.
    /// (`None` when the sidecar exports no process metrics, e.g. off Linux.)
    pub rss_first_bytes: Option<u64>,
    pub rss_min_bytes: Option<u64>,
    pub rss_max_bytes: Option<u64>,
}

impl RenewalReport {
    pub fn table_header() -> String {
        format!(
            "{:<8} {:>7} {:>7} {:>10} {:>8} {:>8} {:>8} {:>9} {:>5} {:>7} {:>6} {:>9} {:>9}",
            "workload",
            "leases",
            "ttl ms",
            "renewals/s",
            "p50 µs",
            "p99 µs",
            "max µs",
            "failures",
            "lost",
            "held",
            "cpu %",
            "rss MiB",
            "rss max"
        )
    }

    pub fn table_row(&self) -> String {
        let mib = |bytes: Option<u64>| match bytes {
            Some(bytes) => format!("{:.1}", bytes as f64 / (1024.0 * 1024.0)),
            None => "-".into(),
        };
        let cpu = self
            .cpu_percent
            .map_or("-".into(), |cpu| format!("{cpu:.1}"));
        format!(
            "{:<8} {:>7} {:>7} {:>10.0} {:>8} {:>8} {:>8} {:>9} {:>5} {:>7} {:>6} {:>9} {:>9}",
            self.workload,
            self.leases,
            self.ttl_ms,
            self.ops_per_s,
            self.p50_us,
            self.p99_us,
            self.max_us,
            self.renewal_failures,
            self.leases_lost,
            self.held_at_end,
            cpu,
            mib(self.rss_first_bytes),
            mib(self.rss_max_bytes)
        )
    }
}

/// Holds the leases on the sidecar `client` speaks to, measures, then releases them all.
pub async fn run(client: &Client, options: &RenewalOptions) -> Result<RenewalReport, String> {
    let guards = acquire_all(client, options).await?;
    let ids: Vec<&str> = guards.iter().map(LockGuard::lease_id).collect();
    let outcome = measure(client, options, &ids).await;
    release_all(guards).await;
    outcome
}

async fn acquire_all(client: &Client, options: &RenewalOptions) -> Result<Vec<LockGuard>, String> {
    // Idle release would end the leases: the load tester keeps no event stream open (one per
    // lease would add its own load to the sidecar).
    let idle = options.duration + SETTLE + Duration::from_secs(60);
    let acquired: Vec<Result<LockGuard, String>> = stream::iter(0..options.leases)
        .map(|i| {
            let request = client
                .lock(format!("load:renewal:{i}"))
                .owner("redlease-load");
            let request = request.ttl(options.ttl).auto_renew(true).idle_timeout(idle);
            async move {
                request
                    .events(false)
                    .send()
                    .await
                    .map_err(|e| e.to_string())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut guards = Vec::with_capacity(acquired.len());
    let mut first_error = None;
    for result in acquired {
        match result {
            Ok(guard) => guards.push(guard),
            Err(error) => first_error = first_error.or(Some(error)),
        }
    }
    if let Some(error) = first_error {
        release_all(guards).await;
        return Err(format!("could not hold {} leases: {error}", options.leases));
    }
    Ok(guards)
}

async fn measure(
    client: &Client,
    options: &RenewalOptions,
    ids: &[&str],
) -> Result<RenewalReport, String> {
    let base = client.base_url();
    tokio::time::sleep(SETTLE).await;
    let before = scrape(client).await?;
    if before.get("lock_renewal_attempts_total").is_none() {
        return Err(format!(
            "{base}/metrics has no lock_renewal_attempts_total: not a redlease sidecar?"
        ));
    }
    let started = Instant::now();
    let mut rss: Vec<f64> = before.get(RSS).into_iter().collect();
    while started.elapsed() < options.duration {
        let left = options.duration.saturating_sub(started.elapsed());
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        rss.extend(scrape(client).await?.get(RSS));
    }
    let after = scrape(client).await?;
    let elapsed = started.elapsed().as_secs_f64();
    let held_at_end = count_held(client, ids).await;
    let delta = |name: &str| (after.value(name) - before.value(name)).max(0.0);
    let renewals = delta("lock_renewal_attempts_total") as u64;
    let renewal_failures = delta("lock_renewal_failures_total") as u64;
    let leases_lost =
        after.sum_of("lock_leases_lost_total") - before.sum_of("lock_leases_lost_total");
    let leases_lost = leases_lost.max(0.0) as u64;
    let buckets = after.bucket_deltas("lock_renewal_latency_bucket", &before);
    let quantile = |q: f64| (bucket_quantile(&buckets, q) * 1e6).round() as u64;
    let not_held = (ids.len() - held_at_end) as u64;
    Ok(RenewalReport {
        workload: "renewal",
        target: "sidecar",
        leases: ids.len(),
        ttl_ms: options.ttl.as_millis() as u64,
        duration_s: elapsed,
        ops: renewals,
        ops_per_s: renewals as f64 / elapsed,
        p50_us: quantile(0.5),
        p90_us: quantile(0.9),
        p99_us: quantile(0.99),
        p999_us: quantile(0.999),
        max_us: (highest_bucket(&buckets) * 1e6).round() as u64,
        errors: renewal_failures + leases_lost + not_held,
        renewal_failures,
        leases_lost,
        held_at_end,
        cpu_percent: after
            .get(CPU)
            .zip(before.get(CPU))
            .map(|(end, start)| 100.0 * (end - start).max(0.0) / elapsed),
        rss_first_bytes: rss.first().map(|&b| b as u64),
        rss_min_bytes: rss.iter().copied().reduce(f64::min).map(|b| b as u64),
        rss_max_bytes: rss.iter().copied().reduce(f64::max).map(|b| b as u64),
    })
}

async fn count_held(client: &Client, ids: &[&str]) -> usize {
    let states: Vec<bool> = stream::iter(ids)
        .map(|id| async move {
            let lease = client.lease(id).await;
            lease.is_ok_and(|lease| lease.state == LeaseState::Held)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    states.into_iter().filter(|held| *held).count()
}

async fn release_all(guards: Vec<LockGuard>) {
    stream::iter(guards)
        .map(LockGuard::release)
        .buffer_unordered(CONCURRENCY)
        .for_each(|_| async {})
        .await;
}

async fn scrape(client: &Client) -> Result<Scrape, String> {
    match client.metrics().await {
        Ok(text) => Ok(Scrape::parse(&text)),
        Err(error) => Err(format!(
            "cannot read {}/metrics: {error}",
            client.base_url()
        )),
    }
}

/// The samples of one Prometheus text exposition: series (name with labels) → value.
#[derive(Debug, Default)]
pub struct Scrape {
    samples: HashMap<String, f64>,
}

impl Scrape {
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            .collect();
        Self { samples }
    }

    /// The value of an unlabelled series (0 when absent).
    pub fn value(&self, name: &str) -> f64 {
        self.get(name).unwrap_or(0.0)
    }

    /// The value of an unlabelled series, if the scrape has it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.samples.get(name).copied()
    }

    /// The sum over every label set of `name`.
    pub fn sum_of(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|(series, _)| series.split('{').next() == Some(name))
            .map(|(_, value)| value)
            .sum()
    }

    /// `(upper bound in seconds, cumulative count)` of an unlabelled histogram's buckets,
    /// minus those of `earlier`, sorted by bound (`+Inf` last).
    pub fn bucket_deltas(&self, bucket_series: &str, earlier: &Scrape) -> Vec<(f64, f64)> {
        let prefix = format!("{bucket_series}{{le=\"");
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter_map(|(series, count)| {
                let bound = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                let bound: f64 = if bound == "+Inf" {
                    f64::INFINITY
                } else {
                    bound.parse().ok()?
                };
                let before = earlier.samples.get(series).copied().unwrap_or(0.0);
                Some((bound, count - before))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    }
}

/// The `q`-quantile of cumulative buckets, interpolated linearly inside its bucket (the
/// lowest bucket starts at 0); 0 without observations. A quantile in the `+Inf` bucket is
/// reported at the highest finite bound.
pub fn bucket_quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return 0.0;
    };
    if total <= 0.0 {
        return 0.0;
    }
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(bound, count) in buckets {
        if count >= rank {
            if bound.is_infinite() {
                return lower;
            }
            let inside = count - below;
            let fraction = if inside > 0.0 {
                (rank - below) / inside
            } else {
                1.0
            };
            return lower + (bound - lower) * fraction;
        }
        (lower, below) = (bound, count);
    }
    lower
}

/// The upper bound of the highest bucket that gained observations (the highest finite bound
/// when only `+Inf` did).
pub fn highest_bucket(buckets: &[(f64, f64)]) -> f64 {
    let mut below = 0.0;
    let mut highest = 0.0;
    let mut last_finite = 0.0;
    for &(bound, count) in buckets {
        if count > below {
            highest = if bound.is_finite() {
                bound
            } else {
                last_finite
            };
        }
        if bound.is_finite() {
            last_finite = bound;
        }
        below = count;
    }
    highest
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP x\n\
        lock_renewal_attempts_total 10\n\
        lock_leases_lost_total{reason=\"expired\"} 1\n\
        lock_leases_lost_total{reason=\"not_ours\"} 0\n\
        lock_renewal_latency_bucket{le=\"0.001\"} 5\n\
        lock_renewal_latency_bucket{le=\"0.01\"} 10\n\
        lock_renewal_latency_bucket{le=\"+Inf\"} 10\n";
    const AFTER: &str = "lock_renewal_attempts_total 110\n\
        lock_leases_lost_total{reason=\"expired\"} 1\n\
        lock_leases_lost_total{reason=\"not_ours\"} 2\n\
        lock_renewal_latency_bucket{le=\"0.001\"} 55\n\
        lock_renewal_latency_bucket{le=\"0.01\"} 109\n\
        lock_renewal_latency_bucket{le=\"+Inf\"} 110\n";

    #[test]
    fn scrapes_are_compared_series_by_series() {
        let (before, after) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        assert_eq!(
            after.value("lock_renewal_attempts_total")
                - before.value("lock_renewal_attempts_total"),
            100.0
        );
        assert_eq!(
            after.sum_of("lock_leases_lost_total") - before.sum_of("lock_leases_lost_total"),
            2.0
        );
        let buckets = after.bucket_deltas("lock_renewal_latency_bucket", &before);
        assert_eq!(
            buckets,
            vec![(0.001, 50.0), (0.01, 99.0), (f64::INFINITY, 100.0)]
        );
    }

    /// Interpolation inside the bucket, as `histogram_quantile` does.
    #[test]
    fn quantiles_interpolate_within_buckets() {
        let buckets = vec![(0.001, 50.0), (0.01, 99.0), (f64::INFINITY, 100.0)];
        assert!((bucket_quantile(&buckets, 0.25) - 0.0005).abs() < 1e-12);
        assert!((bucket_quantile(&buckets, 0.5) - 0.001).abs() < 1e-12);
        let p90 = 0.001 + 0.009 * (40.0 / 49.0);
        assert!((bucket_quantile(&buckets, 0.9) - p90).abs() < 1e-12);
        assert_eq!(
            bucket_quantile(&buckets, 0.999),
            0.01,
            "in +Inf: the highest finite bound"
        );
        assert_eq!(highest_bucket(&buckets), 0.01);
        assert_eq!(bucket_quantile(&[], 0.5), 0.0);
        assert_eq!(highest_bucket(&[(0.001, 0.0), (f64::INFINITY, 0.0)]), 0.0);
    }
}

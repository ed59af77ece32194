//! What both benches share: the raw-quorum baseline's compare-and-delete script and the
//! 16-client throughput loop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// The baseline's release: delete the key only where it holds our value.
pub const COMPARE_AND_DELETE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0"#;

/// Clients of the throughput runs, each on its own resource.
pub const PARALLEL_CLIENTS: usize = 16;

/// The measured seconds of each throughput run: PARALLEL_SECS (default 3).
pub fn parallel_secs() -> f64 {
    std::env::var("PARALLEL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
}

/// Cycles per second of `PARALLEL_CLIENTS` tasks looping `cycle(client index)` for
/// `parallel_secs()` seconds, after a one-second warm-up.
pub async fn throughput<F, Fut>(cycle: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    throughput_window(Arc::new(cycle), Duration::from_secs(1), parallel_secs()).await
}

/// One client's acquire+release cycle (its index picks its resource), for `throughput_in_turns`.
pub type ParallelCycle =
    dyn Fn(usize) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync + 'static;

/// Blocks of this many seconds alternate in `throughput_in_turns`.
const TURN_SECS: f64 = 0.5;

/// The throughput of each of `paths`, measured in alternating windows of `TURN_SECS` (each
/// after a short warm-up) until every path had `parallel_secs()`: a slow spell of the machine
/// then weighs on every path alike.
pub async fn throughput_in_turns(paths: &[Arc<ParallelCycle>]) -> Vec<f64> {
    let rounds = (parallel_secs() / TURN_SECS).ceil().max(1.0) as usize;
    let mut rates = vec![0.0; paths.len()];
    for _ in 0..rounds {
        for (path, rate) in paths.iter().zip(&mut rates) {
            let warmup = Duration::from_millis(200);
            *rate += throughput_window(Arc::clone(path), warmup, TURN_SECS).await;
        }
    }
    rates.iter().map(|total| total / rounds as f64).collect()
}

/// Cycles per second of `PARALLEL_CLIENTS` tasks looping `cycle` for `secs`, after `warmup`.
async fn throughput_window<F, Fut>(cycle: Arc<F>, warmup: Duration, secs: f64) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static + ?Sized,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let measure_from = Instant::now() + warmup;
    let end = measure_from + Duration::from_secs_f64(secs);
    let counted = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..PARALLEL_CLIENTS)
        .map(|i| {
            let (counted, cycle) = (Arc::clone(&counted), Arc::clone(&cycle));
            tokio::spawn(async move {
                loop {
                    let started = Instant::now();
                    if started >= end {
                        break;
                    }
                    cycle(i).await;
                    if started >= measure_from {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    futures_util::future::join_all(workers).await;
    counted.load(Ordering::Relaxed) as f64 / secs
}

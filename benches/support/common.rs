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

/// Cycles per second of `PARALLEL_CLIENTS` tasks looping `cycle(client index)` for
/// PARALLEL_SECS seconds (default 3), after a one-second warm-up.
pub async fn throughput<F, Fut>(cycle: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let secs: f64 = std::env::var("PARALLEL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let measure_from = Instant::now() + Duration::from_secs(1);
    let end = measure_from + Duration::from_secs_f64(secs);
    let cycle = Arc::new(cycle);
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

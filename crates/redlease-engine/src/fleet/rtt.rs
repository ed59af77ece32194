//! A pure sliding-window RTT estimator: a log-bucketed histogram per time slice.
//!
//! Fed by every command a node answers (and by the periodic PING of long-running fleets),
//! read for p50/p99. Buckets are four per power of two (about 19% resolution), and a quantile
//! reports the upper bound of its bucket, so estimates err on the slow side. Time is an
//! argument; nothing here reads a clock.

use std::time::Duration;

use tokio::time::Instant;

/// Number of time slices in the window.
const SLICES: usize = 6;
/// Buckets cover 0 µs to 2^28 µs (about 268 s); four per power of two.
const BUCKETS: usize = 108;
const MAX_MICROS: u64 = (1 << 28) - 1;

/// Default length of the sliding window.
pub const DEFAULT_RTT_WINDOW: Duration = Duration::from_secs(30);

/// Recent round-trip times of one node.
#[derive(Clone, Debug)]
pub struct RttWindow {
    slices: [Slice; SLICES],
    slice_len: Duration,
    current: usize,
}

#[derive(Clone, Debug)]
struct Slice {
    start: Instant,
    counts: [u32; BUCKETS],
    total: u64,
    /// The highest bucket holding a sample (0 when empty): a quantile merges no bucket above
    /// the live slices' highest, where round trips of a near fleet leave most of them empty.
    top: usize,
}

// === impl RttWindow ===

impl RttWindow {
    /// An empty window of length `window`, starting at `now`.
    pub fn new(window: Duration, now: Instant) -> Self {
        let slice_len = (window / SLICES as u32).max(Duration::from_millis(1));
        let empty = Slice {
            start: now,
            counts: [0; BUCKETS],
            total: 0,
            top: 0,
        };
        Self {
            slices: std::array::from_fn(|_| empty.clone()),
            slice_len,
            current: 0,
        }
    }

    /// Records one round trip observed at `now`.
    pub fn record(&mut self, rtt: Duration, now: Instant) {
        self.rotate(now);
        let slice = &mut self.slices[self.current];
        let bucket = bucket_of(rtt);
        slice.counts[bucket] += 1;
        slice.total += 1;
        slice.top = slice.top.max(bucket);
    }

    /// Number of samples still inside the window at `now`.
    pub fn count(&self, now: Instant) -> u64 {
        self.live(now).map(|s| s.total).sum()
    }

    /// The `q`-quantile (0.0–1.0) of the samples inside the window, or `None` when empty.
    pub fn quantile(&self, q: f64, now: Instant) -> Option<Duration> {
        let total = self.count(now);
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        // The live slices merged once, then one pass over the buckets.
        let mut counts = [0u64; BUCKETS];
        let top = self.live(now).map(|s| s.top).max().unwrap_or(0);
        for slice in self.live(now) {
            let (merged, own) = (&mut counts[..=top], &slice.counts[..=top]);
            for (merged, &count) in merged.iter_mut().zip(own) {
                *merged += u64::from(count);
            }
        }
        let mut seen = 0;
        for (bucket, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Duration::from_micros(bucket_upper_micros(bucket)));
            }
        }
        None
    }

    fn live(&self, now: Instant) -> impl Iterator<Item = &Slice> {
        let window = self.slice_len * SLICES as u32;
        self.slices
            .iter()
            .filter(move |s| s.total > 0 && now.saturating_duration_since(s.start) < window)
    }

    fn rotate(&mut self, now: Instant) {
        let start = self.slices[self.current].start;
        if now < start + self.slice_len {
            return;
        }
        let steps = (now - start).as_nanos() / self.slice_len.as_nanos();
        let steps = steps.min(SLICES as u128) as usize;
        for step in 1..=steps {
            let index = (self.current + step) % SLICES;
            self.slices[index].counts = [0; BUCKETS];
            self.slices[index].total = 0;
            self.slices[index].top = 0;
        }
        self.current = (self.current + steps) % SLICES;
        self.slices[self.current].start = now;
    }
}

fn bucket_of(rtt: Duration) -> usize {
    let micros = (rtt.as_micros() as u64).min(MAX_MICROS);
    if micros < 4 {
        return micros as usize;
    }
    let exponent = 63 - micros.leading_zeros() as usize;
    let sub = ((micros >> (exponent - 2)) & 3) as usize;
    4 * (exponent - 1) + sub
}

fn bucket_upper_micros(bucket: usize) -> u64 {
    if bucket < 4 {
        return bucket as u64;
    }
    let exponent = bucket / 4 + 1;
    let lower = (4 + (bucket % 4) as u64) << (exponent - 2);
    lower + (1 << (exponent - 2)) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every duration lands in a bucket whose upper bound is at or above it, within 25%.
    #[test]
    fn buckets_bound_each_sample_from_above() {
        for micros in [0u64, 1, 3, 4, 7, 8, 100, 999, 12_345, 1_000_000, MAX_MICROS] {
            let upper = bucket_upper_micros(bucket_of(Duration::from_micros(micros)));
            assert!(upper >= micros, "{micros} -> {upper}");
            assert!(
                upper as f64 <= (micros as f64 * 1.25).max(3.0),
                "{micros} -> {upper}"
            );
        }
    }

    /// p50 and p99 follow the recorded distribution.
    #[tokio::test(start_paused = true)]
    async fn quantiles_follow_the_samples() {
        let now = Instant::now();
        let mut window = RttWindow::new(DEFAULT_RTT_WINDOW, now);
        assert_eq!(window.quantile(0.5, now), None);
        for _ in 0..98 {
            window.record(Duration::from_micros(200), now);
        }
        window.record(Duration::from_millis(10), now);
        window.record(Duration::from_millis(10), now);
        let p50 = window.quantile(0.5, now).unwrap();
        let p99 = window.quantile(0.99, now).unwrap();
        assert!((200..=250).contains(&p50.as_micros()), "{p50:?}");
        assert!((10_000..=12_500).contains(&p99.as_micros()), "{p99:?}");
    }

    /// A quantile counts the slow samples of an older live slice beside the fast ones of the
    /// current slice, and forgets them once their slice is reused.
    #[tokio::test(start_paused = true)]
    async fn quantiles_span_every_live_slice() {
        let start = Instant::now();
        let mut window = RttWindow::new(Duration::from_secs(6), start);
        for _ in 0..5 {
            window.record(Duration::from_millis(10), start);
        }
        let later = start + Duration::from_secs(2);
        for _ in 0..95 {
            window.record(Duration::from_micros(100), later);
        }
        let p99 = window.quantile(0.99, later).unwrap();
        assert!((10_000..=12_500).contains(&p99.as_micros()), "{p99:?}");
        let p50 = window.quantile(0.5, later).unwrap();
        assert!(p50 < Duration::from_millis(1), "{p50:?}");
        let reused = start + Duration::from_secs(6);
        window.record(Duration::from_micros(100), reused);
        let p99 = window.quantile(0.99, reused).unwrap();
        assert!(p99 < Duration::from_millis(1), "{p99:?}");
    }

    /// Samples older than the window stop counting; newer ones stay.
    #[tokio::test(start_paused = true)]
    async fn old_samples_slide_out_of_the_window() {
        let start = Instant::now();
        let mut window = RttWindow::new(Duration::from_secs(6), start);
        window.record(Duration::from_millis(50), start);
        let later = start + Duration::from_secs(4);
        window.record(Duration::from_micros(100), later);
        assert_eq!(window.count(later), 2);
        let much_later = start + Duration::from_secs(7);
        assert_eq!(window.count(much_later), 1);
        let p99 = window.quantile(0.99, much_later).unwrap();
        assert!(p99 < Duration::from_millis(1));
        window.record(Duration::from_micros(100), start + Duration::from_secs(60));
        assert_eq!(window.count(start + Duration::from_secs(60)), 1);
    }
}

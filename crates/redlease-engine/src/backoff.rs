//! The one doubling backoff: how long to wait before each next attempt of something that keeps
//! failing (a connection to a master, a force release re-sent to masters that missed it).
//! Pure: it reads no clock; the caller sleeps what it answers.

use std::time::Duration;

/// Waits that double from `first` up to `max`: `first`, `2 × first`, `4 × first`, … `max`,
/// `max`, …; optionally after a first attempt that does not wait at all.
///
/// ```
/// # use std::time::Duration;
/// # use redlease_engine::Backoff;
/// let ms = Duration::from_millis;
/// let mut backoff = Backoff::new(ms(100), ms(1_000));
/// let waits: Vec<_> = (0..6).map(|_| backoff.next_wait()).collect();
/// assert_eq!(waits, [ms(100), ms(200), ms(400), ms(800), ms(1_000), ms(1_000)]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    /// What the next call of [`Backoff::next_wait`] answers.
    next: Duration,
}

// === impl Backoff ===

impl Backoff {
    /// Waits `first` before the first attempt again, doubling each time up to `max` (taken
    /// as `first` when it is shorter).
    pub fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max: max.max(first),
            next: first,
        }
    }

    /// The same waits, after one attempt made at once (a connection that was healthy is
    /// made again without waiting).
    pub fn at_once_then(first: Duration, max: Duration) -> Self {
        Self {
            next: Duration::ZERO,
            ..Self::new(first, max)
        }
    }

    /// How long to wait before the next attempt; the wait after it doubles (up to `max`).
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = wait.saturating_mul(2).clamp(self.first, self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn waits(backoff: &mut Backoff, n: usize) -> Vec<Duration> {
        (0..n).map(|_| backoff.next_wait()).collect()
    }

    /// Waits double from the first and stay at the cap.
    #[test]
    fn waits_double_up_to_the_cap() {
        let mut backoff = Backoff::new(10 * MS, 1_000 * MS);
        let expected = [10, 20, 40, 80, 160, 320, 640, 1_000, 1_000].map(|ms| ms * MS);
        assert_eq!(waits(&mut backoff, 9), expected);
    }

    /// A backoff that starts at once waits nothing first, then as the plain one.
    #[test]
    fn a_backoff_at_once_waits_nothing_first() {
        let mut backoff = Backoff::at_once_then(10 * MS, 40 * MS);
        let expected = [0, 10, 20, 40, 40].map(|ms| ms * MS);
        assert_eq!(waits(&mut backoff, 5), expected);
    }

    /// A cap below the first wait is the first wait; a huge cap never overflows.
    #[test]
    fn odd_bounds_stay_sane() {
        let mut low = Backoff::new(100 * MS, MS);
        assert_eq!(waits(&mut low, 3), [100 * MS; 3]);
        let mut huge = Backoff::new(Duration::MAX / 2, Duration::MAX);
        assert_eq!(waits(&mut huge, 3)[2], Duration::MAX);
    }

    /// The waits, slept one after the other on a paused clock, add up as documented: 100 ms
    /// doubling to 1 s puts the sixth attempt 2.5 s after the first.
    #[tokio::test(start_paused = true)]
    async fn slept_waits_add_up() {
        let start = tokio::time::Instant::now();
        let mut backoff = Backoff::new(100 * MS, 1_000 * MS);
        for _ in 0..5 {
            tokio::time::sleep(backoff.next_wait()).await;
        }
        assert_eq!(start.elapsed(), 2_500 * MS);
    }
}

//! When `lock run` stops its command: the SIGTERM and SIGKILL instants counted back from the
//! end of the lease's validity, so that the command has exited before the lease can pass to
//! another holder; and the longest grace a TTL leaves room for. Pure: every function takes
//! `now` (or needs no clock at all).

use std::time::Duration;

use tokio::time::Instant;

/// Time left between SIGKILL and the end of the validity, for the signal to be delivered, the
/// processes to exit and the kernel to close what they held.
pub const KILL_MARGIN: Duration = Duration::from_millis(100);
/// `--kill-grace-ms` when not given: this much, or less when the TTL leaves room for less.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(2_000);
/// The grace and the kill margin together take at most 1/`GRACE_SHARE` of the TTL. The rest
/// is for renewals: one is sent at half the TTL (the lease table's default renewal fraction,
/// less its jitter), and a quarter of the TTL is left for its retries before SIGTERM.
const GRACE_SHARE: u32 = 4;

/// When the command's process group gets SIGTERM, and SIGKILL for what is left of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    pub term_at: Instant,
    pub kill_at: Instant,
}

/// A `--kill-grace-ms` that leaves renewals no room in the TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--kill-grace-ms {grace_ms} leaves no room for renewals with a TTL of {ttl_ms} ms: the \
     grace and the {margin_ms} ms kill margin may take a quarter of the TTL at most (here a \
     grace of {max_ms} ms); lower --kill-grace-ms or raise --ttl-ms",
    margin_ms = KILL_MARGIN.as_millis()
)]
pub struct GraceTooLong {
    pub grace_ms: u128,
    pub ttl_ms: u128,
    pub max_ms: u128,
}

// === impl Stop ===

impl Stop {
    /// The stop a validity ending at `valid_until` calls for if no renewal extends it:
    /// SIGKILL `KILL_MARGIN` before the end, SIGTERM `grace` before that. (Due at `now` in the
    /// impossible case of a validity ending within the margin of the clock's origin.)
    pub fn before(valid_until: Instant, grace: Duration, now: Instant) -> Self {
        let kill_at = valid_until.checked_sub(KILL_MARGIN).unwrap_or(now);
        let term_at = kill_at.checked_sub(grace).unwrap_or(now);
        Self { term_at, kill_at }
    }

    /// The stop at once, at `now` (a loss reported before the end of the validity, or a
    /// command that left processes behind): SIGTERM now, SIGKILL `grace` later but never
    /// after this stop's SIGKILL.
    pub fn at_once(self, grace: Duration, now: Instant) -> Self {
        Self {
            term_at: now,
            kill_at: (now + grace).min(self.kill_at),
        }
    }
}

/// The grace to give a command whose lease has a TTL of `ttl`: `asked` when it fits (see
/// `GRACE_SHARE`), else an error; without `asked`, `DEFAULT_KILL_GRACE` or what fits if less.
pub fn grace_for(ttl: Duration, asked: Option<Duration>) -> Result<Duration, GraceTooLong> {
    let max = max_grace(ttl);
    match asked {
        None => Ok(DEFAULT_KILL_GRACE.min(max)),
        Some(grace) if grace <= max => Ok(grace),
        Some(grace) => Err(GraceTooLong {
            grace_ms: grace.as_millis(),
            ttl_ms: ttl.as_millis(),
            max_ms: max.as_millis(),
        }),
    }
}

/// The longest grace that leaves renewals room in `ttl` (zero for TTLs under 4 × the margin).
pub fn max_grace(ttl: Duration) -> Duration {
    (ttl / GRACE_SHARE).saturating_sub(KILL_MARGIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// SIGKILL comes the margin before the validity ends, SIGTERM the grace before that.
    #[test]
    fn the_stop_counts_back_from_the_validity() {
        let now = Instant::now();
        let valid_until = now + 2_000 * MS;
        let stop = Stop::before(valid_until, 300 * MS, now);
        assert_eq!(stop.kill_at, valid_until - KILL_MARGIN);
        assert_eq!(stop.term_at, valid_until - KILL_MARGIN - 300 * MS);
        assert!(stop.kill_at < valid_until);
    }

    /// A validity already over calls for a stop already due.
    #[test]
    fn a_validity_already_over_is_due_at_once() {
        let now = Instant::now() + 10_000 * MS;
        let stop = Stop::before(now - 50 * MS, 300 * MS, now);
        assert!(stop.term_at < stop.kill_at && stop.kill_at <= now);
    }

    /// A loss reported early stops at once and kills after the grace, unless the validity's
    /// own SIGKILL comes sooner.
    #[test]
    fn a_loss_stops_at_once_within_the_validity() {
        let now = Instant::now();
        let stop = Stop::before(now + 2_000 * MS, 300 * MS, now);
        let early = stop.at_once(300 * MS, now + 100 * MS);
        assert_eq!(early.term_at, now + 100 * MS);
        assert_eq!(early.kill_at, now + 400 * MS);
        let late = stop.at_once(300 * MS, now + 1_800 * MS);
        assert_eq!(late.term_at, now + 1_800 * MS);
        assert_eq!(late.kill_at, stop.kill_at);
    }

    /// A grace fits when it and the margin take at most a quarter of the TTL; the default
    /// shrinks to fit, an asked one is refused.
    #[test]
    fn the_grace_leaves_room_for_renewals() {
        let ttl = 10_000 * MS;
        assert_eq!(max_grace(ttl), 2_400 * MS);
        assert_eq!(grace_for(ttl, None), Ok(DEFAULT_KILL_GRACE));
        assert_eq!(grace_for(ttl, Some(2_400 * MS)), Ok(2_400 * MS));
        let refused = grace_for(ttl, Some(2_401 * MS)).unwrap_err();
        assert_eq!((refused.grace_ms, refused.max_ms), (2_401, 2_400));
        assert!(refused.to_string().contains("--ttl-ms"), "{refused}");
        assert_eq!(grace_for(1_000 * MS, None), Ok(150 * MS));
        assert_eq!(grace_for(300 * MS, None), Ok(Duration::ZERO));
        assert!(grace_for(300 * MS, Some(MS)).is_err());
    }
}

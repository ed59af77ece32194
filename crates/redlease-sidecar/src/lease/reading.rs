//! An open event stream as a sign of life: how often the stream checks that its app reads
//! what it is sent (the heartbeat period), and what each check proves. Pure: the checks'
//! figures come from the kernel (see `sockdiag`), time is an argument.
//!
//! The rule: the stream sends a heartbeat right after each check, so something sent after
//! every check waits to be read. A check at `t` that finds the app has read a byte sent after
//! an earlier check at `m` proves the app was alive after `m`: its last sign of life is then
//! at least `m`. A frozen app reads nothing more, its proofs stop at the check before it
//! froze, and its lease is released as idle at the latest `idle_timeout` after its last read.
//! A live reader's proof is at most two periods old, and the period is a quarter of the
//! idle timeout.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Shortest heartbeat period: checks of a very short idle timeout are not made faster.
pub(crate) const MIN_HEARTBEAT: Duration = Duration::from_millis(50);
/// Longest heartbeat period.
pub(crate) const MAX_HEARTBEAT: Duration = Duration::from_secs(5);
/// Checks kept to judge a slow reader against (four periods cover an idle timeout).
const MARKS: usize = 4;

/// How often the event stream of a lease with `idle_timeout` checks its reader and sends a
/// heartbeat: a quarter of the idle timeout, within [`MIN_HEARTBEAT`] and [`MAX_HEARTBEAT`].
pub(crate) fn heartbeat_period(idle_timeout: Duration) -> Duration {
    (idle_timeout / 4).clamp(MIN_HEARTBEAT, MAX_HEARTBEAT)
}

/// What a check found on the stream's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sample {
    /// TCP: bytes the app's socket has received from the sidecar in all, and of those the
    /// bytes the app has not read yet.
    Received { received: u64, unread: u64 },
    /// Unix: whether the app has consumed everything the sidecar sent.
    Drained(bool),
    /// The connection cannot be checked: its peer is not on this host's network namespace,
    /// or the kernel did not answer. Proves nothing.
    Unchecked,
}

/// The checks of one event stream so far.
#[derive(Debug)]
pub(crate) struct ReadingChecks {
    /// Earlier checks that counted what the app's socket had received then.
    marks: VecDeque<(Instant, u64)>,
    /// The last check, or the opening of the stream.
    last_check: Instant,
}

impl ReadingChecks {
    pub(crate) fn new(opened: Instant) -> Self {
        Self {
            marks: VecDeque::with_capacity(MARKS),
            last_check: opened,
        }
    }

    /// Takes the check made at `now`, just before its heartbeat is sent; the instant the app
    /// is proven to have been alive at, if the check proves anything.
    pub(crate) fn observe(&mut self, now: Instant, sample: Sample) -> Option<Instant> {
        let since = std::mem::replace(&mut self.last_check, now);
        match sample {
            Sample::Received { received, unread } => {
                let read = received.saturating_sub(unread);
                let proof = self.marks.iter().rev().find(|(_, mark)| read > *mark);
                let proof = proof.map(|(at, _)| *at);
                if self.marks.len() == MARKS {
                    self.marks.pop_front();
                }
                self.marks.push_back((now, received));
                proof
            }
            // Everything sent was consumed, the heartbeat sent after the last check included.
            Sample::Drained(true) => Some(since),
            Sample::Drained(false) | Sample::Unchecked => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_millis(250);

    /// A quarter of the idle timeout, within its bounds.
    #[test]
    fn the_heartbeat_is_a_quarter_of_the_idle_timeout() {
        assert_eq!(heartbeat_period(Duration::from_secs(1)), H);
        assert_eq!(
            heartbeat_period(Duration::from_secs(15)),
            Duration::from_millis(3750)
        );
        assert_eq!(heartbeat_period(Duration::from_secs(60)), MAX_HEARTBEAT);
        assert_eq!(heartbeat_period(Duration::from_millis(1)), MIN_HEARTBEAT);
    }

    fn received(received: u64, unread: u64) -> Sample {
        Sample::Received { received, unread }
    }

    /// A TCP reader that reads each heartbeat is proven alive at the check before; once it
    /// stops reading, no proof is newer than the check before its last read, however much
    /// its socket receives.
    #[tokio::test(start_paused = true)]
    async fn a_tcp_reader_is_proven_alive_until_it_stops_reading() {
        let t0 = Instant::now();
        let mut checks = ReadingChecks::new(t0);
        assert_eq!(checks.observe(t0 + H, received(200, 0)), None);
        assert_eq!(checks.observe(t0 + 2 * H, received(203, 0)), Some(t0 + H));
        // The heartbeat sent at 2H is the last thing it reads.
        assert_eq!(
            checks.observe(t0 + 3 * H, received(206, 0)),
            Some(t0 + 2 * H)
        );
        for k in 4..20u32 {
            let got = 206 + 3 * u64::from(k - 3);
            let proof = checks.observe(t0 + k * H, received(got, got - 206));
            assert!(proof.is_none_or(|at| at <= t0 + 2 * H), "{k}: {proof:?}");
        }
        assert_eq!(checks.observe(t0 + 20 * H, received(300, 94)), None);
    }

    /// A reader behind by more than a heartbeat is proven alive at the latest check whose
    /// bytes it has got past; events sent just before a check do not hide its reading.
    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_is_judged_against_older_checks() {
        let t0 = Instant::now();
        let mut checks = ReadingChecks::new(t0);
        checks.observe(t0 + H, received(100, 0));
        checks.observe(t0 + 2 * H, received(1000, 900));
        assert_eq!(
            checks.observe(t0 + 3 * H, received(2000, 1500)),
            Some(t0 + H)
        );
        // Everything up to the check at 3H read, not the heartbeat after it: alive after 2H.
        assert_eq!(
            checks.observe(t0 + 4 * H, received(2003, 3)),
            Some(t0 + 2 * H)
        );
        assert_eq!(
            checks.observe(t0 + 5 * H, received(2006, 0)),
            Some(t0 + 4 * H)
        );
    }

    /// A Unix reader that consumed everything is proven alive at the check before; one that
    /// did not, or a connection that cannot be checked, proves nothing.
    #[tokio::test(start_paused = true)]
    async fn a_drained_unix_stream_proves_the_check_before() {
        let t0 = Instant::now();
        let mut checks = ReadingChecks::new(t0);
        assert_eq!(checks.observe(t0 + H, Sample::Drained(true)), Some(t0));
        assert_eq!(checks.observe(t0 + 2 * H, Sample::Drained(false)), None);
        assert_eq!(checks.observe(t0 + 3 * H, Sample::Unchecked), None);
        assert_eq!(
            checks.observe(t0 + 4 * H, Sample::Drained(true)),
            Some(t0 + 3 * H)
        );
    }
}

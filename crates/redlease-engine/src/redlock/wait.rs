//! Blocking acquisition: attempts until granted or the wait is over. With wake-ups, the
//! waiters of this process queue first come first served per resource; only the head retries,
//! at once on a release message, or when the holder's lease would have expired. Without them,
//! attempts come at random intervals. Fair waiters are lined up by the masters' queue instead,
//! and each retries on every release message.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{AcquireOutcome, EngineOptions, Redlock, Refusal};
use crate::Error;

// === impl Redlock ===

impl Redlock {
    /// Tries to acquire until granted or `wait` has passed. One attempt at once, unless waiters
    /// of this process are queued on `resource` (with wake-ups); then in turn, sleeping between
    /// attempts a random delay, or until a release message or the holder's expiry when the
    /// engine has wake-ups, never past the deadline. A waiter still queued at the deadline is
    /// answered `Contended` with no votes.
    pub async fn acquire_with_wait(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        let pace = (Line::ThisProcess, None);
        self.wait_for_grant(resource, wait, pace, || self.acquire(resource, owner, ttl))
            .await
    }

    /// Runs `attempt` until it grants or `wait` has passed, lined up as `line` says under
    /// `queue` (a lock name's [`crate::keys::waiting_name`], whose channel announces the
    /// releases worth retrying at). With `max_pause`, an attempt at least that often however
    /// long the holder has left: for an attempt that keeps something of its own alive on the
    /// masters while it waits (a waiting writer's intent).
    pub(crate) async fn wait_for_grant<F, A>(
        &self,
        queue: &str,
        wait: Duration,
        (line, max_pause): (Line, Option<Duration>),
        mut attempt: F,
    ) -> Result<AcquireOutcome, Error>
    where
        F: FnMut() -> A,
        A: Future<Output = Result<AcquireOutcome, Error>>,
    {
        let resource = queue;
        let deadline = Instant::now() + wait;
        let queued = line == Line::ThisProcess
            && self
                .wakeups
                .as_ref()
                .is_some_and(|w| w.has_waiters(resource));
        // An attempt already answered, to wait after before the next one.
        let mut refused = None;
        if wait.is_zero() || !queued {
            let outcome = attempt().await?;
            if outcome.lease().is_some() || wait.is_zero() {
                return Ok(outcome);
            }
            refused = Some(outcome);
        }
        let waiting = self.wakeups.as_ref().map(|wakeups| match line {
            Line::ThisProcess => wakeups.join(resource),
            Line::Masters | Line::Alone => wakeups.watch(resource),
        });
        let mut listening = false;
        let _turn = match &waiting {
            None => None,
            Some(waiting) if line != Line::ThisProcess => {
                // Retry once listening, as the head of this process's line does: a release
                // announced before the subscription was confirmed reached nobody here.
                listening = waiting.listening(deadline).await;
                refused = None;
                None
            }
            Some(waiting) => {
                // Queue first (the fair mutex serves in the order of this call), then, as the
                // head, make sure the release channel is subscribed and retry at once.
                let Some(turn) = waiting.take_turn(deadline).await else {
                    return Ok(AcquireOutcome::Contended(Refusal::queued()));
                };
                listening = waiting.listening(deadline).await;
                refused = None;
                Some(turn)
            }
        };
        loop {
            let mut released = waiting.as_ref().map(|w| Box::pin(w.released()));
            if let Some(released) = &mut released {
                released.as_mut().enable();
            }
            let outcome = match refused.take() {
                Some(outcome) => outcome,
                None => attempt().await?,
            };
            let now = Instant::now();
            let Some(refusal) = outcome.refusal().filter(|_| now < deadline) else {
                return Ok(outcome);
            };
            let holder_remaining = refusal.holder_remaining();
            // Unconfirmed, a release may publish to nobody here: then do not sleep until the
            // holder's expiry, retry at the engine's jittered pace.
            let delay = match (listening, line) {
                (true, Line::ThisProcess | Line::Alone) => {
                    fallback_delay(&self.options, holder_remaining, rand::random())
                }
                (true, Line::Masters) => fair_fallback_delay(&self.options, holder_remaining),
                (false, _) => retry_delay(&self.options, holder_remaining, rand::random()),
            };
            let delay = delay.min(max_pause.unwrap_or(Duration::MAX));
            let message = async {
                match released {
                    Some(released) => released.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = message => {}
                _ = tokio::time::sleep_until((now + delay).min(deadline)) => {}
            }
        }
    }
}

/// Who lines up a blocking acquisition's attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// The waiters of this process, first come first served per resource: only the head
    /// retries.
    ThisProcess,
    /// The masters' queue (fair waiting), whose attempts the masters grant only at the head
    /// of their queue: every waiter retries on its own (a line here could hold the masters'
    /// head behind a waiter they rank after it), at a pace of its own
    /// ([`fair_fallback_delay`]).
    Masters,
    /// No line: this waiter retries on its own, otherwise as the head of a line would (a
    /// semaphore's waiter for several permits, whom a line would put behind, or ahead of,
    /// waiters for one permit it cannot stand for).
    Alone,
}

/// A random delay in `[retry_delay_min, retry_delay_max]` (`jitter` in 0..1 picks where),
/// cut short to just past the holder's expiry when that comes sooner.
pub(crate) fn retry_delay(
    options: &EngineOptions,
    holder_remaining: Option<Duration>,
    jitter: f64,
) -> Duration {
    let (min, max) = (options.retry_delay_min, options.retry_delay_max);
    let span = max.saturating_sub(min);
    let delay = min + span.mul_f64(jitter.clamp(0.0, 1.0));
    match holder_remaining {
        Some(remaining) => delay.min(remaining + Duration::from_millis(1)),
        None => delay,
    }
}

/// How long the head waiter sleeps when no release message comes: until just past the
/// holder's expiry when a master said when that is (an expiry publishes nothing), otherwise
/// the jittered retry delay (`jitter` in 0..1).
pub(crate) fn fallback_delay(
    options: &EngineOptions,
    holder_remaining: Option<Duration>,
    jitter: f64,
) -> Duration {
    match holder_remaining {
        Some(left) => left + Duration::from_millis(1),
        None => retry_delay(options, None, jitter),
    }
}

/// How long a fair waiter that listens for releases sleeps when no message comes: until just
/// past the holder's expiry when a master said when that is; else (another waiter is ahead of
/// it) an eighth of the heartbeat TTL. The queue moves on a release message (a grant's or a
/// give-up's leave publishes one), so the pause only bounds how late a waiter behind a dead
/// head (purged by the first attempt after its heartbeat deadline) learns it is the head —
/// without every waiter of a long queue polling the masters at the retry pace.
pub(crate) fn fair_fallback_delay(
    options: &EngineOptions,
    holder_remaining: Option<Duration>,
) -> Duration {
    match holder_remaining {
        Some(left) => left + Duration::from_millis(1),
        None => options.fair_heartbeat / 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redlock::EngineOptions;

    /// Retry delays spread between their bounds and never sleep past the holder's expiry.
    #[test]
    fn retry_delay_is_jittered_and_bounded_by_holder_expiry() {
        let options = EngineOptions::default();
        assert_eq!(retry_delay(&options, None, 0.0), Duration::from_millis(10));
        assert_eq!(retry_delay(&options, None, 1.0), Duration::from_millis(100));
        assert_eq!(retry_delay(&options, None, 0.5), Duration::from_millis(55));
        let soon = Some(Duration::from_millis(3));
        assert_eq!(retry_delay(&options, soon, 1.0), Duration::from_millis(4));
    }

    /// A fair waiter behind another retries at an eighth of the heartbeat TTL without a
    /// message; one refused by a holder, just after the holder's expiry.
    #[test]
    fn a_fair_waiter_behind_another_waits_an_eighth_of_the_heartbeat() {
        let options = EngineOptions::default();
        assert_eq!(
            fair_fallback_delay(&options, None),
            Duration::from_millis(250)
        );
        let left = Some(Duration::from_millis(700));
        assert_eq!(
            fair_fallback_delay(&options, left),
            Duration::from_millis(701)
        );
    }

    /// Without a message, the head waiter retries just after the holder's expiry, or after the
    /// jittered delay when no master said.
    #[test]
    fn fallback_waits_for_the_holders_expiry() {
        let options = EngineOptions::default();
        let left = Some(Duration::from_millis(700));
        assert_eq!(
            fallback_delay(&options, left, 0.5),
            Duration::from_millis(701)
        );
        assert_eq!(
            fallback_delay(&options, None, 0.0),
            Duration::from_millis(10)
        );
    }
}

//! Observing an election: the leader read again every poll interval, and at once when the
//! election's channel announces a resignation, a release or a proclamation (with wake-ups);
//! each change told once ([`Observer::next`]). What one observer is told never goes back in
//! term: a read showing a lower term than one already told is told as `Unknown`
//! ([`Sequence`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Leadership;
use crate::keys::{lock_name, validate_resource, LockKind};
use crate::redlock::Redlock;
use crate::wakeup::Waiting;
use crate::Error;

/// How often an observer reads the masters when no message comes: a dead leader (one that
/// never resigns) is seen `vacant` within its TTL and this. A fifth of a second costs each
/// master 5 pipelined `GET`+`PTTL` pairs a second per observer.
pub const DEFAULT_OBSERVE_POLL: Duration = Duration::from_millis(200);

/// What one observer has told so far, and the rule for what it tells next.
#[derive(Clone, Debug, Default)]
pub struct Sequence {
    /// The last leadership told.
    last: Option<Leadership>,
    /// The largest term told.
    highest_term: u64,
}

// === impl Sequence ===

impl Sequence {
    /// What to tell of a new `read`: `None` when it is what was told last (the validity
    /// aside); a leader whose term is below one already told, as `Unknown`.
    pub fn admit(&mut self, read: Leadership) -> Option<Leadership> {
        let told = match read {
            Leadership::Leader(leader) if leader.term < self.highest_term => Leadership::Unknown,
            other => other,
        };
        if let Some(leader) = told.leader() {
            self.highest_term = leader.term;
        }
        if self.last.as_ref().is_some_and(|last| last.same_as(&told)) {
            return None;
        }
        self.last = Some(told.clone());
        Some(told)
    }
}

/// Follows one election (see the module's notes). Made by [`Redlock::observe`].
pub struct Observer {
    engine: Arc<Redlock>,
    /// The election's lock name.
    name: String,
    poll: Duration,
    /// The election's channel, when the engine has wake-ups.
    watching: Option<Waiting>,
    /// Messages heard before the last read began.
    heard: u64,
    /// When the next read is due without a message; `None`: at once.
    due: Option<Instant>,
    sequence: Sequence,
}

// === impl Observer ===

impl Observer {
    /// The next change of the election's leadership: the first call answers what the masters
    /// say now; each later one waits until a read differs from what was told last.
    pub async fn next(&mut self) -> Leadership {
        loop {
            self.wait_for_news().await;
            self.heard = self.watching.as_ref().map_or(0, Waiting::messages);
            let read = self.engine.read_leadership(&self.name).await;
            self.due = Some(Instant::now() + self.poll);
            if let Some(told) = self.sequence.admit(read) {
                return told;
            }
        }
    }

    /// Until the next read is due, or a message came since the last read began.
    async fn wait_for_news(&self) {
        let Some(due) = self.due else {
            return;
        };
        let Some(watching) = &self.watching else {
            tokio::time::sleep_until(due).await;
            return;
        };
        let message = watching.released();
        tokio::pin!(message);
        message.as_mut().enable();
        if watching.messages() != self.heard {
            return;
        }
        tokio::select! {
            _ = message => {}
            _ = tokio::time::sleep_until(due) => {}
        }
    }
}

// === impl Redlock ===

impl Redlock {
    /// An observer of the election of `resource` that reads the masters every `poll` (and at
    /// once on the election's messages, when this engine has wake-ups).
    pub fn observe(self: &Arc<Self>, resource: &str, poll: Duration) -> Result<Observer, Error> {
        validate_resource(resource)?;
        let name = lock_name(resource, LockKind::Election);
        let watching = self.wakeups.as_ref().map(|wakeups| wakeups.watch(&name));
        Ok(Observer {
            engine: Arc::clone(self),
            name,
            poll,
            watching,
            heard: 0,
            due: None,
            sequence: Sequence::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redlock::election::Leader;
    use crate::LeaseId;

    fn leader(id: LeaseId, term: u64, value: &str, validity_ms: u64) -> Leadership {
        Leadership::Leader(Leader {
            lease_id: id,
            owner: "a".into(),
            term,
            value: value.into(),
            validity: Duration::from_millis(validity_ms),
            masters: 3,
        })
    }

    /// Each change is told once (validity aside); a new value of the same term is a change.
    #[test]
    fn each_change_is_told_once() {
        let id = LeaseId::random();
        let mut sequence = Sequence::default();
        assert_eq!(sequence.admit(Leadership::Vacant), Some(Leadership::Vacant));
        assert_eq!(sequence.admit(Leadership::Vacant), None);
        assert!(sequence.admit(leader(id, 5, "x", 900)).is_some());
        assert_eq!(sequence.admit(leader(id, 5, "x", 300)), None);
        assert!(sequence.admit(leader(id, 5, "y", 300)).is_some());
        assert_eq!(
            sequence.admit(Leadership::Unknown),
            Some(Leadership::Unknown)
        );
        assert!(sequence.admit(leader(id, 5, "y", 300)).is_some());
    }

    /// A term below one already told is told as unknown, never as the leader; the same or a
    /// higher term is told.
    #[test]
    fn terms_never_go_back_for_one_observer() {
        let (old, new) = (LeaseId::random(), LeaseId::random());
        let mut sequence = Sequence::default();
        sequence.admit(leader(new, 9, "n", 900));
        assert_eq!(
            sequence.admit(leader(old, 7, "o", 900)),
            Some(Leadership::Unknown)
        );
        assert_eq!(sequence.admit(leader(old, 7, "o", 900)), None);
        assert_eq!(sequence.admit(Leadership::Vacant), Some(Leadership::Vacant));
        assert_eq!(
            sequence.admit(leader(old, 7, "o", 900)),
            Some(Leadership::Unknown)
        );
        assert!(sequence.admit(leader(new, 10, "n", 900)).is_some());
    }
}

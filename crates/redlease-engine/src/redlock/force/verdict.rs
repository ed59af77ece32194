//! What a force release's answers mean (pure): each master's answer to `force_release.lua`,
//! whether a quorum confirmed the release, which lease it revoked, and when the resource is
//! free for others at the latest.

use std::collections::HashMap;
use std::time::Duration;

use fred::types::Value;

use crate::lease_id::parse_value;
use crate::LeaseId;

/// What the value of a revoked lease is replaced with, followed by the lease id.
pub const TOMBSTONE_PREFIX: &str = "revoked:";

/// One master's answer to a force release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterAnswer {
    /// The lease (`value`) was revoked: its tombstone holds the lock `pttl` more, until the
    /// holder acknowledges.
    Revoked {
        /// The lease's value (`<lease id>|<owner>`).
        value: String,
        /// How long the tombstone lives.
        pttl: Option<Duration>,
    },
    /// The lease's tombstone (`value`) was there already: revoked before.
    AlreadyRevoked {
        /// The tombstone (`revoked:<lease id>`).
        value: String,
        /// How long it still lives.
        pttl: Option<Duration>,
    },
    /// The lock (`value`) was deleted at once.
    Deleted {
        /// What the lock held.
        value: String,
    },
    /// The master holds no lock for the resource.
    Empty,
    /// Another lease than the one named holds the lock: nothing was written.
    HeldByOther {
        /// What the lock holds.
        value: String,
    },
    /// The master did not answer (or answered something else than the script's reply).
    NoAnswer {
        /// Why, in words.
        error: String,
    },
}

/// What a force release amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A quorum of masters answered: no majority holds the lease any more.
    Confirmed,
    /// The lease named by the caller is on no master, and another one holds the lock: nothing
    /// was revoked.
    Mismatch,
    /// Too few masters answered before the deadline.
    NoQuorum,
}

// === impl MasterAnswer ===

impl MasterAnswer {
    /// The answer `{code, value, pttl}` of `force_release.lua`; `NoAnswer` for anything else.
    pub fn from_reply(reply: &Value) -> Self {
        let parsed = match reply {
            Value::Array(parts) if parts.len() == 3 => Self::from_parts(parts),
            _ => None,
        };
        parsed.unwrap_or_else(|| Self::NoAnswer {
            error: format!("unexpected reply {reply:?}"),
        })
    }

    fn from_parts(parts: &[Value]) -> Option<Self> {
        let code = parts[0].as_i64()?;
        let value = parts[1].as_string();
        let pttl = parts[2].as_i64().and_then(|ms| u64::try_from(ms).ok());
        let pttl = pttl.map(Duration::from_millis);
        Some(match (code, value) {
            (0, _) => Self::Empty,
            (1, Some(value)) => Self::Revoked { value, pttl },
            (2, Some(value)) => Self::Deleted { value },
            (3, Some(value)) => Self::AlreadyRevoked { value, pttl },
            (-1, Some(value)) => Self::HeldByOther { value },
            _ => return None,
        })
    }

    /// Whether the master answered with the script's reply.
    pub fn answered(&self) -> bool {
        !matches!(self, Self::NoAnswer { .. })
    }

    /// How the API and the command line name it.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Revoked { .. } => "revoked",
            Self::AlreadyRevoked { .. } => "already_revoked",
            Self::Deleted { .. } => "deleted",
            Self::Empty => "empty",
            Self::HeldByOther { .. } => "held_by_other",
            Self::NoAnswer { .. } => "no_answer",
        }
    }

    /// The value this call took off the master (a lease, or a foreign value deleted).
    pub fn removed(&self) -> Option<&str> {
        match self {
            Self::Revoked { value, .. } => Some(value),
            Self::Deleted { value } if !value.starts_with(TOMBSTONE_PREFIX) => Some(value),
            _ => None,
        }
    }

    /// The lease this answer is about: revoked, deleted or found revoked.
    fn lease_id(&self) -> Option<LeaseId> {
        match self {
            Self::Revoked { value, .. } | Self::Deleted { value } => {
                tombstoned_lease(value).or_else(|| parse_value(value).map(|(id, _)| id))
            }
            Self::AlreadyRevoked { value, .. } => tombstoned_lease(value),
            _ => None,
        }
    }

    /// The tombstone left on the master and how long it lives, when there is one.
    pub fn tombstone(&self) -> Option<(LeaseId, Option<Duration>)> {
        match self {
            Self::Revoked { pttl, .. } | Self::AlreadyRevoked { pttl, .. } => {
                Some((self.lease_id()?, *pttl))
            }
            _ => None,
        }
    }
}

/// The lease a tombstone names.
fn tombstoned_lease(value: &str) -> Option<LeaseId> {
    value.strip_prefix(TOMBSTONE_PREFIX)?.parse().ok()
}

/// The verdict on `answers`: `named` is the lease the caller asked to revoke, if any.
pub fn verdict(answers: &[MasterAnswer], quorum: usize, named: Option<LeaseId>) -> Verdict {
    let matched = answers.iter().any(|a| a.lease_id().is_some());
    let other = answers
        .iter()
        .any(|a| matches!(a, MasterAnswer::HeldByOther { .. }));
    if named.is_some() && !matched && other {
        return Verdict::Mismatch;
    }
    if answers.iter().filter(|a| a.answered()).count() >= quorum {
        Verdict::Confirmed
    } else {
        Verdict::NoQuorum
    }
}

/// The lease the answers revoked on the most masters: the one that later tries must name, so
/// that a retry never revokes a newer holder.
pub fn pinned_lease(answers: &[MasterAnswer]) -> Option<LeaseId> {
    let mut counts: HashMap<LeaseId, usize> = HashMap::new();
    for id in answers.iter().filter_map(MasterAnswer::lease_id) {
        *counts.entry(id).or_default() += 1;
    }
    // Ties (a split no quorum carries) go to the lowest id, the same in every run.
    let most = counts
        .into_iter()
        .max_by_key(|(id, masters)| (*masters, std::cmp::Reverse(id.to_string())));
    most.map(|(id, _)| id)
}

/// When the last tombstone of `answers` expires, `time_ms` being when they were read: the
/// latest the resource is free if the holder never acknowledges. `time_ms` when none is left.
pub fn free_at_ms(time_ms: u64, answers: &[MasterAnswer]) -> u64 {
    let longest = answers
        .iter()
        .filter_map(|a| a.tombstone()?.1)
        .max()
        .unwrap_or(Duration::ZERO);
    time_ms + longest.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revoked(id: LeaseId) -> MasterAnswer {
        MasterAnswer::Revoked {
            value: format!("{id}|cron"),
            pttl: Some(Duration::from_millis(900)),
        }
    }

    fn silent() -> MasterAnswer {
        MasterAnswer::NoAnswer {
            error: "timed out".into(),
        }
    }

    /// A quorum of answers confirms, whatever each master held; fewer do not.
    #[test]
    fn a_quorum_of_answers_confirms() {
        let id = LeaseId::random();
        let answers = [revoked(id), MasterAnswer::Empty, silent()];
        assert_eq!(verdict(&answers, 2, None), Verdict::Confirmed);
        let answers = [revoked(id), silent(), silent()];
        assert_eq!(verdict(&answers, 2, None), Verdict::NoQuorum);
    }

    /// Naming a lease that no master holds while another lease does is a mismatch; the named
    /// lease found anywhere is not.
    #[test]
    fn a_named_lease_held_nowhere_is_a_mismatch() {
        let (named, other) = (LeaseId::random(), LeaseId::random());
        let held = MasterAnswer::HeldByOther {
            value: format!("{other}|b"),
        };
        let answers = [held.clone(), held.clone(), MasterAnswer::Empty];
        assert_eq!(verdict(&answers, 2, Some(named)), Verdict::Mismatch);
        assert_eq!(verdict(&answers, 2, None), Verdict::Confirmed);
        let answers = [revoked(named), held, MasterAnswer::Empty];
        assert_eq!(verdict(&answers, 2, Some(named)), Verdict::Confirmed);
    }

    /// Retries name the lease revoked on the most masters, tombstones included.
    #[test]
    fn retries_are_pinned_to_the_lease_revoked_most() {
        let (holder, stray) = (LeaseId::random(), LeaseId::random());
        let tombstone = MasterAnswer::AlreadyRevoked {
            value: format!("{TOMBSTONE_PREFIX}{holder}"),
            pttl: None,
        };
        let answers = [revoked(stray), revoked(holder), tombstone, silent()];
        assert_eq!(pinned_lease(&answers), Some(holder));
        assert_eq!(pinned_lease(&[MasterAnswer::Empty, silent()]), None);
    }

    /// The resource is free at the latest when the longest tombstone expires.
    #[test]
    fn free_at_is_the_longest_tombstone() {
        let id = LeaseId::random();
        let answers = [revoked(id), MasterAnswer::Empty];
        assert_eq!(free_at_ms(1_000, &answers), 1_900);
        let deleted = MasterAnswer::Deleted {
            value: format!("{id}|cron"),
        };
        assert_eq!(free_at_ms(1_000, &[deleted]), 1_000);
    }

    /// The script's replies parse; anything else is no answer.
    #[test]
    fn replies_parse() {
        let reply = |code: i64, value: Option<&str>, pttl: i64| {
            let value = value.map_or(Value::Null, |v| Value::String(v.into()));
            Value::Array(vec![Value::Integer(code), value, Value::Integer(pttl)])
        };
        assert_eq!(
            MasterAnswer::from_reply(&reply(0, None, -1)),
            MasterAnswer::Empty
        );
        let revoked = MasterAnswer::from_reply(&reply(1, Some("v"), 500));
        let pttl = Some(Duration::from_millis(500));
        let expected = MasterAnswer::Revoked {
            value: "v".into(),
            pttl,
        };
        assert_eq!(revoked, expected);
        assert!(!MasterAnswer::from_reply(&reply(7, Some("v"), 1)).answered());
        assert!(!MasterAnswer::from_reply(&Value::Null).answered());
    }
}

//! The leader read: from what every master holds in an election's key, who leads — a value
//! (lease, owner, term and proclaimed value, whole) a quorum of masters carries — or that
//! nobody does (`Vacant`: a quorum answered and no lease can be on a quorum), or that the
//! masters cannot tell (`Unknown`). Pure: the reads are the inventory's.

use std::time::Duration;

use super::parse_election_value;
use crate::redlock::inventory::{Holding, MasterView};
use crate::LeaseId;

/// Who leads an election, as a quorum of masters says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// A quorum of masters carries this leader's value, whole.
    Leader(Leader),
    /// A quorum of masters answered, and no lease is, or can be, on a quorum of them.
    Vacant,
    /// Fewer than a quorum answered, or a lease may be on a quorum without a quorum agreeing
    /// on its term and value (a campaign writing its term, a proclamation half done), or a
    /// term lower than one already seen (an observer's).
    Unknown,
}

/// The leader a quorum of masters carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leader's lease.
    pub lease_id: LeaseId,
    /// Its owner.
    pub owner: String,
    /// Its term: the lease's fencing token, larger than every earlier leader's.
    pub term: u64,
    /// The value it proclaimed last (as a quorum holds it).
    pub value: String,
    /// How long a quorum of masters still keeps it: the quorum-th longest time-to-live among
    /// the masters carrying the value, less the time the read took.
    pub validity: Duration,
    /// Masters carrying the value.
    pub masters: usize,
}

// === impl Leadership ===

impl Leadership {
    /// The leader, if there is one.
    pub fn leader(&self) -> Option<&Leader> {
        match self {
            Self::Leader(leader) => Some(leader),
            Self::Vacant | Self::Unknown => None,
        }
    }

    /// `leader`, `vacant` or `unknown`.
    pub fn state(&self) -> &'static str {
        match self {
            Self::Leader(_) => "leader",
            Self::Vacant => "vacant",
            Self::Unknown => "unknown",
        }
    }

    /// The same state, leader, term and value as `other` (the validity aside): what an
    /// observer does not tell twice.
    pub fn same_as(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Leader(a), Self::Leader(b)) => {
                (a.lease_id, &a.owner, a.term, &a.value) == (b.lease_id, &b.owner, b.term, &b.value)
            }
            (a, b) => a.state() == b.state(),
        }
    }
}

/// Who leads, from every master's holding of the election's key (`elapsed`: how long the
/// reads took):
/// - `Leader`: one stored value, parsed as an election's, is on at least `quorum` masters
///   with validity left;
/// - `Vacant`: at least `quorum` masters answered and no lease is on so many of them that,
///   with the masters that did not answer, it could be on a quorum (a tombstone or a value
///   redlease did not write is no lease);
/// - `Unknown` otherwise: too few answers, or a lease on a quorum whose masters disagree on its
///   term and value (or have none yet), or a leader whose validity ran out during the read.
pub fn leadership(masters: &[MasterView], quorum: usize, elapsed: Duration) -> Leadership {
    let answered: Vec<Option<&Holding>> = masters
        .iter()
        .filter_map(|m| m.answer.as_ref().ok().map(Option::as_ref))
        .collect();
    let held: Vec<&Holding> = answered.iter().flatten().copied().collect();
    if let Some(found) = quorum_value(&held, quorum) {
        return match leader_of(&held, found, quorum, elapsed) {
            Some(leader) => Leadership::Leader(leader),
            None => Leadership::Unknown,
        };
    }
    if answered.len() < quorum {
        return Leadership::Unknown;
    }
    let unanswered = masters.len() - answered.len();
    let could_lead = |id: &LeaseId| {
        let carriers = held.iter().filter(|h| h.lease_id == Some(*id)).count();
        carriers + unanswered >= quorum
    };
    match held
        .iter()
        .filter_map(|h| h.lease_id.as_ref())
        .any(could_lead)
    {
        true => Leadership::Unknown,
        false => Leadership::Vacant,
    }
}

/// An election's value (one with a term) carried whole by at least `quorum` masters, if one
/// is.
fn quorum_value<'a>(held: &[&'a Holding], quorum: usize) -> Option<&'a str> {
    let carried = |value: &str| held.iter().filter(|h| h.value == value).count();
    let elected = |h: &&&Holding| parse_election_value(&h.value).is_some();
    let found = held
        .iter()
        .filter(elected)
        .find(|h| carried(&h.value) >= quorum)?;
    Some(found.value.as_str())
}

/// The leader whose value `stored` is, kept by the quorum-th longest TTL of its carriers;
/// `None` when no validity is left.
fn leader_of(held: &[&Holding], stored: &str, quorum: usize, elapsed: Duration) -> Option<Leader> {
    let proclaimed = parse_election_value(stored)?;
    let mut pttls: Vec<Duration> = held
        .iter()
        .filter(|h| h.value == stored)
        .map(|h| h.pttl.unwrap_or(Duration::MAX))
        .collect();
    pttls.sort_unstable_by(|a, b| b.cmp(a));
    let validity = pttls.get(quorum.checked_sub(1)?)?.saturating_sub(elapsed);
    (!validity.is_zero()).then(|| Leader {
        lease_id: proclaimed.lease_id,
        owner: proclaimed.owner.to_string(),
        term: proclaimed.term,
        value: proclaimed.value.to_string(),
        validity,
        masters: pttls.len(),
    })
}

#[cfg(test)]
mod tests;

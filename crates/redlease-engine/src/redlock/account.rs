//! What each master did in a call that fell short, in words: the engine's answer to "why no
//! quorum?" (connection refused, timed out, quarantined until when, held by whom, TLS or
//! credentials refused), so a one-shot command can print it rather than leave it to a log
//! line at a level nobody reads.

use std::time::Duration;

use tokio::time::Instant;

use super::outcome::{NodeVote, Refusal};
use super::Redlock;
use crate::fleet::{CallError, Node, NodeStatus};
use crate::keys::{lock_name, parse_lock_name, LockKind, LockName};
use crate::scripts::ExtendReply;

/// How long `Redlock::account` waits for a master whose vote was not sent to finish its
/// connection attempt: a refusal is known within milliseconds, a silent master stays silent.
const STATUS_WAIT: Duration = Duration::from_millis(100);

/// What one master did in a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterAccount {
    /// The master's index in the configured list.
    pub node: usize,
    /// Its URL, credentials masked.
    pub url: String,
    /// A stable word for scripts: `granted`, `held`, `extended`, `lease_lost`, `revoked`,
    /// `down`, `timed_out`, `connection_failed`, `error_reply`, `lost_memory`, `no_answer`, and
    /// `up` where only the master's state is known.
    pub outcome: &'static str,
    /// What happened, for a person.
    pub why: String,
}

// === impl Redlock ===

impl Redlock {
    /// What each master did in the call `refusal` describes; a master whose vote was not
    /// sent (down) is described by its status, and a master that refused because another
    /// lease holds `resource` names that lease's owner when a read of the lock can tell.
    pub async fn account(&self, resource: &str, refusal: &Refusal) -> Vec<MasterAccount> {
        let holders = if refusal.votes.iter().any(is_held) {
            self.holders_of(resource).await
        } else {
            Vec::new()
        };
        let statuses = self.fleet.statuses_by(Instant::now() + STATUS_WAIT).await;
        let nodes = self.fleet.nodes();
        let votes = nodes.iter().zip(&refusal.votes).zip(statuses);
        votes
            .map(|((node, vote), status)| {
                let holder = holders.get(node.index()).cloned().flatten();
                account_of(node, vote, status, holder)
            })
            .collect()
    }

    /// What each master is now, for calls whose outcome carries no vote per master (`lock run`'s
    /// acquisition, a release without quorum): `down` and why, or `up` (whatever it answered,
    /// no quorum formed).
    pub async fn status_accounts(&self) -> Vec<MasterAccount> {
        let statuses = self.fleet.statuses_by(Instant::now() + STATUS_WAIT).await;
        let accounts = self.fleet.nodes().iter().zip(statuses);
        accounts
            .map(|(node, status)| match status {
                // Its own answer is not known here: it may have answered, too late or apart
                // from a quorum.
                NodeStatus::Up => account(node, "up", "up (no quorum formed)".into()),
                status => account(node, "down", status.to_string()),
            })
            .collect()
    }

    /// The owner of the lock of `resource` on each master (`None` where unknown); for a lease
    /// of several semaphore slots, the first of its slots that holds anything there.
    async fn holders_of(&self, resource: &str) -> Vec<Option<String>> {
        let names: Vec<String> = match parse_lock_name(resource) {
            Some(LockName {
                resource: semaphore,
                kind: LockKind::Slots(slots),
            }) => slots
                .iter()
                .map(|slot| lock_name(semaphore, LockKind::Slot(slot)))
                .collect(),
            _ => vec![resource.to_string()],
        };
        let views = self.read_locks(&names).await;
        let owner = |answer: &Result<_, _>| match answer {
            Ok(Some(holding)) => Some(owner_words(holding)),
            _ => None,
        };
        (0..self.fleet.len())
            .map(|i| {
                let held = views.iter().filter_map(|view| view.masters.get(i));
                held.map(|m| owner(&m.answer))
                    .find(Option::is_some)
                    .flatten()
            })
            .collect()
    }
}

fn owner_words(holding: &super::Holding) -> String {
    match (&holding.owner, holding.lease_id) {
        (Some(owner), Some(id)) => format!("{owner} (lease {id})"),
        _ => format!("a value redlease did not write ({:?})", holding.value),
    }
}

fn is_held(vote: &NodeVote) -> bool {
    matches!(
        vote,
        NodeVote::Refused { .. } | NodeVote::Extend(ExtendReply::HeldByOther)
    )
}

fn account(node: &Node, outcome: &'static str, why: String) -> MasterAccount {
    MasterAccount {
        node: node.index(),
        url: node.url().to_string(),
        outcome,
        why,
    }
}

/// `status`: the master's, read when its vote was not sent.
fn account_of(
    node: &Node,
    vote: &NodeVote,
    status: NodeStatus,
    holder: Option<String>,
) -> MasterAccount {
    let held = |left: Option<Duration>| {
        let by = holder.map_or_else(|| "another lease".to_string(), |h| h.to_string());
        let left = left.map_or_else(String::new, |l| format!(", {} ms left", l.as_millis()));
        format!("held by {by}{left}")
    };
    let (outcome, why) = match vote {
        NodeVote::Granted { .. } => ("granted", "granted".to_string()),
        NodeVote::Refused { holder_remaining } => ("held", held(*holder_remaining)),
        NodeVote::Extend(ExtendReply::Extended) => ("extended", "extended".into()),
        NodeVote::Extend(ExtendReply::Absent) => ("lease_lost", "the lease is not there".into()),
        NodeVote::Extend(ExtendReply::HeldByOther) => ("held", held(None)),
        NodeVote::Extend(ExtendReply::Revoked) => ("revoked", "revoked by a force release".into()),
        NodeVote::Shadow(true) => ("granted", "shadow set".into()),
        NodeVote::Shadow(false) => ("held", held(None)),
        NodeVote::Failed(CallError::Down) if status == NodeStatus::Up => {
            ("down", "not yet ready when the call was sent".into())
        }
        NodeVote::Failed(CallError::Down) => ("down", status.to_string()),
        NodeVote::Failed(CallError::Timeout) => ("timed_out", "timed out".into()),
        NodeVote::Failed(error @ CallError::Connection(_)) => {
            ("connection_failed", error.to_string())
        }
        NodeVote::Failed(error @ CallError::Reply(_)) => ("error_reply", error.to_string()),
        NodeVote::Failed(error @ CallError::LostMemory) => ("lost_memory", error.to_string()),
        NodeVote::NoAnswer => (
            "no_answer",
            "no answer before the outcome (timed out)".into(),
        ),
    };
    account(node, outcome, why)
}

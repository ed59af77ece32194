//! Leader election: a campaign is the exclusive acquisition of the resource's election lock
//! (`<prefix>elect:<resource>`, lock name `<resource>\u{1f}e`), whose fencing token is the
//! leader's **term**. The term is known only once a quorum granted (the largest of the granted
//! `INCR`s, laggards raised), so the campaign then writes the value
//! `<lease id>|<owner>\u{1f}<term>\u{1f}<value>` over the key on every master with
//! `proclaim.lua` (compare-the-lease, `SET … KEEPTTL`) and stands only once a quorum took it:
//! any process's leader read ([`Redlock::leader`]) then finds the term and value on a quorum.
//! A proclamation ([`Redlock::proclaim`]) is the same script with a new value, same term.
//! Values keep starting with `<lease id>|`, so renewal, shadows, release and force release
//! are those of any lease.
//!
//! A fair campaign ([`Redlock::campaign_fair_with_wait`]) waits in the election's queue of
//! fair candidates across processes and takes the lock by `lock_acquire.lua` behind the head
//! check of `fair_head.lua`, then writes its
//! term as any campaign.
//!
//! The read ([`leadership`]) and the observer ([`Observer`]) are in their own files.

mod leadership;
mod observe;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::calls::vote_on;
use super::fair::Queue;
use super::fanout::fan_out;
use super::wait::Line;
use super::{collect_votes, AcquireOutcome, Lease, NodeVote, Redlock, Refusal, Shortfall};
use crate::keys::{
    lock_name, parse_lock_name, validate_owner, validate_resource, validate_value, LockKind,
};
use crate::lease_id::parse_value;
use crate::metrics::METRICS;
use crate::redlock::quorum::Verdict;
use crate::scripts::{ExtendReply, ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};
pub use leadership::{leadership, Leader, Leadership};
pub use observe::{Observer, Sequence, DEFAULT_OBSERVE_POLL};

/// Separates the owner, the term and the value in an election's stored value: a control
/// character, which none of the three may hold.
const FIELD_SEPARATOR: char = '\u{1f}';

/// What an election's key holds after `<lease id>|`: `<owner>\u{1f}<term>\u{1f}<value>`. A
/// shadow of the lease writes this too (the sidecar passes it as the shadow's owner), so a
/// master that lost the key gets the term and value back with it.
pub fn election_tail(owner: &str, term: u64, value: &str) -> String {
    let mut tail = String::with_capacity(owner.len() + value.len() + 22);
    tail.push_str(owner);
    tail.push(FIELD_SEPARATOR);
    tail.push_str(itoa::Buffer::new().format(term));
    tail.push(FIELD_SEPARATOR);
    tail.push_str(value);
    tail
}

/// An election's stored value, split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proclaimed<'a> {
    /// The leader's lease.
    pub lease_id: LeaseId,
    /// Its owner.
    pub owner: &'a str,
    /// Its term (the lease's fencing token).
    pub term: u64,
    /// The value it proclaimed.
    pub value: &'a str,
}

/// The parts of an election's stored value; `None` for a value without a term (a campaign's
/// key before its term was written, a value redlease did not write, a force release's
/// tombstone).
pub fn parse_election_value(stored: &str) -> Option<Proclaimed<'_>> {
    let (lease_id, tail) = parse_value(stored)?;
    let mut fields = tail.splitn(3, FIELD_SEPARATOR);
    let (owner, term, value) = (fields.next()?, fields.next()?, fields.next()?);
    let digits_only = !term.is_empty() && term.bytes().all(|b| b.is_ascii_digit());
    let term = term.parse().ok().filter(|_| digits_only)?;
    Some(Proclaimed {
        lease_id,
        owner,
        term,
        value,
    })
}

/// What a proclamation (or a campaign's writing of its term) came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProclaimOutcome {
    /// A quorum of masters holds the new value.
    Proclaimed,
    /// A majority said the lease is not there (expired, another lease, a force release's
    /// tombstone): the lease is lost.
    NotOurs(Refusal),
    /// Too few masters answered; some may hold the new value, the others the old one.
    NoQuorum(Refusal),
}

// === impl Redlock ===

impl Redlock {
    /// One campaign for the leadership of `resource`: the election lock taken as
    /// [`Redlock::acquire`] takes a lock, then the term (the lease's fencing token) and
    /// `value` written over it on every master. `Acquired` only once a quorum holds them
    /// and validity is left; otherwise the lease is released and the answer is `NoQuorum`.
    /// The lease's resource is the election's lock name: renew, release (resign) and inspect
    /// it as any lease.
    #[tracing::instrument(level = "debug", skip(self, value), fields(ttl_ms = ttl.as_millis() as u64))]
    pub async fn campaign(
        &self,
        resource: &str,
        owner: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<AcquireOutcome, Error> {
        validate_resource(resource)?;
        validate_owner(owner)?;
        validate_value(value)?;
        self.check_ttl(ttl)?;
        let name = lock_name(resource, LockKind::Election);
        let (outcome, start) = self.acquire_lock(&name, owner, ttl).await;
        let outcome = match outcome {
            AcquireOutcome::Acquired(lease) => self.elect(lease, value, start).await?,
            refused => refused,
        };
        METRICS.record_acquisition(outcome.label(), start.elapsed());
        Ok(outcome)
    }

    /// Writes the term and `value` of the lease a campaign begun at `start` was granted:
    /// `Acquired` once a quorum took them with validity left; otherwise the lease is released
    /// and the campaign `NoQuorum`.
    async fn elect(
        &self,
        mut lease: Lease,
        value: &str,
        start: Instant,
    ) -> Result<AcquireOutcome, Error> {
        let timeout = self.node_timeout(lease.ttl, start);
        let written = self.write_value(&lease, value, timeout).await;
        let now = Instant::now();
        let opts = &self.options;
        let refusal = match written {
            ProclaimOutcome::Proclaimed if lease.remaining_validity(now) > opts.min_validity => {
                lease.validity = lease.remaining_validity(now);
                return Ok(AcquireOutcome::Acquired(lease));
            }
            ProclaimOutcome::Proclaimed => Refusal {
                cause: Shortfall::ValidityExpired,
                votes: Vec::new(),
                valid_until_cap: None,
            },
            ProclaimOutcome::NotOurs(refusal) | ProclaimOutcome::NoQuorum(refusal) => refusal,
        };
        tracing::debug!(cause = ?refusal.cause, "campaign's term not written on a quorum");
        self.release(&lease.resource, lease.id).await?;
        Ok(AcquireOutcome::NoQuorum(refusal))
    }

    /// Campaigns until elected or `wait` has passed, as [`Redlock::acquire_with_wait`] waits
    /// for a lock: the candidates of this process queue first come first served, and the head
    /// tries again when the leader resigns (or a proclamation is announced) or its lease would
    /// have expired.
    pub async fn campaign_with_wait(
        &self,
        resource: &str,
        owner: &str,
        value: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        validate_resource(resource)?;
        let name = lock_name(resource, LockKind::Election);
        self.wait_for_grant(&name, wait, (Line::ThisProcess, None), || {
            self.campaign(resource, owner, value, ttl)
        })
        .await
    }

    /// Campaigns in the order fair candidates of every process asked, waiting at most `wait`
    /// ([`super::fair`]): in the election's own queue, each attempt only while this candidate
    /// is the head of it, the head taking the election lock when it is free
    /// (`lock_acquire.lua` behind `fair_head.lua`, on the election's key), then writing its
    /// term and value as
    /// [`Redlock::campaign`] does. Contended with [`Shortfall::Dequeued`] when a majority
    /// purged the candidate.
    pub async fn campaign_fair_with_wait(
        &self,
        resource: &str,
        owner: &str,
        value: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        validate_resource(resource)?;
        validate_owner(owner)?;
        validate_value(value)?;
        self.check_ttl(ttl)?;
        let name = lock_name(resource, LockKind::Election);
        let keyspace = self.fleet.keyspace();
        let (queue, lock) = (Queue::of(keyspace, &name), keyspace.lock(&name));
        let (keys, lock, name) = (&queue, lock.as_str(), name.as_str());
        self.wait_fairly(keys, (ttl, wait, None), move |waiter| async move {
            let start = Instant::now();
            match self
                .fair_attempt(keys, lock, waiter, name, owner, ttl)
                .await?
            {
                AcquireOutcome::Acquired(lease) => self.elect(lease, value, start).await,
                refused => Ok(refused),
            }
        })
        .await
    }

    /// The leader `lease` (a campaign's) proclaims `value`: written over its key where the key
    /// still holds the lease, keeping its TTL and its term; announced on the election's
    /// channel. Each master gets the timeout of a lock write of the longest TTL, as a release
    /// does: a proclamation eats no validity.
    pub async fn proclaim(&self, lease: &Lease, value: &str) -> Result<ProclaimOutcome, Error> {
        validate_value(value)?;
        let is_election =
            parse_lock_name(&lease.resource).is_some_and(|name| name.kind == LockKind::Election);
        if !is_election {
            return Err(Error::NotACampaign);
        }
        let timeout = self.node_timeout(self.options.max_ttl, Instant::now());
        Ok(self.write_value(lease, value, timeout).await)
    }

    /// Who leads `resource` now, as a quorum of masters says (see [`leadership`]): read from
    /// every master whatever its state, each bounded by the inventory's timeout.
    pub async fn leader(&self, resource: &str) -> Result<Leadership, Error> {
        validate_resource(resource)?;
        Ok(self
            .read_leadership(&lock_name(resource, LockKind::Election))
            .await)
    }

    /// The leadership the masters show for the election lock `name` (checked by the caller).
    pub(crate) async fn read_leadership(&self, name: &str) -> Leadership {
        let start = Instant::now();
        let view = match self.inspect(name).await {
            Ok(view) => view,
            // The name was checked: `inspect` answers one view per name it is given.
            Err(_) => return Leadership::Unknown,
        };
        // From before the wait for the masters' statuses: the validity is never overstated.
        leadership(&view.masters, view.quorum, start.elapsed())
    }

    /// Writes `<lease>|<owner>\u{1f}<term>\u{1f}<value>` over the lease's key on every master
    /// that takes lock writes, each bounded by `timeout`, and judges the answers.
    async fn write_value(&self, lease: &Lease, value: &str, timeout: Duration) -> ProclaimOutcome {
        let keyspace = self.fleet.keyspace();
        let (key, channel) = (
            keyspace.lock(&lease.resource),
            keyspace.released_channel(&lease.resource),
        );
        let tail = election_tail(&lease.owner, lease.fencing_token, value);
        let (id, stored) = (lease.id.hex(), lease.id.value_for(&tail));
        let args: [&[u8]; 3] = [
            id.as_str().as_bytes(),
            stored.as_bytes(),
            channel.as_bytes(),
        ];
        let call = Arc::new(ScriptCall::new(&SCRIPTS.proclaim, &[key.as_bytes()], &args));
        let until = Instant::now() + timeout;
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            self.fleet.nodes(),
            until,
            |node, deadline, reply| {
                let to_vote = |code: i64| NodeVote::Extend(ExtendReply::from_script(code));
                vote_on(node, call.clone(), deadline, to_vote, reply)
            },
        );
        let (tally, votes) = collect_votes(&mut replies, self.fleet.len(), Some).await;
        let refusal = |cause| Refusal {
            cause,
            votes: votes.clone(),
            valid_until_cap: None,
        };
        match tally.verdict() {
            Verdict::Yes => ProclaimOutcome::Proclaimed,
            Verdict::No => ProclaimOutcome::NotOurs(refusal(Shortfall::NotOurs)),
            Verdict::Pending | Verdict::Split => {
                ProclaimOutcome::NoQuorum(refusal(Shortfall::TooFewAnswers))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored value carries owner, term and value apart, whatever the value holds; a value
    /// without a term is none.
    #[test]
    fn stored_values_split_into_owner_term_and_value() {
        let id = LeaseId::random();
        let stored = id.value_for(&election_tail("svc|a", 42, "10.0.0.7:80|x"));
        assert_eq!(
            parse_election_value(&stored),
            Some(Proclaimed {
                lease_id: id,
                owner: "svc|a",
                term: 42,
                value: "10.0.0.7:80|x",
            })
        );
        let empty = id.value_for(&election_tail("a", 7, ""));
        assert_eq!(parse_election_value(&empty).map(|p| p.value), Some(""));
        assert_eq!(parse_election_value(&id.value_for("a")), None);
        assert_eq!(parse_election_value(&id.value_for("a\u{1f}x\u{1f}v")), None);
        assert_eq!(
            parse_election_value(&id.value_for("a\u{1f}+7\u{1f}v")),
            None
        );
        assert_eq!(parse_election_value(&format!("revoked:{id}")), None);
    }
}

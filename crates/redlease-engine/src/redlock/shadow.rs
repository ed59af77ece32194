//! Shadow reservation: the degraded-mode fallback when a renewal could not reach a quorum
//! because masters were slow or unreachable. `shadow.lua` (re)sets the lock key itself to our
//! lease for the shadow TTL where it is ours or free; acquisitions respect it like any lock,
//! so a quorum of shadows keeps the resource ours for the shadow TTL while renewals cannot get
//! through, and the next renewal that does sets the lock's own TTL back (recovered).

use std::time::Duration;

use tokio::time::Instant;

use super::calls::{shadow_call, vote_on};
use super::fanout::fan_out;
use super::{collect_votes, ExtendOutcome, NodeVote, Redlock};
use crate::keys::validate_lock_name;
use crate::{Error, LeaseId};

// === impl Redlock ===

impl Redlock {
    /// Sets our shadow for `shadow_ttl` on every master where the lock is ours or free, each
    /// master bounded by `timeout`. `Extended` when a quorum took it (validity from the
    /// shadow); `Lost` when a majority said another lease holds the resource or the lease was
    /// force-released.
    #[tracing::instrument(level = "debug", skip(self, owner), fields(lease_id = %id, shadow_ttl_ms = shadow_ttl.as_millis() as u64))]
    pub async fn reserve_shadow(
        &self,
        resource: &str,
        id: LeaseId,
        owner: &str,
        shadow_ttl: Duration,
        timeout: Duration,
    ) -> Result<ExtendOutcome, Error> {
        validate_lock_name(resource)?;
        let quarantine = self.fleet.options().quarantine;
        if shadow_ttl.is_zero() || shadow_ttl > quarantine {
            let bound = quarantine.as_millis();
            return Err(Error::InvalidTtl(format!(
                "shadow ttl must be between 1 and {bound} ms"
            )));
        }
        let keyspace = self.fleet.keyspace();
        let locks = keyspace.locks(resource);
        let call = shadow_call(&locks, &keyspace.revoked_prefix(), id, owner, shadow_ttl);
        let start = Instant::now();
        let nodes = self.fleet.nodes();
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            nodes,
            start + timeout,
            |node, deadline, reply| {
                let to_vote = |set: i64| NodeVote::Shadow(set == 1);
                vote_on(node, call.clone(), deadline, to_vote, reply)
            },
        );
        let (tally, votes) = collect_votes(&mut replies, self.fleet.len(), Some).await;
        Ok(self.judge_extension(tally, votes, start, shadow_ttl))
    }
}

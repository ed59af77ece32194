//! The operator's way back for masters whose quarantine is over but that find fewer than a
//! quorum of members to raise their fence from (a majority of the fleet lost its memory, or
//! two of three masters within one quarantine): `redlease fleet rejoin`.
//!
//! Exclusivity is safe again by then — every lease alive when those masters lost their memory
//! has expired, since the quarantine outlasts every TTL — but no quorum remembers the last
//! fencing token. So their counters are raised to the largest counter any master still holds
//! and to a floor the operator names (`fence_at`: at least the largest token any protected
//! resource accepted), and they vote again.

use super::exclusion::Exclusion;
use super::mark::{Birth, FleetMark};
use super::membership::PREPARE_STEP_TIMEOUT;
use super::node::admin::Marked;
use super::{Fleet, Node};

// === impl Fleet ===

impl Fleet {
    /// Raises the fence of every master left out as [`Exclusion::Rejoining`] to the largest
    /// counter among the masters that answer, and to `fence_at`, and marks it a member; it
    /// then votes after its next preparation. Per such master: the counter it now holds, or
    /// why not. Masters still in their quarantine are never touched.
    pub async fn force_rejoin(&self, fence_at: u64) -> Vec<(usize, Result<u64, String>)> {
        let Some(birth) = self.birth() else {
            return Vec::new();
        };
        let fence = self.keyspace().fence();
        let reads = self
            .nodes()
            .iter()
            .map(|n| n.get_counter(&fence, PREPARE_STEP_TIMEOUT));
        let counters = futures_util::future::join_all(reads).await;
        let highest = counters.into_iter().flatten().max().unwrap_or(0);
        let stuck = self
            .nodes()
            .iter()
            .filter(|n| matches!(n.exclusion(), Some(Exclusion::Rejoining { .. })));
        let mut forced = Vec::new();
        for node in stuck {
            let target = highest.max(fence_at);
            let outcome = force_one(self, node, &birth, target).await;
            forced.push((node.index(), outcome));
        }
        forced
    }
}

/// Marks `node` a member of `birth`'s fleet with its counter at least `target`, if it is still
/// as read and no quarantine is recorded there.
async fn force_one(fleet: &Fleet, node: &Node, birth: &Birth, target: u64) -> Result<u64, String> {
    let keyspace = fleet.keyspace();
    let Some(read) = node.inspect(keyspace, PREPARE_STEP_TIMEOUT).await else {
        return Err("it did not answer".into());
    };
    let marker = FleetMark::member(birth, &read.identity.run_id).to_string();
    let target = target.max(node.fence_seen()).max(1);
    let expected = (read.marker.as_deref(), read.fence);
    match node
        .mark(keyspace, expected, target, &marker, PREPARE_STEP_TIMEOUT)
        .await
    {
        Some(Marked::Done(counter)) => {
            tracing::warn!(
                node = node.index(),
                url = node.url(),
                counter,
                "master forced back into the fleet by the operator"
            );
            node.raise_fence_seen(counter);
            node.request_prepare();
            Ok(counter)
        }
        Some(Marked::Recorded) => Err("a quarantine is recorded there: wait for its end".into()),
        Some(Marked::Changed) => Err("it changed while it was read: try again".into()),
        None => Err("it did not answer".into()),
    }
}

//! Preparing a master before it takes lock writes, on every (re)connection, NOSCRIPT or lost
//! fence counter: load the scripts, identify the server, apply restart quarantine, sync its
//! fence counter from a quorum of the others (at least 1), mark it as a fleet member.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::quarantine::{assess, carry_over, quarantine_marker, Standing};
use super::{quorum_of, Admission, Deadline, Fleet, Node};
use crate::metrics::{self, METRICS};
use crate::scripts::{ScriptCall, SCRIPTS};

/// Bound on each step of a preparation (script load, INFO, fence reads and raise).
pub const PREPARE_STEP_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the preparations the masters ask for, one at a time per master. Ends with the fleet.
pub(super) async fn supervise(fleet: Weak<Fleet>, mut requests: mpsc::UnboundedReceiver<usize>) {
    while let Some(index) = requests.recv().await {
        let Some(node) = fleet.upgrade().map(|f| Arc::clone(&f.nodes()[index])) else {
            return;
        };
        if node.begin_prepare() {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                prepare(&fleet, &node).await;
                node.end_prepare();
            });
        }
    }
}

/// Leaves `node` ready, quarantined (then ready), or not ready when a step failed (the
/// fleet's probe asks again).
async fn prepare(fleet: &Weak<Fleet>, node: &Node) {
    node.set_ready(false);
    let Some((standing, run_id)) = identify(fleet, node).await else {
        return;
    };
    match standing {
        Standing::Quarantined { until } => {
            if !begin_quarantine(fleet, node, &run_id, until).await {
                return;
            }
            let left_ms = until.saturating_duration_since(Instant::now()).as_millis() as u64;
            tracing::warn!(
                node = node.index(),
                url = node.url(),
                quarantine_ms = left_ms,
                "master lost its memory: quarantined"
            );
            METRICS
                .quarantines
                .add(1, &metrics::label("node", node.index() as i64));
            tokio::time::sleep_until(until).await;
        }
        Standing::Rejoining => {
            tracing::warn!(
                node = node.index(),
                url = node.url(),
                "master lost its memory longer than a quarantine ago: syncing its fence"
            );
        }
        Standing::Member => {}
    }
    let Some(fleet) = fleet.upgrade() else {
        return;
    };
    let fence = fleet.keyspace().fence();
    let fenced = match standing {
        Standing::Member => raise_own_fence(node, &fence, 1).await,
        _ => sync_fence(&fleet, node, &fence).await,
    };
    if !fenced {
        tracing::warn!(node = node.index(), "fence sync failed; master stays out");
        return;
    }
    let marker = fleet.keyspace().marker();
    if !node
        .set_marker(&marker, &run_id, PREPARE_STEP_TIMEOUT)
        .await
    {
        return;
    }
    node.set_marked_here();
    node.set_quarantine(None);
    node.set_ready(true);
    tracing::info!(
        node = node.index(),
        url = node.url(),
        "master takes lock writes"
    );
}

/// Makes the quarantine of `node` (server `run_id`, until `until`) every process's: records it
/// (`<prefix>quarantined`, expiring at its end), then marks the master `quarantined:<run_id>`,
/// in that order, so a process that finds the marker also finds the record while it lasts.
/// The fence counter is left as it is until the end (see `quarantine`). `false` when a step
/// failed (the master stays out, and the fleet's probe asks again).
async fn begin_quarantine(fleet: &Weak<Fleet>, node: &Node, run_id: &str, until: Instant) -> bool {
    let Some(fleet) = fleet.upgrade() else {
        return false;
    };
    let keyspace = fleet.keyspace();
    let left = until.saturating_duration_since(Instant::now());
    let quarantined = keyspace.quarantined();
    let marker = quarantine_marker(run_id);
    node.set_quarantined(&quarantined, run_id, left, PREPARE_STEP_TIMEOUT)
        .await
        && node
            .set_marker(&keyspace.marker(), &marker, PREPARE_STEP_TIMEOUT)
            .await
}

/// Loads the scripts and decides the master's standing; with it, the server's `run_id`.
/// `None` when a step failed, when nobody can tell whether the fleet has lock history (too
/// few masters answered), or when this server is already counted as another master.
async fn identify(fleet: &Weak<Fleet>, node: &Node) -> Option<(Standing, String)> {
    let fleet = fleet.upgrade()?;
    if !node.load_scripts(PREPARE_STEP_TIMEOUT).await {
        return None;
    }
    // A master this process marked is part of a marked fleet, fresh as the fleet was then.
    let fleet_marked = node.marked_here() || fleet.was_marked(node).await?;
    let (marker, quarantined) = (fleet.keyspace().marker(), fleet.keyspace().quarantined());
    let (identity, member) = node.identify(&marker, PREPARE_STEP_TIMEOUT).await?;
    let served_elsewhere =
        node.quarantine_left(&quarantined, &identity.run_id, PREPARE_STEP_TIMEOUT);
    let served_elsewhere = served_elsewhere.await?;
    let previous = fleet.claim_run_id(node, &identity.run_id)?;
    let now = Instant::now();
    let standing = match node.quarantine() {
        // A retry after a failed step: the quarantine already decided still stands.
        Some(until) if previous.as_deref() == Some(&identity.run_id) => {
            if until > now {
                Standing::Quarantined { until }
            } else {
                Standing::Rejoining
            }
        }
        _ => {
            let period = fleet.options().quarantine;
            let previous = previous.as_deref();
            let member = member.as_deref();
            let assessed = assess(previous, &identity, member, fleet_marked, period, now);
            carry_over(assessed, member, &identity.run_id, served_elsewhere, now)
        }
    };
    if let Standing::Quarantined { until } = standing {
        node.set_quarantine(Some(until));
    } else if standing == Standing::Rejoining {
        node.set_quarantine(Some(now));
    }
    Some((standing, identity.run_id))
}

/// Raises the master's fence counter to the largest counter among the others (at least 1, so
/// an acquisition's INCR answering 1 shows a lost memory, see `scripts::fence_was_lost`).
/// Needs answers from a quorum of the fleet among the others (all others when N ≤ 3), so the
/// read meets every majority that could have issued the latest token.
async fn sync_fence(fleet: &Fleet, node: &Node, fence: &str) -> bool {
    let others: Vec<&Arc<Node>> = fleet
        .nodes()
        .iter()
        .filter(|n| n.index() != node.index())
        .collect();
    let needed = quorum_of(fleet.len()).min(others.len());
    let reads = others
        .iter()
        .map(|n| n.get_counter(fence, PREPARE_STEP_TIMEOUT));
    let counters: Vec<u64> = futures_util::future::join_all(reads)
        .await
        .into_iter()
        .flatten()
        .collect();
    if counters.len() < needed {
        return false;
    }
    let target = counters.into_iter().max().unwrap_or(0).max(1);
    raise_own_fence(node, fence, target).await
}

/// Max-assigns `target` to the master's fence counter (`fence`, its key): `true` once it
/// holds at least that, which its acquisitions' INCRs must then exceed.
async fn raise_own_fence(node: &Node, fence: &str, target: u64) -> bool {
    let target_text = itoa::Buffer::new().format(target).to_string();
    let call = ScriptCall::new(
        &SCRIPTS.raise_fence,
        &[fence.as_bytes()],
        &[target_text.as_bytes()],
    );
    let raised = node
        .eval::<i64>(
            &call,
            &Deadline::After(PREPARE_STEP_TIMEOUT),
            Admission::Always,
        )
        .await;
    match raised {
        Ok(counter) if counter as u64 >= target => {
            node.reset_fence_seen(counter as u64);
            true
        }
        _ => false,
    }
}

//! Preparing a master before it takes lock writes, on every (re)connection, NOSCRIPT or lost
//! fence counter: load the scripts, read its identity, eviction settings, marker, counter and
//! quarantine record at one instant, refuse it when it belongs elsewhere or may evict keys,
//! decide its standing ([`assess`]), serve a quarantine out (recorded for every process), sync
//! its fence counter from a quorum of current members, and end with `mark.lua`, which writes
//! the marker only if the master is still as it was read.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::exclusion::Exclusion;
use super::mark::{Birth, FleetMark};
use super::node::admin::{Inspection, Marked};
use super::quarantine::{assess, Evidence, Standing};
use super::{quorum_of, Fleet, Node};
use crate::metrics::{self, METRICS};

/// Bound on each step of a preparation (script load, inspection, fence reads and marking).
pub(crate) const PREPARE_STEP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a rejoining master waits for a quorum of the others to be members.
const MEMBERS_WAIT: Duration = Duration::from_secs(2);
/// How often it looks.
const MEMBERS_LOOK: Duration = Duration::from_millis(20);

/// Runs the preparations the masters ask for, one at a time per master; a request that comes
/// while one runs makes it run again rather than setting the master ready. Ends with the fleet.
pub(super) async fn supervise(fleet: Weak<Fleet>, mut requests: mpsc::UnboundedReceiver<usize>) {
    while let Some(index) = requests.recv().await {
        let Some(node) = fleet.upgrade().map(|f| Arc::clone(&f.nodes()[index])) else {
            return;
        };
        if node.begin_prepare() {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                loop {
                    let asked = node.prepare_requests();
                    if prepare(&fleet, &node).await == Again::Yes {
                        continue;
                    }
                    node.end_prepare();
                    // A request that came while it ran found the slot taken: run again for it.
                    if node.prepare_requests() == asked || !node.begin_prepare() {
                        return;
                    }
                }
            });
        }
    }
}

/// Whether a preparation must run again at once.
#[derive(PartialEq, Eq)]
enum Again {
    Yes,
    No,
}

/// Leaves `node` ready, quarantined (then ready), or not ready when a step failed or the
/// master is excluded (the fleet's probe asks again).
async fn prepare(weak: &Weak<Fleet>, node: &Node) -> Again {
    let requests = node.prepare_requests();
    node.set_ready(false);
    let Some(fleet) = weak.upgrade() else {
        return Again::No;
    };
    let writing = fleet.preparation_started();
    let Some(Examined {
        birth,
        read,
        mark,
        previous,
    }) = examine(&fleet, node).await
    else {
        return Again::No;
    };
    let standing = decide(node, &read, mark.as_ref(), previous, birth.quarantine);
    let expected = match standing {
        Standing::Member => read.marker.clone(),
        Standing::Quarantined { until, why } => {
            let run_id = &read.identity.run_id;
            let marker = FleetMark::quarantined(&birth, run_id).to_string();
            let left = until.saturating_duration_since(Instant::now());
            let keyspace = fleet.keyspace();
            let recorded =
                node.record_quarantine(keyspace, (run_id, left), &marker, PREPARE_STEP_TIMEOUT);
            if !recorded.await {
                return Again::No;
            }
            announce_quarantine(node, left, why.as_str());
            drop((writing, fleet));
            tokio::time::sleep_until(until).await;
            return finish(weak, node, &birth, (Some(marker), read), requests).await;
        }
        Standing::Rejoining { why } => {
            tracing::warn!(
                node = node.index(),
                url = node.url(),
                why = why.as_str(),
                "master lost its memory longer than a quarantine ago: syncing its fence"
            );
            read.marker.clone()
        }
    };
    drop(writing);
    finish(weak, node, &birth, (expected, read), requests).await
}

/// A master read by a preparation that may go on: of the born fleet, its marker (if any) of
/// that fleet.
struct Examined {
    birth: Birth,
    read: Inspection,
    /// The marker, parsed.
    mark: Option<FleetMark>,
    /// The `run_id` this process saw before.
    previous: Option<String>,
}

/// Loads the scripts and reads the master; `None` (the master left out) when a step failed,
/// the fleet is not born, or the master must be refused: it may evict keys, it carries another
/// fleet's marker or one nobody can read, or it is the server of another configured master.
async fn examine(fleet: &Fleet, node: &Node) -> Option<Examined> {
    if !node.load_scripts(PREPARE_STEP_TIMEOUT).await {
        return None;
    }
    // After the birth, if any: a master read before it would lack the marker it gets there.
    let born = fleet.born().await;
    let read = node.inspect(fleet.keyspace(), PREPARE_STEP_TIMEOUT).await?;
    match &read.evicting {
        Ok(Some(evicting)) => return exclude(node, Exclusion::Evicting(evicting.clone())),
        Ok(None) => {}
        Err(why) => tracing::warn!(
            node = node.index(),
            why,
            "cannot tell whether the master evicts keys"
        ),
    }
    let Some(birth) = born else {
        return exclude(node, Exclusion::Unborn);
    };
    let mark = match read
        .marker
        .as_deref()
        .map(|text| (text, FleetMark::parse(text)))
    {
        None => None,
        Some((text, None)) => return exclude(node, Exclusion::UnreadableMarker(text.into())),
        Some((_, Some(mark))) if mark.fleet != birth.fleet => {
            let (theirs, ours) = (mark.fleet, birth.fleet.clone());
            return exclude(node, Exclusion::OtherFleet { theirs, ours });
        }
        Some((_, mark)) => mark,
    };
    match fleet.claim_run_id(node, &read.identity.run_id) {
        Ok(previous) => Some(Examined {
            birth,
            read,
            mark,
            previous,
        }),
        Err(of) => exclude(node, Exclusion::Twin { of }),
    }
}

/// Leaves `node` out for `why`, saying so (at error when only the operator can lift it) when
/// the reason changed.
fn exclude<T>(node: &Node, why: Exclusion) -> Option<T> {
    let changed = node.exclusion().map(|e| e.reason()) != Some(why.reason());
    if changed && why.needs_operator() {
        tracing::error!(
            node = node.index(),
            url = node.url(),
            reason = why.reason(),
            "master refused: {why}"
        );
    } else if changed {
        tracing::warn!(
            node = node.index(),
            url = node.url(),
            reason = why.reason(),
            "master takes no votes: {why}"
        );
    }
    node.set_exclusion(Some(why));
    None
}

/// The standing of `node` from what was read and what this process knows of it (`previous`:
/// the `run_id` it saw before); remembers a quarantine so a retry after a failed step keeps it.
fn decide(
    node: &Node,
    read: &Inspection,
    marker: Option<&FleetMark>,
    previous: Option<String>,
    period: Duration,
) -> Standing {
    // Whatever happens next, this counter was seen here: the floor never goes down.
    let floor = node.fence_seen();
    node.raise_fence_seen(read.fence);
    let record = read
        .record
        .as_ref()
        .map(|(run_id, left)| (run_id.as_str(), *left));
    let evidence = Evidence {
        previous_run_id: previous.as_deref(),
        identity: &read.identity,
        marker,
        fence: read.fence,
        floor,
        counter_went_back: node.take_counter_went_back(),
        record,
        decided: node.quarantine(),
    };
    let now = Instant::now();
    let standing = assess(&evidence, period, now);
    let (quarantine, exclusion) = match standing {
        Standing::Member => (None, None),
        Standing::Quarantined { until, why } => {
            (Some(until), Some(Exclusion::Quarantined { until, why }))
        }
        Standing::Rejoining { why } => (Some(now), Some(Exclusion::Rejoining { why })),
    };
    node.set_quarantine(quarantine);
    node.set_exclusion(exclusion);
    standing
}

fn announce_quarantine(node: &Node, left: Duration, why: &str) {
    tracing::warn!(
        node = node.index(),
        url = node.url(),
        quarantine_ms = left.as_millis() as u64,
        why,
        "master lost its memory: quarantined"
    );
    METRICS
        .quarantines
        .add(1, &metrics::label("node", node.index() as i64));
}

/// Raises the master's counter (from a quorum of current members after a quarantine, else to
/// at least the floor) and writes its member marker, only if it is still as read: `expected`
/// is the marker it should carry now and `read` the inspection.
async fn finish(
    weak: &Weak<Fleet>,
    node: &Node,
    birth: &Birth,
    (expected, read): (Option<String>, Inspection),
    requests: u64,
) -> Again {
    let Some(fleet) = weak.upgrade() else {
        return Again::No;
    };
    let _writing = fleet.preparation_started();
    let quarantined = node.quarantine().is_some();
    let target = if quarantined {
        match fence_from_members(&fleet, node).await {
            Some(target) => target,
            None => {
                tracing::warn!(
                    node = node.index(),
                    "fence sync failed: fewer than a quorum of members answered; master stays out"
                );
                return Again::No;
            }
        }
    } else {
        0
    };
    let target = target.max(node.fence_seen()).max(1);
    let marker = FleetMark::member(birth, &read.identity.run_id).to_string();
    let keyspace = fleet.keyspace();
    let mark = node.mark(
        keyspace,
        (expected.as_deref(), read.fence),
        target,
        &marker,
        PREPARE_STEP_TIMEOUT,
    );
    match mark.await {
        Some(Marked::Done(counter)) => node.raise_fence_seen(counter),
        // The master changed under the preparation: read it again.
        Some(Marked::Changed | Marked::Recorded) => return Again::Yes,
        None => return Again::No,
    }
    node.set_quarantine(None);
    node.set_exclusion(None);
    if !node.set_ready_unless_asked_again(requests) {
        return Again::Yes;
    }
    tracing::info!(
        node = node.index(),
        url = node.url(),
        "master takes lock writes"
    );
    Again::No
}

/// The largest fence counter among a quorum of the fleet's current members other than
/// `node` (all the others when N ≤ 3): any majority that issued a token meets that quorum.
/// Masters that are quarantined, rejoining or down do not count: their counters may have gone
/// back. Waits up to `MEMBERS_WAIT` for enough members; `None` when they never were.
async fn fence_from_members(fleet: &Fleet, node: &Node) -> Option<u64> {
    let needed = quorum_of(fleet.len()).min(fleet.len() - 1);
    let give_up = Instant::now() + MEMBERS_WAIT;
    let fence = fleet.keyspace().fence();
    loop {
        let members = fleet.nodes().iter();
        let members: Vec<&Arc<Node>> = members
            .filter(|n| n.index() != node.index() && n.is_member())
            .collect();
        if members.len() >= needed {
            let reads = members
                .iter()
                .map(|n| n.get_counter(&fence, PREPARE_STEP_TIMEOUT));
            let counters = futures_util::future::join_all(reads).await;
            let counters: Vec<u64> = counters.into_iter().flatten().collect();
            if counters.len() >= needed {
                return Some(counters.into_iter().max().unwrap_or(0));
            }
        }
        if Instant::now() >= give_up {
            return None;
        }
        tokio::time::sleep(MEMBERS_LOOK).await;
    }
}

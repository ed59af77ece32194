//! The fault schedule: what goes wrong, in order, each fault bounded and undone before the
//! next begins (a master that lost its memory stays quarantined after its step; the frozen
//! holder runs alongside the later steps). Every fault is logged in the history with the time
//! it was in force, so a violation can be shown with the faults around it.
//!
//! Masters lose their memory (restart empty, restart from a snapshot, FLUSHALL, a reload of an
//! older dump that keeps the `run_id` and the marker, the fence counter deleted, keys evicted)
//! one at a time, more than the quarantine apart: the safety model's limits put losing a
//! majority's history out of reach of any quorum algorithm. (The fleet's birth with two
//! masters missing is the lab's, before the schedule: see `Lab::start`.)

use std::time::Duration;

use redlease_testkit::proxy::Fault;
use redlease_testkit::sidecar::TestSidecar;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::sidecar::Frozen;
use super::{Lab, QUARANTINE};

/// One fault.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// `SAVE` on a master: the snapshot a later `RestartFromSnapshot` loads.
    Snapshot(usize),
    /// The answers of three masters (a majority) delayed past the per-master timeout.
    SlowMajority {
        proxies: [usize; 3],
        delay_ms: u64,
        for_ms: u64,
    },
    /// Two masters (a minority) cut off both ways; what was sent meanwhile arrives after.
    BlackholeMinority { proxies: [usize; 2], for_ms: u64 },
    /// A master killed and started again with empty memory.
    RestartEmpty(usize),
    /// A master killed and started again from its snapshot (older locks and fence counter).
    RestartFromSnapshot(usize),
    /// `FLUSHALL` on a master, without a restart.
    Flush(usize),
    /// A sidecar shut down and started again while two masters are cut off.
    RestartSidecar {
        sidecar: usize,
        blackholed: [usize; 2],
    },
    /// Every connection through one proxy reset.
    ResetConnections(usize),
    /// A holder frozen past its validity.
    Freeze,
    /// `DEBUG RELOAD NOSAVE` on a master: back to its snapshot (older locks and fence counter),
    /// same `run_id`, no reconnection (the master must run with `--enable-debug-command`).
    ReloadOlderDump(usize),
    /// The fence counter of a master deleted (as an eviction would), its marker kept.
    DeleteFence(usize),
    /// A master set to evict (`allkeys-lru`, `maxmemory` below what it uses: it drops keys at
    /// once, fence counter and marker included) for a while, then set back to `noeviction`.
    Evict { master: usize, for_ms: u64 },
}

/// (ms to wait after the previous step ended, step).
pub const SCHEDULE: [(u64, Step); 18] = [
    (1_500, Step::Snapshot(4)),
    (0, Step::Snapshot(1)),
    (
        1_500,
        Step::SlowMajority {
            proxies: [0, 1, 2],
            delay_ms: 150,
            for_ms: 2_500,
        },
    ),
    (
        1_500,
        Step::BlackholeMinority {
            proxies: [3, 4],
            for_ms: 3_000,
        },
    ),
    (1_000, Step::RestartEmpty(0)),
    (1_500, Step::Freeze),
    (2_000, Step::ResetConnections(1)),
    (
        1_500,
        Step::SlowMajority {
            proxies: [1, 2, 3],
            delay_ms: 250,
            for_ms: 2_000,
        },
    ),
    (
        1_500,
        Step::RestartSidecar {
            sidecar: 1,
            blackholed: [0, 1],
        },
    ),
    (2_000, Step::RestartFromSnapshot(4)),
    (4_000, Step::Flush(2)),
    (
        3_000,
        Step::SlowMajority {
            proxies: [0, 3, 4],
            delay_ms: 150,
            for_ms: 2_000,
        },
    ),
    (2_000, Step::ResetConnections(3)),
    (
        1_500,
        Step::BlackholeMinority {
            proxies: [1, 2],
            for_ms: 2_500,
        },
    ),
    (
        1_500,
        Step::SlowMajority {
            proxies: [2, 3, 4],
            delay_ms: 400,
            for_ms: 3_000,
        },
    ),
    (1_500, Step::DeleteFence(3)),
    (3_500, Step::ReloadOlderDump(1)),
    (
        3_500,
        Step::Evict {
            master: 0,
            for_ms: 2_000,
        },
    ),
];

/// Runs the schedule; hands back the frozen holder's task.
pub async fn run(lab: &mut Lab) -> Option<JoinHandle<Frozen>> {
    let mut frozen = None;
    for (gap, step) in SCHEDULE {
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let start = Instant::now();
        if let Step::Freeze = step {
            frozen = Some(tokio::spawn(lab.client_to_freeze().frozen_holder()));
        }
        let (kind, detail) = apply(lab, step).await;
        let end = match step {
            Step::RestartEmpty(_)
            | Step::RestartFromSnapshot(_)
            | Step::Flush(_)
            | Step::ReloadOlderDump(_)
            | Step::DeleteFence(_)
            | Step::Evict { .. } => Instant::now() + QUARANTINE,
            _ => Instant::now(),
        };
        lab.history.fault(kind, detail, start, end);
    }
    frozen
}

/// Injects one fault and undoes it; its kind and what it did.
async fn apply(lab: &mut Lab, step: Step) -> (&'static str, String) {
    match step {
        Step::Snapshot(i) => {
            lab.fleet.command(i, &["SAVE"]);
            ("snapshot", format!("SAVE on master {i}"))
        }
        Step::SlowMajority {
            proxies,
            delay_ms,
            for_ms,
        } => slow(lab, &proxies, delay_ms, for_ms).await,
        Step::BlackholeMinority { proxies, for_ms } => {
            blackhole(lab, &proxies, true);
            tokio::time::sleep(Duration::from_millis(for_ms)).await;
            blackhole(lab, &proxies, false);
            ("blackholed minority", format!("proxies {proxies:?}"))
        }
        Step::RestartEmpty(i) => {
            lab.fleet.servers[i].restart();
            (
                "master restarted empty",
                format!("master {i}, quarantined after"),
            )
        }
        Step::RestartFromSnapshot(i) => {
            lab.fleet.servers[i].restart();
            let kind = "master restarted from snapshot";
            (kind, format!("master {i}, quarantined after"))
        }
        Step::Flush(i) => {
            lab.fleet.command(i, &["FLUSHALL"]);
            ("flushall", format!("master {i}, quarantined after"))
        }
        Step::RestartSidecar {
            sidecar,
            blackholed,
        } => restart_sidecar(lab, sidecar, &blackholed).await,
        Step::ResetConnections(i) => {
            lab.proxies[i].reset_all();
            ("connections reset", format!("proxy {i}"))
        }
        Step::Freeze => ("frozen holder", "on r0, through sidecar 0".to_string()),
        Step::ReloadOlderDump(i) => {
            lab.fleet.command(i, &["DEBUG", "RELOAD", "NOSAVE"]);
            let kind = "master reloaded an older dump";
            (kind, format!("master {i}, quarantined after"))
        }
        Step::DeleteFence(i) => {
            lab.fleet.command(i, &["DEL", "redlease:fence"]);
            (
                "fence counter deleted",
                format!("master {i}, quarantined after"),
            )
        }
        Step::Evict { master, for_ms } => evict(lab, master, for_ms).await,
    }
}

/// Sets master `i` to evict every key it can for `for_ms`, then back to `noeviction`.
async fn evict(lab: &Lab, i: usize, for_ms: u64) -> (&'static str, String) {
    let info = lab
        .fleet
        .command(i, &["INFO", "memory"])
        .bulk()
        .unwrap_or_default();
    let used: u64 = info
        .lines()
        .find_map(|l| l.trim_end().strip_prefix("used_memory:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 20);
    let limit = (used / 2).to_string();
    lab.fleet
        .command(i, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    lab.fleet
        .command(i, &["CONFIG", "SET", "maxmemory", &limit]);
    tokio::time::sleep(Duration::from_millis(for_ms)).await;
    lab.fleet.command(i, &["CONFIG", "SET", "maxmemory", "0"]);
    lab.fleet
        .command(i, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let detail =
        format!("master {i} evicted with maxmemory {limit} for {for_ms} ms, quarantined after");
    ("master evicting keys", detail)
}

async fn slow(lab: &Lab, proxies: &[usize], delay_ms: u64, for_ms: u64) -> (&'static str, String) {
    let delay = Fault::Delay(Duration::from_millis(delay_ms));
    proxies
        .iter()
        .for_each(|&i| lab.proxies[i].set_downstream(delay));
    tokio::time::sleep(Duration::from_millis(for_ms)).await;
    proxies
        .iter()
        .for_each(|&i| lab.proxies[i].set_downstream(Fault::Pass));
    let detail = format!("proxies {proxies:?} answer {delay_ms} ms late");
    ("slow majority", detail)
}

fn blackhole(lab: &Lab, proxies: &[usize], on: bool) {
    let fault = if on { Fault::Blackhole } else { Fault::Pass };
    proxies.iter().for_each(|&i| lab.proxies[i].set_both(fault));
}

/// Cuts two masters off, tells the sidecar's clients it is going away (their windows end),
/// shuts it down (it releases its leases), starts a new one, then heals the masters.
async fn restart_sidecar(lab: &mut Lab, index: usize, cut_off: &[usize]) -> (&'static str, String) {
    blackhole(lab, cut_off, true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    lab.slots[index].set(None);
    let cut = lab.history.retire(index);
    let began = Instant::now();
    lab.sidecars[index].shut_down().await;
    let stopped = began.elapsed();
    let sidecar = TestSidecar::start_on(lab.urls.clone(), &super::sidecar_env()).await;
    lab.slots[index].set(Some(sidecar.base.clone()));
    lab.sidecars[index] = sidecar;
    tokio::time::sleep(Duration::from_millis(500)).await;
    blackhole(lab, cut_off, false);
    let detail = format!(
        "sidecar {index} with proxies {cut_off:?} cut off: {cut} windows ended, shut down in {} ms, back after {} ms",
        stopped.as_millis(),
        began.elapsed().as_millis()
    );
    ("sidecar restarted", detail)
}

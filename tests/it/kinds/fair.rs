//! Fair waiting's history: two fair waiters on each of two sidecars and two fair library
//! waiters queue again and again for one lock on the kinds' lab, under its faults. Every
//! grant is recorded with when its request was sent and its fencing token (the lock is
//! exclusive, so tokens rise in grant order). At the end: no waiter whose request was sent
//! clearly after another's was granted before it — tickets are drawn as the request arrives,
//! so among waiters that were both granted, grant order is the order they queued in.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use super::record::Record;
use super::{inject_faults, join_clients, library_engine, Lab};

/// The lock every fair waiter queues for.
const LOCK: &str = "fifo";
/// How long a grant is held; the TTL and the longest wait asked for.
const HOLD: Duration = Duration::from_millis(60);
const TTL: Duration = Duration::from_millis(1500);
const WAIT: Duration = Duration::from_secs(8);
/// How much earlier one request must have been sent than another for its ticket to be
/// certainly the smaller: a ticket is drawn in the first round of the masters (at most a
/// per-master timeout, 150 ms here for a 1.5 s TTL) after its request's arrival, after the
/// sidecar's handling of the request (two worker threads, shared with everything else).
const MARGIN: Duration = Duration::from_millis(600);

/// One grant: who, when its request was sent, its fencing token.
#[derive(Clone, Debug)]
struct Grant {
    client: String,
    sent: Instant,
    token: u64,
}

/// Pairs of grants where the request sent at least `MARGIN` later was granted first.
fn overtakes(grants: &[Grant]) -> Vec<(Grant, Grant)> {
    let mut found = Vec::new();
    for earlier in grants {
        for later in grants {
            if later.sent >= earlier.sent + MARGIN && later.token < earlier.token {
                found.push((earlier.clone(), later.clone()));
            }
        }
    }
    found
}

/// A fair waiter of a sidecar, queueing until `stop_at`.
async fn sidecar_waiter(
    name: String,
    base: String,
    grants: Arc<Mutex<Vec<Grant>>>,
    record: Arc<Record>,
    stop_at: Instant,
) {
    let http = reqwest::Client::new();
    while Instant::now() < stop_at {
        let body = json!({"owner": name, "ttl_ms": TTL.as_millis() as u64,
            "wait_ms": WAIT.as_millis() as u64, "fair": true});
        let url = format!("{base}/v1/locks/{LOCK}/acquire");
        let sent = Instant::now();
        let answer = http.post(url).json(&body).timeout(WAIT * 2).send().await;
        let Ok(answer) = answer else {
            record.count("sidecar requests that failed");
            continue;
        };
        if answer.status() != 200 {
            let status = answer.status().as_u16();
            let reason = answer.json::<serde_json::Value>().await.ok();
            let reason = reason.as_ref().and_then(|p| p["reason"].as_str());
            record.count(match (status, reason) {
                (409, Some("dequeued")) => "sidecar refusals: dequeued",
                (409, _) => "sidecar refusals: held",
                (503, _) => "sidecar refusals: no quorum",
                _ => "sidecar refusals: other",
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let Ok(lease) = answer.json::<serde_json::Value>().await else {
            continue;
        };
        let token = lease["fencing_token"].as_u64().unwrap();
        grants.lock().unwrap().push(Grant {
            client: name.clone(),
            sent,
            token,
        });
        record.count("sidecar grants");
        tokio::time::sleep(HOLD).await;
        let id = lease["lease_id"].as_str().unwrap();
        let url = format!("{base}/v1/leases/{id}");
        let _ = http.delete(url).timeout(WAIT).send().await;
    }
}

/// A fair waiter of its own library engine (hearing releases), queueing until `stop_at`.
async fn library_waiter(
    name: String,
    urls: Vec<String>,
    grants: Arc<Mutex<Vec<Grant>>>,
    record: Arc<Record>,
    stop_at: Instant,
) {
    let engine = library_engine(&urls, true).await;
    let engine = &engine.engine;
    while Instant::now() < stop_at {
        let sent = Instant::now();
        let outcome = engine.acquire_fair_with_wait(LOCK, &name, TTL, WAIT).await;
        let lease = match outcome {
            Ok(redlease::AcquireOutcome::Acquired(lease)) => Some(lease),
            Ok(redlease::AcquireOutcome::Contended(refusal))
                if refusal.cause == redlease::Shortfall::Dequeued =>
            {
                record.count("library refusals: dequeued");
                None
            }
            Ok(redlease::AcquireOutcome::Contended(_)) => {
                record.count("library refusals: held");
                None
            }
            Ok(redlease::AcquireOutcome::NoQuorum(_)) => {
                record.count("library refusals: no quorum");
                None
            }
            Err(_) => {
                record.count("library refusals: error");
                None
            }
        };
        let Some(lease) = lease else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        grants.lock().unwrap().push(Grant {
            client: name.clone(),
            sent,
            token: lease.fencing_token,
        });
        record.count("library grants");
        tokio::time::sleep(HOLD).await;
        let _ = engine.release(&lease.resource, lease.id).await;
    }
    engine.settle(Duration::from_secs(3)).await;
}

/// Two fair waiters on each of two sidecars and two fair library waiters queue for one lock
/// for 14 s while a majority is slowed, one master black-holed, one frozen, one killed and two
/// restarted empty: no request sent 600 ms or more after another was granted before it, and
/// no waiter waited its whole 8 s in vain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_grants_follow_the_queue_under_faults() {
    let mut lab = Lab::start().await;
    let record = Arc::new(Record::new());
    let grants = Arc::new(Mutex::new(Vec::new()));
    let stop_at = Instant::now() + Duration::from_secs(14);
    let mut clients = Vec::new();
    for (i, sidecar) in lab.sidecars.iter().enumerate() {
        for j in 0..2 {
            let waiter = sidecar_waiter(
                format!("s{i}-{j}"),
                sidecar.base.clone(),
                Arc::clone(&grants),
                Arc::clone(&record),
                stop_at,
            );
            clients.push(tokio::spawn(waiter));
        }
    }
    for i in 0..2 {
        let waiter = library_waiter(
            format!("lib-{i}"),
            lab.urls.clone(),
            Arc::clone(&grants),
            Arc::clone(&record),
            stop_at,
        );
        clients.push(tokio::spawn(waiter));
    }
    inject_faults(&mut lab.fleet, &lab.proxies, &record).await;
    join_clients(clients).await;
    let grants = grants.lock().unwrap().clone();
    let counts = record.counts();
    eprintln!(
        "fair history: {} grants; {counts:?}\nfaults: {:?}",
        grants.len(),
        record.faults()
    );
    let mut tokens: Vec<u64> = grants.iter().map(|g| g.token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), grants.len(), "two grants with one token");
    let overtaken = overtakes(&grants);
    assert!(
        overtaken.is_empty(),
        "granted before a waiter that queued earlier: {overtaken:?}"
    );
    for who in ["sidecar grants", "library grants"] {
        let granted = counts.get(who).copied().unwrap_or(0);
        assert!(granted >= 10, "too few {who} to judge: {counts:?}");
    }
    // A waiter passed over for its whole 8 s wait would not show among the grants: none was.
    for starved in ["sidecar refusals: held", "library refusals: held"] {
        let refused = counts.get(starved).copied().unwrap_or(0);
        assert_eq!(refused, 0, "fair waiters waited 8 s in vain: {counts:?}");
    }
    let clients: std::collections::BTreeSet<&str> =
        grants.iter().map(|g| g.client.as_str()).collect();
    assert_eq!(clients.len(), 6, "a waiter never granted: {clients:?}");
}

//! The clients of the kinds' history: sidecar clients (auto-renewed, their validity read back
//! while they hold; or renewed by hand) and library clients, each taking permits (or
//! campaigning for the leadership, or reading and writing a read-write lock) in a loop and recording the window each grant opened, as
//! conservatively as they were told. A leader proclaims a new value once while it holds.

use std::sync::Arc;
use std::time::Duration;

use redlease::keys::{parse_lock_name, LockKind};
use redlease::redlock::Permits;
use redlease::{AcquireOutcome, Lease};
use redlease_testkit::history::{instant_of_wall_ms, Window};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::election::ELECTION;
use super::record::Record;
use super::{LibraryEngine, LIMIT, RW_LOCK, SEMAPHORE};
use redlease::redlock::read_write::{RwMode, RwRequest};

/// What a client takes: a permit of the semaphore, the election's leadership, or the
/// read-write lock in a mode (window resource `doc/read` or `doc/write`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// This many permits of the semaphore at once.
    Permit(u32),
    Leadership,
    Rw(RwMode),
    /// The lock of [`REENTERED`], re-entered while held (sidecar clients); the library's
    /// clients take it plainly.
    Reentry,
}

/// The resource whose lock the re-entry run takes.
pub const REENTERED: &str = "job";

fn mode_name(mode: RwMode) -> &'static str {
    match mode {
        RwMode::Read => "read",
        RwMode::Write => "write",
    }
}

/// The window resource of a read-write lock's lease in `mode`.
fn rw_resource(mode: RwMode) -> String {
    format!("{RW_LOCK}/{}", mode_name(mode))
}

/// How long a client waits for a permit, and the TTL it asks for.
const WAIT: Duration = Duration::from_millis(1000);
const TTL: Duration = Duration::from_millis(1200);

fn random_ms(low: u64, high: u64) -> Duration {
    Duration::from_millis(low + rand::random::<u64>() % (high - low))
}

/// How long a client holds what it took.
fn hold_for(kind: Kind) -> Duration {
    match kind {
        Kind::Reentry => random_ms(20, 200),
        _ => random_ms(50, 750),
    }
}

/// How long a client waits after its release before it asks again: a writer gives readers a
/// turn (writers that ask again at once keep a writer waiting all the time, and a waiting
/// writer holds new readers back), everyone else asks at once.
fn pause_after(kind: Kind) -> Duration {
    match kind {
        Kind::Rw(RwMode::Write) => random_ms(200, 600),
        _ => Duration::ZERO,
    }
}

/// The window resource of a lease's slots: `pool#<slot>`, `pool#<slot>,<slot>` for several
/// (see `record::per_slot`).
fn slot_resource(slots: impl IntoIterator<Item = u64>) -> String {
    let slots: Vec<String> = slots.into_iter().map(|slot| slot.to_string()).collect();
    format!("{SEMAPHORE}#{}", slots.join(","))
}

/// The end of the validity a lease view tells, counted from `sent` (when the request that
/// answered it left), never past its `expires_at`; `sent` itself for an ended lease.
fn told_end(view: &Value, sent: Instant) -> Option<Instant> {
    let state = view["state"].as_str()?;
    if state != "held" && state != "degraded" {
        return Some(sent);
    }
    let validity = Duration::from_millis(view["validity_ms"].as_u64()?);
    Some((sent + validity).min(instant_of_wall_ms(view["expires_at"].as_u64()?)))
}

/// One client of one sidecar.
pub struct SidecarClient {
    pub name: String,
    pub base: String,
    pub http: reqwest::Client,
    pub record: Arc<Record>,
    pub auto_renew: bool,
    pub stop_at: Instant,
    pub kind: Kind,
}

impl SidecarClient {
    pub async fn run(self) {
        // Ids of this client's ended leases and holds, replayed after its next release.
        let mut stale: Vec<String> = Vec::new();
        while Instant::now() < self.stop_at {
            let mut body = json!({
                "owner": self.name, "ttl_ms": TTL.as_millis() as u64,
                "wait_ms": WAIT.as_millis() as u64, "auto_renew": self.auto_renew,
            });
            let url = match self.kind {
                Kind::Permit(count) => {
                    body["limit"] = json!(LIMIT);
                    body["permits"] = json!(count);
                    format!("{}/v1/semaphores/{SEMAPHORE}/acquire", self.base)
                }
                Kind::Leadership => {
                    body["value"] = json!(self.name);
                    format!("{}/v1/elections/{ELECTION}/campaign", self.base)
                }
                Kind::Rw(mode) => {
                    body["mode"] = json!(mode_name(mode));
                    format!("{}/v1/rwlocks/{RW_LOCK}/acquire", self.base)
                }
                Kind::Reentry => format!("{}/v1/locks/{REENTERED}/acquire", self.base),
            };
            let sent = Instant::now();
            let answer = self
                .http
                .post(url)
                .json(&body)
                .timeout(WAIT * 4)
                .send()
                .await;
            let Some(view) = ok_json(answer).await else {
                self.record.count("sidecar refusals");
                tokio::time::sleep(random_ms(10, 50)).await;
                continue;
            };
            // A grant may have waited in the sidecar's queue: its validity counts from the
            // request, not from the answer.
            let start = Instant::now();
            let Some(end) = told_end(&view, sent) else {
                panic!("a grant without validity: {view}");
            };
            let (resource, token) = self.held(&view);
            let id = self.record.open(Window {
                client: self.name.clone(),
                resource,
                token,
                start,
                end,
                sidecar: None,
            });
            self.record.count("sidecar grants");
            let lease = view["lease_id"].as_str().unwrap().to_string();
            if self.kind == Kind::Reentry {
                // While this client holds a newer lease of the resource.
                self.replay_stale(&mut stale).await;
                stale.extend(self.reenter(&lease, token).await);
            }
            self.hold(id, &lease).await;
            let released = Instant::now();
            if released < self.record.end(id) {
                self.record.set_end(id, released);
            }
            let url = format!("{}/v1/leases/{lease}", self.base);
            let answer = self.http.delete(url).timeout(WAIT * 4).send().await;
            // Only a release a quorum confirmed is replayed: one still short of a quorum is
            // told `released: true` by whichever request sees it confirmed, a replay included.
            let confirmed = ok_json(answer)
                .await
                .is_some_and(|view| view["released"].as_bool() == Some(true));
            if self.kind == Kind::Reentry && confirmed {
                stale.push(lease);
            }
            tokio::time::sleep(pause_after(self.kind)).await;
        }
    }

    /// Sends again the releases of this client's ended leases and holds, as a client retrying
    /// late would, while it holds a newer lease of the same resource: they must free nothing
    /// (counted, and the overlap check sees it if another client then took the resource).
    async fn replay_stale(&self, stale: &mut Vec<String>) {
        for id in stale.drain(..) {
            let url = format!("{}/v1/leases/{id}", self.base);
            let answer = self.http.delete(url).timeout(WAIT).send().await;
            let released = match ok_json(answer).await {
                Some(view) => view["released"].as_bool() == Some(true),
                None => false,
            };
            self.record.count(if released {
                "stale releases that released"
            } else {
                "stale releases replayed"
            });
        }
    }

    /// The window's resource and token of a grant: a permit's slot and fencing token; the
    /// election and the leader's term (which must be its fencing token).
    fn held(&self, view: &Value) -> (String, u64) {
        let token = view["fencing_token"].as_u64().unwrap();
        match self.kind {
            Kind::Permit(count) => {
                let slots: Vec<u64> = view["slots"].as_array().map_or(Vec::new(), |slots| {
                    slots.iter().filter_map(Value::as_u64).collect()
                });
                assert_eq!(slots.len(), count as usize, "permits granted: {view}");
                assert_eq!(view["slot"].as_u64(), slots.first().copied(), "{view}");
                if count > 1 {
                    self.record.count("sidecar grants of several permits");
                }
                (slot_resource(slots), token)
            }
            Kind::Leadership => {
                assert_eq!(view["term"].as_u64(), Some(token), "{view}");
                (ELECTION.to_string(), token)
            }
            Kind::Rw(mode) => (rw_resource(mode), token),
            Kind::Reentry => (REENTERED.to_string(), token),
        }
    }

    /// Re-enters the lease and releases the hold: the hold must carry the lease's token, and
    /// its release must leave the lease held. Answers the hold's id, to replay later.
    async fn reenter(&self, lease: &str, token: u64) -> Option<String> {
        let url = format!("{}/v1/leases/{lease}/reenter", self.base);
        let answer = self.http.post(url).timeout(WAIT).send().await;
        let Some(hold) = ok_json(answer).await else {
            self.record.count("reentries refused");
            return None;
        };
        if hold["fencing_token"].as_u64() != Some(token) {
            self.record.count("reentries with another token");
        }
        self.record.count("reentries");
        let hold_id = hold["hold_id"].as_str()?.to_string();
        let url = format!("{}/v1/leases/{hold_id}", self.base);
        let _ = self.http.delete(url).timeout(WAIT).send().await;
        let url = format!("{}/v1/leases/{lease}", self.base);
        let still = ok_json(self.http.get(url).timeout(WAIT).send().await).await;
        let state = still.as_ref().and_then(|view| view["state"].as_str());
        if state == Some("released") {
            self.record.count("hold releases that released the lease");
        }
        Some(hold_id)
    }

    /// Holds for a while: an auto-renewed lease reads its validity back; one renewed by hand
    /// renews; a leader proclaims once first. The window's end moves only to what an answer
    /// told.
    async fn hold(&self, id: usize, lease: &str) {
        // The re-entry run's six clients share one lock: shorter holds give each more turns.
        let until = Instant::now() + hold_for(self.kind);
        if self.kind == Kind::Leadership {
            let url = format!("{}/v1/leases/{lease}/proclaim", self.base);
            let body = json!({"value": format!("{}-proclaimed", self.name)});
            let answer = self.http.post(url).json(&body).timeout(WAIT).send().await;
            let proclaimed = answer.is_ok_and(|answer| answer.status() == 200);
            self.record.count(if proclaimed {
                "proclamations"
            } else {
                "proclamations refused"
            });
        }
        while Instant::now() < until && Instant::now() < self.record.end(id) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let url = format!("{}/v1/leases/{lease}", self.base);
            let sent = Instant::now();
            let answer = if self.auto_renew {
                self.http.get(url).timeout(WAIT).send().await
            } else {
                let renew = self.http.post(format!("{url}/renew"));
                renew.json(&json!({})).timeout(WAIT).send().await
            };
            match ok_json(answer).await.and_then(|view| told_end(&view, sent)) {
                // Still believed held when the answer came: it now holds until the answer's end.
                Some(end) if end > sent && self.record.end(id) > Instant::now() => {
                    self.record.set_end(id, end);
                }
                Some(end) if end > sent => {}
                Some(_) => {
                    self.record.set_end(id, self.record.end(id).min(sent));
                    self.record.count("sidecar leases ended while held");
                    return;
                }
                None => {}
            }
        }
    }
}

async fn ok_json(answer: reqwest::Result<reqwest::Response>) -> Option<Value> {
    let answer = answer.ok()?;
    if answer.status() != 200 {
        return None;
    }
    answer.json().await.ok()
}

/// One library client.
pub struct LibraryClient {
    pub name: String,
    pub engine: Arc<LibraryEngine>,
    pub record: Arc<Record>,
    pub stop_at: Instant,
    pub kind: Kind,
}

impl LibraryClient {
    pub async fn run(self) {
        let engine = &self.engine.engine;
        while Instant::now() < self.stop_at {
            let name = self.name.as_str();
            let outcome = match self.kind {
                Kind::Permit(count) => {
                    let permits = Permits {
                        limit: LIMIT,
                        count,
                    };
                    let permit =
                        engine.acquire_permit_with_wait(SEMAPHORE, name, TTL, permits, WAIT);
                    permit.await
                }
                Kind::Leadership => {
                    let campaign = engine.campaign_with_wait(ELECTION, name, name, TTL, WAIT);
                    campaign.await
                }
                Kind::Reentry => {
                    let lock = engine.acquire_with_wait(REENTERED, name, TTL, WAIT);
                    lock.await
                }
                Kind::Rw(mode) => {
                    let request = RwRequest {
                        resource: RW_LOCK,
                        owner: name,
                        ttl: TTL,
                        mode,
                        beside: None,
                    };
                    engine.acquire_rw_with_wait(request, WAIT).await
                }
            };
            let Ok(AcquireOutcome::Acquired(lease)) = outcome else {
                self.record.count("library refusals");
                tokio::time::sleep(random_ms(10, 50)).await;
                continue;
            };
            self.record.count("library grants");
            let lease = self.hold(lease).await;
            let _ = engine.release(&lease.resource, lease.id).await;
            tokio::time::sleep(pause_after(self.kind)).await;
        }
        engine.settle(Duration::from_secs(3)).await;
    }

    /// Holds, extending once halfway; the window ends at the validity the lease has, or when
    /// the client stops holding.
    async fn hold(&self, mut lease: Lease) -> Lease {
        let resource = match parse_lock_name(&lease.resource).map(|n| n.kind) {
            Some(kind @ (LockKind::Slot(_) | LockKind::Slots(_))) => {
                if kind.slots().len() > 1 {
                    self.record.count("library grants of several permits");
                }
                slot_resource(kind.slots().iter().map(u64::from))
            }
            Some(LockKind::Election) => ELECTION.to_string(),
            Some(LockKind::Writer) => rw_resource(RwMode::Write),
            Some(LockKind::Exclusive) => REENTERED.to_string(),
            Some(LockKind::Reader(_)) => rw_resource(RwMode::Read),
            _ => panic!("not a lease of the kinds' history: {}", lease.resource),
        };
        let id = self.record.open(Window {
            client: self.name.clone(),
            resource,
            token: lease.fencing_token,
            start: Instant::now(),
            end: lease.valid_until,
            sidecar: None,
        });
        let hold = hold_for(self.kind);
        if self.kind == Kind::Leadership {
            let value = format!("{}-proclaimed", self.name);
            let proclaimed = self.engine.engine.proclaim(&lease, &value).await;
            let proclaimed = matches!(proclaimed, Ok(redlease::ProclaimOutcome::Proclaimed));
            self.record.count(if proclaimed {
                "proclamations"
            } else {
                "proclamations refused"
            });
        }
        tokio::time::sleep((hold / 2).min(lease.remaining_validity(Instant::now()))).await;
        let extended = self
            .engine
            .engine
            .extend(&lease.resource, lease.id, TTL)
            .await;
        if let Ok(outcome) = extended {
            lease.apply_extension(&outcome, Instant::now());
        }
        self.record.set_end(id, lease.valid_until);
        tokio::time::sleep((hold / 2).min(lease.remaining_validity(Instant::now()))).await;
        let now = Instant::now();
        if now < lease.valid_until {
            self.record.set_end(id, now);
        }
        lease
    }
}

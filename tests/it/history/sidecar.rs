//! Clients of a sidecar, over HTTP: leases renewed by the sidecar and watched over their event
//! stream, leases renewed by hand with shorter and longer TTLs than they have, DELETEs cut off
//! after a few ms, and one holder frozen past its validity. Each records in the history when
//! it was told it holds what, and writes to the register only while it believes so.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease_testkit::history::{instant_of_wall_ms, Window, WindowId};
use redlease_testkit::sidecar::open_events;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::pace::{extension_cap, write_for, Rng, Stop, MAX_ROUNDS, MAX_STEPS, WRITE_EVERY};
use super::record::{History, Wrote};

/// A blocking acquisition waits at most this long.
const WAIT_MS: u64 = 800;
/// A manually renewed lease is renewed this often.
const RENEW_EVERY: Duration = Duration::from_millis(250);

/// Where one sidecar's clients find it: its address while it serves, none while it restarts.
pub struct SidecarSlot {
    pub index: usize,
    base: Mutex<Option<String>>,
}

impl SidecarSlot {
    pub fn new(index: usize, base: String) -> Arc<Self> {
        let base = Mutex::new(Some(base));
        Arc::new(Self { index, base })
    }

    pub fn set(&self, base: Option<String>) {
        *self.base.lock().unwrap() = base;
    }

    fn base(&self) -> Option<String> {
        self.base.lock().unwrap().clone()
    }
}

/// What a lease view (a grant, a renewal, an event, a GET) says.
struct Told {
    lease_id: String,
    token: u64,
    state: String,
    validity: Duration,
    /// `expires_at` (this host's wall clock) on the monotonic clock.
    expires: Instant,
}

impl Told {
    fn parse(view: &Value) -> Option<Self> {
        Some(Self {
            lease_id: view["lease_id"].as_str()?.to_string(),
            token: view["fencing_token"].as_u64()?,
            state: view["state"].as_str()?.to_string(),
            validity: Duration::from_millis(view["validity_ms"].as_u64()?),
            expires: instant_of_wall_ms(view["expires_at"].as_u64()?),
        })
    }

    /// The validity's end: `validity_ms` counted from `from` (when the request was sent, or
    /// when a grant or event arrived: a grant may have waited in the queue), never later than
    /// `expires_at`.
    fn end(&self, from: Instant) -> Instant {
        (from + self.validity).min(self.expires)
    }

    fn is_live(&self) -> bool {
        self.state == "held" || self.state == "degraded"
    }
}

/// A lease a sidecar client holds.
pub struct Held {
    window: WindowId,
    lease_id: String,
    /// The sidecar that granted it.
    base: String,
    pub resource: &'static str,
    pub token: u64,
}

/// One client of one sidecar.
pub struct SidecarClient {
    pub name: String,
    pub slot: Arc<SidecarSlot>,
    pub history: Arc<History>,
    pub http: reqwest::Client,
    pub rng: Rng,
    pub stop: Arc<Stop>,
}

// === impl SidecarClient ===

impl SidecarClient {
    /// Leases the sidecar renews, held while watching their event stream.
    pub async fn auto_renewed(mut self) {
        for _ in 0..MAX_ROUNDS {
            if self.stop.stopped() {
                return;
            }
            let resource = self.rng.resource();
            let body = json!({"ttl_ms": 1000, "auto_renew": true});
            let Some(held) = self.grant(resource, body, WAIT_MS).await else {
                continue;
            };
            let hold = self.rng.ms(150, 2500);
            self.hold_watching(&held, hold).await;
            self.release(&held).await;
        }
    }

    /// Leases renewed by hand, alternately to a shorter and a longer TTL than they have.
    pub async fn manually_renewed(mut self) {
        for _ in 0..MAX_ROUNDS {
            if self.stop.stopped() {
                return;
            }
            let resource = self.rng.resource();
            let body = json!({"ttl_ms": 900, "auto_renew": false});
            let Some(held) = self.grant(resource, body, WAIT_MS).await else {
                continue;
            };
            let hold = self.rng.ms(200, 2000);
            self.hold_renewing(&held, hold).await;
            self.release(&held).await;
        }
    }

    /// Takes `resource` (`body` without owner and wait), and records the window it was told.
    async fn grant(&mut self, resource: &'static str, body: Value, wait: u64) -> Option<Held> {
        let generation = self.history.generation(self.slot.index);
        let Some(base) = self.slot.base() else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return None;
        };
        let mut body = body;
        body["owner"] = json!(self.name);
        body["wait_ms"] = json!(wait);
        let url = format!("{base}/v1/locks/{resource}/acquire");
        let request = self.http.post(url).json(&body);
        let answer = call(request.timeout(Duration::from_millis(wait + 3000))).await;
        let arrival = Instant::now();
        let told = match answer {
            Some((200, view)) => Told::parse(&view).unwrap(),
            other => {
                self.history.count(refusal_label(other.map(|(s, _)| s)));
                tokio::time::sleep(self.rng.ms(10, 40)).await;
                return None;
            }
        };
        let window = Window {
            client: self.name.clone(),
            resource: resource.to_string(),
            token: told.token,
            start: arrival,
            end: told.end(arrival),
            sidecar: Some((self.slot.index, generation)),
        };
        self.opened(window, told, base, resource)
    }

    fn opened(
        &self,
        window: Window,
        told: Told,
        base: String,
        resource: &'static str,
    ) -> Option<Held> {
        let empty = window.is_empty();
        let Some(id) = self.history.open(window) else {
            self.history.count("grants from a retired sidecar");
            return None;
        };
        self.history.count("grants");
        if empty {
            self.history.count("grants arrived expired");
        }
        Some(Held {
            window: id,
            lease_id: told.lease_id,
            base,
            resource,
            token: told.token,
        })
    }

    /// Writes while it holds, for `hold`, taking what the event stream says.
    async fn hold_watching(&mut self, held: &Held, hold: Duration) {
        let until = Instant::now() + hold;
        let url = format!("{}/v1/leases/{}/events", held.base, held.lease_id);
        let opened = tokio::time::timeout(Duration::from_secs(1), open_events(&self.http, &url));
        let Ok(Some(mut events)) = opened.await else {
            self.history.count("event streams refused");
            return;
        };
        for _ in 0..MAX_STEPS {
            let done = Instant::now() >= until;
            if done || self.history.write(held.window, false) == Wrote::NotHeld {
                return;
            }
            let event = events.next_or_end(WRITE_EVERY).await;
            let at = Instant::now();
            match event {
                Ok(None) => {}
                Ok(Some((name, view))) if self.take_event(held, &name, &view, at) => {}
                Ok(Some(_)) => return,
                Err(_) => {
                    self.history.count("event streams ended");
                    return self.history.cut(held.window, at);
                }
            }
        }
    }

    /// Takes one event that arrived at `at`; `false` once the lease is over for the client.
    fn take_event(&self, held: &Held, name: &str, view: &Value, at: Instant) -> bool {
        let label = match name {
            "renewed" => "renewals",
            "recovered" => "recovered events",
            "degraded" => "degraded events",
            "lost" => "lost events",
            "released" => "released events",
            _ => "other events",
        };
        self.history.count(label);
        match Told::parse(view) {
            Some(told) if told.is_live() => self.history.update(held.window, at, told.end(at)),
            _ => {
                self.history.cut(held.window, at);
                false
            }
        }
    }

    /// Writes while it holds, renewing every `RENEW_EVERY`, for `hold`.
    async fn hold_renewing(&mut self, held: &Held, hold: Duration) {
        let until = Instant::now() + hold;
        for step in 0..MAX_STEPS {
            let holds = write_for(&self.history, held.window, RENEW_EVERY).await;
            if !holds || Instant::now() >= until {
                return;
            }
            let ttl_ms = if step % 2 == 0 { 600 } else { 1600 };
            if !self.renew(held, ttl_ms).await {
                return;
            }
        }
    }

    /// `POST …/renew` to `ttl_ms`; `false` once the lease is over for the client.
    async fn renew(&mut self, held: &Held, ttl_ms: u64) -> bool {
        let sent = Instant::now();
        let cap = extension_cap(sent, Duration::from_millis(ttl_ms));
        self.history.cap(held.window, sent, cap);
        let url = format!("{}/v1/leases/{}/renew", held.base, held.lease_id);
        let request = self.http.post(url).json(&json!({ "ttl_ms": ttl_ms }));
        let answer = call(request.timeout(Duration::from_secs(2))).await;
        let at = Instant::now();
        match answer {
            Some((200, view)) => {
                self.history.count("renewals");
                let told = Told::parse(&view).unwrap();
                self.history.update(held.window, at, told.end(sent))
            }
            Some((503, _)) => {
                self.history.count("renewals short of a quorum");
                self.reread(held).await
            }
            _ => {
                self.history.count("renewals refused");
                self.history.cut(held.window, at);
                false
            }
        }
    }

    /// After a renewal short of a quorum: what validity the lease has left, per the sidecar.
    async fn reread(&mut self, held: &Held) -> bool {
        let sent = Instant::now();
        let url = format!("{}/v1/leases/{}", held.base, held.lease_id);
        let answer = call(self.http.get(url).timeout(Duration::from_secs(1))).await;
        let at = Instant::now();
        let told = answer.and_then(|(status, view)| (status == 200).then(|| Told::parse(&view)));
        match told.flatten() {
            Some(told) if told.is_live() => self.history.update(held.window, at, told.end(sent)),
            _ => {
                self.history.cut(held.window, at);
                false
            }
        }
    }

    /// Stops believing, then DELETEs the lease; one DELETE in three is given 2–8 ms, so it is
    /// cut off mid-request.
    async fn release(&mut self, held: &Held) {
        self.history.cut(held.window, Instant::now());
        let url = format!("{}/v1/leases/{}", held.base, held.lease_id);
        let cancel = self.rng.below(3) == 0;
        let timeout = if cancel {
            self.rng.ms(2, 8)
        } else {
            Duration::from_secs(3)
        };
        let answer = self.http.delete(url).timeout(timeout).send().await;
        let label = match answer {
            Err(error) if error.is_timeout() && cancel => "DELETEs cancelled",
            Err(error) if error.is_timeout() => "DELETEs timed out",
            Err(_) => "DELETEs failed",
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.json::<Value>().await.unwrap_or_default();
                release_label(status, &body)
            }
        };
        self.history.count(label);
    }
}

/// What the frozen holder's late write came to.
#[derive(Debug)]
pub struct Frozen {
    /// The register's answer; `None` when the holder was never granted.
    pub wrote: Option<Wrote>,
    /// Another holder had written with a larger token before the late write.
    pub overtaken: bool,
}

impl SidecarClient {
    /// Holds `r0` without renewing, sleeps past its validity, waits until another holder has
    /// written, then writes anyway: the register must refuse it.
    pub async fn frozen_holder(mut self) -> Frozen {
        let body = json!({"ttl_ms": 700, "auto_renew": false});
        let mut held = None;
        for _ in 0..5 {
            held = self.grant("r0", body.clone(), 2000).await;
            if held.is_some() {
                break;
            }
        }
        let Some(held) = held else {
            return Frozen {
                wrote: None,
                overtaken: false,
            };
        };
        let _ = self.history.write(held.window, false);
        let wake = self.history.end_of(held.window) + Duration::from_millis(100);
        tokio::time::sleep_until(wake).await;
        let give_up = Instant::now() + Duration::from_secs(8);
        while self.history.register_max(held.resource) <= held.token && Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let overtaken = self.history.register_max(held.resource) > held.token;
        let wrote = self.history.write(held.window, true);
        self.release(&held).await;
        Frozen {
            wrote: Some(wrote),
            overtaken,
        }
    }
}

/// Sends `request`: its status and JSON body, or `None` when it failed.
async fn call(request: reqwest::RequestBuilder) -> Option<(u16, Value)> {
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.unwrap_or_default()))
}

fn refusal_label(status: Option<u16>) -> &'static str {
    match status {
        Some(409) => "acquisitions refused: held",
        Some(503) => "acquisitions refused: no quorum or closing",
        Some(_) => "acquisitions refused: other",
        None => "acquisitions failed",
    }
}

fn release_label(status: u16, body: &Value) -> &'static str {
    match (status, body["released"].as_bool()) {
        (200, Some(true)) => "releases",
        (200, _) => "DELETEs of ended leases",
        (503, _) => "releases pending",
        _ => "DELETEs refused",
    }
}

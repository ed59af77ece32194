//! redlease-client: a Rust client of the redlease sidecar's HTTP API: take a lock, hold it
//! while the lease's event stream says how it stands, enter it again ([`LockGuard::reenter`]),
//! release it; campaign for an election's leadership, proclaim, read and observe its leader
//! ([`Client::campaign`], [`Client::observe`]). It speaks HTTP/1.1 to a sidecar, each request
//! written and its answer read in the caller's own task (see `http` and `exchange`), and uses
//! nothing of the engine (no Redis client, and no TLS: the sidecar listens on loopback or on a
//! socket file).
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease_client::{Client, ClientError};
//!
//! async fn close_the_books() -> Result<(), ClientError> {
//!     let sidecar = Client::new("http://127.0.0.1:7600")?;
//!     let guard = sidecar.lock("payments-close").wait(Duration::from_secs(5)).send().await?;
//!     let token = guard.fencing_token(); // pass it to what the job writes
//!     tokio::select! {
//!         _ = run_close(token) => {}
//!         end = guard.lost() => eprintln!("stopping: the lease {end}"),
//!     }
//!     guard.release().await?;
//!     Ok(())
//! }
//! # async fn run_close(_token: u64) {}
//! ```

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![warn(unreachable_pub, missing_docs)]

mod election;
mod error;
mod events;
mod exchange;
mod hold;
mod http;
mod lease;
mod own_wakes;
mod path;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use election::{Election, ElectionState, Observation};
pub use error::ClientError;
pub use hold::Hold;
pub use http::TransportError;
use http::{Endpoint, Transport};
use hyper::header::HeaderValue;
use hyper::Method;
pub use lease::{LeaseEnd, LeaseInfo, LeaseState};
use path::BasePath;

/// How much longer than the wait it asked for a request may take before the client gives up
/// on it (the sidecar's own request timeout is its longest wait plus 10 s).
pub const REQUEST_MARGIN: Duration = Duration::from_secs(10);
/// How long connecting to the sidecar may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A handle on one sidecar. Cheap to clone: clones share one pool of connections.
#[derive(Clone, Debug)]
pub struct Client {
    http: Transport,
    /// The URL given.
    base: url::Url,
    /// The URL's path (a prefix, perhaps), with which every request's path starts.
    base_path: BasePath,
    /// The `unix:/path` URL of a sidecar on a Unix socket, as given (requests then go to
    /// `http://localhost/` over the socket).
    unix_url: Option<String>,
}

/// The scheme of a sidecar listening on a Unix socket: `unix:/run/redlease/api.sock`.
pub const UNIX_SCHEME: &str = "unix:";

/// A lock to take, built by [`Client::lock`] and sent with [`LockRequest::send`].
#[must_use = "nothing is acquired until the request is sent"]
#[derive(Debug)]
pub struct LockRequest<'a> {
    client: &'a Client,
    resource: String,
    owner: Option<String>,
    ttl: Option<Duration>,
    wait: Duration,
    auto_renew: bool,
    idle_timeout: Option<Duration>,
    events: bool,
    /// `Some(n)`: a permit of the semaphore of `n` slots on the resource.
    limit: Option<u32>,
    /// How many permits of the semaphore, all or none (the sidecar's default, 1, when `None`).
    permits: Option<u32>,
    /// `Some(value)`: a campaign for the leadership of the resource's election.
    campaign: Option<String>,
    /// `Some(mode)`: the resource's read-write lock in this mode.
    mode: Option<RwMode>,
    /// Wait in one queue with the fair waiters of every sidecar.
    fair: bool,
}

/// A read-write lock's two modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RwMode {
    /// Shared with other readers; excludes writers.
    Read,
    /// Excludes readers and other writers.
    Write,
}

/// A held lease. It keeps the lease's event stream open (which also tells an auto-renewing
/// sidecar that the app is alive), says when the lease has ended ([`LockGuard::lost`]), and
/// releases it with [`LockGuard::release`] or, best effort, when dropped.
#[derive(Debug)]
pub struct LockGuard {
    lease: LeaseInfo,
    http: Transport,
    /// `…/v1/leases/{id}`.
    lease_path: String,
    /// How the lease ended, once it has; set once, by the watcher or by the release.
    ended: Arc<watch::Sender<Option<LeaseEnd>>>,
    /// Without an event stream and without auto-renewal: when the validity the acquisition
    /// reported runs out.
    expiry: Option<Instant>,
    /// When the validity last reported runs out (the acquisition's, then each event's).
    valid_until: watch::Receiver<Instant>,
    /// The task that follows the event stream, when there is one.
    watcher: Option<JoinHandle<()>>,
    /// Set by `release`: dropping the guard then sends nothing more.
    released: bool,
}

/// The answer to `DELETE /v1/leases/{id}`.
#[derive(Deserialize)]
struct ReleaseBody {
    released: bool,
}

/// The body of an acquisition.
#[derive(Serialize)]
struct AcquireBody<'a> {
    owner: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    wait_ms: u64,
    auto_renew: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    permits: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<RwMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    fair: bool,
}

// === impl Client ===

impl Client {
    /// A client of the sidecar at `url`: `http://host:port`, perhaps with a path prefix, or
    /// `unix:/path/to/api.sock` for a sidecar listening on a Unix socket. Only plain HTTP is
    /// spoken (the sidecar listens on loopback or a socket file).
    pub fn new(url: impl AsRef<str>) -> Result<Self, ClientError> {
        let url = url.as_ref();
        let invalid = |detail: &str| ClientError::InvalidUrl {
            url: url.to_string(),
            detail: detail.to_string(),
        };
        if let Some(path) = url.strip_prefix(UNIX_SCHEME) {
            if !path.starts_with('/') {
                return Err(invalid("expected unix:/absolute/path/to/the.sock"));
            }
            // A constant URL that parses.
            let base = url::Url::parse("http://localhost/").expect("a valid URL");
            let endpoint = Endpoint::Unix(path.into());
            let http = Transport::new(endpoint, HeaderValue::from_static("localhost"));
            return Ok(Self {
                http,
                base_path: BasePath::of(&base),
                base,
                unix_url: Some(url.to_string()),
            });
        }
        let base = url::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
        if base.scheme() != "http" {
            return Err(invalid("the sidecar speaks http:// (or unix:/path)"));
        }
        if base.cannot_be_a_base() {
            return Err(invalid("no host"));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(invalid(
                "credentials go in the token (with_token), not the URL",
            ));
        }
        let (Some(host), Some(port)) = (base.host_str(), base.port_or_known_default()) else {
            return Err(invalid("no host"));
        };
        let authority = match base.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        // A host the URL parser accepted is visible ASCII.
        let host_header =
            HeaderValue::from_str(&authority).map_err(|_| invalid("a host that is not ASCII"))?;
        let http = Transport::new(Endpoint::Tcp(format!("{host}:{port}")), host_header);
        Ok(Self {
            http,
            base_path: BasePath::of(&base),
            base,
            unix_url: None,
        })
    }

    /// The same client, sending `Authorization: Bearer <token>` with every request (for a
    /// sidecar with `auth.token_file`). The header is marked sensitive: never printed.
    pub fn with_token(self, token: &str) -> Result<Self, ClientError> {
        let invalid = || ClientError::InvalidUrl {
            url: self.base_url().to_string(),
            detail: "the token must be printable ASCII".into(),
        };
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| invalid())?;
        value.set_sensitive(true);
        let http = self.http.authorized(value);
        Ok(Self { http, ..self })
    }

    /// The sidecar's Prometheus text exposition (`GET /metrics`).
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let path = self.path(&["metrics"]);
        let answer = self
            .http
            .call(Method::GET, &path, None, REQUEST_MARGIN)
            .await?;
        error::read_text(answer)
    }

    /// The sidecar's URL, without a trailing slash (`unix:/path` for a Unix socket).
    pub fn base_url(&self) -> &str {
        match &self.unix_url {
            Some(url) => url,
            None => self.base.as_str().trim_end_matches('/'),
        }
    }

    /// A request for the lock on `resource`, to adjust and [`send`](LockRequest::send).
    pub fn lock(&self, resource: impl Into<String>) -> LockRequest<'_> {
        LockRequest {
            client: self,
            resource: resource.into(),
            owner: None,
            ttl: None,
            wait: Duration::ZERO,
            auto_renew: true,
            idle_timeout: None,
            events: true,
            limit: None,
            permits: None,
            campaign: None,
            mode: None,
            fair: false,
        }
    }

    /// A request for the read-write lock on `resource` in `mode`, to adjust and
    /// [`send`](LockRequest::send): readers share it, a writer holds it alone. A write asked
    /// for by an owner that holds a read of it through the same sidecar is refused
    /// (`ClientError::Invalid` with reason `upgrade_refused`); downgrade a write with
    /// [`LockGuard::downgrade`].
    pub fn rwlock(&self, resource: impl Into<String>, mode: RwMode) -> LockRequest<'_> {
        LockRequest {
            mode: Some(mode),
            ..self.lock(resource)
        }
    }

    /// A request for a permit of the counting semaphore `resource` of `limit` slots (1–64,
    /// the same for every holder), to adjust and [`send`](LockRequest::send): the guard's
    /// lease holds one slot ([`LockGuard::slot`]), or several with
    /// [`permits`](LockRequest::permits) ([`LockGuard::slots`]); fence per slot.
    pub fn semaphore(&self, resource: impl Into<String>, limit: u32) -> LockRequest<'_> {
        LockRequest {
            limit: Some(limit),
            ..self.lock(resource)
        }
    }

    /// The lease `lease_id` as the sidecar sees it now (`GET /v1/leases/{id}`; reading does
    /// not count as a sign of life).
    pub async fn lease(&self, lease_id: &str) -> Result<LeaseInfo, ClientError> {
        let path = self.path(&["v1", "leases", lease_id]);
        let answer = self
            .http
            .call(Method::GET, &path, None, REQUEST_MARGIN)
            .await?;
        error::read(answer)
    }

    /// The base URL's path with `segments` appended, each percent-encoded.
    fn path(&self, segments: &[&str]) -> String {
        self.base_path.join(segments)
    }
}

// === impl LockRequest ===

impl LockRequest<'_> {
    /// Who holds the lock (1–256 bytes, no control characters); defaults to
    /// `client:<pid>@<host>`.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The lease's time-to-live (10 ms to the sidecar's `lease.max_ttl_ms`); defaults to the
    /// sidecar's adaptive TTL.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long to wait for a held lock (at most the sidecar's `lease.max_wait_ms`); default
    /// 0: one attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Whether to wait in one queue with the fair waiters of every sidecar on the same lock
    /// (the resource's lock, semaphore, read-write lock or election), first come first
    /// served (default `false`; it matters with [`wait`](Self::wait)). A fair waiter whose
    /// heartbeats came too late is refused with [`ClientError::Dequeued`].
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// How many permits of a [`semaphore`](Client::semaphore) the lease takes, all or none
    /// (1 to its limit; default 1): that many slots, held by one lease with one fencing token.
    /// Ignored by other requests.
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// Whether the sidecar renews the lease (default `true`). Without it the lease ends at
    /// its validity unless renewed through the API.
    pub fn auto_renew(mut self, auto_renew: bool) -> Self {
        self.auto_renew = auto_renew;
        self
    }

    /// How long an auto-renewed lease may go without a sign of life (its event stream, read by
    /// the guard's task, is one) before the sidecar releases it; defaults to the sidecar's
    /// `lease.idle_timeout_ms`.
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = Some(idle_timeout);
        self
    }

    /// Whether the guard keeps the lease's event stream open (default `true`). Without it,
    /// nothing tells the guard about a loss: [`LockGuard::lost`] then resolves only when the
    /// validity of a lease that is not auto-renewed runs out, or when the guard releases it;
    /// and an auto-renewed lease is released after its idle timeout.
    pub fn events(mut self, events: bool) -> Self {
        self.events = events;
        self
    }

    /// Acquires the lock, waiting as asked; then opens the lease's event stream.
    pub async fn send(self) -> Result<LockGuard, ClientError> {
        let client = self.client;
        let owner = self.owner.unwrap_or_else(default_owner);
        let body = AcquireBody {
            owner: &owner,
            ttl_ms: self.ttl.map(|ttl| ttl.as_millis() as u64),
            wait_ms: self.wait.as_millis() as u64,
            auto_renew: self.auto_renew,
            idle_timeout_ms: self.idle_timeout.map(|idle| idle.as_millis() as u64),
            limit: self.limit,
            permits: self.limit.and(self.permits),
            value: self.campaign.as_deref(),
            mode: self.mode,
            fair: self.fair,
        };
        let path = match (&self.campaign, self.limit, self.mode) {
            (Some(_), _, _) => client.path(&["v1", "elections", &self.resource, "campaign"]),
            (None, Some(_), _) => client.path(&["v1", "semaphores", &self.resource, "acquire"]),
            (None, None, Some(_)) => client.path(&["v1", "rwlocks", &self.resource, "acquire"]),
            (None, None, None) => client.path(&["v1", "locks", &self.resource, "acquire"]),
        };
        // Plain strings and numbers: serialising them cannot fail.
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let limit = self.wait + REQUEST_MARGIN;
        let sent_at = Instant::now();
        let answer = client.http.call(Method::POST, &path, Some(body), limit);
        let lease: LeaseInfo = error::read(answer.await?)?;
        let valid_until = deadline_of(&lease, sent_at, self.wait, Instant::now());
        let lease_path = client.path(&["v1", "leases", &lease.lease_id]);
        Ok(LockGuard::follow(
            client.http.clone(),
            lease,
            lease_path,
            valid_until,
            self.events,
        ))
    }
}

/// When the validity of a granted `lease` ends here, never later than it does: counted from
/// `sent_at`, before the request left (the sidecar measured it after that); for a request that
/// waited for the lock, when the grant came is unknown here, so it is the earlier of the
/// answer's `expires_at` (the sidecar's clock, this host's on loopback) and the validity
/// counted from `received_at`.
fn deadline_of(
    lease: &LeaseInfo,
    sent_at: Instant,
    wait: Duration,
    received_at: Instant,
) -> Instant {
    let validity = Duration::from_millis(lease.validity_ms);
    if wait.is_zero() {
        return sent_at + validity;
    }
    let now = std::time::SystemTime::now();
    let expires = std::time::UNIX_EPOCH + Duration::from_millis(lease.expires_at);
    let left = expires.duration_since(now).unwrap_or(Duration::ZERO);
    (received_at + validity).min(Instant::now() + left)
}

// === impl LockGuard ===

impl LockGuard {
    /// A guard of `lease` (at `lease_path`), valid until `valid_until`, following its event
    /// stream when `events`.
    fn follow(
        http: Transport,
        lease: LeaseInfo,
        lease_path: String,
        valid_until: Instant,
        events: bool,
    ) -> Self {
        let ended = Arc::new(watch::Sender::new(None));
        let (validity, valid_until_rx) = watch::channel(valid_until);
        let watcher = events.then(|| {
            let events_path = format!("{lease_path}/events");
            let watcher =
                events::Watcher::new(http.clone(), events_path, Arc::clone(&ended), validity);
            tokio::spawn(watcher.run())
        });
        Self {
            expiry: (!events && !lease.auto_renew).then_some(valid_until),
            valid_until: valid_until_rx,
            lease,
            http,
            lease_path,
            ended,
            watcher,
            released: false,
        }
    }

    /// Downgrades this write lease of a read-write lock to a read: the sidecar takes a read
    /// lease of the same resource and settings beside the write, then releases the write. The
    /// new guard holds the read; this one is done (its lease released). On a refusal
    /// (`not_a_writer`, `held`, …) the write lease is kept and this guard is given back.
    pub async fn downgrade(mut self) -> Result<LockGuard, (ClientError, LockGuard)> {
        let path = format!("{}/downgrade", self.lease_path);
        let sent_at = Instant::now();
        let answer = self
            .http
            .call(Method::POST, &path, None, REQUEST_MARGIN)
            .await;
        let read: LeaseInfo = match answer.map_err(ClientError::from).and_then(error::read) {
            Ok(read) => read,
            Err(error) => return Err((error, self)),
        };
        let valid_until = sent_at + Duration::from_millis(read.validity_ms);
        // `lease_path` is `…/v1/leases/{lease id}`: the read's path replaces the id.
        let leases = self
            .lease_path
            .rsplit_once('/')
            .map_or("", |(base, _)| base);
        let read_path = format!("{leases}/{}", read.lease_id);
        let events = self.watcher.is_some();
        let guard = LockGuard::follow(self.http.clone(), read, read_path, valid_until, events);
        // The sidecar released the write: this guard sends nothing more.
        self.released = true;
        self.stop();
        Ok(guard)
    }

    /// A read-write lock's lease mode (`read`, `write`); `None` for other locks.
    pub fn mode(&self) -> Option<&str> {
        self.lease.mode.as_deref()
    }

    /// A semaphore permit's slot (the lowest of a lease of several permits); `None` for a
    /// lock. Fence on the slot and the token.
    pub fn slot(&self) -> Option<u32> {
        self.lease.slot
    }

    /// Every slot a semaphore lease holds, ascending (one per permit); empty for a lock. The
    /// fencing token is valid for each of them.
    pub fn slots(&self) -> &[u32] {
        &self.lease.slots
    }

    /// The fencing token: strictly greater than every earlier holder's. Pass it to what the
    /// lock protects, which refuses writes with a smaller one.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// The lease's id (32 lowercase hex digits).
    pub fn lease_id(&self) -> &str {
        &self.lease.lease_id
    }

    /// The locked resource.
    pub fn resource(&self) -> &str {
        &self.lease.resource
    }

    /// The lease as the acquisition answered it.
    pub fn info(&self) -> &LeaseInfo {
        &self.lease
    }

    /// When the lease's validity ends, as last reported (by the acquisition, then by each
    /// event of the stream), on tokio's clock; it changes with every renewal reported.
    pub fn valid_until(&self) -> watch::Receiver<Instant> {
        self.valid_until.clone()
    }

    /// How the lease ended, if it has (as far as the guard has heard).
    pub fn ended(&self) -> Option<LeaseEnd> {
        self.ended.borrow().clone()
    }

    /// Resolves once the lease has ended, whatever the cause: lost (stop acting on the lock at
    /// once), released, or past the validity last heard of. Independent of the guard's
    /// lifetime: it can be awaited beside the work, in another task.
    pub fn lost(&self) -> impl Future<Output = LeaseEnd> + Send + 'static {
        let mut ended = self.ended.subscribe();
        let expiry = self.expiry;
        async move {
            let news = async move {
                match ended.wait_for(Option::is_some).await {
                    Ok(end) => end.clone().unwrap_or(LeaseEnd::Expired),
                    // Unreachable while the guard lives, and a dropped guard marks the lease
                    // released first: nothing holds the lease any more.
                    Err(_) => LeaseEnd::Expired,
                }
            };
            match expiry {
                Some(at) => tokio::select! {
                    end = news => end,
                    _ = tokio::time::sleep_until(at) => LeaseEnd::Expired,
                },
                None => news.await,
            }
        }
    }

    /// Releases the lease (`DELETE`). `Ok(true)` when this call saw a quorum of masters
    /// confirm it; `Ok(false)` when the lease had already ended (lost, or released before).
    /// [`ClientError::Releasing`]: too few masters confirmed it yet; the sidecar keeps trying
    /// until a quorum does or the keys expire, and the lease is no longer yours either way.
    pub async fn release(mut self) -> Result<bool, ClientError> {
        self.released = true;
        let answer = self
            .http
            .call(Method::DELETE, &self.lease_path, None, REQUEST_MARGIN);
        let answer = answer.await;
        self.stop();
        let body: ReleaseBody = error::read(answer?)?;
        Ok(body.released)
    }

    /// Stops following the event stream and marks the lease released for `lost()`.
    fn stop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        // The guard goes with this call (a release or a drop), so only a `lost()` awaited
        // elsewhere can still hear of the end: with none, telling nobody is skipped (a watch
        // channel wakes its waiters through eight lists).
        if self.ended.receiver_count() == 0 {
            return;
        }
        let end = LeaseEnd::Released {
            reason: "released".to_string(),
        };
        events::settle(&self.ended, end);
    }
}

impl Drop for LockGuard {
    /// A guard dropped without `release` releases its lease in the background when a tokio
    /// runtime is there to run the request; otherwise the sidecar's idle release or the
    /// lease's expiry frees it.
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (http, path) = (self.http.clone(), std::mem::take(&mut self.lease_path));
            runtime.spawn(async move {
                let _ = http.call(Method::DELETE, &path, None, REQUEST_MARGIN).await;
            });
        }
    }
}

/// `client:<pid>@<host>`, so a lease's owner tells which process holds it (read once).
fn default_owner() -> String {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER
        .get_or_init(|| owner_of_this_process("client"))
        .clone()
}

/// `<kind>:<pid>@<host>`: a default owner that tells which process holds a lock.
pub fn owner_of_this_process(kind: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    format!("{kind}:{}@{host}", std::process::id())
}

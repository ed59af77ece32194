//! The N independent Redis masters: connecting them in parallel, preparing each before it
//! takes lock writes (scripts, restart quarantine, fence sync: `membership`), and reading
//! their health.
//!
//! Each master gets a lock connection ([`wire`]) that carries every lock command in order, and
//! a fred client for its preparation, with `max_command_attempts = 1` and `fail_fast = false`
//! (a master that is down at start-up is reconnected in the background while the others
//! serve). Neither re-sends a command after a reconnect. Every call to a master gives up at a
//! [`Deadline`]: its own timeout, or the one its fan-out's calls share.
//!
//! Both connections of a master come from its URL (`endpoint`): `rediss://` ones are TLS,
//! with one rustls configuration for the whole fleet (`tls`), and the fleet's
//! [`Credentials`] stand in for a URL that has none.

mod credentials;
pub mod deadline;
mod endpoint;
pub mod eviction;
pub mod exclusion;
pub mod health;
pub mod mark;
mod membership;
pub mod node;
mod permissions;
pub mod quarantine;
mod rejoin;
pub mod rtt;
mod startup;
mod tls;
pub mod wire;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::{ClientLike, EventInterface};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_rustls::rustls::ClientConfig;

use self::rtt::{RttWindow, DEFAULT_RTT_WINDOW};
use crate::keys::Keyspace;
use crate::metrics::{self, METRICS};
use crate::Error;
pub use credentials::{Credentials, Password};
pub use deadline::{Deadline, DeadlineKeeper, SharedDeadline};
pub use endpoint::mask_credentials;
pub use endpoint::uses_tls;
use endpoint::{build_client, lock_target};
pub use exclusion::Exclusion;
pub use health::{Breaker, DEFAULT_BREAKER_THRESHOLD, DEFAULT_BREAKER_TRIAL_INTERVAL};
pub use mark::Birth;
pub use node::status::NodeStatus;
pub use node::{Admission, CallError, Node};
pub use quarantine::DEFAULT_QUARANTINE;
pub use tls::TlsOptions;

/// How long start-up waits for each master's first connection and preparation.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a long-running fleet PINGs every master.
pub const DEFAULT_PROBE_PERIOD: Duration = Duration::from_millis(500);
/// The longest TTL a process puts on a key unless it says otherwise (the engine's default
/// max TTL).
pub const DEFAULT_LONGEST_TTL: Duration = Duration::from_secs(30);

/// When a fleet whose masters carry no history is born.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BirthRule {
    /// Only when every configured master answers with no history (no marker, no fence
    /// counter, no quarantine record): a quorum of blank answers may be masters that lost
    /// their memory while the others are silent.
    #[default]
    WhenAllFresh,
    /// The operator's act (`redlease fleet init`): now, with every master that answers,
    /// refused when any shows history, when fewer than a quorum answer, and — unless
    /// `allow_missing` — when any does not answer.
    Init {
        /// Birth with the masters that answer even when some do not.
        allow_missing: bool,
    },
}

/// Votes needed among `n` masters: ⌊n/2⌋+1.
pub fn quorum_of(n: usize) -> usize {
    n / 2 + 1
}
/// What fred bounds each command by on a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommandBound {
    /// None: every command of a lock client already runs under our own per-node timeout,
    /// and fred's would cost a timer per command.
    OursOnly,
    /// A generous bound (pub/sub clients, whose (un)subscribes may be left to finish alone).
    Generous,
}

/// fred's bound for `CommandBound::Generous` (our per-node timeouts are far shorter).
const GENEROUS_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of the fleet.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// Names of every key redlease writes.
    pub keyspace: Keyspace,
    /// How long `connect` waits for each master before going on without it.
    pub connect_timeout: Duration,
    /// Consecutive failures that open a master's breaker.
    pub breaker_threshold: u32,
    /// How often an open breaker lets a trial write through.
    pub breaker_trial_interval: Duration,
    /// Length of the RTT window each master keeps.
    pub rtt_window: Duration,
    /// How long a master that lost its memory takes no votes, for a fleet this process gives
    /// birth to; a born fleet's own (written in its markers) is used otherwise.
    pub quarantine: Duration,
    /// The longest TTL this process may put on a key (max TTL, shadows included): `connect`
    /// fails when the fleet's quarantine is shorter.
    pub longest_ttl: Duration,
    /// When a fleet with no history is born.
    pub birth: BirthRule,
    /// `Some(grace)`: `connect` returns once a quorum takes lock writes, every master that
    /// answered is prepared, and masters that never answered (frozen, black-holed: TCP
    /// accepted, nothing said) had `grace` more — what a one-shot command wants. `None`
    /// (default): `connect` waits for every master until `connect_timeout`.
    pub straggler_grace: Option<Duration>,
    /// The user and password for every master whose URL carries none (default: none). A URL
    /// with credentials of its own is refused while these are set.
    pub credentials: Option<Credentials>,
    /// How `rediss://` masters are spoken to: trusted CAs, client certificate.
    pub tls: TlsOptions,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            keyspace: Keyspace::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            breaker_trial_interval: DEFAULT_BREAKER_TRIAL_INTERVAL,
            rtt_window: DEFAULT_RTT_WINDOW,
            quarantine: DEFAULT_QUARANTINE,
            longest_ttl: DEFAULT_LONGEST_TTL,
            birth: BirthRule::WhenAllFresh,
            straggler_grace: None,
            credentials: None,
            tls: TlsOptions::default(),
        }
    }
}

/// The masters, in the configured order.
pub struct Fleet {
    nodes: Vec<Arc<Node>>,
    /// The configured URLs, credentials included, for the connections opened later.
    urls: Vec<String>,
    options: FleetOptions,
    /// The one TLS configuration of every connection (`None` without `rediss://` masters).
    tls: Option<Arc<ClientConfig>>,
    /// Subscriber connections opened for release messages ([`Fleet::open_subscribers`]).
    subscribers: Mutex<Vec<fred::clients::Client>>,
    /// Whether the fleet is born, and as what; `None` until the start-up survey decided.
    history: watch::Sender<Option<History>>,
    /// Held while an unborn fleet is surveyed again (and perhaps born).
    birth_lock: tokio::sync::Mutex<()>,
    /// Preparations writing to their masters now (not those sleeping out a quarantine).
    writing: Arc<watch::Sender<usize>>,
    /// The last `quorum_rtt_p99` and when it was computed (see `recent_quorum_rtt_p99`).
    recent_p99: Mutex<Option<(Instant, Option<Duration>)>>,
    /// Held while a master's `run_id` is checked against the others' and recorded.
    identities: Mutex<()>,
    /// Set once a [`Fleet::wait_for_statuses`] has run to its end: later reads go on at once.
    statuses_awaited: std::sync::atomic::AtomicBool,
}

/// How long a computed quorum p99 serves the per-node timeouts before it is computed again.
const P99_REFRESH: Duration = Duration::from_millis(10);

// === impl Fleet ===

impl Fleet {
    /// Connects to every master in parallel and prepares each, returning once every master
    /// is settled (takes writes, quarantined, or unreachable), or after `connect_timeout`, or
    /// (with `FleetOptions::straggler_grace`) once a quorum takes writes and the silent
    /// masters had that grace. The rest go on in the background: an unreachable master keeps
    /// reconnecting and is prepared when it comes. Errs on an invalid URL, and when two
    /// entries are one server (same address, or the same `run_id`), on unusable TLS settings,
    /// and when a master refuses TLS or lacks a permission redlease needs (`permissions`).
    pub async fn connect(urls: &[String], options: &FleetOptions) -> Result<Arc<Self>, Error> {
        if urls.is_empty() {
            return Err(Error::NoMasters);
        }
        let now = Instant::now();
        let tls = endpoint::tls_config(urls, options)?;
        let (prepare_tx, prepare_rx) = mpsc::unbounded_channel();
        let mut nodes = Vec::with_capacity(urls.len());
        let mut addresses = Vec::with_capacity(urls.len());
        for (index, url) in urls.iter().enumerate() {
            let client = build_client(url, options, tls.as_ref(), CommandBound::OursOnly)?;
            let target = lock_target(url, options, tls.as_ref())?;
            let masked = mask_credentials(url);
            addresses.push((masked.clone(), target.host.clone(), target.port));
            let rtt = RttWindow::new(options.rtt_window, now);
            let breaker = Breaker::new(options.breaker_threshold, options.breaker_trial_interval);
            let channels = (client, target);
            let health = (rtt, breaker);
            nodes.push(Node::new(
                index,
                masked,
                channels,
                health,
                prepare_tx.clone(),
            ));
        }
        startup::check_distinct_addresses(&addresses).await?;
        for index in 0..nodes.len() {
            METRICS
                .quarantines
                .add(0, &metrics::label("node", index as i64));
        }
        let fleet = Arc::new(Self {
            nodes,
            urls: urls.to_vec(),
            options: options.clone(),
            tls,
            subscribers: Mutex::new(Vec::new()),
            statuses_awaited: std::sync::atomic::AtomicBool::new(false),
            history: watch::channel(None).0,
            birth_lock: tokio::sync::Mutex::new(()),
            writing: Arc::new(watch::channel(0).0),
            recent_p99: Mutex::new(None),
            identities: Mutex::new(()),
        });
        tokio::spawn(membership::supervise(Arc::downgrade(&fleet), prepare_rx));
        for node in &fleet.nodes {
            prepare_on_every_connection(node);
            node.client().connect();
            node.wire().connect();
        }
        if let Err(error) = startup::start(&fleet).await {
            fleet.quit(options.connect_timeout).await;
            return Err(error);
        }
        Ok(fleet)
    }

    /// The masters, in the configured order.
    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    /// How many masters the fleet has (N).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the fleet has no master (never, once connected).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The options the fleet was connected with.
    pub fn options(&self) -> &FleetOptions {
        &self.options
    }

    /// The names of every key and channel redlease uses on the masters.
    pub fn keyspace(&self) -> &Keyspace {
        &self.options.keyspace
    }

    /// Votes needed for a grant: ⌊N/2⌋+1.
    pub fn quorum(&self) -> usize {
        quorum_of(self.nodes.len())
    }

    /// The p99 RTT of the ⌊N/2⌋+1-th fastest master: what a quorum round trip costs.
    /// `None` until a quorum of masters has samples.
    pub fn quorum_rtt_p99(&self, now: Instant) -> Option<Duration> {
        let mut p99s: Vec<Duration> = self
            .nodes
            .iter()
            .filter_map(|node| node.rtt_quantile(0.99, now))
            .collect();
        p99s.sort_unstable();
        p99s.get(self.quorum() - 1).copied()
    }

    /// `quorum_rtt_p99` as computed at most `P99_REFRESH` ago: every call's per-node timeout
    /// needs it, and computing it scans every master's RTT window.
    pub fn recent_quorum_rtt_p99(&self, now: Instant) -> Option<Duration> {
        // Plain data behind the lock: a poisoned value is still a valid reading.
        let mut recent = self
            .recent_p99
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match *recent {
            Some((at, p99)) if now.saturating_duration_since(at) < P99_REFRESH => p99,
            _ => {
                let p99 = self.quorum_rtt_p99(now);
                *recent = Some((now, p99));
                p99
            }
        }
    }

    /// PINGs every master every `interval` in the background, so RTT windows stay fresh, an
    /// open breaker closes as soon as its master answers again, and a master whose
    /// preparation failed is prepared again; a voting master whose eviction settings now let
    /// it drop keys is taken out. Stops when the returned guard is dropped.
    pub fn spawn_probe(self: &Arc<Self>, interval: Duration) -> ProbeGuard {
        let fleet = Arc::downgrade(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(fleet) = fleet.upgrade() else { return };
                let probes = fleet.nodes.iter().map(|node| async move {
                    node.ping(interval).await;
                    node.recheck_eviction(interval).await;
                });
                futures_util::future::join_all(probes).await;
                fleet.nodes.iter().for_each(|node| node.prepare_if_needed());
            }
        });
        ProbeGuard(task)
    }

    /// Waits until every master's lock connection is up, or `timeout` has passed (for the
    /// operator's reads and force releases, which go to every master whatever its state, right
    /// after a process connected).
    pub async fn wait_for_links(&self, timeout: Duration) {
        let links = self.nodes.iter().map(|node| node.wire().wait_for_connect());
        let _ = tokio::time::timeout(timeout, futures_util::future::join_all(links)).await;
    }

    /// Waits until every master has answered to being connected and prepared (up, excluded,
    /// or its connection attempt failed: [`NodeStatus::is_settled`]), or `timeout` has passed:
    /// the operator's reads, right after a process connected, report what each master
    /// answered, not a connection still being made.
    /// Once per process: a long-running sidecar whose master stays unprepared (an ACL that
    /// refuses its preparation, say) must not make every inventory read wait `timeout`.
    pub async fn wait_for_statuses(&self, timeout: Duration) {
        use std::sync::atomic::Ordering;
        if self.statuses_awaited.load(Ordering::Acquire) {
            return;
        }
        self.statuses_by(Instant::now() + timeout).await;
        self.statuses_awaited.store(true, Ordering::Release);
    }

    /// Every master's status, in the configured order, once it has settled
    /// ([`NodeStatus::is_settled`]) or at `deadline`.
    pub async fn statuses_by(&self, deadline: Instant) -> Vec<NodeStatus> {
        let waits = self.nodes.iter().map(|node| node.wait_for_status(deadline));
        futures_util::future::join_all(waits).await
    }

    /// Opens one subscriber connection per master, in the configured order, for release
    /// messages (`Wakeups`); not connected until the caller has set its handlers and calls
    /// `connect`. [`Fleet::quit`] closes them with the others.
    pub(crate) fn open_subscribers(&self) -> Result<Vec<fred::clients::Client>, Error> {
        let tls = self.tls.as_ref();
        let build = |url: &String| build_client(url, &self.options, tls, CommandBound::Generous);
        let clients = self.urls.iter().map(build).collect::<Result<Vec<_>, _>>()?;
        let mut subscribers = self
            .subscribers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        subscribers.extend(clients.iter().cloned());
        Ok(clients)
    }

    /// Closes every connection, the subscribers' included (best effort, each bounded by
    /// `timeout`). A fred client that is not connected (its master down, or refusing TLS)
    /// would send `QUIT` only after reconnecting: it is told in the background, unwaited.
    pub async fn quit(&self, timeout: Duration) {
        self.nodes.iter().for_each(|n| n.wire().close());
        let subscribers = std::mem::take(
            &mut *self
                .subscribers
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let clients = self.nodes.iter().map(|n| n.client()).chain(&subscribers);
        let (connected, down): (Vec<_>, Vec<_>) = clients.partition(|c| c.is_connected());
        for client in down {
            let client = client.clone();
            tokio::spawn(async move { tokio::time::timeout(timeout, client.quit()).await });
        }
        let quits = (connected.into_iter()).map(|c| tokio::time::timeout(timeout, c.quit()));
        futures_util::future::join_all(quits).await;
    }

    /// The born fleet's id and quarantine, as the masters' markers agree; `None` while unborn.
    pub fn birth(&self) -> Option<Birth> {
        match &*self.history.borrow() {
            Some(History::Born(birth)) => Some(birth.clone()),
            _ => None,
        }
    }

    /// The quarantine in force: the born fleet's, else the one this process would give it.
    pub fn quarantine(&self) -> Duration {
        self.birth()
            .map_or(self.options.quarantine, |b| b.quarantine)
    }

    pub(crate) fn set_history(&self, history: History) {
        self.history.send_replace(Some(history));
    }

    /// Refuses a fleet whose quarantine is shorter than the longest TTL this process may write:
    /// a master that lost its memory could vote again while such a key still stands elsewhere.
    pub(crate) fn check_quarantine(&self, birth: &Birth) -> Result<(), Error> {
        if birth.quarantine >= self.options.longest_ttl {
            return Ok(());
        }
        Err(Error::QuarantineTooShort {
            fleet: birth.fleet.clone(),
            quarantine_ms: birth.quarantine.as_millis() as u64,
            longest_ttl_ms: self.options.longest_ttl.as_millis() as u64,
        })
    }

    /// The born fleet, for a master's preparation. Waits for the start-up survey; while the
    /// fleet is unborn, surveys every master again (and births it once every master answers
    /// with no history). `None` while it stays unborn.
    pub(crate) async fn born(&self) -> Option<Birth> {
        let mut history = self.history.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait on it.
        let decided = history.wait_for(Option::is_some).await.ok()?.clone();
        match decided {
            Some(History::Born(birth)) => Some(birth),
            _ => self.survey_again().await,
        }
    }

    async fn survey_again(&self) -> Option<Birth> {
        // The masters' preparations ask together (every probe): one survey answers them all.
        let Ok(_one_at_a_time) = self.birth_lock.try_lock() else {
            let _ = self.birth_lock.lock().await;
            return self.birth();
        };
        if let Some(birth) = self.birth() {
            return Some(birth);
        }
        let timeout = self.options.connect_timeout;
        let reads = self
            .nodes
            .iter()
            .map(|n| n.inspect(self.keyspace(), timeout));
        let reads = futures_util::future::join_all(reads).await;
        let mut survey = startup::Survey::new(self.len(), self.quorum());
        survey.answers = reads.into_iter().map(startup::Answer::from).collect();
        let birth = match survey.decision(BirthRule::WhenAllFresh)? {
            startup::Decision::Born(birth) => birth,
            startup::Decision::Fresh => startup::give_birth(self, &survey).await,
            startup::Decision::Unborn => return None,
        };
        if let Err(error) = self.check_quarantine(&birth) {
            tracing::error!(%error, "the fleet's masters take no votes from this process");
            return None;
        }
        self.set_history(History::Born(birth.clone()));
        Some(birth)
    }

    /// Counts a preparation as writing to its master until the guard is dropped.
    pub(crate) fn preparation_started(&self) -> Writing {
        self.writing.send_modify(|n| *n += 1);
        Writing(Arc::clone(&self.writing))
    }

    /// Waits (at most `timeout`) until no preparation is writing to a master: a process about
    /// to exit lets the masters that answered get their marker or quarantine record.
    pub async fn settle_preparations(&self, timeout: Duration) -> bool {
        let mut writing = self.writing.subscribe();
        let idle = async { writing.wait_for(|n| *n == 0).await.is_ok() };
        tokio::time::timeout(timeout, idle).await.unwrap_or(false)
    }

    /// Records `run_id` as `node`'s server, returning the one recorded before; `Err` with the
    /// other master's index (and nothing recorded) when another master of this fleet is that
    /// very server: one server must never count twice towards a quorum.
    pub(crate) fn claim_run_id(&self, node: &Node, run_id: &str) -> Result<Option<String>, usize> {
        // Plain data behind the lock: a poisoned guard still serialises the check.
        let _guard = self
            .identities
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let twin = self.nodes.iter().find(|other| {
            other.index() != node.index() && other.run_id().as_deref() == Some(run_id)
        });
        node.set_twin(twin.is_some());
        if let Some(twin) = twin {
            tracing::error!(
                node = node.index(),
                url = node.url(),
                same_as = twin.url(),
                run_id,
                "two configured masters are one redis server: this one takes no votes"
            );
            return Err(twin.index());
        }
        Ok(node.swap_run_id(run_id.to_string()))
    }
}

/// A preparation writing to its master (see [`Fleet::settle_preparations`]).
pub(crate) struct Writing(Arc<watch::Sender<usize>>);

impl Drop for Writing {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// What the surveys found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum History {
    /// Born: the id and quarantine every process uses.
    Born(Birth),
    /// Not born (yet): no master votes.
    Unborn,
}

/// Stops the fleet's background PINGs when dropped.
pub struct ProbeGuard(tokio::task::JoinHandle<()>);

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// fred reports the first connection and every reconnection; each one may be a restarted
/// master (empty script cache, lost locks), so it is prepared again before taking writes.
fn prepare_on_every_connection(node: &Arc<Node>) {
    let weak = Arc::downgrade(node);
    node.client().on_reconnect(move |_server| {
        if let Some(node) = weak.upgrade() {
            node.set_ready_false_and_prepare();
        }
        async { Ok(()) }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ⌊N/2⌋+1 for odd and even fleets.
    #[test]
    fn quorum_is_a_strict_majority() {
        let quorums: Vec<usize> = (1..=7).map(quorum_of).collect();
        assert_eq!(quorums, [1, 2, 2, 3, 3, 4, 4]);
    }
}

//! The leases this sidecar holds: acquiring them for apps, renewing them automatically while
//! the app is alive, reporting loss at once, releasing them on request, on idleness and on
//! shutdown. Each lease the table renews has one task (see `renewal`) that owns its timing;
//! the leases it does not renew share one task that reports each expired at its end (see
//! `expiry`). The same table keeps a lease for a holder in this very process (`lock run` on
//! the masters, see `holder`), and the re-entry holds of its leases (see `reentry`).

#[macro_use]
mod logs;
mod retired;

pub(crate) mod election;
mod ending;
pub(crate) mod escalation;
mod expiry;
pub(crate) mod holder;
pub(crate) mod read_write;
pub(crate) mod reading;
pub(crate) mod reentry;
pub(crate) mod renewal;
mod request;
pub(crate) mod state;
pub(crate) mod ttl;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use self::ending::Ending;
use self::logs::{Activity, SUMMARY_INTERVAL};
use self::ttl::{RenewalSchedule, TtlPolicy};
use crate::batch::Renewals;
use crate::metrics::METRICS;
use crate::redlock::read_write::{RwMode, RwRequest};
use crate::redlock::{AcquireOutcome, Lease, Redlock, Shortfall};
use crate::{Error, LeaseId};
pub use holder::Revocations;
pub use reentry::{HoldRelease, Reentry};
use renewal::Begin;
pub use request::{AcquireKind, AcquireRequest, Acquired};
pub(crate) use request::{ReleaseAnswer, RenewError};
pub(crate) use state::RecordGuard;
pub(crate) use state::{LeaseEndReason, LeaseEvent, LeaseState, LeaseView};
pub(crate) use state::{LeaseRecord, Step};

/// How long a lost or released lease stays visible to `GET /v1/leases/{id}`.
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(60);
/// How many ended leases stay visible at most, the oldest forgotten first: ~700 bytes each
/// (`bench/README.md`, "Memory"), so ~35 MiB at most; at the busiest churn measured (~15,000
/// leases a second) an ended lease is still readable for over 3 s.
pub(crate) const DEFAULT_RETAINED_MAX: usize = 50_000;
/// An idle timeout that never passes: for a holder in this very process, alive as long as the
/// lease table is.
pub const NEVER_IDLE: Duration = Duration::MAX;
/// Events buffered per lease for slow stream readers.
const EVENT_BUFFER: usize = 16;
/// The reason of a lease whose validity ran out. For a lease without auto-renewal that is how
/// its caller chose it to end: counted as expired (`lock_leases_expired_total`, logged at
/// info), never as lost.
const EXPIRED: &str = "expired";

/// The lease manager's settings.
#[derive(Clone, Copy, Debug)]
pub struct LeasePolicy {
    /// TTL bounds and the adaptive TTL.
    pub ttl: TtlPolicy,
    /// When renewals fall due.
    pub schedule: RenewalSchedule,
    /// Release a lease whose app showed no sign of life this long (default per lease).
    pub idle_timeout: Duration,
    /// Upper bound on a caller's idle timeout.
    pub max_idle_timeout: Duration,
    /// Upper bound on a caller's blocking wait.
    pub max_wait: Duration,
    /// How long an ended lease stays readable.
    pub retention: Duration,
    /// How many ended leases stay readable at most (the oldest forgotten first, even within
    /// their retention): what bounds the table's memory under churn.
    pub retained_max: usize,
    /// Shadow TTL = lease TTL × this, capped at `shadow_cap`.
    pub shadow_multiplier: u32,
    /// The longest a shadow may live: the fleet's restart quarantine.
    pub shadow_cap: Duration,
    /// Who acknowledges a force release's revocation of a lease.
    pub revocations: Revocations,
}

/// One lease and the means to reach its task and its watchers. What only a watcher or a
/// holder in this process needs (the event channel, the validity channel) is made when the
/// first one asks, not for every lease.
pub(crate) struct Tracked {
    record: Mutex<LeaseRecord>,
    /// Made by the first watcher; events sent before it have nobody to reach.
    events: OnceLock<broadcast::Sender<LeaseEvent>>,
    /// Wakes the task after a change it must see (renewal, keepalive, release).
    wake: Notify,
    /// Serialises the engine calls of this lease (manual and automatic renewals, release).
    ops: tokio::sync::Mutex<()>,
    /// Set when the lease ends (release begun, or lost): a renewal or shadow in flight
    /// stops waiting, so the release goes out at once, after what was already sent.
    ending: Ending,
    /// Release attempts made so far (see `renewal::start_release`).
    release_rounds: AtomicU32,
    /// Told after each release attempt (its `DELETE`s wait for one).
    release_round: Notify,
    /// Whether a request has already been told `released: true`.
    release_reported: AtomicBool,
    /// `lease.valid_until` as renewals move it, for a holder in this process (`holder`):
    /// made when the holder first asks.
    validity: OnceLock<watch::Sender<Instant>>,
    /// With [`Revocations::ByTheHolder`]: the holder acknowledged the revocation, so every
    /// later announcement of it is acknowledged at once.
    holder_acknowledged: AtomicBool,
    /// The table's tally for the log summary.
    activity: Arc<Activity>,
    /// Whether the lease has a task of its own (the table renews it). Without one, its end
    /// is armed in the table's `expiry` and its end retires it.
    has_task: bool,
    /// The table, to arm the end of a lease without a task and to retire it.
    table: Weak<LeaseManager>,
    /// The deadline armed for a lease without a task (see `expiry`).
    expiry_armed: Mutex<Option<Instant>>,
}

// === impl Tracked ===

impl Tracked {
    pub(crate) fn record(&self) -> RecordGuard<'_> {
        // Every critical section only assigns fields, so a poisoned record is still whole.
        let record = self
            .record
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        RecordGuard::new(record, &self.validity)
    }

    pub(crate) fn view(&self) -> LeaseView {
        self.record().view(Instant::now())
    }

    /// Where the lease stands now, and what ended it or is ending it (`None` while it is
    /// held).
    pub(crate) fn state_and_reason(&self) -> (LeaseState, Option<&'static str>) {
        let record = self.record();
        (record.state_at(Instant::now()), record.reason)
    }

    /// The lease's validity or schedule moved: its task looks again, or (a lease without a
    /// task) a sooner end is armed.
    pub(crate) fn rearm(self: &Arc<Self>) {
        if self.has_task {
            self.wake.notify_one();
            return;
        }
        let valid_until = self.record().lease.valid_until;
        if let Some(table) = self.table.upgrade() {
            table.expiries.arm(self, valid_until);
        }
    }

    fn expiry_armed(&self) -> MutexGuard<'_, Option<Instant>> {
        // Assignments only: a poisoned deadline is still whole.
        self.expiry_armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The lease's future events.
    fn subscribe(&self) -> broadcast::Receiver<LeaseEvent> {
        let sender = self
            .events
            .get_or_init(|| broadcast::channel(EVENT_BUFFER).0);
        sender.subscribe()
    }

    /// Tells the lease's watchers, if it has any.
    pub(crate) fn send_event(&self, event: LeaseEvent) {
        if let Some(sender) = self.events.get() {
            let _ = sender.send(event);
        }
    }

    /// Where the lease's validity ends, followed as renewals move it.
    fn validity(&self) -> watch::Receiver<Instant> {
        // Made under the record's lock, which every change of `valid_until` holds: the
        // channel starts from the value in force and misses no later change.
        let record = self.record();
        let sender = self
            .validity
            .get_or_init(|| watch::channel(record.lease.valid_until).0);
        sender.subscribe()
    }

    /// Counts a release attempt and wakes the `DELETE`s waiting for one.
    pub(crate) fn release_round_done(&self) {
        self.release_rounds.fetch_add(1, Ordering::AcqRel);
        self.release_round.notify_waiters();
    }

    /// Waits until more than `seen` release attempts were made.
    async fn release_round_after(&self, seen: u32) {
        loop {
            let notified = self.release_round.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.release_rounds.load(Ordering::Acquire) > seen {
                return;
            }
            notified.await;
        }
    }

    /// The lease's resource and id.
    fn key(&self) -> (String, LeaseId) {
        let record = self.record();
        (record.lease.resource.clone(), record.lease.id)
    }

    /// Held or degraded → releasing (validity 0 from now, renewals stopped).
    fn begin_release(&self, reason: &'static str) -> Begin {
        let mut record = self.record();
        let now = Instant::now();
        match record.state_at(now) {
            LeaseState::Held | LeaseState::Degraded => {}
            LeaseState::Releasing => return Begin::Joined,
            LeaseState::Lost | LeaseState::Released => return Begin::Ended,
        }
        record.state = LeaseState::Releasing;
        record.reason = Some(reason);
        record.ended_at = Some(now);
        drop(record);
        self.ending.end();
        self.wake.notify_one();
        Begin::Started
    }

    /// Moves the lease to a terminal state once, telling the watchers. A lease being
    /// released ends released, never lost. A lease without auto-renewal that ran out
    /// (`expired`) is lost to the API but counted and logged as expired: its caller chose it.
    fn finish(&self, state: LeaseState, reason: &'static str) -> bool {
        let mut record = self.record();
        let releasing = record.state == LeaseState::Releasing;
        if record.state.is_terminal() || (releasing && state == LeaseState::Lost) {
            return false;
        }
        record.state = state;
        record.reason = Some(reason);
        let now = Instant::now();
        let ended_at = record.lease.valid_until.min(now);
        record.ended_at.get_or_insert(ended_at);
        let held_for = record.acquired_at.elapsed();
        let chosen = !record.auto_renew && reason == EXPIRED;
        self.activity
            .ended(&record.lease, state, reason, chosen, held_for);
        let event = if state == LeaseState::Lost {
            "lost"
        } else {
            "released"
        };
        // A view for the watchers only: one who subscribes after this look reads the ended
        // state in its first view, taken under the record's lock held here.
        let lease = self.events.get().is_some().then(|| record.view(now));
        let id = record.lease.id;
        drop(record);
        self.ending.end();
        if let Some(lease) = lease {
            self.send_event(LeaseEvent { event, lease });
        }
        if self.has_task {
            // Its task ends, and retires it.
            self.wake.notify_one();
        } else {
            // Nothing is due for it any more: its queued deadline no longer counts.
            *self.expiry_armed() = None;
            if let Some(table) = self.table.upgrade() {
                table.retire(id, Instant::now());
            }
        }
        true
    }
}

/// An open event stream's hold on its lease: the stream proves the app alive through it
/// (see `reading`), and its closing counts as a sign of life.
pub struct WatchGuard(Arc<Tracked>);

impl WatchGuard {
    /// The app was alive at `at` (its stream read what was sent after it). The task needs no
    /// wake-up: it looks again at the idle deadline it had, and finds the later one.
    pub fn alive_at(&self, at: Instant) {
        let mut record = self.0.record();
        record.last_seen = record.last_seen.max(at);
    }

    /// The lease's idle timeout, which sets how often its stream checks the app.
    pub fn idle_timeout(&self) -> Duration {
        self.0.record().idle_timeout
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.record().last_seen = Instant::now();
        self.0.wake.notify_one();
    }
}

/// An open event stream: the lease as it was, its future events, and the liveness guard.
pub struct Watch {
    pub view: LeaseView,
    pub events: broadcast::Receiver<LeaseEvent>,
    pub guard: WatchGuard,
}

/// The table of leases this sidecar holds.
pub struct LeaseManager {
    engine: Arc<Redlock>,
    /// Renewals due together go out as one script call per master.
    renewals: Arc<Renewals>,
    policy: LeasePolicy,
    table: Mutex<HashMap<LeaseId, Arc<Tracked>>>,
    /// Each re-entry hold's id → the lease it is a hold of, until that lease is forgotten.
    holds: Mutex<HashMap<LeaseId, LeaseId>>,
    /// Ended leases in the order they were retired, with when each is forgotten.
    retired: Mutex<VecDeque<(Instant, LeaseId)>>,
    /// The ends of the leases without a task of their own.
    expiries: Arc<expiry::Expiries>,
    tasks: TaskTracker,
    /// Set at shutdown: no new lease is granted.
    closing: AtomicBool,
    /// Cancelled at shutdown, so that what never ends on its own (an election's observe
    /// stream) ends then.
    shutdown: CancellationToken,
    /// Grants, releases and losses for the log summary.
    activity: Arc<Activity>,
}

// === impl LeaseManager ===

impl LeaseManager {
    /// A manager of leases taken on `engine`, listening for their revocations.
    pub fn new(engine: Arc<Redlock>, policy: LeasePolicy) -> Arc<Self> {
        let manager = Arc::new(Self {
            renewals: Arc::new(Renewals::start(Arc::clone(&engine))),
            engine,
            policy,
            table: Mutex::new(HashMap::new()),
            holds: Mutex::new(HashMap::new()),
            retired: Mutex::new(VecDeque::new()),
            expiries: Arc::default(),
            tasks: TaskTracker::new(),
            closing: AtomicBool::new(false),
            shutdown: CancellationToken::new(),
            activity: Arc::default(),
        });
        let expiries = Arc::clone(&manager.expiries);
        tokio::spawn(expiry::expire_leases(Arc::downgrade(&manager), expiries));
        let summaries = logs::log_summaries(Arc::downgrade(&manager), SUMMARY_INTERVAL);
        tokio::spawn(summaries);
        // Ended leases stay readable for the retention, and for at most a second more.
        let sweep_every =
            (manager.policy.retention / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::spawn(retired::sweep_retired_every(
            Arc::downgrade(&manager),
            sweep_every,
        ));
        if let Some(revocations) = manager.engine.revocations() {
            tokio::spawn(tell_revoked(Arc::downgrade(&manager), revocations));
        }
        manager
    }

    /// The engine leases are taken on.
    pub fn engine(&self) -> &Arc<Redlock> {
        &self.engine
    }

    /// The manager's settings.
    pub fn policy(&self) -> &LeasePolicy {
        &self.policy
    }

    /// The TTL a lease gets when its caller names none.
    pub fn adaptive_ttl(&self) -> Duration {
        let p99 = self.engine.fleet().quorum_rtt_p99(Instant::now());
        self.policy.ttl.adaptive(p99)
    }

    /// Sets the gauges (active leases, adaptive TTL, quorum RTT, masters up, quarantined and
    /// refused)
    /// to their values now; called at every scrape.
    pub fn record_gauges(&self) {
        let fleet = self.engine.fleet();
        let now = Instant::now();
        let nodes = fleet.nodes();
        let up = nodes.iter().filter(|n| n.is_up()).count() as u64;
        let quarantined = nodes.iter().filter(|n| n.is_quarantined(now)).count() as u64;
        let refused = nodes
            .iter()
            .filter(|n| n.exclusion().is_some_and(|e| e.needs_operator()));
        let refused = refused.count() as u64;
        METRICS.active_leases.record(self.active() as u64, &[]);
        METRICS.retained_leases.record(self.retained() as u64, &[]);
        METRICS
            .adaptive_ttl
            .record(self.adaptive_ttl().as_secs_f64(), &[]);
        if let Some(p99) = fleet.quorum_rtt_p99(now) {
            METRICS.quorum_rtt_p99.record(p99.as_secs_f64(), &[]);
        }
        METRICS.masters_up.record(up, &[]);
        METRICS.masters_quarantined.record(quarantined, &[]);
        METRICS.masters_refused.record(refused, &[]);
        METRICS.masters_quorum.record(fleet.quorum() as u64, &[]);
        METRICS
            .oldest_lease_age
            .record(self.oldest_held(now).as_secs_f64(), &[]);
    }

    /// How long the oldest lease still held (or degraded) has been held; zero when none.
    fn oldest_held(&self, now: Instant) -> Duration {
        let table = self.table();
        let ages = table.values().filter_map(|tracked| {
            let record = tracked.record();
            let held = !record.state_at(now).is_ended();
            held.then(|| now.saturating_duration_since(record.acquired_at))
        });
        ages.max().unwrap_or(Duration::ZERO)
    }

    /// Leases held or degraded right now.
    pub fn active(&self) -> usize {
        let table = self.table();
        let now = Instant::now();
        let active = table
            .values()
            .filter(|t| !t.record().state_at(now).is_ended());
        active.count()
    }

    /// Takes `request.resource` for the app, waiting up to `request.wait` (capped by policy).
    /// Refused with `Acquired::Closing` once shutdown began; a grant that lands after that is
    /// released at once.
    pub async fn acquire(self: &Arc<Self>, request: AcquireRequest) -> Result<Acquired, Error> {
        if self.is_closing() {
            return Ok(Acquired::Closing);
        }
        let ttl = request.ttl.unwrap_or_else(|| self.adaptive_ttl());
        let wait = request.wait.min(self.policy.max_wait);
        let outcome = self.acquire_waiting(&request, ttl, wait).await?;
        Ok(match outcome {
            AcquireOutcome::Acquired(lease) if self.is_closing() => {
                // Its own task: a caller that goes away cannot leave the grant standing.
                let engine = Arc::clone(&self.engine);
                let release = async move { engine.release(&lease.resource, lease.id).await };
                tokio::spawn(release).await.ok().transpose()?;
                Acquired::Closing
            }
            AcquireOutcome::Acquired(lease) => Acquired::Granted(self.track(lease, &request)),
            AcquireOutcome::Contended(refusal) if refusal.cause == Shortfall::Dequeued => {
                Acquired::Dequeued
            }
            AcquireOutcome::Contended(_) => Acquired::Held,
            AcquireOutcome::NoQuorum(_) => Acquired::NoQuorum,
        })
    }

    /// Blocking acquisition: the engine's, through its wake-up queues.
    async fn acquire_waiting(
        &self,
        request: &AcquireRequest,
        ttl: Duration,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        let (resource, owner) = (request.resource.as_str(), request.owner.as_str());
        let engine = &self.engine;
        // Every kind but the plain lock waits in a box of its own: their futures are larger
        // (up to 4 KiB against 2.2 for the plain lock's), and this one's size, moved into
        // every acquisition's future, is its largest branch's.
        if let Some(value) = &request.campaign {
            return if request.fair {
                Box::pin(engine.campaign_fair_with_wait(resource, owner, value, ttl, wait)).await
            } else {
                Box::pin(engine.campaign_with_wait(resource, owner, value, ttl, wait)).await
            };
        }
        let rw = |mode, beside| RwRequest {
            resource,
            owner,
            ttl,
            mode,
            beside,
        };
        let rw_request = match request.kind {
            AcquireKind::Read { beside } => rw(RwMode::Read, beside),
            _ => rw(RwMode::Write, None),
        };
        match (request.kind, request.fair) {
            (AcquireKind::Lock, false) => {
                engine.acquire_with_wait(resource, owner, ttl, wait).await
            }
            (AcquireKind::Lock, true) => {
                Box::pin(engine.acquire_fair_with_wait(resource, owner, ttl, wait)).await
            }
            (AcquireKind::Permit(permits), false) => {
                let waiting = engine.acquire_permit_with_wait(resource, owner, ttl, permits, wait);
                Box::pin(waiting).await
            }
            (AcquireKind::Permit(permits), true) => {
                let waiting =
                    engine.acquire_permit_fair_with_wait(resource, owner, ttl, permits, wait);
                Box::pin(waiting).await
            }
            (AcquireKind::Read { .. } | AcquireKind::Write, false) => {
                Box::pin(engine.acquire_rw_with_wait(rw_request, wait)).await
            }
            (AcquireKind::Read { .. } | AcquireKind::Write, true) => {
                Box::pin(engine.acquire_rw_fair_with_wait(rw_request, wait)).await
            }
        }
    }

    /// Deadlines queued for the leases without auto-renewal (see `expiry`): at most about
    /// four times the table's leases, or a few thousand.
    pub fn queued_expiries(&self) -> usize {
        self.expiries.len()
    }

    /// Whether shutdown began: no new lease is granted.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Resolves once shutdown began.
    pub fn closing(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.shutdown.clone().cancelled_owned()
    }

    /// The lease `id` as the API shows it, while this manager knows it.
    pub fn get(&self, id: LeaseId) -> Option<LeaseView> {
        self.find(id).map(|t| t.view())
    }

    /// A sign of life from the app; refused once the lease has ended.
    pub fn keepalive(&self, id: LeaseId) -> Result<LeaseView, RenewError> {
        let tracked = self.find(id).ok_or(RenewError::Unknown)?;
        let view = {
            let mut record = tracked.record();
            let now = Instant::now();
            if record.state_at(now).is_ended() {
                return Err(RenewError::Gone(Box::new(record.view(now))));
            }
            record.last_seen = now;
            record.view(now)
        };
        tracked.wake.notify_one();
        Ok(view)
    }

    /// Extends the lease now, to `ttl` or its current TTL.
    pub async fn renew(&self, id: LeaseId, ttl: Option<Duration>) -> Result<LeaseView, RenewError> {
        let tracked = self.find(id).ok_or(RenewError::Unknown)?;
        self.renew_tracked(&tracked, ttl).await
    }

    /// Extends the lease of `tracked` now (a sign of life), as [`LeaseManager::renew`].
    async fn renew_tracked(
        &self,
        tracked: &Arc<Tracked>,
        ttl: Option<Duration>,
    ) -> Result<LeaseView, RenewError> {
        let view = tracked.view();
        if view.state.is_ended() {
            return Err(RenewError::Gone(Box::new(view)));
        }
        tracked.record().last_seen = Instant::now();
        let ttl = ttl.unwrap_or_else(|| tracked.record().lease.ttl);
        match renewal::renew(&self.renewals, &self.policy, tracked, ttl).await? {
            Some(view) => Ok(view),
            None if tracked.view().state.is_ended() => {
                Err(RenewError::Gone(Box::new(tracked.view())))
            }
            None => Err(RenewError::NoQuorum),
        }
    }

    /// Releases the lease on the fleet and waits for its first attempt: sent from this task
    /// when this call began the release (a caller that goes away does not stop it, see
    /// `renewal::release_from_caller`), or the attempt under way waited for. `None` when
    /// this sidecar does not know it.
    pub async fn release(&self, id: LeaseId, reason: &'static str) -> Option<ReleaseAnswer> {
        let tracked = self.find(id)?;
        let seen = tracked.release_rounds.load(Ordering::Acquire);
        match tracked.begin_release(reason) {
            Begin::Started => renewal::release_from_caller(&self.engine, &tracked).await,
            Begin::Joined => tracked.release_round_after(seen).await,
            Begin::Ended => {}
        }
        let (state, ended_by) = tracked.state_and_reason();
        let ours = reason == "released" && ended_by == Some("released");
        let released = ours
            && state == LeaseState::Released
            && !tracked.release_reported.swap(true, Ordering::AcqRel);
        Some(ReleaseAnswer {
            released,
            state,
            reason: ended_by,
        })
    }

    /// Opens an event stream on the lease (a sign of life; while open, the stream proves the
    /// app alive as long as it reads, through its guard).
    pub fn watch(&self, id: LeaseId) -> Option<Watch> {
        let tracked = self.find(id)?;
        let events = tracked.subscribe();
        tracked.record().last_seen = Instant::now();
        Some(Watch {
            view: tracked.view(),
            events,
            guard: WatchGuard(tracked),
        })
    }

    /// Shutdown: grants no new lease, releases every lease still held, in parallel, and
    /// waits for each release's first attempt.
    pub async fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.shutdown.cancel();
        let held: Vec<LeaseId> = self.table().keys().copied().collect();
        let releases = held.into_iter().map(|id| self.release(id, "shutdown"));
        futures_util::future::join_all(releases).await;
        self.tasks.close();
    }

    fn track(self: &Arc<Self>, lease: Lease, request: &AcquireRequest) -> LeaseView {
        let now = Instant::now();
        let granted_at = lease.valid_until - lease.validity;
        let record = LeaseRecord {
            renew_at: self
                .policy
                .schedule
                .renew_at(granted_at, lease.ttl, rand::random()),
            lease,
            limit: request.kind.limit(),
            election: request.campaign.clone(),
            state: LeaseState::Held,
            acquired_at: now,
            reason: None,
            auto_renew: request.auto_renew,
            idle_timeout: request.idle_timeout.unwrap_or(self.policy.idle_timeout),
            last_seen: now,
            ended_at: None,
            holds: Default::default(),
        };
        let id = record.lease.id;
        lease_event!(
            debug,
            &record.lease,
            "lease granted",
            auto_renew = record.auto_renew
        );
        self.activity.granted();
        let tracked = Arc::new(Tracked {
            record: Mutex::new(record),
            events: OnceLock::new(),
            wake: Notify::new(),
            ops: tokio::sync::Mutex::new(()),
            ending: Ending::default(),
            release_rounds: AtomicU32::new(0),
            release_round: Notify::new(),
            release_reported: AtomicBool::new(false),
            validity: OnceLock::new(),
            holder_acknowledged: AtomicBool::new(false),
            activity: Arc::clone(&self.activity),
            has_task: request.auto_renew,
            table: Arc::downgrade(self),
            expiry_armed: Mutex::new(None),
        });
        self.table().insert(id, Arc::clone(&tracked));
        let view = tracked.view();
        if !request.auto_renew {
            let valid_until = tracked.record().lease.valid_until;
            self.expiries.arm(&tracked, valid_until);
            return view;
        }
        let (renewals, policy, manager) = (
            Arc::clone(&self.renewals),
            self.policy,
            Arc::downgrade(self),
        );
        self.tasks.spawn(async move {
            renewal::drive(&renewals, &policy, &tracked).await;
            drop(tracked);
            if let Some(manager) = manager.upgrade() {
                manager.retire(id, Instant::now());
            }
        });
        view
    }

    fn find(&self, id: LeaseId) -> Option<Arc<Tracked>> {
        self.table().get(&id).cloned()
    }

    fn table(&self) -> MutexGuard<'_, HashMap<LeaseId, Arc<Tracked>>> {
        // Inserts and removes only: a poisoned table is still consistent.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Marks each lease of this sidecar that a force release revokes lost (`revoked`) as soon as
/// a master announces it, and acknowledges (see [`renewal::revoke`]). Announcements missed
/// (a lagging receiver, a master's subscriber connection down) are caught by the lease's next
/// renewal, which finds the tombstone.
async fn tell_revoked(manager: Weak<LeaseManager>, mut revocations: broadcast::Receiver<LeaseId>) {
    loop {
        let id = match revocations.recv().await {
            Ok(id) => id,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(manager) = manager.upgrade() else {
            return;
        };
        if let Some(tracked) = manager.find(id) {
            renewal::revoke(&manager.engine, &manager.policy, &tracked);
        }
    }
}

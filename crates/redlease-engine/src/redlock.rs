//! The Redlock engine: acquire, extend and release, each fanned out to every master at once.
//!
//! The pure arithmetic (quorum, validity, per-node timeout) is in [`quorum`], the fencing plan
//! in [`fencing`]; this module only sends and collects.

mod account;
mod calls;
mod decision;
pub mod election;
mod extend;
pub mod fair;
mod fanout;
pub mod fencing;
pub mod force;
pub mod inventory;
pub mod outcome;
pub mod quorum;
pub mod read_write;
mod release;
mod retry;
pub mod semaphore;
mod shadow;
pub mod slotted;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use self::calls::{acquire_commands, acquire_on, eval_on, AcquireEvent, ChainedRelease};
use self::decision::{decision, Decide, Decision};
use self::fanout::{fan_out, Fanout};
use self::quorum::{DriftPolicy, NodeTimeoutPolicy, Tally, Verdict};
use self::retry::ReleaseRetries;
use crate::fleet::{CallError, DeadlineKeeper, Fleet, Node};
use crate::keys::{validate_owner, validate_resource};
use crate::metrics::METRICS;
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::wakeup::Wakeups;
use crate::{Error, LeaseId};
pub use account::MasterAccount;
pub use election::{Leader, Leadership, Observer, ProclaimOutcome};
pub use extend::Extension;
pub use force::audit::AuditRecord;
pub use force::verdict::{MasterAnswer, Verdict as ForceVerdict};
pub use force::{ForceOptions, ForceRelease, ForcedMaster, RemovedHolder};
pub use inventory::{Holding, LockPage, LockView, MasterView, QuorumHolder};
pub use outcome::{
    AcquireOutcome, ExtendOutcome, Lease, NodeVote, Refusal, ReleaseOutcome, Renewal, Shortfall,
};
pub use release::Release;
pub use semaphore::Permits;

/// Shortest TTL accepted.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_millis(10);
/// Longest TTL accepted: the longest a lease can outlive its holder.
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(30);
/// Blocking acquire waits a random delay between these two before trying again.
pub const DEFAULT_RETRY_DELAY_MIN: Duration = Duration::from_millis(10);
/// Longest pause between two attempts of a blocking acquisition without wake-ups.
pub const DEFAULT_RETRY_DELAY_MAX: Duration = Duration::from_millis(100);

/// Settings of the engine.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// How much of the TTL is set aside for clock drift.
    pub drift: DriftPolicy,
    /// A grant or renewal must leave more validity than this.
    pub min_validity: Duration,
    /// Shortest TTL a lease may ask for.
    pub min_ttl: Duration,
    /// Longest TTL a lease may ask for.
    pub max_ttl: Duration,
    /// How long each master may take to answer one call.
    pub node_timeout: NodeTimeoutPolicy,
    /// Shortest pause between two attempts of a blocking acquisition without wake-ups.
    pub retry_delay_min: Duration,
    /// Longest pause between two attempts of a blocking acquisition without wake-ups.
    pub retry_delay_max: Duration,
    /// A fair waiter's heartbeat TTL ([`fair`]): a waiter that died delays its queue by at
    /// most this.
    pub fair_heartbeat: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            drift: DriftPolicy::default(),
            min_validity: quorum::DEFAULT_MIN_VALIDITY,
            min_ttl: DEFAULT_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL,
            node_timeout: NodeTimeoutPolicy::default(),
            retry_delay_min: DEFAULT_RETRY_DELAY_MIN,
            retry_delay_max: DEFAULT_RETRY_DELAY_MAX,
            fair_heartbeat: fair::DEFAULT_FAIR_HEARTBEAT,
        }
    }
}

/// Redlock over a fleet of independent masters.
pub struct Redlock {
    fleet: Arc<Fleet>,
    options: EngineOptions,
    /// Counts every fan-out in flight and runs the per-master calls a caller left behind, so
    /// `settle` can wait for writes and releases still in flight.
    tasks: TaskTracker,
    /// Passes every fan-out's deadline on one timer.
    keeper: DeadlineKeeper,
    /// Releases a master did not answer with a result, sent again until it does.
    retries: Arc<ReleaseRetries>,
    /// Release messages for blocking acquisitions, when the engine has them.
    wakeups: Option<Arc<Wakeups>>,
}

// === impl Redlock ===

impl Redlock {
    /// An engine on `fleet` (shared with whatever else uses it).
    pub fn new(fleet: Arc<Fleet>, options: EngineOptions) -> Self {
        if options.max_ttl > fleet.quarantine() {
            tracing::warn!(
                max_ttl_ms = options.max_ttl.as_millis() as u64,
                quarantine_ms = fleet.quarantine().as_millis() as u64,
                "max TTL exceeds the restart quarantine: a restarted master may vote while a \
                 lease it forgot still stands"
            );
        }
        let tasks = TaskTracker::new();
        let key_lifetime = fleet.quarantine().max(fleet.options().quarantine);
        let retries = ReleaseRetries::new(key_lifetime);
        Self {
            fleet,
            options,
            tasks,
            keeper: DeadlineKeeper::new(),
            retries,
            wakeups: None,
        }
    }

    /// Blocking acquisitions ([`Redlock::acquire_with_wait`]) of this engine queue first come
    /// first served per resource and retry when a release message comes (see [`Wakeups`]),
    /// instead of at random intervals only.
    pub fn with_wakeups(mut self, wakeups: Arc<Wakeups>) -> Self {
        self.wakeups = Some(wakeups);
        self
    }

    /// The lease ids force releases revoke from now on (see [`Wakeups::revocations`]); `None`
    /// without wake-ups, whose connections carry them.
    pub fn revocations(&self) -> Option<tokio::sync::broadcast::Receiver<crate::LeaseId>> {
        self.wakeups.as_ref().map(|wakeups| wakeups.revocations())
    }

    /// Waits (at most `timeout`) until no per-master call of this engine is in flight: the
    /// writes that went out after a quorum answered, the releases of abandoned grants, and the
    /// releases being sent again to masters that have a connection now and did not answer them
    /// with a result yet (one answering error replies keeps it waiting up to `timeout`), and
    /// the preparations still writing a master's marker or quarantine record (so a process
    /// that exits early leaves no master that answered unmarked). Call it before closing the
    /// connections or exiting the process.
    pub async fn settle(&self, timeout: Duration) -> bool {
        self.tasks.close();
        let both = async {
            self.tasks.wait().await;
            self.retries.wait_until_settled().await;
            self.fleet.settle_preparations(timeout).await;
        };
        let settled = tokio::time::timeout(timeout, both).await.is_ok();
        self.tasks.reopen();
        settled
    }

    /// The masters this engine sends to.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    /// The options the engine was made with.
    pub fn options(&self) -> &EngineOptions {
        &self.options
    }

    /// The per-node timeout for a lock write with `ttl`, from the fleet's current RTT.
    pub fn node_timeout(&self, ttl: Duration, now: Instant) -> Duration {
        let p99 = self.fleet.recent_quorum_rtt_p99(now);
        self.options.node_timeout.timeout(ttl, p99)
    }

    /// One attempt to take `resource` for `owner` for `ttl`.
    #[tracing::instrument(level = "debug", skip(self), fields(ttl_ms = ttl.as_millis() as u64))]
    pub async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(resource, owner, ttl)?;
        let (outcome, start) = self.acquire_lock(resource, owner, ttl).await;
        METRICS.record_acquisition(outcome.label(), start.elapsed());
        Ok(outcome)
    }

    /// One attempt to take the lock `name` (a lock name of any kind whose lock is taken by
    /// `SET NX`: the resource's own, or its election's), its arguments checked by the caller;
    /// with when it began, for the caller's metrics.
    async fn acquire_lock(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> (AcquireOutcome, Instant) {
        let id = LeaseId::random();
        let keys = self.fleet.keyspace().resource(name);
        let start = Instant::now();
        let timeout = self.node_timeout(ttl, start);
        let (decision, decided) = decision();
        let commands = acquire_commands(&keys, id, owner, ttl);
        let release = ChainedRelease::new(
            keys.lock,
            keys.released_channel,
            id,
            Arc::clone(&self.retries),
        );
        let until = start + timeout;
        let mut events = fan_out(
            &self.tasks,
            &self.keeper,
            self.fleet.nodes(),
            until,
            |node, deadline, reply| {
                acquire_on(
                    node,
                    commands.clone(),
                    release.clone(),
                    (deadline, timeout),
                    decided.clone(),
                    reply,
                )
            },
        );
        let mut sent = 0;
        let (tally, votes) = collect_votes(&mut events, self.fleet.len(), |event| match event {
            AcquireEvent::Vote(vote) => Some(vote),
            AcquireEvent::Sent => {
                sent += 1;
                None
            }
            AcquireEvent::Released => None,
        })
        .await;
        let attempt = Attempt {
            start,
            timeout,
            ttl,
            decision,
            events,
            sent,
        };
        let outcome = match tally.verdict() {
            Verdict::Yes => self.confirm(attempt, votes, id, name, owner).await,
            verdict => {
                let held = verdict == Verdict::No || tally.answered() >= self.fleet.quorum();
                let cause = if held {
                    Shortfall::Held
                } else {
                    Shortfall::TooFewAnswers
                };
                let refusal = abandon(attempt, votes, cause).await;
                if held {
                    AcquireOutcome::Contended(refusal)
                } else {
                    AcquireOutcome::NoQuorum(refusal)
                }
            }
        };
        (outcome, start)
    }

    /// Sends `call` to `nodes`, down or not (fence raises: running one late is harmless).
    fn send_ungated<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a Arc<Node>>,
        call: Arc<ScriptCall>,
        timeout: Duration,
    ) -> Fanout<Result<i64, CallError>> {
        let until = Instant::now() + timeout;
        fan_out(
            &self.tasks,
            &self.keeper,
            nodes,
            until,
            |node, deadline, reply| eval_on(node, call.clone(), deadline, reply),
        )
    }

    /// A resource, an owner and a TTL an acquisition of any kind may ask for.
    fn check_request(&self, resource: &str, owner: &str, ttl: Duration) -> Result<(), Error> {
        validate_resource(resource)?;
        validate_owner(owner)?;
        self.check_ttl(ttl)
    }

    /// Whether `ttl` is one this engine grants and extends (`min_ttl` to `max_ttl`).
    pub fn check_ttl(&self, ttl: Duration) -> Result<(), Error> {
        let (min, max) = (self.options.min_ttl, self.options.max_ttl);
        if ttl < min || ttl > max {
            return Err(Error::InvalidTtl(format!(
                "ttl must be between {} and {} ms",
                min.as_millis(),
                max.as_millis()
            )));
        }
        Ok(())
    }

    /// The fencing step and the validity check of a grant the masters voted `votes`: the
    /// token is the largest counter among the granting masters, the lagging ones are raised,
    /// and the grant stands if a quorum then holds the token and validity is left. Answers the
    /// token, the validity and when it was measured, or why the grant does not stand.
    async fn fence_and_judge(
        &self,
        votes: &[NodeVote],
        (start, ttl, timeout): (Instant, Duration, Duration),
        resource: &str,
    ) -> Result<(u64, Duration, Instant), Shortfall> {
        let granted: Vec<(usize, u64)> = votes
            .iter()
            .enumerate()
            .filter_map(|(i, vote)| match vote {
                NodeVote::Granted { counter } => Some((i, *counter)),
                _ => None,
            })
            .collect();
        // None only without a grant, which a quorum verdict rules out; kept total.
        let plan = fencing::plan(&granted).ok_or(Shortfall::TooFewAnswers)?;
        let confirmed = plan.at_token.len() + self.raise_fence(&plan, timeout).await;
        if confirmed < self.fleet.quorum() {
            tracing::warn!(
                resource,
                token = plan.token,
                confirmed,
                "fencing token not confirmed by a quorum"
            );
            return Err(Shortfall::FenceNotConfirmed);
        }
        let (opts, now) = (&self.options, Instant::now());
        let validity = quorum::validity(&opts.drift, start, now, ttl, opts.min_validity);
        let validity = validity.ok_or(Shortfall::ValidityExpired)?;
        Ok((plan.token, validity, now))
    }

    /// The fencing step and the validity check of a quorum grant.
    async fn confirm(
        &self,
        mut attempt: Attempt,
        votes: Vec<NodeVote>,
        id: LeaseId,
        resource: &str,
        owner: &str,
    ) -> AcquireOutcome {
        let (start, ttl) = (attempt.start, attempt.ttl);
        let judged = self
            .fence_and_judge(&votes, (start, ttl, attempt.timeout), resource)
            .await;
        let (token, validity, now) = match judged {
            Ok(judged) => judged,
            Err(cause) => return AcquireOutcome::NoQuorum(abandon(attempt, votes, cause).await),
        };
        attempt.wait_until_all_sent(self.fleet.len()).await;
        attempt.decision.send(Decision::Keep);
        AcquireOutcome::Acquired(Lease {
            id,
            resource: resource.to_string(),
            owner: owner.to_string(),
            fencing_token: token,
            ttl,
            validity,
            valid_until: now + validity,
        })
    }

    /// Raises the lagging granted masters to the token; returns how many now hold it.
    async fn raise_fence(&self, plan: &fencing::FencePlan, timeout: Duration) -> usize {
        if plan.to_raise.is_empty() {
            return 0;
        }
        let fence = self.fleet.keyspace().fence();
        let token = itoa::Buffer::new().format(plan.token).to_string();
        let call = Arc::new(ScriptCall::new(
            &SCRIPTS.raise_fence,
            &[fence.as_bytes()],
            &[token.as_bytes()],
        ));
        let nodes = plan.to_raise.iter().map(|&i| &self.fleet.nodes()[i]);
        let mut replies = self.send_ungated(nodes, call, timeout);
        let mut raised = 0;
        while let Some((_, result)) = replies.recv().await {
            raised += usize::from(matches!(result, Ok(counter) if counter as u64 >= plan.token));
        }
        METRICS.fence_raises.add(raised as u64, &[]);
        raised
    }

    fn judge_extension(
        &self,
        tally: Tally,
        votes: Vec<NodeVote>,
        start: Instant,
        ttl: Duration,
    ) -> ExtendOutcome {
        let valid_until_cap = self.options.drift.valid_until(start, ttl).or(Some(start));
        let refusal = |cause| Refusal {
            cause,
            votes: votes.clone(),
            valid_until_cap,
        };
        match tally.verdict() {
            Verdict::Yes => {
                let opts = &self.options;
                let now = Instant::now();
                match quorum::validity(&opts.drift, start, now, ttl, opts.min_validity) {
                    Some(validity) => ExtendOutcome::Extended(Renewal {
                        ttl,
                        validity,
                        valid_until: now + validity,
                    }),
                    None => ExtendOutcome::NoQuorum(refusal(Shortfall::ValidityExpired)),
                }
            }
            Verdict::No => ExtendOutcome::Lost(refusal(Shortfall::NotOurs)),
            Verdict::Pending | Verdict::Split => {
                ExtendOutcome::NoQuorum(refusal(Shortfall::TooFewAnswers))
            }
        }
    }
}

/// An acquisition in flight: what `confirm` and `abandon` need to finish it.
struct Attempt {
    start: Instant,
    timeout: Duration,
    ttl: Duration,
    decision: Decide,
    events: Fanout<AcquireEvent>,
    /// Masters whose write is already enqueued on their connection.
    sent: usize,
}

impl Attempt {
    /// A grant returns at quorum while slower masters' writes may not have left yet; a later
    /// release of this lease must queue behind them on each connection, so wait until every
    /// write is enqueued (microseconds: each task enqueues on its first poll).
    async fn wait_until_all_sent(&mut self, n: usize) {
        let deadline = Instant::now() + self.timeout;
        while self.sent < n {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some((_, AcquireEvent::Sent))) => self.sent += 1,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    tracing::warn!(sent = self.sent, n, "not every write was enqueued in time");
                    return;
                }
            }
        }
    }
}

/// Reads answers until the verdict is no longer pending (or every master has answered);
/// `to_vote` picks the votes out of the events.
async fn collect_votes<E>(
    events: &mut Fanout<E>,
    n: usize,
    mut to_vote: impl FnMut(E) -> Option<NodeVote>,
) -> (Tally, Vec<NodeVote>) {
    let mut tally = Tally::new(n);
    let mut votes = vec![NodeVote::NoAnswer; n];
    while tally.verdict() == Verdict::Pending {
        let Some((index, event)) = events.recv().await else {
            break;
        };
        if let Some(vote) = to_vote(event) {
            count_vote(&mut tally, &vote);
            votes[index] = vote;
        }
    }
    (tally, votes)
}

fn count_vote(tally: &mut Tally, vote: &NodeVote) {
    match vote {
        NodeVote::Granted { .. } => tally.yes += 1,
        NodeVote::Extend(reply) if reply.is_ours() => tally.yes += 1,
        NodeVote::Shadow(true) => tally.yes += 1,
        NodeVote::Refused { .. } | NodeVote::Extend(_) | NodeVote::Shadow(false) => tally.no += 1,
        NodeVote::Failed(_) => tally.failed += 1,
        NodeVote::NoAnswer => {}
    }
}

/// Tells every master's task to release, then waits (at most one node timeout past the
/// acquisition's own) until every master has voted and each one that answered with a write
/// has confirmed its release. Masters that timed out release in the background.
async fn abandon(mut attempt: Attempt, mut votes: Vec<NodeVote>, cause: Shortfall) -> Refusal {
    attempt.decision.send(Decision::Release);
    let mut releasing: Vec<bool> = votes.iter().map(answered_with_write).collect();
    let deadline = Instant::now().max(attempt.start + attempt.timeout) + attempt.timeout;
    let settled = |votes: &[NodeVote], releasing: &[bool]| {
        !votes.contains(&NodeVote::NoAnswer) && !releasing.contains(&true)
    };
    while !settled(&votes, &releasing) {
        let event = tokio::time::timeout_at(deadline, attempt.events.recv()).await;
        match event {
            Ok(Some((index, AcquireEvent::Vote(vote)))) => {
                releasing[index] = answered_with_write(&vote);
                votes[index] = vote;
            }
            Ok(Some((index, AcquireEvent::Released))) => releasing[index] = false,
            Ok(Some((_, AcquireEvent::Sent))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    tracing::debug!(?cause, "acquisition abandoned and released");
    Refusal {
        cause,
        votes,
        valid_until_cap: None,
    }
}

/// The master answered and may have written our lease: its release is worth waiting for.
fn answered_with_write(vote: &NodeVote) -> bool {
    matches!(
        vote,
        NodeVote::Granted { .. } | NodeVote::Failed(CallError::Reply(_) | CallError::LostMemory)
    )
}

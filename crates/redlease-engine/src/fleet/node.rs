//! One Redis master: its lock connection ([`Wire`]) and fred client, the per-call timeout, its
//! RTT record, its breaker, whether it may take lock writes (`ready`, maintained by
//! `membership`) and, when it may not though it answers, why ([`Exclusion`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fred::prelude::{ClientLike, ErrorKind};
use fred::types::{FromValue, Value};
use opentelemetry::metrics::BoundHistogram;
use tokio::sync::mpsc;
use tokio::time::Instant;

pub(super) mod admin;
pub mod status;

use super::deadline::Deadline;
use super::exclusion::Exclusion;
use super::health::Breaker;
use super::rtt::RttWindow;
use super::wire::{self, Target, Wire, WireError};
use crate::metrics::{self, METRICS};
use crate::resp::Commands;
use crate::scripts::{fence_was_lost, AcquireCommands, AcquireReply, ScriptCall};

/// Why a call to one master produced no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No reply within the per-node timeout. The command may still run later on the master.
    #[error("timed out")]
    Timeout,
    /// Not sent: disconnected, breaker open, quarantined or not yet prepared.
    #[error("down")]
    Down,
    /// The connection failed while the command was in flight.
    #[error("connection: {0}")]
    Connection(String),
    /// The master answered with an error reply.
    #[error("error reply: {0}")]
    Reply(String),
    /// The master's fence counter went back (or was gone) when an acquisition INCRed it: it
    /// lost its memory (a restart without persistence not yet seen as a reconnect, or a
    /// FLUSHALL). Its vote does not count, and it is prepared again (restart quarantine)
    /// before it takes writes.
    #[error("lost its memory (fence counter went back)")]
    LostMemory,
}

/// Whether a call goes out while the master may not take lock writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Lock writes (acquire, extend, shadow): only to a ready master.
    WhenUp,
    /// Releases and fence raises: always sent, so they queue behind any write still in flight.
    Always,
}

/// One master of the fleet.
pub struct Node {
    index: usize,
    /// The URL with its password masked, fit for logs and the fleet view.
    url: String,
    /// Every lock command goes here, in order.
    wire: Arc<Wire>,
    /// Preparation (scripts, identity, markers, fence reads) and the pub/sub-free admin
    /// commands go here.
    client: fred::clients::Client,
    /// Scripts loaded, identity checked, quarantine over, fence synced: lock writes may go here.
    ready: AtomicBool,
    /// A preparation (see `membership`) is running; at most one at a time.
    preparing: AtomicBool,
    /// It is the server of another configured master (one `run_id`): its answers never count.
    twin: AtomicBool,
    /// Counts the requests for a preparation: one that finishes sets the master ready only if
    /// no request came while it ran (a new connection, a NOSCRIPT, a counter that went back).
    prepare_requests: AtomicU64,
    /// Asks the fleet's membership task to prepare this master (again).
    prepare_tx: mpsc::UnboundedSender<usize>,
    /// The largest fence counter seen from this master (it never goes down: a counter below
    /// it is evidence of a memory loss).
    fence_seen: AtomicU64,
    /// `redis_command_rtt` bound to this master's `node` label once.
    command_rtt: BoundHistogram<f64>,
    state: Mutex<NodeState>,
}

struct NodeState {
    rtt: RttWindow,
    breaker: Breaker,
    /// The server's `run_id` when this process last identified it.
    run_id: Option<String>,
    /// Set while the master must not vote before this instant and then needs a fence sync.
    quarantine: Option<Instant>,
    /// An acquisition's `INCR` showed the counter went back: the next preparation quarantines
    /// it whatever it reads.
    counter_went_back: bool,
    /// Why the master answers but takes no votes (`None`: it votes, or it does not answer).
    exclusion: Option<Exclusion>,
}

// === impl Node ===

impl Node {
    pub(super) fn new(
        index: usize,
        url: String,
        (client, target): (fred::clients::Client, Target),
        (rtt, breaker): (RttWindow, Breaker),
        prepare_tx: mpsc::UnboundedSender<usize>,
    ) -> Arc<Self> {
        let state = NodeState {
            rtt,
            breaker,
            run_id: None,
            quarantine: None,
            counter_went_back: false,
            exclusion: None,
        };
        Arc::new_cyclic(|me: &std::sync::Weak<Self>| {
            let me = me.clone();
            // Every new lock connection may lead to a restarted master, as fred's do.
            let on_connect = Box::new(move || {
                if let Some(node) = me.upgrade() {
                    node.set_ready_false_and_prepare();
                }
            });
            Self {
                index,
                url,
                wire: Wire::new(target, on_connect),
                client,
                ready: AtomicBool::new(false),
                preparing: AtomicBool::new(false),
                prepare_requests: AtomicU64::new(0),
                twin: AtomicBool::new(false),
                prepare_tx,
                fence_seen: AtomicU64::new(0),
                command_rtt: METRICS.command_rtt_for(index),
                state: Mutex::new(state),
            }
        })
    }

    /// Position of this master in the configured list.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The URL with credentials masked.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The master's fred client, for preparation and inspection (not the lock path).
    pub fn client(&self) -> &fred::clients::Client {
        &self.client
    }

    /// The master's lock connection.
    pub fn wire(&self) -> &Wire {
        &self.wire
    }

    /// Both connections are up.
    pub fn is_connected(&self) -> bool {
        self.client.is_connected() && self.wire.is_connected()
    }

    /// Takes lock writes: connected, prepared, not quarantined, breaker closed.
    pub fn is_up(&self) -> bool {
        self.takes_writes() && !self.state().breaker.is_open()
    }

    /// Prepared and connected: a member of the fleet now, whose fence counter a rejoining
    /// master may be synced from (its breaker aside).
    pub fn is_member(&self) -> bool {
        self.takes_writes()
    }

    /// Restarted recently: takes no votes until its quarantine ends.
    pub fn is_quarantined(&self, now: Instant) -> bool {
        self.state().quarantine.is_some_and(|until| now < until)
    }

    /// The server's `run_id` as this process last identified it.
    pub fn run_id(&self) -> Option<String> {
        self.state().run_id.clone()
    }

    /// The `q`-quantile of recent round trips.
    pub fn rtt_quantile(&self, q: f64, now: Instant) -> Option<Duration> {
        self.state().rtt.quantile(q, now)
    }

    /// Runs `call`'s script here before `deadline`, recording the round trip and feeding the
    /// breaker.
    pub async fn eval<R: FromValue + Send + 'static>(
        &self,
        call: &ScriptCall,
        deadline: &Deadline,
        admission: Admission,
    ) -> Result<R, CallError> {
        let start = deadline.start();
        if admission == Admission::WhenUp && !self.admit(start) {
            return Err(CallError::Down);
        }
        let reply = self.evalsha(call, admission);
        self.timed(start, deadline, reply).await
    }

    /// Runs an acquisition's two commands here before `deadline`, recording their round trip
    /// and feeding the breaker; when the SET was refused, a `PTTL` of the lock follows (in
    /// what is left before `deadline`) to tell the holder's remaining time. Lock writes are sent
    /// once, only to a master that is up.
    ///
    /// NOSCRIPT cannot reveal a restarted master here (no script runs), so the fence counter
    /// does: an INCR answering no more than a counter seen before it was sent (or 1, the key
    /// gone) turns the vote into [`CallError::LostMemory`] and the master is prepared again,
    /// as NOSCRIPT does for the scripted writes.
    pub async fn acquire(
        &self,
        commands: &AcquireCommands,
        deadline: &Deadline,
    ) -> Result<AcquireReply, CallError> {
        let start = deadline.start();
        if !self.admit(start) {
            return Err(CallError::Down);
        }
        let floor = self.fence_seen.load(Ordering::Acquire);
        let pair = self.set_nx_and_incr(commands);
        let (written, counter) = self.timed(start, deadline, pair).await?;
        if fence_was_lost(counter, floor) {
            tracing::warn!(
                node = self.index,
                counter,
                floor,
                "fence counter went back: memory lost"
            );
            self.state().counter_went_back = true;
            self.set_ready_false_and_prepare();
            return Err(CallError::LostMemory);
        }
        self.fence_seen.fetch_max(counter as u64, Ordering::AcqRel);
        let holder_pttl = if written {
            None
        } else {
            // Within what is left of the same deadline (no timer of its own when shared).
            let pttl = [b"PTTL".as_slice(), commands.lock().as_bytes()];
            let reply = deadline.run(start, self.wire.command(&pttl)).await;
            let reply = reply.ok().and_then(Result::ok);
            reply.and_then(|r| convert::<i64>(r).ok())
        };
        // The counter is at least 2 here (`fence_was_lost` caught anything smaller).
        Ok(AcquireReply::from_commands(
            written,
            counter as u64,
            holder_pttl,
        ))
    }

    /// Sends `commands` (reads, and the writes of an operator's audit) on the lock connection
    /// whatever the master's state, and waits for their replies until `deadline`. Each reply
    /// may be an error reply of its own.
    pub async fn query(
        &self,
        commands: &Commands,
        deadline: &Deadline,
    ) -> Result<wire::Replies, CallError> {
        let send = async { Ok(self.wire.send(commands).await?) };
        self.timed(deadline.start(), deadline, send).await
    }

    /// PINGs this master within `timeout`, feeding the RTT window and the breaker.
    pub async fn ping(&self, timeout: Duration) -> bool {
        let ping = async { convert::<String>(self.wire.command(&[b"PING"]).await?) };
        let deadline = Deadline::After(timeout);
        self.timed(Instant::now(), &deadline, ping).await.is_ok()
    }

    /// Asks for this master to be prepared unless that is already under way or done.
    pub fn prepare_if_needed(&self) {
        let idle = !self.preparing.load(Ordering::Acquire);
        if idle && self.is_connected() && !self.ready.load(Ordering::Acquire) {
            self.request_prepare();
        }
    }

    /// Records a round trip measured elsewhere (a PING, a batch).
    pub fn record_rtt(&self, rtt: Duration, now: Instant) {
        self.command_rtt.record(metrics::seconds(rtt));
        let mut state = self.state();
        state.rtt.record(rtt, now);
        state.breaker.record_success();
    }

    /// A new connection may lead to a restarted master: no writes until it is prepared again.
    pub(super) fn set_ready_false_and_prepare(&self) {
        {
            // Under the lock `set_ready_unless_asked_again` checks the requests with: a
            // preparation ending now either sees this request, or set the master ready before
            // it is taken back here.
            let _state = self.state();
            self.ready.store(false, Ordering::Release);
            self.prepare_requests.fetch_add(1, Ordering::AcqRel);
        }
        let _ = self.prepare_tx.send(self.index);
    }

    pub(super) fn request_prepare(&self) {
        self.prepare_requests.fetch_add(1, Ordering::AcqRel);
        let _ = self.prepare_tx.send(self.index);
    }

    /// The count of preparation requests so far: a preparation notes it when it begins.
    pub(super) fn prepare_requests(&self) -> u64 {
        self.prepare_requests.load(Ordering::Acquire)
    }

    /// Claims the single preparation slot; `false` when one is already running.
    pub(super) fn begin_prepare(&self) -> bool {
        let claimed =
            self.preparing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire);
        claimed.is_ok()
    }

    pub(super) fn end_prepare(&self) {
        self.preparing.store(false, Ordering::Release);
    }

    pub(super) fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Lets lock writes through unless a preparation was requested since `requests` (counted
    /// when the preparation began), which then runs again instead. `false` when it must.
    pub(super) fn set_ready_unless_asked_again(&self, requests: u64) -> bool {
        // See `set_ready_false_and_prepare`.
        let _state = self.state();
        if self.prepare_requests.load(Ordering::Acquire) != requests {
            return false;
        }
        self.ready.store(true, Ordering::Release);
        true
    }

    /// Remembers `run_id`, returning the one seen before.
    pub(super) fn swap_run_id(&self, run_id: String) -> Option<String> {
        self.state().run_id.replace(run_id)
    }

    pub(super) fn quarantine(&self) -> Option<Instant> {
        self.state().quarantine
    }

    /// The fence counter a preparation left here: later INCRs must answer more. The floor
    /// never goes down.
    pub(super) fn raise_fence_seen(&self, counter: u64) {
        self.fence_seen.fetch_max(counter, Ordering::AcqRel);
    }

    /// The largest fence counter seen from this master.
    pub(super) fn fence_seen(&self) -> u64 {
        self.fence_seen.load(Ordering::Acquire)
    }

    /// Whether an acquisition saw the counter go back since the last preparation; clears it.
    pub(super) fn take_counter_went_back(&self) -> bool {
        std::mem::take(&mut self.state().counter_went_back)
    }

    /// Whether its answers count towards a quorum: not when it is the server of another
    /// configured master.
    pub fn counts_in_quorum(&self) -> bool {
        !self.twin.load(Ordering::Acquire)
    }

    pub(super) fn set_twin(&self, twin: bool) {
        self.twin.store(twin, Ordering::Release);
    }

    /// Why the master answers but takes no votes, if it does.
    pub fn exclusion(&self) -> Option<Exclusion> {
        self.state().exclusion.clone()
    }

    pub(super) fn set_exclusion(&self, exclusion: Option<Exclusion>) {
        self.state().exclusion = exclusion;
    }

    pub(super) fn set_quarantine(&self, until: Option<Instant>) {
        self.state().quarantine = until;
    }

    fn takes_writes(&self) -> bool {
        self.is_connected() && self.ready.load(Ordering::Acquire)
    }

    fn admit(&self, now: Instant) -> bool {
        self.takes_writes() && self.state().breaker.admit(now)
    }

    /// Lock writes are sent exactly once: on NOSCRIPT (a restarted master) the write did not
    /// run, and re-sending it later could put it behind a release of the same lease. The
    /// master is prepared again (scripts, identity, quarantine) before it takes writes.
    /// Releases and fence raises reload and retry at once: running them late is harmless.
    async fn evalsha<R: FromValue>(
        &self,
        call: &ScriptCall,
        admission: Admission,
    ) -> Result<R, CallError> {
        let result = self.send_evalsha(call).await;
        let noscript = matches!(&result, Err(CallError::Reply(e)) if e.starts_with("NOSCRIPT"));
        match admission {
            _ if !noscript => result,
            Admission::WhenUp => {
                self.set_ready_false_and_prepare();
                result
            }
            Admission::Always => Box::pin(self.reload_and_evalsha(call)).await,
        }
    }

    /// Sends one EVALSHA on the lock connection and waits for its reply.
    async fn send_evalsha<R: FromValue>(&self, call: &ScriptCall) -> Result<R, CallError> {
        convert(self.wire.send_one(call.commands()).await?)
    }

    async fn reload_and_evalsha<R: FromValue>(&self, call: &ScriptCall) -> Result<R, CallError> {
        call.script().load(&self.client).await.map_err(|error| {
            if is_connection_error(&error) {
                CallError::Connection(error.details().to_string())
            } else {
                CallError::Reply(error.details().to_string())
            }
        })?;
        self.send_evalsha(call).await
    }

    /// `SET lock value NX PX ttl` and `INCR fence`, written together on the lock connection
    /// on the first poll: whether the SET wrote, and the counter.
    async fn set_nx_and_incr(&self, commands: &AcquireCommands) -> Result<(bool, i64), CallError> {
        let mut replies = self.wire.send(commands.commands()).await?.into_iter();
        let (Some(set), Some(incr)) = (replies.next(), replies.next()) else {
            return Err(CallError::Reply("fewer replies than commands".into()));
        };
        let written = !convert::<Value>(set)?.is_null();
        Ok((written, convert(incr)?))
    }

    /// Awaits `call` until `deadline` (measured from `start` when it is the call's own),
    /// recording the round trip from `start` and feeding the breaker.
    async fn timed<R>(
        &self,
        start: Instant,
        deadline: &Deadline,
        call: impl Future<Output = Result<R, CallError>>,
    ) -> Result<R, CallError> {
        let result = deadline.run(start, call).await;
        let now = Instant::now();
        match result {
            Ok(Ok(reply)) => {
                self.record_rtt(now - start, now);
                Ok(reply)
            }
            Ok(Err(CallError::Connection(reason))) => {
                self.state().breaker.record_failure(now);
                Err(CallError::Connection(reason))
            }
            Ok(Err(CallError::Reply(reason))) => {
                self.record_rtt(now - start, now);
                Err(CallError::Reply(reason))
            }
            Ok(Err(other)) => Err(other),
            Err(()) => {
                self.state().breaker.record_failure(now);
                Err(CallError::Timeout)
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, NodeState> {
        // A panic while holding this lock cannot leave the RTT window, the breaker or the
        // membership fields half-updated in a way that matters, so a poisoned lock is used.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A reply converted to `R`; an error reply is the master's answer, not a connection fault.
fn convert<R: FromValue>(reply: wire::Reply) -> Result<R, CallError> {
    let value = reply.map_err(CallError::Reply)?;
    R::from_value(value).map_err(|e| CallError::Reply(format!("unexpected reply: {}", e.details())))
}

impl From<WireError> for CallError {
    fn from(error: WireError) -> Self {
        match error {
            WireError::Down | WireError::Overloaded => CallError::Down,
            WireError::Connection(reason) => CallError::Connection(reason),
        }
    }
}

fn is_connection_error(error: &fred::error::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Timeout | ErrorKind::Backpressure
    )
}

//! What each master's call does (driven by a [`super::fanout::Fanout`]), and the payloads it
//! sends: the acquire write (plain commands, with its chained release when the grant is
//! abandoned), scripted lock writes that vote, and ungated script calls.

use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use super::decision::{Decided, Decision};
use super::fanout::Reply;
use super::release::ReleaseTally;
use super::retry::ReleaseRetries;
use super::NodeVote;
use crate::fleet::{Admission, CallError, Deadline, Node};
use crate::keys::ResourceKeys;
use crate::scripts::{AcquireCommands, AcquireReply, ScriptCall, SCRIPTS};
use crate::LeaseId;

/// What a master's acquire task reports.
#[derive(Debug)]
pub(super) enum AcquireEvent {
    /// The write is on its way (enqueued on the master's connection).
    Sent,
    Vote(NodeVote),
    Released,
}

/// One master's part of an acquisition: the write, then — if the engine abandons the grant or
/// is dropped — the release, sent on the same connection after the write.
///
/// The write gives up at `deadline`; the release, sent whenever the engine decides, gets
/// `timeout` of its own.
pub(super) async fn acquire_on(
    node: Arc<Node>,
    commands: Arc<AcquireCommands>,
    release: Arc<ChainedRelease>,
    (deadline, timeout): (Deadline, Duration),
    decided: Decided,
    reply: Reply<AcquireEvent>,
) {
    let mut write = std::pin::pin!(node.acquire(&commands, &deadline));
    let first_poll = futures_util::poll!(&mut write);
    reply.send(AcquireEvent::Sent);
    let result = match first_poll {
        Poll::Ready(result) => result,
        Poll::Pending => write.await,
    };
    let vote = acquire_vote(result);
    let may_hold = !matches!(
        vote,
        NodeVote::Refused { .. } | NodeVote::Failed(CallError::Down)
    );
    reply.send(AcquireEvent::Vote(vote));
    if !may_hold {
        return;
    }
    // An acquisition dropped before it decided decides to release.
    if decided.wait().await != Decision::Keep {
        // Boxed: the rare path would otherwise make every acquisition's per-master future,
        // which is boxed and moved on each fan-out, a kilobyte larger.
        let own = Deadline::After(timeout);
        let call = release.call();
        let result = Box::pin(node.eval::<i64>(&call, &own, Admission::Always)).await;
        if result.is_err() {
            // Whatever the error, the release may not have run there.
            release.retries.push(Arc::clone(&node), call, None);
        }
        reply.send(AcquireEvent::Released);
    }
}

pub(super) fn acquire_vote(result: Result<AcquireReply, CallError>) -> NodeVote {
    match result {
        Ok(AcquireReply::Granted { counter }) => NodeVote::Granted { counter },
        Ok(AcquireReply::Refused { holder_remaining }) => NodeVote::Refused { holder_remaining },
        Err(error) => NodeVote::Failed(error),
    }
}

/// A lock write to one master (extend, shadow), its answer turned into a vote by `to_vote`.
pub(super) async fn vote_on(
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    deadline: Deadline,
    to_vote: fn(i64) -> NodeVote,
    reply: Reply<NodeVote>,
) {
    let result = node.eval(&call, &deadline, Admission::WhenUp).await;
    reply.send(result.map_or_else(NodeVote::Failed, to_vote));
}

/// A script answering one integer per entry (`extend.lua`), sent whatever the master's state
/// allows for lock writes.
pub(super) async fn eval_values_on(
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    deadline: Deadline,
    reply: Reply<Result<Vec<i64>, CallError>>,
) {
    let result = node.eval(&call, &deadline, Admission::WhenUp).await;
    reply.send(result);
}

/// One master's part of a release: its result goes to `tally`; a release this master did not
/// answer with a result (down, reconnecting, timed out, an error reply) is handed to
/// `retries`, which sends it again until it does (and tells `tally`). `reply` says the master
/// answered or gave up.
pub(super) async fn release_on(
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    deadline: Deadline,
    retries: Arc<ReleaseRetries>,
    tally: Arc<ReleaseTally>,
    reply: Reply<()>,
) {
    match node.eval::<i64>(&call, &deadline, Admission::Always).await {
        Ok(deleted) => tally.answered(node.index(), node.counts_in_quorum(), deleted > 0),
        Err(_) => retries.push(node, call, Some(tally)),
    }
    reply.send(());
}

pub(super) async fn eval_on(
    node: Arc<Node>,
    call: Arc<ScriptCall>,
    deadline: Deadline,
    reply: Reply<Result<i64, CallError>>,
) {
    let result = node.eval(&call, &deadline, Admission::Always).await;
    reply.send(result);
}

pub(super) fn acquire_commands(
    keys: &ResourceKeys,
    id: LeaseId,
    owner: &str,
    ttl: Duration,
) -> Arc<AcquireCommands> {
    // Checked against max_ttl before any write: far below u64::MAX ms.
    let ttl_ms = ttl.as_millis() as u64;
    let value = id.value_for(owner);
    Arc::new(AcquireCommands::new(
        keys.lock.clone(),
        &value,
        ttl_ms,
        &keys.fence,
    ))
}

/// `locks` are the lease's lock keys ([`crate::keys::Keyspace::locks`]); `revoked_prefix` is
/// `<prefix>revoked:`.
pub(super) fn shadow_call(
    locks: &[String],
    revoked_prefix: &str,
    id: LeaseId,
    owner: &str,
    shadow_ttl: Duration,
) -> Arc<ScriptCall> {
    let ttl = itoa::Buffer::new()
        .format(shadow_ttl.as_millis())
        .to_string();
    let (id, value) = (id.hex(), id.value_for(owner));
    let args: [&[u8]; 3] = [id.as_str().as_bytes(), value.as_bytes(), ttl.as_bytes()];
    let revoked = format!("{revoked_prefix}{}", id.as_str());
    let keys: Vec<&[u8]> = locks
        .iter()
        .map(|lock| lock.as_bytes())
        .chain([revoked.as_bytes()])
        .collect();
    Arc::new(ScriptCall::new(&SCRIPTS.shadow, &keys, &args))
}

/// `lock` and `channel` are the resource's lock key and release channel.
pub(super) fn release_call(lock: &str, channel: &str, id: LeaseId) -> Arc<ScriptCall> {
    Arc::new(release_script_call(&[lock.as_bytes()], channel, id))
}

/// The release of a lease whose lock name has several keys ([`crate::keys::Keyspace::locks`]).
pub(super) fn release_keys_call(locks: &[String], channel: &str, id: LeaseId) -> Arc<ScriptCall> {
    let keys: Vec<&[u8]> = locks.iter().map(|lock| lock.as_bytes()).collect();
    Arc::new(release_script_call(&keys, channel, id))
}

fn release_script_call(locks: &[&[u8]], channel: &str, id: LeaseId) -> ScriptCall {
    let id = id.hex();
    let args: [&[u8]; 2] = [id.as_str().as_bytes(), channel.as_bytes()];
    ScriptCall::new(&SCRIPTS.release, locks, &args)
}

/// The release an acquisition chains after its write on each master, for when the grant is
/// abandoned: shared by every master's call, and built (and encoded) only when one of them
/// needs it, which a granted acquisition never does.
pub(super) struct ChainedRelease {
    lock: String,
    channel: String,
    id: LeaseId,
    call: OnceLock<Arc<ScriptCall>>,
    /// Where a master that did not answer the release with a result is queued to be sent it
    /// again.
    retries: Arc<ReleaseRetries>,
}

impl ChainedRelease {
    /// `lock` and `channel` are the resource's lock key and release channel.
    pub(super) fn new(
        lock: String,
        channel: String,
        id: LeaseId,
        retries: Arc<ReleaseRetries>,
    ) -> Arc<Self> {
        Arc::new(Self {
            lock,
            channel,
            id,
            call: OnceLock::new(),
            retries,
        })
    }

    fn call(&self) -> Arc<ScriptCall> {
        let call = self
            .call
            .get_or_init(|| release_call(&self.lock, &self.channel, self.id));
        Arc::clone(call)
    }
}

//! Fair (FIFO) acquisition across processes, for every kind of lock: a waiter draws a
//! ticket the way a fencing token is drawn (an `INCR` of every master's fence counter, the
//! largest a majority answered, the laggards raised), so every master orders the waiters
//! alike; it is queued on a majority of its kind's queue (`fair_enqueue.lua`; one queue per
//! resource and kind, named after the lock's waiting name), keeps a heartbeat there while it
//! waits, and a master lets it try only while it is the head of that queue: the head check of
//! `fair_head.lua` in front of the kind's own acquisition script (`lock_acquire.lua` for an
//! exclusive lock and an election's lock, a semaphore's slots, a read-write lock's writer or
//! reader), which alone decides what is granted. A waiter that stops beating (its process
//! died) is purged by the next attempt after its heartbeat TTL, so it delays the queue by at
//! most that; a waiter purged while alive learns it at its next beat (its entry gone on a
//! majority) and stops with [`Shortfall::Dequeued`]. A granted waiter leaves the queue when it
//! stops waiting, so the next head is let try at once, beside it if its kind allows.
//!
//! Fairness orders the waiters that ask for it; exclusion (or a semaphore's bound) is the
//! kind's own, written by the same script as without fairness, so a caller that does not ask
//! for fairness is not queued and can take a free lock before them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::types::scripts::Script;
use futures_util::FutureExt;
use tokio::time::Instant;

use super::calls::{eval_on, release_call};
use super::fanout::fan_out;
use super::slotted::SlottedAttempt;
use super::wait::Line;
use super::{fencing, AcquireOutcome, Redlock, Refusal, Shortfall};
use crate::keys::{waiting_name, Keyspace, SlotSet};
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

/// A fair waiter's heartbeat TTL unless the engine's options say otherwise: a waiter that
/// died delays the queue by at most this.
pub const DEFAULT_FAIR_HEARTBEAT: Duration = Duration::from_secs(2);

/// The keys and channel of one queue of fair waiters: a resource has one per kind of lock
/// (its exclusive lock, its semaphore, its read-write lock, its election), named after the
/// lock's [`waiting_name`], so waiters of two kinds never share a queue.
pub(super) struct Queue {
    /// The waiting name: this process's waiters on it queue under it too.
    name: String,
    fence: String,
    queue: String,
    beats: String,
    /// The lock's release channel: a waiter that leaves is announced on it.
    channel: String,
}

/// A fair waiter's turn: its queue and its id there, which a kind's fair acquisition script
/// gets before its own arguments (see `lua/fair_head.lua`).
#[derive(Clone, Copy)]
pub(super) struct Turn<'a> {
    pub(super) queue: &'a Queue,
    pub(super) waiter: LeaseId,
}

// === impl Queue ===

impl Queue {
    /// The queue of the fair waiters of lock `name` ([`crate::keys::lock_name`] of any kind; one slot or
    /// reader stands for its whole semaphore or read-write lock).
    pub(super) fn of(keyspace: &Keyspace, name: &str) -> Self {
        let waiting = waiting_name(name).into_owned();
        let (queue, beats) = keyspace.fair_queue(&waiting);
        Self {
            fence: keyspace.fence(),
            queue,
            beats,
            channel: keyspace.released_channel(name),
            name: waiting,
        }
    }
}

// === impl Turn ===

impl Turn<'_> {
    /// `script` (a kind's acquisition, which reads `KEYS[1]` as the fence counter) as the fair
    /// variant `fair_script` for this turn: the queue's keys after the fence, the waiter's id
    /// before `args`.
    pub(super) fn call(
        turn: Option<Self>,
        (script, fair_script): (&'static Script, &'static Script),
        fence: &str,
        args: &[&[u8]],
    ) -> Arc<ScriptCall> {
        match turn {
            Some(turn) => turn.fair_call(fair_script, fence, args),
            None => Arc::new(ScriptCall::new(script, &[fence.as_bytes()], args)),
        }
    }

    /// `fair_script` (`fair_head.lua` in front of a kind's acquisition) for this turn.
    fn fair_call(
        self,
        fair_script: &'static Script,
        fence: &str,
        args: &[&[u8]],
    ) -> Arc<ScriptCall> {
        let keys: [&[u8]; 3] = [
            fence.as_bytes(),
            self.queue.queue.as_bytes(),
            self.queue.beats.as_bytes(),
        ];
        let waiter = self.waiter.to_string();
        let mut fair_args: Vec<&[u8]> = Vec::with_capacity(args.len() + 1);
        fair_args.push(waiter.as_bytes());
        fair_args.extend_from_slice(args);
        Arc::new(ScriptCall::new(fair_script, &keys, &fair_args))
    }
}

// === impl Redlock ===

impl Redlock {
    /// Takes `resource` for `owner` for `ttl` in the order fair waiters of every process
    /// asked for it, waiting at most `wait`. Contended with [`Shortfall::Dequeued`] when this
    /// waiter's heartbeat came too late and a majority purged it.
    pub async fn acquire_fair_with_wait(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<AcquireOutcome, Error> {
        self.check_request(resource, owner, ttl)?;
        let keyspace = self.fleet.keyspace();
        let queue = Queue::of(keyspace, resource);
        let lock = keyspace.lock(resource);
        self.wait_fairly(&queue, (ttl, wait, None), |waiter| {
            self.fair_attempt(&queue, &lock, waiter, resource, owner, ttl)
        })
        .await
    }

    /// A fair wait in `queue`, whatever the kind: a ticket drawn, the waiter queued on a
    /// majority and kept there by its beats, `attempt` (given the waiter's id, which its
    /// script checks is the head) run until it grants or `wait` has passed, and the waiter
    /// out of the queue once it stops waiting. Contended with [`Shortfall::Dequeued`] when a
    /// majority purged it. With `max_pause`, an attempt at least that often.
    pub(super) async fn wait_fairly<F, A>(
        &self,
        queue: &Queue,
        (ttl, wait, max_pause): (Duration, Duration, Option<Duration>),
        attempt: F,
    ) -> Result<AcquireOutcome, Error>
    where
        F: Fn(LeaseId) -> A,
        A: Future<Output = Result<AcquireOutcome, Error>>,
    {
        let waiter = LeaseId::random();
        let heartbeat = self.options.fair_heartbeat;
        let timeout = self.node_timeout(ttl, Instant::now());
        let Some(ticket) = self.draw_ticket(&queue.fence, timeout).await else {
            return Ok(AcquireOutcome::NoQuorum(refusal(Shortfall::TooFewAnswers)));
        };
        let all: Vec<usize> = (0..self.fleet.len()).collect();
        let queued = self
            .enqueue(queue, waiter, (ticket, heartbeat), "enqueue", &all)
            .await;
        if queued.iter().filter(|&&here| here == Some(true)).count() < self.fleet.quorum() {
            self.leave(queue, waiter, timeout).await;
            return Ok(AcquireOutcome::NoQuorum(refusal(Shortfall::TooFewAnswers)));
        }
        let attempts = self.wait_for_grant(&queue.name, wait, (Line::Masters, max_pause), || {
            attempt(waiter)
        });
        let beating = self.beat_until_purged(queue, waiter, ticket, heartbeat);
        let outcome = tokio::select! {
            outcome = attempts => outcome,
            () = beating => Ok(AcquireOutcome::Contended(refusal(Shortfall::Dequeued))),
        };
        // Granted: the masters that did not grant still queue it. Not granted: it waits no
        // more. Either way the next waiter must not wait behind it. Sent, not waited for: a
        // grant goes back to its caller at once, with no await between it and the caller (which
        // could go away there and leave the grant untracked until its TTL); the first poll
        // puts the call on every master's connection, and a master that misses it purges the
        // waiter once its heartbeat deadline has passed.
        let _sent = self.leave(queue, waiter, timeout).now_or_never();
        outcome
    }

    /// One attempt of waiter `waiter` on the exclusive lock `name` (key `lock`): a slotted
    /// acquisition of the lock key alone by `lock_acquire.lua` behind the head check.
    pub(super) async fn fair_attempt(
        &self,
        keys: &Queue,
        lock: &str,
        waiter: LeaseId,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<AcquireOutcome, Error> {
        let id = LeaseId::random();
        let (value, ttl_ms) = (id.value_for(owner), ttl.as_millis().to_string());
        let args: [&[u8]; 3] = [lock.as_bytes(), value.as_bytes(), ttl_ms.as_bytes()];
        let turn = Turn {
            queue: keys,
            waiter,
        };
        let acquire = turn.fair_call(&SCRIPTS.lock_acquire_fair, &keys.fence, &args);
        let release_claims = |_keep: Option<SlotSet>| release_call(lock, &keys.channel, id);
        let name_of = |_slot| name.to_string();
        let attempt = SlottedAttempt {
            id,
            owner,
            ttl,
            acquire,
            release_claims: &release_claims,
            name_of: &name_of,
        };
        Ok(self.acquire_slotted(attempt).await.0)
    }

    /// A ticket: every master's fence counter `INCR`ed, the largest a majority answered,
    /// the lagging ones raised to it; `None` without a quorum at it.
    async fn draw_ticket(&self, fence: &str, timeout: Duration) -> Option<u64> {
        let call = Arc::new(ScriptCall::new(&SCRIPTS.ticket, &[fence.as_bytes()], &[]));
        let until = Instant::now() + timeout;
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            self.fleet.nodes(),
            until,
            |node, deadline, reply| {
                let call = call.clone();
                async move {
                    if node.is_up() {
                        eval_on(node, call, deadline, reply).await;
                    }
                }
            },
        );
        let mut counters = Vec::new();
        while let Some((index, answer)) = replies.recv().await {
            if let Ok(counter) = answer {
                counters.push((index, counter as u64));
            }
        }
        if counters.len() < self.fleet.quorum() {
            return None;
        }
        let plan = fencing::plan(&counters)?;
        let confirmed = plan.at_token.len() + self.raise_fence(&plan, timeout).await;
        (confirmed >= self.fleet.quorum()).then_some(plan.token)
    }

    /// Sends `fair_enqueue.lua` (`enqueue`, or `beat`) for the waiter to the masters `at`;
    /// answers per master whether it is queued there now (`None`: no answer within a third of
    /// the heartbeat TTL, or not asked).
    async fn enqueue(
        &self,
        keys: &Queue,
        waiter: LeaseId,
        (ticket, heartbeat): (u64, Duration),
        what: &str,
        at: &[usize],
    ) -> Vec<Option<bool>> {
        let (waiter, ticket, ttl) = (
            waiter.to_string(),
            ticket.to_string(),
            heartbeat.as_millis().to_string(),
        );
        let call_keys: [&[u8]; 2] = [keys.queue.as_bytes(), keys.beats.as_bytes()];
        let args: [&[u8]; 4] = [
            waiter.as_bytes(),
            ticket.as_bytes(),
            ttl.as_bytes(),
            what.as_bytes(),
        ];
        let call = Arc::new(ScriptCall::new(&SCRIPTS.fair_enqueue, &call_keys, &args));
        let mut queued = vec![None; self.fleet.len()];
        let until = Instant::now() + heartbeat / 3;
        let nodes = at.iter().map(|&i| &self.fleet.nodes()[i]);
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            nodes,
            until,
            |node, deadline, reply| eval_on(node, call.clone(), deadline, reply),
        );
        while let Some((index, answer)) = replies.recv().await {
            queued[index] = answer.ok().map(|here| here == 1);
        }
        queued
    }

    /// Beats every third of the heartbeat TTL, on a fixed schedule (a master slow to answer
    /// does not put the next beat off); puts the waiter back on masters that answered that
    /// they lost it (a restarted master); returns once so many masters answered that they
    /// lost it that no majority can queue it any more: purged.
    async fn beat_until_purged(
        &self,
        keys: &Queue,
        waiter: LeaseId,
        ticket: u64,
        heartbeat: Duration,
    ) {
        let all: Vec<usize> = (0..self.fleet.len()).collect();
        let mut beats = tokio::time::interval(heartbeat / 3);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beats.tick().await;
        loop {
            beats.tick().await;
            let queued = self
                .enqueue(keys, waiter, (ticket, heartbeat), "beat", &all)
                .await;
            let lost: Vec<usize> = (0..queued.len())
                .filter(|&i| queued[i] == Some(false))
                .collect();
            if lost.len() > self.fleet.len() - self.fleet.quorum() {
                tracing::info!(waiter = %waiter, "a fair waiter was purged from its queue");
                return;
            }
            if !lost.is_empty() {
                self.enqueue(keys, waiter, (ticket, heartbeat), "enqueue", &lost)
                    .await;
            }
        }
    }

    /// Takes the waiter out of the queue on every master (waiting at most `timeout`).
    async fn leave(&self, keys: &Queue, waiter: LeaseId, timeout: Duration) {
        let waiter = waiter.to_string();
        let call_keys: [&[u8]; 2] = [keys.queue.as_bytes(), keys.beats.as_bytes()];
        let args: [&[u8]; 2] = [waiter.as_bytes(), keys.channel.as_bytes()];
        let call = Arc::new(ScriptCall::new(&SCRIPTS.fair_leave, &call_keys, &args));
        let all: Vec<usize> = (0..self.fleet.len()).collect();
        self.release_claims(call, &all, timeout).await;
    }
}

fn refusal(cause: Shortfall) -> Refusal {
    Refusal {
        cause,
        votes: Vec::new(),
        valid_until_cap: None,
    }
}

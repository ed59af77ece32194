//! Extending leases: one `extend.lua` call per master renews any number of leases, each one
//! judged by its own quorum. `extend` is a batch of one; [`super::batch`] gathers the
//! renewals that fall due together.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::calls::eval_values_on;
use super::fanout::fan_out;
use super::quorum::{Tally, Verdict};
use super::{count_vote, ExtendOutcome, NodeVote, Redlock};
use crate::fleet::CallError;
use crate::keys::validate_lock_name;
use crate::scripts::{ExtendReply, ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

/// One lease to extend: `id` on `resource`, to `ttl` from now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extension {
    /// The lease's resource.
    pub resource: String,
    /// The lease's id.
    pub id: LeaseId,
    /// The TTL to set on every master that holds the lease.
    pub ttl: Duration,
}

/// Per lease of a batch: the tally and each master's vote so far.
struct EntryVotes {
    tally: Tally,
    votes: Vec<NodeVote>,
}

// === impl Redlock ===

impl Redlock {
    /// Extends lease `id` on `resource` to `ttl` from now on every master that holds it.
    #[tracing::instrument(level = "debug", skip(self), fields(lease_id = %id, ttl_ms = ttl.as_millis() as u64))]
    pub async fn extend(
        &self,
        resource: &str,
        id: LeaseId,
        ttl: Duration,
    ) -> Result<ExtendOutcome, Error> {
        let one = Extension {
            resource: resource.to_string(),
            id,
            ttl,
        };
        let mut outcomes = self.extend_many(std::slice::from_ref(&one)).await;
        // extend_many answers once per extension, in order: there is exactly one.
        outcomes.pop().expect("one outcome per extension")
    }

    /// Extends every lease of `batch` with one script call per master (one per distinct
    /// per-master timeout, which depends on the TTL: a short lease never shortens a long
    /// one's timeout). Each lease gets its own outcome, in order, exactly as `extend` would
    /// have judged it alone; its validity is counted from the moment its call was sent. An
    /// invalid entry gets its error and is left out of the call.
    pub async fn extend_many(&self, batch: &[Extension]) -> Vec<Result<ExtendOutcome, Error>> {
        let mut outcomes: Vec<Option<Result<ExtendOutcome, Error>>> = batch
            .iter()
            .map(|ext| self.check_extension(ext).err().map(Err))
            .collect();
        let now = Instant::now();
        let mut groups: Vec<(Duration, Vec<usize>)> = Vec::new();
        for i in (0..batch.len()).filter(|&i| outcomes[i].is_none()) {
            let timeout = self.node_timeout(batch[i].ttl, now);
            match groups.iter_mut().find(|(t, _)| *t == timeout) {
                Some((_, members)) => members.push(i),
                None => groups.push((timeout, vec![i])),
            }
        }
        let calls = groups.iter().map(|(timeout, sent)| async move {
            let start = Instant::now();
            let counts = self.extend_sent(batch, sent, *timeout).await;
            (start, counts)
        });
        let answered = futures_util::future::join_all(calls).await;
        for ((_, sent), (start, counts)) in groups.iter().zip(answered) {
            for (&i, count) in sent.iter().zip(counts) {
                let ttl = batch[i].ttl;
                let judged = self.judge_extension(count.tally, count.votes, start, ttl);
                outcomes[i] = Some(Ok(judged));
            }
        }
        // Every entry was either refused by its check or sent and judged above.
        outcomes.into_iter().flatten().collect()
    }

    fn check_extension(&self, extension: &Extension) -> Result<(), Error> {
        validate_lock_name(&extension.resource)?;
        self.check_ttl(extension.ttl)
    }

    /// Sends the entries `sent` of `batch` to every master; reads answers until each entry's
    /// verdict is in (or every master answered).
    async fn extend_sent(
        &self,
        batch: &[Extension],
        sent: &[usize],
        timeout: Duration,
    ) -> Vec<EntryVotes> {
        let n = self.fleet.len();
        let (call, spans) = batch_call(self, batch, sent);
        let keys = spans.last().map_or(0, |span| span.end);
        let until = Instant::now() + timeout;
        let nodes = self.fleet.nodes();
        let mut replies = fan_out(
            &self.tasks,
            &self.keeper,
            nodes,
            until,
            |node, deadline, reply| eval_values_on(node, call.clone(), deadline, reply),
        );
        let mut counts: Vec<EntryVotes> = sent
            .iter()
            .map(|_| EntryVotes {
                tally: Tally::new(n),
                votes: vec![NodeVote::NoAnswer; n],
            })
            .collect();
        let pending =
            |counts: &[EntryVotes]| counts.iter().any(|c| c.tally.verdict() == Verdict::Pending);
        while pending(&counts) {
            let Some((index, answer)) = replies.recv().await else {
                break;
            };
            for (span, count) in spans.iter().zip(counts.iter_mut()) {
                let vote = entry_vote(&answer, span.clone(), keys);
                count_vote(&mut count.tally, &vote);
                count.votes[index] = vote;
            }
        }
        counts
    }
}

/// KEYS lock₁, lock₂, …; ARGV id₁, ttl₁, id₂, ttl₂, …; and for each entry sent, the range of
/// its keys (one, or one per slot for a lease of several semaphore slots).
fn batch_call(
    engine: &Redlock,
    batch: &[Extension],
    sent: &[usize],
) -> (Arc<ScriptCall>, Vec<Range<usize>>) {
    let keyspace = engine.fleet().keyspace();
    let mut locks = Vec::with_capacity(sent.len());
    let mut args = Vec::with_capacity(sent.len() * 2);
    let mut spans = Vec::with_capacity(sent.len());
    for &i in sent {
        let extension = &batch[i];
        let first = locks.len();
        locks.extend(keyspace.locks(&extension.resource));
        let (id, ttl) = (
            extension.id.to_string(),
            itoa::Buffer::new()
                .format(extension.ttl.as_millis())
                .to_string(),
        );
        // One (id, ttl) per key, cloned only for a lease of several keys.
        args.extend(std::iter::repeat_n([id, ttl], locks.len() - first).flatten());
        spans.push(first..locks.len());
    }
    let keys: Vec<&[u8]> = locks.iter().map(|lock| lock.as_bytes()).collect();
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    let call = Arc::new(ScriptCall::new(&SCRIPTS.extend, &keys, &args));
    (call, spans)
}

/// The vote for the entry whose keys are `span` in one master's answer to a call of `keys`
/// keys: the code of its one key; for a lease of several keys, extended only where every one
/// was, else the worst of their codes (revoked, then held by another, then absent).
fn entry_vote(answer: &Result<Vec<i64>, CallError>, span: Range<usize>, keys: usize) -> NodeVote {
    match answer {
        Ok(codes) if codes.len() == keys => {
            let codes = &codes[span];
            let code = match codes {
                [one] => *one,
                _ if codes.iter().all(|&code| code == 1) => 1,
                _ => [-2, -1, 0]
                    .into_iter()
                    .find(|worst| codes.contains(worst))
                    .unwrap_or(0),
            };
            NodeVote::Extend(ExtendReply::from_script(code))
        }
        Ok(codes) => NodeVote::Failed(CallError::Reply(format!(
            "extend.lua answered {} codes for {keys} keys",
            codes.len()
        ))),
        Err(error) => NodeVote::Failed(error.clone()),
    }
}

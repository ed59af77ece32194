//! Force release, for operators: the lease that holds a lock revoked on every master that
//! answers (a tombstone in its place until its holder acknowledges, or the lock deleted at
//! once when the operator says the holder is gone), re-sent to masters that miss it until a
//! quorum confirmed it, and an audit record appended on every master (see [`audit`]).

pub mod audit;
pub mod verdict;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use fred::types::Value;
use tokio::time::Instant;

use self::audit::{audit_command, unix_ms, AuditRecord};
use self::verdict::{MasterAnswer, Verdict, TOMBSTONE_PREFIX};
use super::inventory::{text, Holding, INSPECT_TIMEOUT};
use super::Redlock;
use crate::backoff::Backoff;
use crate::fleet::{Admission, Deadline};
use crate::keys::{parse_lock_name, validate_actor, validate_one_lock_name, validate_reason};
use crate::keys::{LockKind, LockName};
use crate::lease_id::parse_value;
use crate::metrics::METRICS;
use crate::resp::Commands;
use crate::scripts::{ScriptCall, SCRIPTS};
use crate::{Error, LeaseId};

/// How long a force release keeps re-sending to masters that did not answer.
pub const FORCE_DEADLINE: Duration = Duration::from_secs(5);
/// How long a force release waits for the holder to acknowledge the revocation.
pub const HOLDER_WAIT: Duration = Duration::from_secs(1);
/// First pause between two sends to masters that did not answer (doubled after each, up to
/// `MAX_RESEND`).
const FIRST_RESEND: Duration = Duration::from_millis(100);
const MAX_RESEND: Duration = Duration::from_secs(1);
/// Pause between two looks for the holder's acknowledgement.
const HOLDER_POLL: Duration = Duration::from_millis(10);

/// How a force release goes about it.
#[derive(Clone, Copy, Debug, Default)]
pub struct ForceOptions {
    /// Revoke only this lease: a compare-and-revoke that leaves any other holder alone.
    pub lease_id: Option<LeaseId>,
    /// The operator says the holder is gone: delete the lock at once rather than waiting for
    /// the holder to acknowledge (or for the lease's validity to end).
    pub holder_gone: bool,
}

/// A value a force release removed, and from how many masters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemovedHolder {
    /// The lease id, when the value is one redlease wrote.
    pub lease_id: Option<LeaseId>,
    /// The owner, when the value is one redlease wrote.
    pub owner: Option<String>,
    /// The value as it was stored.
    pub value: String,
    /// How many masters held it.
    pub masters: usize,
}

/// One master's part in a force release.
#[derive(Clone, Debug)]
pub struct ForcedMaster {
    /// Its URL, credentials masked.
    pub url: String,
    /// What it answered.
    pub answer: MasterAnswer,
}

/// What a force release did.
#[derive(Clone, Debug)]
pub struct ForceRelease {
    /// The resource whose lock was forced.
    pub resource: String,
    /// The id of its audit record (32 hex digits), the same on every master.
    pub audit_id: String,
    /// When it ran, in ms since the Unix epoch.
    pub time_ms: u64,
    /// Whether a quorum confirmed it, the named lease was not there, or too few answered.
    pub verdict: Verdict,
    /// Each master's answer, in the configured order.
    pub masters: Vec<ForcedMaster>,
    /// Masters that answered.
    pub masters_answered: usize,
    /// Masters on which a lock was revoked or deleted.
    pub masters_removed: usize,
    /// Masters that recorded the audit record.
    pub audits_recorded: usize,
    /// What was removed.
    pub removed: Vec<RemovedHolder>,
    /// Whether the holder acknowledged the revocation within [`HOLDER_WAIT`] (its sidecar
    /// marked the lease lost, or `lock run` stopped its command): `None` when no lease was
    /// left revoked (nothing held, or deleted at once).
    pub holder_told: Option<bool>,
    /// When the resource is free for others at the latest, in ms since the Unix epoch: now
    /// when the holder acknowledged; else when the revoked lease's keys expire.
    pub free_at_ms: u64,
    /// The other slots of a semaphore that the revoked lease held (a lease of several
    /// permits), each revoked too, named by that lease (a compare-and-revoke), and audited as
    /// its own force release; empty for any other lock. A slot another lease had taken by
    /// then is left out.
    pub also: Vec<ForceRelease>,
}

// === impl Redlock ===

impl Redlock {
    /// Revokes the lease holding `resource` (only `options.lease_id`, when given) on every
    /// master that answers, re-sent to those that miss it until a quorum answered or
    /// [`FORCE_DEADLINE`] passed, and records who (`actor`) did it and why (`reason`) in every
    /// master's audit stream, in the log (warn) and in `lock_force_releases_total`.
    ///
    /// The holder learns at once: its sidecar (or `lock run`) hears the revocation, marks the
    /// lease lost (`revoked`) and deletes the tombstone left in the lease's place, which frees
    /// the resource; a holder that does not acknowledge keeps others out until the lease's
    /// keys expire, unless `options.holder_gone`.
    ///
    /// A semaphore's slot held by a lease of several permits revokes the whole lease: its
    /// other slots are forced too, each named by that lease ([`ForceRelease::also`]).
    pub async fn force_release(
        &self,
        resource: &str,
        actor: &str,
        reason: &str,
        options: &ForceOptions,
    ) -> Result<ForceRelease, Error> {
        // An operator forces one lock: a slot of a semaphore, whatever lease holds it.
        validate_one_lock_name(resource)?;
        validate_actor(actor)?;
        validate_reason(reason)?;
        let mut forced = self.force_one(resource, actor, reason, options).await;
        let Some(LockName {
            resource: semaphore,
            kind: LockKind::Slot(named_slot),
        }) = parse_lock_name(resource)
        else {
            return Ok(forced);
        };
        // The lease named holds the slot named nowhere, another does: nothing was revoked,
        // and nothing of the named lease is followed elsewhere either.
        if forced.verdict == Verdict::Mismatch {
            return Ok(forced);
        }
        // The lease to follow: the one named, else the one the answers revoked (or found
        // revoked: a retry of a force release) on the most masters, never a stray value of
        // another lease found on fewer.
        let answers: Vec<MasterAnswer> = forced.masters.iter().map(|m| m.answer.clone()).collect();
        let Some(lease) = options.lease_id.or_else(|| verdict::pinned_lease(&answers)) else {
            return Ok(forced);
        };
        // A semaphore of limit 1 has no other slot (its values say its limit).
        let limit_one = |holder: &RemovedHolder| holder.value.ends_with("\u{1f}1");
        if forced.removed.iter().any(limit_one) {
            return Ok(forced);
        }
        // The slot named was forced whatever comes next: its outcome is answered even when
        // the semaphore cannot be read (its name was checked above, so it can).
        let Ok(slots) = self.inspect_semaphore(semaphore).await else {
            return Ok(forced);
        };
        let named = ForceOptions {
            lease_id: Some(lease),
            holder_gone: options.holder_gone,
        };
        // The other slots where any master holds the lease, or its tombstone (a retry after a
        // force release that revoked them), forced at once: named by the lease, a force
        // touches nothing of another.
        let tombstone = format!("{TOMBSTONE_PREFIX}{lease}");
        let holds =
            |holding: &Holding| holding.lease_id == Some(lease) || holding.value == tombstone;
        let others = slots.iter().filter(|slot| {
            let held = slot
                .masters
                .iter()
                .any(|m| matches!(&m.answer, Ok(Some(h)) if holds(h)));
            let kind = parse_lock_name(&slot.resource).map(|name| name.kind);
            held && kind != Some(LockKind::Slot(named_slot))
        });
        let forcing = others.map(|slot| self.force_one(&slot.resource, actor, reason, &named));
        let also = futures_util::future::join_all(forcing).await;
        // A slot the lease no longer held by then (its holder's sidecar released it, and
        // another lease took it) was not the lease's to force: nothing of it is reported.
        forced.also = also
            .into_iter()
            .filter(|other| other.verdict != Verdict::Mismatch)
            .collect();
        Ok(forced)
    }

    /// [`Redlock::force_release`] of one lock, its arguments checked.
    async fn force_one(
        &self,
        resource: &str,
        actor: &str,
        reason: &str,
        options: &ForceOptions,
    ) -> ForceRelease {
        self.fleet.wait_for_links(INSPECT_TIMEOUT).await;
        let answers = self.revoke_until_confirmed(resource, options).await;
        let verdict = verdict::verdict(&answers, self.fleet.quorum(), options.lease_id);
        let values: Vec<String> = answers
            .iter()
            .filter_map(|a| a.removed().map(String::from))
            .collect();
        let removed = removed_holders(&values);
        let audit = self.record_audit(resource, actor, reason, &removed).await;
        let (audit_id, time_ms, audits_recorded) = (audit.audit_id, audit.time_ms, audit.masters);
        let tombstones: Vec<(usize, LeaseId)> = answers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| Some((i, a.tombstone()?.0)))
            .collect();
        let holder_told = match tombstones.is_empty() {
            true => None,
            false => {
                let read_at = Instant::now();
                let gone = self.wait_for_holder(resource, &tombstones).await;
                // Gone after the longest tombstone's TTL: it may have expired unacknowledged.
                let longest = answers.iter().filter_map(|a| a.tombstone()?.1).max();
                let expired_by_now = longest.is_some_and(|ttl| read_at.elapsed() >= ttl);
                Some(gone && !expired_by_now)
            }
        };
        let now_ms = unix_ms(SystemTime::now());
        let free_at_ms = match holder_told {
            Some(false) => verdict::free_at_ms(time_ms, &answers),
            _ => now_ms,
        };
        let masters_answered = answers.iter().filter(|a| a.answered()).count();
        METRICS.force_releases.add(1, &[]);
        let labels: Vec<&str> = answers.iter().map(MasterAnswer::label).collect();
        // JSON lists, in the masters' order: the command line's JSON log format writes them as
        // arrays (`LIST_FIELDS` there), and in text they stay unambiguous (an owner may hold a
        // comma).
        tracing::warn!(
            resource,
            actor,
            reason,
            removed = %JsonList(&values),
            answers = %JsonList(&labels),
            ?verdict,
            ?holder_told,
            audits_recorded,
            audit_id,
            "force release"
        );
        let masters = self.fleet.nodes().iter().zip(answers);
        let masters = masters.map(|(node, answer)| ForcedMaster {
            url: node.url().to_string(),
            answer,
        });
        ForceRelease {
            resource: resource.to_string(),
            audit_id,
            time_ms,
            verdict,
            masters: masters.collect(),
            masters_answered,
            masters_removed: values.len(),
            audits_recorded,
            removed,
            holder_told,
            free_at_ms,
            also: Vec::new(),
        }
    }

    /// Sends `force_release.lua` to every master, then again to those that did not answer,
    /// until the answers reach a verdict or the deadline passes. After the first answers, the
    /// sends name the lease they revoked, so a newer holder is never revoked by a retry.
    async fn revoke_until_confirmed(
        &self,
        resource: &str,
        options: &ForceOptions,
    ) -> Vec<MasterAnswer> {
        let keyspace = self.fleet.keyspace();
        let lock = keyspace.lock(resource);
        let released = keyspace.released_channel(resource);
        let revocations = keyspace.revocations_channel();
        let revoked_prefix = keyspace.revoked_prefix();
        // Longer than any shadow of the lease can still run: shadows go out only while the
        // lease is valid, and a shadow keeps it valid for at most the quarantine.
        let revoked_for = self.fleet.options().quarantine + self.options.max_ttl;
        let revoked_ms = revoked_for.as_millis().to_string();
        let outright: &[u8] = if options.holder_gone { b"1" } else { b"0" };
        let nodes = self.fleet.nodes();
        let quorum = self.fleet.quorum();
        let mut answers = vec![
            MasterAnswer::NoAnswer {
                error: "not sent".into()
            };
            nodes.len()
        ];
        let mut named = options.lease_id;
        let give_up = Instant::now() + FORCE_DEADLINE;
        let mut resend = Backoff::new(FIRST_RESEND, MAX_RESEND);
        loop {
            let named_text = named.map(|id| id.to_string()).unwrap_or_default();
            let call = ScriptCall::new(
                &SCRIPTS.force_release,
                &[lock.as_bytes()],
                &[
                    released.as_bytes(),
                    revoked_prefix.as_bytes(),
                    revoked_ms.as_bytes(),
                    revocations.as_bytes(),
                    named_text.as_bytes(),
                    outright,
                ],
            );
            let left = give_up.saturating_duration_since(Instant::now());
            let deadline = Deadline::After(INSPECT_TIMEOUT.min(left));
            let pending: Vec<usize> = (0..nodes.len())
                .filter(|&i| !answers[i].answered())
                .collect();
            let sends = pending
                .iter()
                .map(|&i| nodes[i].eval::<Value>(&call, &deadline, Admission::Always));
            let replies = futures_util::future::join_all(sends).await;
            for (&i, reply) in pending.iter().zip(replies) {
                answers[i] = match reply {
                    Ok(reply) => MasterAnswer::from_reply(&reply),
                    Err(error) => MasterAnswer::NoAnswer {
                        error: error.to_string(),
                    },
                };
            }
            named = named.or_else(|| verdict::pinned_lease(&answers));
            let settled = verdict::verdict(&answers, quorum, options.lease_id) != Verdict::NoQuorum;
            let pause = resend.next_wait();
            if settled || Instant::now() + pause >= give_up {
                return answers;
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Appends the audit record on every master; returns it, with `masters` the number of
    /// masters that recorded it.
    async fn record_audit(
        &self,
        resource: &str,
        actor: &str,
        reason: &str,
        removed: &[RemovedHolder],
    ) -> AuditRecord {
        let mut record = AuditRecord {
            audit_id: LeaseId::random().to_string(),
            resource: resource.to_string(),
            actor: actor.to_string(),
            reason: reason.to_string(),
            time_ms: unix_ms(SystemTime::now()),
            holders: removed.iter().map(|h| h.value.clone()).collect(),
            masters: 0,
        };
        let xadd = audit_command(&self.fleet.keyspace().audit(), &record);
        let deadline = Deadline::After(INSPECT_TIMEOUT);
        let nodes = self.fleet.nodes();
        let appends = nodes.iter().map(|node| node.query(&xadd, &deadline));
        let appended = futures_util::future::join_all(appends).await;
        record.masters = appended
            .iter()
            .filter(|a| matches!(a.as_deref(), Ok([Ok(_)])))
            .count();
        record
    }

    /// Waits up to [`HOLDER_WAIT`] for every tombstone of `tombstones` (master index, lease)
    /// to be gone: deleted by the holder's acknowledgement, or expired. `false` when one is
    /// still there (or its master stopped answering).
    async fn wait_for_holder(&self, resource: &str, tombstones: &[(usize, LeaseId)]) -> bool {
        let lock = self.fleet.keyspace().lock(resource);
        let mut get = Commands::with_capacity(64);
        get.push(&[b"GET", lock.as_bytes()]);
        let nodes = self.fleet.nodes();
        let give_up = Instant::now() + HOLDER_WAIT;
        loop {
            let deadline = Deadline::After(HOLDER_WAIT);
            let reads = tombstones.iter().map(|&(i, id)| {
                let get = &get;
                let deadline = &deadline;
                async move {
                    let tombstone = format!("{TOMBSTONE_PREFIX}{id}");
                    let replies = nodes[i].query(get, deadline).await;
                    let value = replies.ok().and_then(|mut r| r.pop()?.ok());
                    match value {
                        Some(value) => text(&value).is_some_and(|v| v == tombstone),
                        // No answer: the tombstone may still be there.
                        None => true,
                    }
                }
            });
            let left = futures_util::future::join_all(reads).await;
            if !left.into_iter().any(|still| still) {
                return true;
            }
            if Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(HOLDER_POLL).await;
        }
    }

    /// The holder of revoked lease `id` was told: deletes its tombstone on every master (one
    /// try each; on each of its keys, for a lease of several slots) and publishes the
    /// release, so waiters wake. Returns how many masters held one.
    pub async fn acknowledge_revocation(&self, resource: &str, id: LeaseId) -> usize {
        let keyspace = self.fleet.keyspace();
        let locks = keyspace.locks(resource);
        let released = keyspace.released_channel(resource);
        let id_text = id.to_string();
        let keys: Vec<&[u8]> = locks.iter().map(|lock| lock.as_bytes()).collect();
        let call = ScriptCall::new(
            &SCRIPTS.acknowledge,
            &keys,
            &[id_text.as_bytes(), released.as_bytes()],
        );
        let deadline = Deadline::After(INSPECT_TIMEOUT);
        let nodes = self.fleet.nodes();
        let sends = nodes
            .iter()
            .map(|node| node.eval::<i64>(&call, &deadline, Admission::Always));
        let answers = futures_util::future::join_all(sends).await;
        answers.into_iter().filter(|a| matches!(a, Ok(1))).count()
    }

    /// Whether lease `id` was revoked by a force release: its record `<prefix>revoked:<id>`
    /// on any master that answers within [`INSPECT_TIMEOUT`]. Asked once a renewal found the
    /// lease is no longer its own, to say why.
    pub async fn was_revoked(&self, id: LeaseId) -> bool {
        let record = format!("{}{id}", self.fleet.keyspace().revoked_prefix());
        let mut exists = Commands::with_capacity(96);
        exists.push(&[b"EXISTS", record.as_bytes()]);
        let deadline = Deadline::After(INSPECT_TIMEOUT);
        let nodes = self.fleet.nodes();
        let reads = nodes.iter().map(|node| node.query(&exists, &deadline));
        let answers = futures_util::future::join_all(reads).await;
        answers.into_iter().any(|replies| {
            let reply = replies.ok().and_then(|mut r| r.pop()?.ok());
            matches!(reply, Some(Value::Integer(1)))
        })
    }
}

/// A list of strings written as a JSON array (`["a","b"]`), for a log field.
struct JsonList<'a, T>(&'a [T]);

impl<T: AsRef<str>> std::fmt::Display for JsonList<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_char('[')?;
        for (n, item) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_char(',')?;
            }
            f.write_char('"')?;
            for c in item.as_ref().chars() {
                match c {
                    '"' => f.write_str("\\\"")?,
                    '\\' => f.write_str("\\\\")?,
                    c if u32::from(c) < 0x20 => write!(f, "\\u{:04x}", u32::from(c))?,
                    c => f.write_char(c)?,
                }
            }
            f.write_char('"')?;
        }
        f.write_char(']')
    }
}

/// The distinct values removed, each with how many masters held it.
fn removed_holders(values: &[String]) -> Vec<RemovedHolder> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(value, masters)| {
            // A semaphore slot's or an election's value carries more after the owner, behind a
            // control character, which no owner holds.
            let owner_only =
                |owner: &str| owner.split('\u{1f}').next().unwrap_or(owner).to_string();
            let parsed = parse_value(value).map(|(id, owner)| (id, owner_only(owner)));
            let (lease_id, owner) = parsed.unzip();
            RemovedHolder {
                lease_id,
                owner,
                value: value.to_string(),
                masters,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removed values are grouped, redlease's own parsed into lease id and owner.
    #[test]
    fn removed_values_are_grouped_and_parsed() {
        let id = LeaseId::random();
        let ours = format!("{id}|cron@host");
        let values = [ours.clone(), "foreign".to_string(), ours.clone()];
        let removed = removed_holders(&values);
        assert_eq!(removed.len(), 2);
        let mine = removed.iter().find(|h| h.value == ours).unwrap();
        assert_eq!(
            (mine.lease_id, mine.owner.as_deref()),
            (Some(id), Some("cron@host"))
        );
        assert_eq!(mine.masters, 2);
        let other = removed.iter().find(|h| h.value == "foreign").unwrap();
        assert_eq!((other.lease_id, other.masters), (None, 1));
    }

    /// A log field's list is a JSON array whose strings keep commas, quotes and control
    /// characters unambiguous.
    #[test]
    fn a_json_list_escapes_what_json_needs() {
        let items = ["a|job, \"x\"", "back\\slash\n"];
        assert_eq!(
            JsonList(&items).to_string(),
            r#"["a|job, \"x\"","back\\slash\u000a"]"#
        );
        assert_eq!(JsonList::<&str>(&[]).to_string(), "[]");
    }
}

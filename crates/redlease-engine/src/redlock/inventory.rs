//! The lock inventory: what every master holds for a resource (`GET` and `PTTL` of its lock
//! key), which lease a quorum carries and for how long, and the locks held under a prefix
//! (`SCAN` on every master, merged by resource). Reads only: sent to every master whatever its
//! state, each bounded by [`INSPECT_TIMEOUT`], once every master has answered to being
//! connected and prepared (up, excluded, or refusing the connection) or that long has passed,
//! so a master still being connected is not reported down.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;
use tokio::time::Instant;

use super::Redlock;
use crate::fleet::{CallError, Deadline, Node};
use crate::keys::{validate_lock_name, validate_one_lock_name, validate_prefix};
use crate::lease_id::parse_value;
use crate::resp::{Commands, Reply};
use crate::{Error, LeaseId};

/// How long the inventory waits for each master.
pub const INSPECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Most locks one page lists.
pub const MAX_LIST_LIMIT: usize = 1000;
/// Locks one page lists unless asked otherwise.
pub const DEFAULT_LIST_LIMIT: usize = 100;
/// Keys one `SCAN` call examines on a master.
const SCAN_COUNT: &[u8] = b"1000";
/// Lock keys read from one master for one listing at most; past it the listing is incomplete.
pub const MAX_SCANNED_KEYS: usize = 100_000;

/// What one master holds in a resource's lock key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The lease id, when the value is one redlease wrote (`<lease id>|<owner>`).
    pub lease_id: Option<LeaseId>,
    /// The owner, when the value is one redlease wrote.
    pub owner: Option<String>,
    /// The value as stored.
    pub value: String,
    /// How long the key has left; `None` for a key without expiry.
    pub pttl: Option<Duration>,
}

/// One master's view of a lock.
#[derive(Clone, Debug)]
pub struct MasterView {
    /// The master's index in the configured list.
    pub node: usize,
    /// Its URL, credentials masked.
    pub url: String,
    /// Whether it takes lock writes now.
    pub up: bool,
    /// Whether it is in its restart quarantine.
    pub quarantined: bool,
    /// What it holds (`None`: no lock), or why it did not answer.
    pub answer: Result<Option<Holding>, CallError>,
}

/// The lease a quorum of masters carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumHolder {
    /// The lease a quorum carries.
    pub lease_id: LeaseId,
    /// Its owner.
    pub owner: String,
    /// How many masters carry it.
    pub masters: usize,
    /// How long a quorum of them still keeps it: the quorum-th longest time-to-live among them,
    /// less the time the reads took.
    pub validity: Duration,
}

/// A resource's lock as the fleet sees it.
#[derive(Clone, Debug)]
pub struct LockView {
    /// The resource.
    pub resource: String,
    /// Every master, in the configured order.
    pub masters: Vec<MasterView>,
    /// Masters needed for a quorum.
    pub quorum: usize,
    /// The lease a quorum carries; `None` when no lease is on a quorum of masters.
    pub holder: Option<QuorumHolder>,
}

impl LockView {
    /// Masters that hold any value for the resource.
    pub fn masters_holding(&self) -> usize {
        let holds = |m: &&MasterView| matches!(m.answer, Ok(Some(_)));
        self.masters.iter().filter(holds).count()
    }
}

/// One page of the locks held under a prefix, ordered by resource name.
#[derive(Clone, Debug)]
pub struct LockPage {
    /// The locks of this page, by resource name.
    pub locks: Vec<LockView>,
    /// The resource to list after, for the next page; `None` on the last page.
    pub next: Option<String>,
    /// `false` when a master did not answer the listing, or held more than
    /// 100,000 lock keys under the prefix: locks only it holds may be missing.
    pub complete: bool,
}

// === impl Redlock ===

impl Redlock {
    /// What every master holds for `resource`, and the lease a quorum carries: one lock (a
    /// lease of several semaphore slots is inspected one slot at a time).
    pub async fn inspect(&self, resource: &str) -> Result<LockView, Error> {
        validate_one_lock_name(resource)?;
        self.fleet.wait_for_statuses(INSPECT_TIMEOUT).await;
        let resources = [resource.to_string()];
        let views = self.read_locks(&resources).await;
        // `read_locks` answers one view per resource asked.
        views
            .into_iter()
            .next()
            .ok_or(Error::InvalidResource("not read"))
    }

    /// The locks held on any master under `prefix` (every lock when `None`), after the
    /// resource `after` (exclusive), at most `limit` (1 to [`MAX_LIST_LIMIT`]) in name order.
    pub async fn list_locks(
        &self,
        prefix: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<LockPage, Error> {
        if let Some(prefix) = prefix {
            validate_prefix(prefix)?;
        }
        if let Some(after) = after {
            validate_lock_name(after)?;
        }
        if !(1..=MAX_LIST_LIMIT).contains(&limit) {
            return Err(Error::InvalidLimit(format!(
                "limit must be between 1 and {MAX_LIST_LIMIT}"
            )));
        }
        let keyspace = self.fleet.keyspace();
        let wanted = glob_escape(prefix.unwrap_or(""));
        // Locks, the slots of semaphores, the writers and readers of read-write locks and the
        // leaders of elections (whose
        // lock names sort right after their resource's: the kind separator is below every
        // character a resource may hold).
        let patterns = [
            format!("{}{wanted}*", glob_escape(&keyspace.lock(""))),
            format!("{}sem:{wanted}*", glob_escape(keyspace.prefix())),
            format!("{}rw:{wanted}*", glob_escape(keyspace.prefix())),
            format!("{}elect:{wanted}*", glob_escape(keyspace.prefix())),
        ];
        self.fleet.wait_for_statuses(INSPECT_TIMEOUT).await;
        let scans = self.fleet.nodes().iter().flat_map(|node| {
            patterns
                .iter()
                .map(move |pattern| scan(node, pattern, MAX_SCANNED_KEYS))
        });
        let mut names = BTreeSet::new();
        let mut complete = true;
        for scanned in futures_util::future::join_all(scans).await {
            let Some((keys, finished)) = scanned else {
                complete = false;
                continue;
            };
            complete &= finished;
            let found = keys.iter().filter_map(|key| keyspace.lock_name_of(key));
            let wanted = found.filter(|name| after.is_none_or(|after| name.as_str() > after));
            names.extend(wanted);
        }
        let more = names.len() > limit;
        let page: Vec<String> = names.into_iter().take(limit).collect();
        let next = more.then(|| page.last().cloned()).flatten();
        let locks = if page.is_empty() {
            Vec::new()
        } else {
            self.read_locks(&page).await
        };
        Ok(LockPage {
            locks,
            next,
            complete,
        })
    }

    /// `GET` and `PTTL` of each resource's lock key on every master, pipelined (callers wait
    /// for the lock connections first).
    pub(super) async fn read_locks(&self, resources: &[String]) -> Vec<LockView> {
        let keyspace = self.fleet.keyspace();
        let mut commands = Commands::with_capacity(64 * resources.len());
        for resource in resources {
            let key = keyspace.lock(resource);
            commands.push(&[b"GET", key.as_bytes()]);
            commands.push(&[b"PTTL", key.as_bytes()]);
        }
        let start = Instant::now();
        let deadline = Deadline::After(INSPECT_TIMEOUT);
        let nodes = self.fleet.nodes();
        let reads = nodes.iter().map(|node| node.query(&commands, &deadline));
        let answers = futures_util::future::join_all(reads).await;
        let now = Instant::now();
        let elapsed = now - start;
        let quorum = self.fleet.quorum();
        let view = |index: usize, resource: &String| {
            let masters: Vec<MasterView> = nodes
                .iter()
                .zip(&answers)
                .map(|(node, answer)| MasterView {
                    node: node.index(),
                    url: node.url().to_string(),
                    up: node.is_up(),
                    quarantined: node.is_quarantined(now),
                    answer: answer.as_ref().map_err(Clone::clone).and_then(|replies| {
                        holding(replies.get(2 * index), replies.get(2 * index + 1))
                    }),
                })
                .collect();
            let holder = quorum_holder(&masters, quorum, elapsed);
            LockView {
                resource: resource.clone(),
                masters,
                quorum,
                holder,
            }
        };
        resources
            .iter()
            .enumerate()
            .map(|(index, resource)| view(index, resource))
            .collect()
    }
}

/// The holding a master's `GET` and `PTTL` replies describe.
fn holding(get: Option<&Reply>, pttl: Option<&Reply>) -> Result<Option<Holding>, CallError> {
    let missing = || CallError::Reply("fewer replies than commands".into());
    let get = get.ok_or_else(missing)?.clone().map_err(CallError::Reply)?;
    let pttl = pttl
        .ok_or_else(missing)?
        .clone()
        .map_err(CallError::Reply)?;
    let Some(value) = text(&get) else {
        return Ok(None);
    };
    let pttl = match pttl {
        Value::Integer(-2) => return Ok(None), // expired between the two reads
        Value::Integer(ms) if ms >= 0 => Some(Duration::from_millis(ms as u64)),
        _ => None,
    };
    // A semaphore slot's value ends with `\u{1f}<limit>` after the owner (no owner has a
    // control character).
    let owner_only = |owner: &str| owner.split('\u{1f}').next().unwrap_or(owner).to_string();
    let parsed = parse_value(&value).map(|(id, owner)| (id, owner_only(owner)));
    let (lease_id, owner) = parsed.unzip();
    Ok(Some(Holding {
        lease_id,
        owner,
        value,
        pttl,
    }))
}

/// A string reply's text; `None` for a null or another kind of reply.
pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.to_string()),
        Value::Bytes(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::Integer(number) => Some(number.to_string()),
        _ => None,
    }
}

/// The lease carried by at least `quorum` of `masters`, with the time a quorum of them still
/// keeps it (the quorum-th longest time-to-live, less `elapsed`).
pub fn quorum_holder(
    masters: &[MasterView],
    quorum: usize,
    elapsed: Duration,
) -> Option<QuorumHolder> {
    let held: Vec<&Holding> = masters
        .iter()
        .filter_map(|m| m.answer.as_ref().ok().and_then(Option::as_ref))
        .collect();
    let ids = held.iter().filter_map(|h| h.lease_id);
    let lease_id = ids
        .clone()
        .find(|id| ids.clone().filter(|other| other == id).count() >= quorum)?;
    let carriers: Vec<&&Holding> = held
        .iter()
        .filter(|h| h.lease_id == Some(lease_id))
        .collect();
    let mut pttls: Vec<Duration> = carriers
        .iter()
        .map(|h| h.pttl.unwrap_or(Duration::MAX))
        .collect();
    pttls.sort_unstable_by(|a, b| b.cmp(a));
    let kept = pttls.get(quorum.checked_sub(1)?).copied()?;
    Some(QuorumHolder {
        lease_id,
        owner: carriers[0].owner.clone().unwrap_or_default(),
        masters: carriers.len(),
        validity: kept.saturating_sub(elapsed),
    })
}

/// Scans `node` for keys matching `pattern`: the keys (at most `cap`) and whether the scan
/// finished; `None` when the master did not answer.
async fn scan(node: &Arc<Node>, pattern: &str, cap: usize) -> Option<(Vec<String>, bool)> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    loop {
        let mut command = Commands::with_capacity(64 + pattern.len());
        command.push(&[
            b"SCAN",
            cursor.as_bytes(),
            b"MATCH",
            pattern.as_bytes(),
            b"COUNT",
            SCAN_COUNT,
        ]);
        let deadline = Deadline::After(INSPECT_TIMEOUT);
        let reply = node.query(&command, &deadline).await.ok()?.pop()?.ok()?;
        let Value::Array(mut parts) = reply else {
            return None;
        };
        let (Some(Value::Array(found)), Some(next)) = (parts.pop(), parts.pop()) else {
            return None;
        };
        keys.extend(found.iter().filter_map(text));
        cursor = text(&next)?;
        if cursor == "0" {
            return Some((keys, true));
        }
        if keys.len() >= cap {
            keys.truncate(cap);
            return Some((keys, false));
        }
    }
}

/// `text` with the glob characters of `MATCH` (`*`, `?`, `[`, `]`, `\`) escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn master(node: usize, held: Option<(LeaseId, u64)>) -> MasterView {
        MasterView {
            node,
            url: String::new(),
            up: true,
            quarantined: false,
            answer: Ok(held.map(|(id, ms)| Holding {
                lease_id: Some(id),
                owner: Some("job".into()),
                value: format!("{id}|job"),
                pttl: Some(Duration::from_millis(ms)),
            })),
        }
    }

    /// A lease on a quorum is the holder, kept as long as the quorum-th longest TTL; a lease
    /// on a minority is nobody's.
    #[test]
    fn the_holder_is_the_lease_a_quorum_carries() {
        let (a, b) = (LeaseId::random(), LeaseId::random());
        let masters = [
            master(0, Some((a, 900))),
            master(1, Some((a, 500))),
            master(2, Some((b, 800))),
            master(3, Some((a, 700))),
            master(4, None),
        ];
        let holder = quorum_holder(&masters, 3, Duration::from_millis(20)).unwrap();
        assert_eq!(holder.lease_id, a);
        assert_eq!(holder.masters, 3);
        assert_eq!(holder.validity, Duration::from_millis(480));
        let minority = [master(0, Some((a, 900))), master(1, Some((a, 900)))];
        let five = [
            &minority[..],
            &[master(2, None), master(3, None), master(4, None)],
        ]
        .concat();
        assert_eq!(quorum_holder(&five, 3, Duration::ZERO), None);
    }

    /// A master that did not answer carries nothing.
    #[test]
    fn an_unanswered_master_carries_nothing() {
        let a = LeaseId::random();
        let mut masters = vec![master(0, Some((a, 900))), master(1, Some((a, 900)))];
        masters.push(MasterView {
            answer: Err(CallError::Timeout),
            ..master(2, None)
        });
        assert_eq!(
            quorum_holder(&masters, 2, Duration::ZERO).unwrap().masters,
            2
        );
        assert_eq!(quorum_holder(&masters, 3, Duration::ZERO), None);
    }

    /// Glob characters in a prefix match only themselves.
    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\d"), "a\\*b\\?\\[c\\]\\\\d");
        assert_eq!(glob_escape("plain:name"), "plain:name");
    }
}

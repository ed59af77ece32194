//! A master's administrative commands, on its fred client: loading the scripts, reading what
//! a preparation decides its standing from ([`Inspection`]), the birth of a fleet, the
//! quarantine record and the marker that ends a preparation, and the fence counter read
//! while syncing another master.

use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface};
use fred::types::{CustomCommand, Value};

use super::Node;
use crate::fleet::eviction::{evicting, Evicting};
use crate::fleet::quarantine::{parse_info, Identity};
use crate::keys::Keyspace;
use crate::scripts::SCRIPTS;

/// What a preparation reads of a master.
#[derive(Clone, Debug)]
pub(in crate::fleet) struct Inspection {
    pub(in crate::fleet) identity: Identity,
    /// Its eviction settings when it may drop keys; `Err` when `INFO memory` did not say.
    pub(in crate::fleet) evicting: Result<Option<Evicting>, &'static str>,
    /// The fleet marker's text as read (`None`: absent).
    pub(in crate::fleet) marker: Option<String>,
    /// The fence counter (0: absent).
    pub(in crate::fleet) fence: u64,
    /// `<prefix>quarantined`: the `run_id` it names and what is left of it.
    pub(in crate::fleet) record: Option<(String, Duration)>,
}

impl Inspection {
    /// Whether the master carries anything of a fleet's history: the marker, a fence
    /// counter or a quarantine record.
    pub(in crate::fleet) fn has_history(&self) -> bool {
        self.marker.is_some() || self.fence > 0 || self.record.is_some()
    }
}

/// How `mark.lua` ended a preparation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::fleet) enum Marked {
    /// The counter now holds this, and the marker is written.
    Done(u64),
    /// The marker or the counter changed since the inspection: inspect again.
    Changed,
    /// A quarantine is recorded there: inspect again, and serve it out.
    Recorded,
}

/// The marker, the fence counter and the quarantine record: `KEYS` of `inspect.lua`,
/// `birth.lua` and `mark.lua`, in that order.
fn bookkeeping_keys(keyspace: &Keyspace) -> Vec<String> {
    vec![keyspace.marker(), keyspace.fence(), keyspace.quarantined()]
}

// === impl Node ===

impl Node {
    /// Loads every script into this master's cache; `false` when it did not answer in time.
    pub(in crate::fleet) async fn load_scripts(&self, timeout: Duration) -> bool {
        let load = async {
            for script in SCRIPTS.all() {
                script.load(&self.client).await?;
            }
            Ok::<_, fred::error::Error>(())
        };
        matches!(tokio::time::timeout(timeout, load).await, Ok(Ok(())))
    }

    /// `INFO server`, `INFO memory`, and the marker, fence counter and quarantine record read
    /// at one instant, within `timeout`; `None` when the master did not answer in time.
    pub(in crate::fleet) async fn inspect(
        &self,
        keyspace: &Keyspace,
        timeout: Duration,
    ) -> Option<Inspection> {
        let keys = bookkeeping_keys(keyspace);
        let query = async {
            let server = self.info("server").await?;
            let memory = self.info("memory").await?;
            let script = &SCRIPTS.inspect;
            let read: Vec<Value> = script.evalsha_with_reload(&self.client, keys, ()).await?;
            Ok::<_, fred::error::Error>((server, memory, read))
        };
        let (server, memory, read) = tokio::time::timeout(timeout, query).await.ok()?.ok()?;
        let mut read = read.into_iter();
        let mut text = || read.next().and_then(|v| v.into_string());
        let (marker, fence, record) = (text(), text(), text());
        let pttl = read.next().and_then(|v| v.as_i64()).unwrap_or(-2);
        let record = record.filter(|_| pttl > 0);
        Some(Inspection {
            identity: parse_info(&server)?,
            evicting: evicting(&memory),
            marker,
            fence: fence.and_then(|f| f.parse().ok()).unwrap_or(0),
            record: record.map(|r| (r, Duration::from_millis(pttl as u64))),
        })
    }

    /// Whether this voting master's eviction settings now let it drop keys (a `CONFIG SET`
    /// since it was prepared): it is then taken out, and its preparation refuses it until the
    /// policy is `noeviction`. Nothing when it does not answer within `timeout`.
    pub(in crate::fleet) async fn recheck_eviction(&self, timeout: Duration) {
        if !self.is_member() {
            return;
        }
        let memory = tokio::time::timeout(timeout, self.info("memory")).await;
        let Ok(Ok(memory)) = memory else {
            return;
        };
        if let Ok(Some(evicting)) = evicting(&memory) {
            tracing::warn!(
                node = self.index(),
                policy = evicting.policy,
                "master may evict keys now: taken out"
            );
            self.set_ready_false_and_prepare();
        }
    }

    async fn info(&self, section: &'static str) -> Result<String, fred::error::Error> {
        let info = CustomCommand::new_static("INFO", None, false);
        self.client.custom(info, vec![section]).await
    }

    /// Makes this master, if it has no history, a member of a newborn fleet (`marker`, its
    /// fence counter 1). `Some(false)`: it has history, nothing written; `None`: no answer.
    pub(in crate::fleet) async fn birth(
        &self,
        keyspace: &Keyspace,
        marker: &str,
        timeout: Duration,
    ) -> Option<bool> {
        let keys = bookkeeping_keys(keyspace);
        let birth = SCRIPTS
            .birth
            .evalsha_with_reload(&self.client, keys, marker);
        let born: i64 = tokio::time::timeout(timeout, birth).await.ok()?.ok()?;
        Some(born == 1)
    }

    /// Ends a preparation (`mark.lua`): unless the master changed since `read` (its marker
    /// text and counter), max-assigns `target` to its counter and writes `marker`.
    pub(in crate::fleet) async fn mark(
        &self,
        keyspace: &Keyspace,
        read: (Option<&str>, u64),
        target: u64,
        marker: &str,
        timeout: Duration,
    ) -> Option<Marked> {
        let keys = bookkeeping_keys(keyspace);
        let (read_marker, read_fence) = read;
        let args = vec![
            read_marker.unwrap_or("").to_string(),
            read_fence.to_string(),
            target.to_string(),
            marker.to_string(),
        ];
        let mark = SCRIPTS.mark.evalsha_with_reload(&self.client, keys, args);
        let reply: i64 = tokio::time::timeout(timeout, mark).await.ok()?.ok()?;
        Some(match reply {
            -2 => Marked::Recorded,
            counter if counter >= 1 => Marked::Done(counter as u64),
            _ => Marked::Changed,
        })
    }

    /// Records the quarantine of server `run_id` for every process: `<prefix>quarantined`,
    /// expiring `left` from now on the server's clock, and `marker` (`quarantined=<run_id>`),
    /// at one instant. `false` when the master did not answer in time.
    pub(in crate::fleet) async fn record_quarantine(
        &self,
        keyspace: &Keyspace,
        (run_id, left): (&str, Duration),
        marker: &str,
        timeout: Duration,
    ) -> bool {
        let keys = vec![keyspace.quarantined(), keyspace.marker()];
        let left_ms = left.as_millis().max(1).to_string();
        let args = vec![run_id.to_string(), left_ms, marker.to_string()];
        let record = SCRIPTS
            .quarantine
            .evalsha_with_reload(&self.client, keys, args);
        matches!(tokio::time::timeout(timeout, record).await, Ok(Ok(1i64)))
    }

    /// The value of an integer key (0 when absent), within `timeout`.
    pub(in crate::fleet) async fn get_counter(&self, key: &str, timeout: Duration) -> Option<u64> {
        let get = self.client.get::<Option<u64>, _>(key);
        let value = tokio::time::timeout(timeout, get).await.ok()?.ok()?;
        Some(value.unwrap_or(0))
    }
}

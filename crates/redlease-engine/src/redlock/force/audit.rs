//! The audit of force releases: the record each one appends to the capped stream
//! `<prefix>audit` on every master, and the records read back, merged across masters.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::types::Value;

use super::super::inventory::{text, INSPECT_TIMEOUT};
use super::super::Redlock;
use crate::fleet::Deadline;
use crate::resp::Commands;
use crate::Error;

/// Entries the audit stream of each master keeps, about (`XADD … MAXLEN ~`).
pub const AUDIT_MAXLEN: &[u8] = b"10000";
/// Most audit records one read returns.
pub const MAX_AUDIT_LIMIT: usize = 10_000;

/// One force release as the audit streams record it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    /// The record's id (32 hex digits), the same on every master.
    pub audit_id: String,
    /// The resource whose lock was forced.
    pub resource: String,
    /// Who forced it.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When it ran, in ms since the Unix epoch.
    pub time_ms: u64,
    /// The values it removed (`<lease id>|<owner>` for redlease's own).
    pub holders: Vec<String>,
    /// How many masters' streams carry the record.
    pub masters: usize,
}

// === impl Redlock ===

impl Redlock {
    /// The force releases recorded since `since_ms` (ms since the Unix epoch; all when
    /// `None`), newest first, at most `limit` (1 to [`MAX_AUDIT_LIMIT`]): every master's
    /// stream read, each record once.
    pub async fn audit(
        &self,
        since_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, Error> {
        if !(1..=MAX_AUDIT_LIMIT).contains(&limit) {
            return Err(Error::InvalidLimit(format!(
                "limit must be between 1 and {MAX_AUDIT_LIMIT}"
            )));
        }
        let start = since_ms.map_or("-".to_string(), |ms| ms.to_string());
        let count = limit.to_string();
        let key = self.fleet.keyspace().audit();
        let mut read = Commands::with_capacity(128);
        read.push(&[
            b"XREVRANGE",
            key.as_bytes(),
            b"+",
            start.as_bytes(),
            b"COUNT",
            count.as_bytes(),
        ]);
        self.fleet.wait_for_links(INSPECT_TIMEOUT).await;
        let deadline = Deadline::After(INSPECT_TIMEOUT);
        let reads = self
            .fleet
            .nodes()
            .iter()
            .map(|node| node.query(&read, &deadline));
        let mut merged: BTreeMap<String, AuditRecord> = BTreeMap::new();
        for replies in futures_util::future::join_all(reads).await {
            let Some(Ok(Value::Array(entries))) = replies.ok().and_then(|mut r| r.pop()) else {
                continue;
            };
            for record in entries.iter().filter_map(parse_entry) {
                merged
                    .entry(record.audit_id.clone())
                    .and_modify(|seen| seen.masters += 1)
                    .or_insert(AuditRecord {
                        masters: 1,
                        ..record
                    });
            }
        }
        let mut records: Vec<AuditRecord> = merged.into_values().collect();
        records.sort_by(|a, b| (b.time_ms, &b.audit_id).cmp(&(a.time_ms, &a.audit_id)));
        records.truncate(limit);
        Ok(records)
    }
}

/// `XADD <audit> MAXLEN ~ 10000 * audit_id … holders N holder.0 … holder.N-1`.
pub(super) fn audit_command(key: &str, record: &AuditRecord) -> Commands {
    let time = record.time_ms.to_string();
    let count = record.holders.len().to_string();
    let names: Vec<String> = (0..record.holders.len())
        .map(|i| format!("holder.{i}"))
        .collect();
    let mut parts: Vec<&[u8]> = vec![
        b"XADD",
        key.as_bytes(),
        b"MAXLEN",
        b"~",
        AUDIT_MAXLEN,
        b"*",
        b"audit_id",
        record.audit_id.as_bytes(),
        b"resource",
        record.resource.as_bytes(),
        b"actor",
        record.actor.as_bytes(),
        b"reason",
        record.reason.as_bytes(),
        b"time_ms",
        time.as_bytes(),
        b"holders",
        count.as_bytes(),
    ];
    for (name, holder) in names.iter().zip(&record.holders) {
        parts.push(name.as_bytes());
        parts.push(holder.as_bytes());
    }
    let mut commands = Commands::with_capacity(256);
    commands.push(&parts);
    commands
}

/// An audit record from one `XREVRANGE` entry (`[id, [field, value, …]]`); `None` for an
/// entry redlease did not write.
fn parse_entry(entry: &Value) -> Option<AuditRecord> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let Some(Value::Array(fields)) = parts.get(1) else {
        return None;
    };
    let texts: Vec<String> = fields.iter().filter_map(text).collect();
    let field = |name: &str| {
        let mut pairs = texts.chunks_exact(2);
        pairs
            .find(|pair| pair[0] == name)
            .map(|pair| pair[1].clone())
    };
    let holders = field("holders")?.parse::<usize>().ok()?;
    Some(AuditRecord {
        audit_id: field("audit_id")?,
        resource: field("resource")?,
        actor: field("actor")?,
        reason: field("reason")?,
        time_ms: field("time_ms")?.parse().ok()?,
        holders: (0..holders)
            .filter_map(|i| field(&format!("holder.{i}")))
            .collect(),
        masters: 1,
    })
}

/// Milliseconds since the Unix epoch (0 for a clock set before it).
pub(super) fn unix_ms(time: SystemTime) -> u64 {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    since.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LeaseId;

    /// An audit entry reads back as it was written.
    #[test]
    fn an_audit_entry_round_trips() {
        let record = AuditRecord {
            audit_id: LeaseId::random().to_string(),
            resource: "billing".into(),
            actor: "alice".into(),
            reason: "job died".into(),
            time_ms: 1_795_000_000_000,
            holders: vec!["a|b".into(), "c|d".into()],
            masters: 1,
        };
        let commands = audit_command("redlease:audit", &record);
        let text = String::from_utf8_lossy(commands.encoded()).into_owned();
        let bulk: Vec<&str> = text.split("\r\n").collect();
        // RESP: *N, then $len / value pairs; the fields start after XADD key MAXLEN ~ N *.
        let values: Vec<Value> = bulk[1..]
            .chunks(2)
            .skip(6)
            .filter_map(|pair| pair.get(1).map(|v| Value::String((*v).into())))
            .collect();
        let entry = Value::Array(vec![Value::String("1-0".into()), Value::Array(values)]);
        assert_eq!(parse_entry(&entry), Some(record));
    }
}

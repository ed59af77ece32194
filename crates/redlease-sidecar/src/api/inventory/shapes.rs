//! The JSON shapes of the inventory: a lock as the fleet sees it, a page of locks, what a force
//! release did, and an audit record — answered by the API and printed by the command line.
//!
//! Fields are declared in name order: these shapes were built as `serde_json` maps, which
//! write their keys sorted, and the bytes stay the same. A key the maps left out is skipped
//! here too (`skip_serializing_if`); one they wrote as `null` is an `Option` that is not.

use serde::Serialize;
use utoipa::ToSchema;

use crate::keys::{parse_lock_name, LockKind};
use crate::{AuditRecord, ForceRelease, ForceVerdict, LockPage, LockView};
use crate::{MasterAnswer, MasterView};

/// A lock as the fleet sees it: the quorum holder and every master's value.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct LockJson {
    /// The lease a quorum of masters carries; `null` when none does.
    pub holder: Option<HolderJson>,
    /// Which lock of the resource: `semaphore` (a slot), `read` (a reader slot) or `write`
    /// (the writer) of its read-write lock; absent for the resource's lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub kind: Option<&'static str>,
    /// Every master's value, in the configured order.
    pub masters: Vec<MasterLockJson>,
    /// Masters that hold a value for the resource.
    pub masters_holding: usize,
    /// ⌊N/2⌋+1.
    pub quorum: usize,
    /// The resource.
    pub resource: String,
    /// A semaphore's slot, or a read-write lock's reader slot; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

/// The lease a quorum of masters carries.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct HolderJson {
    /// Its fencing token, when this sidecar holds the lease (held or degraded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<u64>,
    /// 32 lowercase hex digits.
    #[schema(pattern = "^[0-9a-f]{32}$")]
    pub lease_id: String,
    /// Masters that carry it.
    pub masters: usize,
    /// Who holds it.
    pub owner: String,
    /// Validity left, as the quorum's shortest TTL says (ms).
    pub validity_ms: u64,
}

/// One master's value for a lock. `held` is there when the master answered; `error` when it
/// did not. `lease_id`, `owner` and `pttl_ms` are there when it holds a value, `value` when
/// that value is not a lease of this API.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MasterLockJson {
    /// Why the master did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether it holds a value for the resource.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// The lease it holds; `null` for a value that is not a lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub lease_id: Option<Option<String>>,
    /// The master's index in the configured order.
    pub node: usize,
    /// The lease's owner; `null` for a value that is not a lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub owner: Option<Option<String>>,
    /// The key's TTL left (ms); `null` without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, required = false)]
    pub pttl_ms: Option<Option<u64>>,
    /// In restart quarantine.
    pub quarantined: bool,
    /// Takes lock writes.
    pub up: bool,
    /// The master's URL, credentials shown as `***`.
    pub url: String,
    /// The raw value, when it is not a lease of this API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A counting semaphore's slots that any master holds a value in.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct SemaphoreJson {
    /// The resource.
    pub resource: String,
    /// One lock per slot held on any master, in slot order, each with its `slot`.
    pub slots: Vec<LockJson>,
}

/// A page of locks, in name order.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PageJson {
    /// `false` when a master did not answer the listing.
    pub complete: bool,
    /// The locks of this page.
    pub locks: Vec<PageLockJson>,
    /// Pass as `after` for the next page; `null` on the last.
    pub next: Option<String>,
}

/// One lock of a page.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct PageLockJson {
    /// The lease a quorum of masters carries; `null` when none does.
    pub holder: Option<HolderJson>,
    /// Which lock of the resource: `semaphore` (a slot), `read` (a reader slot) or `write`
    /// (the writer) of its read-write lock; absent for the resource's lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub kind: Option<&'static str>,
    /// Masters that hold a value for the resource.
    pub masters_holding: usize,
    /// The resource.
    pub resource: String,
    /// A semaphore's slot, or a read-write lock's reader slot; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

/// What a force release did (also the extension members of its 409 and 503 problems).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ForceReleaseJson {
    /// The other slots of the semaphore that the revoked lease held (a lease of several
    /// permits), each revoked too, named by that lease, and audited on its own; absent when
    /// there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub also: Vec<AlsoForcedJson>,
    /// The audit record's id.
    pub audit_id: String,
    /// Masters that recorded the audit.
    pub audits_recorded: usize,
    /// A quorum confirmed the revocation.
    pub confirmed: bool,
    /// When nobody's key can hold the resource any more (Unix ms).
    pub free_at_ms: u64,
    /// Whether the holder acknowledged; `null` when there was no holder to tell.
    pub holder_told: Option<bool>,
    /// Which lock of the resource: `semaphore` (a slot), `read` (a reader slot) or `write`
    /// (the writer) of its read-write lock; absent for the resource's lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub kind: Option<&'static str>,
    /// Every master's answer, in the configured order.
    pub masters: Vec<ForcedMasterJson>,
    /// Masters that answered.
    pub masters_answered: usize,
    /// Masters that removed a value.
    pub masters_removed: usize,
    /// What was removed.
    pub removed: Vec<RemovedJson>,
    /// The resource.
    pub resource: String,
    /// A semaphore's slot, or a read-write lock's reader slot; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// When it happened (Unix ms).
    pub time_ms: u64,
}

/// Another slot of the revoked lease, forced with it.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AlsoForcedJson {
    /// Its own audit record's id.
    pub audit_id: String,
    /// A quorum confirmed its revocation.
    pub confirmed: bool,
    /// When nobody's key can hold the slot any more (Unix ms).
    pub free_at_ms: u64,
    /// Whether the holder acknowledged; `null` when there was no holder to tell.
    pub holder_told: Option<bool>,
    /// The slot.
    pub slot: Option<u32>,
}

/// One master's answer to a force release.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ForcedMasterJson {
    /// What the master did.
    #[schema(value_type = ForcedAnswer)]
    pub answer: &'static str,
    /// Why it did not answer (only with `no_answer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The master's URL, credentials shown as `***`.
    pub url: String,
}

/// What a master did with a force release.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Describes the engine's `MasterAnswer::label` strings; never built.
pub(crate) enum ForcedAnswer {
    /// The lease was revoked.
    Revoked,
    /// The lease was revoked already.
    AlreadyRevoked,
    /// The value was deleted.
    Deleted,
    /// Nothing held the resource.
    Empty,
    /// Another lease holds it (with `lease_id`).
    HeldByOther,
    /// The master did not answer.
    NoAnswer,
}

/// A holder a force release removed.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct RemovedJson {
    /// Its lease; `null` for a value that is not a lease.
    pub lease_id: Option<String>,
    /// Masters it was removed from.
    pub masters: usize,
    /// Its owner; `null` for a value that is not a lease.
    pub owner: Option<String>,
    /// The raw value.
    pub value: String,
}

/// One audit record of a force release.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct AuditJson {
    /// Who released.
    pub actor: String,
    /// The record's id.
    pub audit_id: String,
    /// The holders removed.
    pub holders: Vec<String>,
    /// Which lock of the resource: `semaphore` (a slot), `read` (a reader slot) or `write`
    /// (the writer) of its read-write lock; absent for the resource's lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false)]
    pub kind: Option<&'static str>,
    /// Masters that recorded it.
    pub masters: usize,
    /// Why.
    pub reason: String,
    /// The resource.
    pub resource: String,
    /// A semaphore's slot, or a read-write lock's reader slot; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// When (Unix ms).
    pub time_ms: u64,
}

/// A lock as the fleet sees it: the quorum holder and every master's value.
pub fn lock_json(view: &LockView, fencing_token: Option<u64>) -> LockJson {
    LockJson {
        holder: holder_json(view, fencing_token),
        masters: view.masters.iter().map(master_json).collect(),
        masters_holding: view.masters_holding(),
        quorum: view.quorum,
        resource: resource_of(&view.resource),
        slot: slot_of(&view.resource),
        kind: kind_of(&view.resource),
    }
}

/// A page of locks: each with its quorum holder and how many masters hold a value for it.
pub fn page_json(page: &LockPage, fencing_tokens: &[Option<u64>]) -> PageJson {
    let lock = |(i, view): (usize, &LockView)| {
        let token = fencing_tokens.get(i).copied().flatten();
        PageLockJson {
            holder: holder_json(view, token),
            masters_holding: view.masters_holding(),
            resource: resource_of(&view.resource),
            slot: slot_of(&view.resource),
            kind: kind_of(&view.resource),
        }
    };
    PageJson {
        complete: page.complete,
        locks: page.locks.iter().enumerate().map(lock).collect(),
        next: page.next.clone(),
    }
}

fn holder_json(view: &LockView, fencing_token: Option<u64>) -> Option<HolderJson> {
    let holder = view.holder.as_ref()?;
    Some(HolderJson {
        fencing_token,
        lease_id: holder.lease_id.to_string(),
        masters: holder.masters,
        owner: holder.owner.clone(),
        validity_ms: holder.validity.as_millis() as u64,
    })
}

fn master_json(master: &MasterView) -> MasterLockJson {
    let mut json = MasterLockJson {
        error: None,
        held: None,
        lease_id: None,
        node: master.node,
        owner: None,
        pttl_ms: None,
        quarantined: master.quarantined,
        up: master.up,
        url: master.url.clone(),
        value: None,
    };
    match &master.answer {
        Ok(None) => json.held = Some(false),
        Ok(Some(holding)) => {
            json.held = Some(true);
            json.lease_id = Some(holding.lease_id.map(|id| id.to_string()));
            json.owner = Some(holding.owner.clone());
            if holding.lease_id.is_none() {
                json.value = Some(holding.value.clone());
            }
            json.pttl_ms = Some(holding.pttl.map(|left| left.as_millis() as u64));
        }
        Err(error) => json.error = Some(error.to_string()),
    }
    json
}

/// What a force release did.
pub fn force_release_json(forced: &ForceRelease) -> ForceReleaseJson {
    let removed = forced.removed.iter().map(|holder| RemovedJson {
        lease_id: holder.lease_id.map(|id| id.to_string()),
        masters: holder.masters,
        owner: holder.owner.clone(),
        value: holder.value.clone(),
    });
    let masters = forced.masters.iter().map(|master| ForcedMasterJson {
        answer: master.answer.label(),
        error: match &master.answer {
            MasterAnswer::NoAnswer { error } => Some(error.clone()),
            _ => None,
        },
        url: master.url.clone(),
    });
    ForceReleaseJson {
        audit_id: forced.audit_id.clone(),
        audits_recorded: forced.audits_recorded,
        confirmed: forced.verdict == ForceVerdict::Confirmed,
        free_at_ms: forced.free_at_ms,
        holder_told: forced.holder_told,
        masters: masters.collect(),
        masters_answered: forced.masters_answered,
        masters_removed: forced.masters_removed,
        removed: removed.collect(),
        resource: resource_of(&forced.resource),
        slot: slot_of(&forced.resource),
        kind: kind_of(&forced.resource),
        time_ms: forced.time_ms,
        also: forced.also.iter().map(also_forced_json).collect(),
    }
}

fn also_forced_json(forced: &ForceRelease) -> AlsoForcedJson {
    AlsoForcedJson {
        audit_id: forced.audit_id.clone(),
        confirmed: forced.verdict == ForceVerdict::Confirmed,
        free_at_ms: forced.free_at_ms,
        holder_told: forced.holder_told,
        slot: slot_of(&forced.resource),
    }
}

/// One audit record.
pub fn audit_json(record: &AuditRecord) -> AuditJson {
    AuditJson {
        actor: record.actor.clone(),
        audit_id: record.audit_id.clone(),
        holders: record.holders.clone(),
        masters: record.masters,
        reason: record.reason.clone(),
        resource: resource_of(&record.resource),
        slot: slot_of(&record.resource),
        kind: kind_of(&record.resource),
        time_ms: record.time_ms,
    }
}

/// The resource of a lock name (a semaphore slot's names its semaphore's resource).
pub(crate) fn resource_of(name: &str) -> String {
    parse_lock_name(name)
        .map_or(name, |parsed| parsed.resource)
        .to_string()
}

/// The slot a lock name names (a semaphore's, or a read-write lock's reader slot; the lowest
/// of a lease of several slots).
pub(crate) fn slot_of(name: &str) -> Option<u32> {
    match parse_lock_name(name)?.kind {
        LockKind::Slot(slot) | LockKind::Reader(slot) => Some(slot),
        LockKind::Slots(slots) => slots.lowest(),
        LockKind::Exclusive | LockKind::Writer | LockKind::Election => None,
    }
}

/// The kind of lock a lock name names, as the API says it; `None` for a resource's lock.
pub(crate) fn kind_of(name: &str) -> Option<&'static str> {
    match parse_lock_name(name)?.kind {
        LockKind::Exclusive => None,
        LockKind::Slot(_) | LockKind::Slots(_) => Some("semaphore"),
        LockKind::Reader(_) => Some("read"),
        LockKind::Writer => Some("write"),
        LockKind::Election => Some("election"),
    }
}

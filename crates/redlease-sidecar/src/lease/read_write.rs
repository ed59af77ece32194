//! The read-write lock's two rules that need this sidecar's table: a write asked for by an
//! owner that holds a read of the same resource here is refused (an upgrade would wait for its
//! own read for ever), and a write lease is downgraded to a read — the read is taken beside
//! the lease's own writer, then the write is released, so the holder never holds nothing.

use std::time::Duration;

use tokio::time::Instant;

use super::{AcquireKind, AcquireRequest, Acquired, LeaseManager, LeaseView, RenewError};
use crate::keys::{parse_lock_name, LockKind, LockName};
use crate::{Error, LeaseId};

/// Why a downgrade did not happen.
#[derive(Debug)]
pub enum DowngradeError {
    /// Unknown, ended, or no quorum: as a renewal says it.
    Renew(RenewError),
    /// The lease is not a read-write lock's writer.
    NotAWriter,
    /// Another lease's writer or intent kept the read out (the write is kept).
    Held,
    /// The sidecar is shutting down (the write is kept until it releases it).
    Closing,
}

impl From<Error> for DowngradeError {
    fn from(error: Error) -> Self {
        Self::Renew(RenewError::Invalid(error))
    }
}

// === impl LeaseManager ===

impl LeaseManager {
    /// Whether `owner` holds a read of `resource`'s read-write lock here that has not ended.
    pub fn holds_read(&self, resource: &str, owner: &str) -> bool {
        let now = Instant::now();
        let table = self.table();
        table.values().any(|tracked| {
            let record = tracked.record();
            let read = matches!(
                parse_lock_name(&record.lease.resource),
                Some(LockName { resource: r, kind: LockKind::Reader(_) }) if r == resource
            );
            read && record.lease.owner == owner && !record.state_at(now).is_ended()
        })
    }

    /// Turns the write lease `id` into a read lease of the same resource, owner, TTL,
    /// renewal and idle timeout: the read is taken (its acquisition lets this lease's writer
    /// stand), then the write is released. Answers the read lease; on any refusal the write
    /// lease is left as it was.
    pub async fn downgrade(
        self: &std::sync::Arc<Self>,
        id: LeaseId,
    ) -> Result<LeaseView, DowngradeError> {
        let tracked = self
            .find(id)
            .ok_or(DowngradeError::Renew(RenewError::Unknown))?;
        let request = {
            let record = tracked.record();
            let now = Instant::now();
            if record.state_at(now).is_ended() {
                let view = Box::new(record.view(now));
                return Err(DowngradeError::Renew(RenewError::Gone(view)));
            }
            let Some(LockName {
                resource,
                kind: LockKind::Writer,
            }) = parse_lock_name(&record.lease.resource)
            else {
                return Err(DowngradeError::NotAWriter);
            };
            AcquireRequest {
                resource: resource.to_string(),
                owner: record.lease.owner.clone(),
                ttl: Some(record.lease.ttl),
                wait: Duration::ZERO,
                auto_renew: record.auto_renew,
                idle_timeout: Some(record.idle_timeout),
                kind: AcquireKind::Read { beside: Some(id) },
                campaign: None,
                fair: false,
            }
        };
        let read = match self.acquire(request).await? {
            Acquired::Granted(read) => read,
            Acquired::Held | Acquired::Dequeued => return Err(DowngradeError::Held),
            Acquired::NoQuorum => return Err(DowngradeError::Renew(RenewError::NoQuorum)),
            Acquired::Closing => return Err(DowngradeError::Closing),
        };
        // The read stands on a quorum: the write can go (it keeps trying in its own task).
        let _ = self.release(id, "released").await;
        Ok(read)
    }
}

//! Re-entry of a held lease: [`LockGuard::reenter`] asks the sidecar to renew the lease on a
//! quorum of masters and open a hold on it (`POST /v1/leases/{id}/reenter`), and
//! [`Hold::release`] releases that one hold (`DELETE /v1/leases/{hold_id}`), never the lease.

use hyper::Method;
use serde::Deserialize;

use crate::error::{self, ClientError};
use crate::http::Transport;
use crate::{LeaseInfo, LockGuard, ReleaseBody, REQUEST_MARGIN};

/// One re-entry hold on a lease, from [`LockGuard::reenter`]. The lease stays held until the
/// guard releases it, which closes every hold; a hold released (or dropped) changes nothing on
/// the masters. A hold dropped without [`Hold::release`] stays open on the sidecar until the
/// lease ends: nothing is sent on drop.
#[must_use = "a hold stays open until released, or until its lease ends"]
#[derive(Debug)]
pub struct Hold {
    hold_id: String,
    /// The lease as the re-entry answered it: renewed, same fencing token.
    lease: LeaseInfo,
    http: Transport,
    /// `…/v1/leases/{hold_id}`.
    hold_path: String,
}

/// The answer to a re-entry: the lease, and the hold's id.
#[derive(Deserialize)]
struct Reentered {
    hold_id: String,
    #[serde(flatten)]
    lease: LeaseInfo,
}

// === impl LockGuard ===

impl LockGuard {
    /// Enters the lease again: the sidecar renews it on a quorum of masters, then opens a
    /// hold on it. The hold has the lease's own fencing token (no new grant, no new token).
    /// Refused, with no hold opened: [`ClientError::NoQuorum`] (too few masters extended the
    /// lease), [`ClientError::LeaseLost`] (it has ended), [`ClientError::TooManyHolds`].
    pub async fn reenter(&self) -> Result<Hold, ClientError> {
        let path = format!("{}/reenter", self.lease_path);
        let answer = self.http.call(Method::POST, &path, None, REQUEST_MARGIN);
        let Reentered { hold_id, lease } = error::read(answer.await?)?;
        if hold_id.len() != 32 || !hold_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ClientError::Unexpected {
                status: 200,
                detail: format!("a hold id that is not 32 hex digits: {hold_id:?}"),
            });
        }
        // `lease_path` is `…/v1/leases/{lease id}`: the hold's path replaces the id.
        let leases = self
            .lease_path
            .rsplit_once('/')
            .map_or("", |(base, _)| base);
        Ok(Hold {
            hold_path: format!("{leases}/{hold_id}"),
            hold_id,
            lease,
            http: self.http.clone(),
        })
    }
}

// === impl Hold ===

impl Hold {
    /// The hold's id (32 lowercase hex digits), not the lease's.
    pub fn hold_id(&self) -> &str {
        &self.hold_id
    }

    /// The id of the lease the hold is on.
    pub fn lease_id(&self) -> &str {
        &self.lease.lease_id
    }

    /// The lease's fencing token: the same as the guard's.
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token
    }

    /// Holds open on the lease when this one was opened, this one included.
    pub fn holds(&self) -> u64 {
        self.lease.holds
    }

    /// The lease as the re-entry answered it (renewed: its new validity).
    pub fn info(&self) -> &LeaseInfo {
        &self.lease
    }

    /// Releases this hold only (the lease stays held; no master is written to). `Ok(true)`
    /// when this call released it; `Ok(false)` when it was released before, or its lease has
    /// ended (which closed it). [`ClientError::UnknownLease`] once the sidecar has forgotten
    /// the lease (60 s after it ended).
    pub async fn release(self) -> Result<bool, ClientError> {
        let answer = self
            .http
            .call(Method::DELETE, &self.hold_path, None, REQUEST_MARGIN);
        let body: ReleaseBody = error::read(answer.await?)?;
        Ok(body.released)
    }
}

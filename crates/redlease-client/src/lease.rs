//! What the sidecar says of a lease: [`LeaseInfo`] (acquire, `GET /v1/leases/{id}`, every
//! event), its [`LeaseState`], and how it ended for a guard ([`LeaseEnd`]).

use serde::Deserialize;

/// A lease as the sidecar reports it (acquire, `GET /v1/leases/{id}`, every event).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct LeaseInfo {
    /// 32 lowercase hex digits.
    pub lease_id: String,
    /// The resource it locks.
    pub resource: String,
    /// Who holds it.
    pub owner: String,
    /// Strictly greater than every earlier holder's: pass it to what you write.
    pub fencing_token: u64,
    /// The TTL set by the last grant or renewal, in ms.
    pub ttl_ms: u64,
    /// Validity left when the sidecar answered, in ms; 0 once elapsed or ended.
    pub validity_ms: u64,
    /// When the validity ends (Unix ms, the sidecar's clock).
    pub expires_at: u64,
    /// Where it stands.
    pub state: LeaseState,
    /// Whether the sidecar renews it.
    pub auto_renew: bool,
    /// Re-entry holds open on it ([`LockGuard::reenter`](crate::LockGuard::reenter)), not counting the lease itself;
    /// 0 once it has ended (and from a sidecar without re-entry).
    #[serde(default)]
    pub holds: u64,
    /// Why the lease ended (`released`, `idle`, `shutdown`, `expired`, `not_ours`,
    /// `revoked`, `invalid`); absent while it is held or degraded.
    #[serde(default)]
    pub reason: Option<String>,
    /// A semaphore permit's slot (0 to `limit` − 1): fence per slot. `None` for a lock. A
    /// lease of several permits names its lowest slot here, and each one in `slots`.
    #[serde(default)]
    pub slot: Option<u32>,
    /// Every slot a semaphore lease holds, ascending (one per permit); empty for a lock.
    #[serde(default)]
    pub slots: Vec<u32>,
    /// A semaphore permit's limit; `None` for a lock.
    #[serde(default)]
    pub limit: Option<u32>,
    /// A read-write lock's lease: `read` or `write`; `None` otherwise.
    #[serde(default)]
    pub mode: Option<String>,
    /// An election leader's term (its fencing token); `None` for a lock or a permit.
    #[serde(default)]
    pub term: Option<u64>,
    /// An election leader's value, as it proclaimed it last; `None` for a lock or a permit.
    #[serde(default)]
    pub value: Option<String>,
}

/// Where a lease stands (`docs/api.md`, Lease states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LeaseState {
    /// Held and valid.
    Held,
    /// A renewal fell short and a quorum of shadows keeps the lease: still held.
    Degraded,
    /// A release is under way: no longer yours to act on.
    Releasing,
    /// Lost: its validity ran out, or the masters say it is not ours any more.
    Lost,
    /// Released: a quorum confirmed the release, or its keys expired.
    Released,
    /// A state this client does not know (a newer sidecar).
    #[serde(other)]
    Unknown,
}

/// How a lease ended, as [`LockGuard::lost`](crate::LockGuard::lost) tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEnd {
    /// The sidecar reported the lease lost. `reason`: `expired`, `not_ours`, `revoked`, `invalid`, or
    /// `unknown_lease` when the sidecar no longer knows the lease (it restarted).
    Lost {
        /// Why (see above).
        reason: String,
    },
    /// The lease was released: by this guard (`released`), or by the sidecar (`idle`,
    /// `shutdown`).
    Released {
        /// Why (see above).
        reason: String,
    },
    /// The validity last reported ran out with no word from the sidecar: a sidecar that
    /// stopped answering, or, without an event stream, a lease nothing renewed.
    Expired,
}

// === impl LeaseEnd ===

impl std::fmt::Display for LeaseEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lost { reason } => write!(f, "was lost ({reason})"),
            Self::Released { reason } => write!(f, "was released ({reason})"),
            Self::Expired => write!(f, "expired with no word from the sidecar"),
        }
    }
}

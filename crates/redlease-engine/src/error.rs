//! The crate's `Error`: invalid input or configuration, never a single master's trouble.

/// Errors of the library: invalid input or configuration. Infrastructure trouble on single
/// masters is reported per node inside the outcomes, never as an `Err` of the whole call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid resource: {0}")]
    InvalidResource(&'static str),
    #[error("invalid owner: {0}")]
    InvalidOwner(&'static str),
    #[error("invalid actor: {0}")]
    InvalidActor(&'static str),
    #[error("invalid reason: {0}")]
    InvalidReason(&'static str),
    #[error("invalid prefix: {0}")]
    InvalidPrefix(&'static str),
    #[error("invalid limit: {0}")]
    InvalidLimit(String),
    #[error("invalid API token: {0}")]
    InvalidToken(String),
    #[error("invalid ttl: {0}")]
    InvalidTtl(String),
    #[error("invalid lease id: expected 32 lowercase hex digits")]
    InvalidLeaseId,
    /// A master that cannot be used as configured: its URL, the TLS settings, a failed TLS
    /// handshake or a missing permission (start-up). `url` has its password masked.
    #[error("invalid master {url}: {reason}")]
    InvalidMaster { url: String, reason: String },
    /// A setting that cannot be used (a password file that cannot be read, flags that go
    /// together given alone), named in the message.
    #[error("invalid setting {0}")]
    InvalidSetting(String),
    #[error("no masters configured")]
    NoMasters,
    #[error(
        "masters {url} and {other} are one redis server: a quorum must count distinct servers"
    )]
    DuplicateMaster { url: String, other: String },
    /// Two configured masters carry the markers of two different fleets.
    #[error(
        "masters {url} (fleet {fleet}) and {other} (fleet {other_fleet}) belong to two fleets: \
         list the masters of one fleet only"
    )]
    TwoFleets {
        url: String,
        fleet: String,
        other: String,
        other_fleet: String,
    },
    /// An operator's birth of a fleet (`redlease fleet init`) that may not happen.
    #[error("fleet birth refused: {0}")]
    BirthRefused(String),
    /// The fleet's quarantine is shorter than the longest TTL this process may write.
    #[error(
        "fleet {fleet} quarantines masters for {quarantine_ms} ms, less than the longest TTL \
         this process may write ({longest_ttl_ms} ms): lower the max TTL (or the shadow cap, \
         fleet.quarantine_ms), or use a fleet born with a longer quarantine"
    )]
    QuarantineTooShort {
        fleet: String,
        quarantine_ms: u64,
        longest_ttl_ms: u64,
    },
}

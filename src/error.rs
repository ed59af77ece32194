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
}

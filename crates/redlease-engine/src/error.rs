//! The crate's `Error`: invalid input or configuration, never a single master's trouble.

/// Errors of the library: invalid input or configuration. Infrastructure trouble on single
/// masters is reported per node inside the outcomes, never as an `Err` of the whole call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A resource name that is empty, too long or carries control or format characters.
    #[error("invalid resource: {0}")]
    InvalidResource(&'static str),
    /// An owner that is empty, too long or carries control or format characters.
    #[error("invalid owner: {0}")]
    InvalidOwner(&'static str),
    /// An election's value that is too long or carries control characters.
    #[error("invalid value: {0}")]
    InvalidValue(&'static str),
    /// A lease that is no election's, asked to proclaim.
    #[error("the lease is no election's: only a leader proclaims")]
    NotACampaign,
    /// A force release's actor that is missing, too long or unprintable.
    #[error("invalid actor: {0}")]
    InvalidActor(&'static str),
    /// A force release's reason that is missing, too long or unprintable.
    #[error("invalid reason: {0}")]
    InvalidReason(&'static str),
    /// A listing's prefix that is not a valid resource name.
    #[error("invalid prefix: {0}")]
    InvalidPrefix(&'static str),
    /// A listing's or the audit's limit outside its range.
    #[error("invalid limit: {0}")]
    InvalidLimit(String),
    /// A semaphore acquisition's permits outside 1 to its limit.
    #[error("invalid permits: {0}")]
    InvalidPermits(String),
    /// The sidecar's API token file cannot be read or holds no usable token.
    #[error("invalid API token: {0}")]
    InvalidToken(String),
    /// A semaphore's limit other than the one its holders use on a master.
    #[error("semaphore limit {asked} differs from the limit {in_force} its holders use")]
    SemaphoreLimit {
        /// The limit asked for.
        asked: u32,
        /// The limit a holder uses.
        in_force: u32,
    },
    /// A TTL outside the engine's `min_ttl`–`max_ttl`.
    #[error("invalid ttl: {0}")]
    InvalidTtl(String),
    /// A lease id that is not 32 lowercase hex digits.
    #[error("invalid lease id: expected 32 lowercase hex digits")]
    InvalidLeaseId,
    /// A master that cannot be used as configured: its URL, the TLS settings, a failed TLS
    /// handshake or a missing permission (start-up). `url` has its password masked.
    #[error("invalid master {url}: {reason}")]
    InvalidMaster {
        /// The master's URL, password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting that cannot be used (a password file that cannot be read, flags that go
    /// together given alone), named in the message.
    #[error("invalid setting {0}")]
    InvalidSetting(String),
    /// No master was configured.
    #[error("no masters configured")]
    NoMasters,
    /// Two configured masters are one server (one address, or one `run_id`).
    #[error(
        "masters {url} and {other} are one redis server: a quorum must count distinct servers"
    )]
    DuplicateMaster {
        /// One of them, password masked.
        url: String,
        /// The other, password masked.
        other: String,
    },
    /// Two configured masters carry the markers of two different fleets.
    #[error(
        "masters {url} (fleet {fleet}) and {other} (fleet {other_fleet}) belong to two fleets: \
         list the masters of one fleet only"
    )]
    TwoFleets {
        /// A master of the first fleet, password masked.
        url: String,
        /// The first fleet's id.
        fleet: String,
        /// A master of the second fleet, password masked.
        other: String,
        /// The second fleet's id.
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
        /// The fleet's id.
        fleet: String,
        /// The quarantine the fleet was born with.
        quarantine_ms: u64,
        /// The longest TTL this process may write.
        longest_ttl_ms: u64,
    },
}

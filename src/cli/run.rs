//! `redlease lock run RESOURCE -- CMD ARGS…`: takes the lock (on the masters through the
//! sidecar crate's lease table, run in this process over its own engine; or through a sidecar
//! with [`crate::client`]), runs the command while keeping the lease, releases it when the
//! command exits and passes the command's exit code through. Either way the lease is kept by
//! the sidecar's one renewal loop.
//!
//! The command never runs without the lock: nothing is started unless the lease is held and
//! still valid; the command is stopped so that it has exited before the lease's validity ends
//! unless a renewal extends it, and at once when the lease is lost ([`child`], [`deadline`]);
//! a watchdog process kills it when `lock run` is stopped or killed ([`watchdog`]).

mod child;
mod deadline;
mod group;
mod watchdog;

pub use watchdog::{serve as serve_watchdog, WatchdogArgs, WATCHDOG_COMMAND};

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use redlease_sidecar::{AcquireKind, AcquireRequest, Acquired, Following, LeaseManager};
use redlease_sidecar::{LeaseState, LetGo};
use tokio::time::Instant;

use super::access::AccessArgs;
use super::fleet_args::{default_owner, finish, fleet_options};
use super::fleet_args::{DEFAULT_CLI_CONNECT_TIMEOUT_MS, DEFAULT_CLI_TTL_MS};
use super::{
    EXIT_HELD, EXIT_LEASE_LOST, EXIT_NO_PERMISSION, EXIT_NO_QUORUM, EXIT_UNAVAILABLE, EXIT_USAGE,
};
use crate::client::{ClientError, RwMode};
use crate::config::in_process_lease_policy;
use crate::keys::SlotSet;
use crate::redlock::{EngineOptions, Permits, Redlock};
use crate::{Error, Fleet, Wakeups, DEFAULT_PROBE_PERIOD};

/// Where the masters are when `--masters` is not given.
const MASTERS_ENV: &str = "REDLEASE__MASTERS";
/// Why the command was not run, after the resource's name.
const HELD: &str = "is held by another lease";
/// Why a permit's command was not run: every slot held.
const NO_PERMIT: &str = "has no free permit: every slot is held by another lease";
/// Why a candidate's command was not run: another leader.
const ANOTHER_LEADER: &str = "has another leader";
/// Why a fair waiter's command was not run: a majority took it out of its queue.
const DEQUEUED: &str = "was not taken: this fair waiter's heartbeats came too late and it was \
     taken out of the queue";
const NO_QUORUM: &str = "cannot be taken: too few masters answered";
const TOKEN_REFUSED: &str = "cannot be taken: the sidecar refused the API token (none was \
     sent, or another one); give the file holding its token with --token-file FILE or \
     REDLEASE__AUTH__TOKEN_FILE";
const LOST_AT_ONCE: &str = "was taken, but its lease ended before it could be followed";

/// The id of `lock run`'s RESOURCE argument.
pub(super) const RESOURCE_ARG: &str = "resource";

/// Where a one-shot command works (`lock run`, `semaphore run`, `elect`, `elect observe`): on
/// the masters, or through a sidecar.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Comma-separated redis:// URLs of the independent masters; without it (and without
    /// --sidecar), those of $REDLEASE__MASTERS.
    // Not `env = …`: clap would then count the variable as a --masters flag given together
    // with --sidecar.
    #[arg(long, value_delimiter = ',')]
    masters: Option<Vec<String>>,
    /// Go through the sidecar at this URL (http://127.0.0.1:7600, or unix:/path/to/api.sock)
    /// rather than the masters; a lease taken there is renewed by the sidecar.
    #[arg(long, conflicts_with = "masters")]
    pub(super) sidecar: Option<String>,
    /// With --sidecar: the file holding the sidecar's API token (its `auth.token_file`).
    #[arg(long, env = "REDLEASE__AUTH__TOKEN_FILE", value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// Prefix of every key redlease writes (masters only).
    #[arg(long, env = "REDLEASE__KEY_PREFIX", default_value = crate::keys::DEFAULT_PREFIX)]
    key_prefix: String,
    /// How long to wait for the masters at start-up (masters only).
    #[arg(long, default_value_t = DEFAULT_CLI_CONNECT_TIMEOUT_MS)]
    connect_timeout_ms: u64,
    /// TLS and credentials for the masters (masters only).
    #[command(flatten)]
    access: AccessArgs,
}

impl TargetArgs {
    /// Connects to the masters these arguments name.
    pub(super) async fn connect_masters(&self) -> Result<Arc<Fleet>, Error> {
        let masters = self.masters.clone().unwrap_or_else(masters_from_env);
        let options = fleet_options(&self.key_prefix, self.connect_timeout_ms);
        Fleet::connect(&masters, &self.access.apply(options)?).await
    }

    /// A client of the sidecar at `url`, with the token these arguments name.
    pub(super) fn sidecar_client(&self, url: &str) -> Result<crate::client::Client, String> {
        super::sidecar_client(url, self.token_file.as_deref())
    }
}

/// `lock run`'s arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    resource: String,
    #[command(flatten)]
    pub(super) target: TargetArgs,
    /// Lease time-to-live in ms; renewed while the command runs. Default: 10000 on the
    /// masters, the sidecar's adaptive TTL through a sidecar.
    #[arg(long)]
    ttl_ms: Option<u64>,
    /// Wait this long for a lock that is held (or a fleet without quorum).
    #[arg(long, default_value_t = 0)]
    wait_ms: u64,
    /// With --wait-ms: wait in one queue with the fair waiters of every process on the same
    /// lock (the lock in any mode, the semaphore, the election), first come first served.
    #[arg(long)]
    fair: bool,
    /// Who holds the lock; defaults to `cli:<pid>@<host>`.
    #[arg(long)]
    owner: Option<String>,
    /// How long the command has between SIGTERM and SIGKILL when it must stop, counted back
    /// from the end of the lease's validity so that it has exited 100 ms before the lease can
    /// pass to another holder. At most a quarter of the TTL less 100 ms (refused otherwise,
    /// exit 64). Default: 2000, or that limit if lower.
    #[arg(long)]
    kill_grace_ms: Option<u64>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// What the command runs under.
#[derive(Clone, Debug)]
enum Holding {
    /// The resource's lock.
    Lock,
    /// Permits of the resource's semaphore: how many, of how many slots.
    Permit(Permits),
    /// The leadership of the resource's election, proclaiming this value.
    Leader(String),
    /// The resource's read-write lock, shared with other readers.
    Read,
    /// The resource's read-write lock, alone.
    Write,
}

impl Holding {
    /// A semaphore's limit, when it is a permit.
    fn limit(&self) -> Option<u32> {
        match self {
            Self::Permit(permits) => Some(permits.limit),
            _ => None,
        }
    }

    /// An election's value, when it is the leadership.
    fn campaign(&self) -> Option<String> {
        match self {
            Self::Leader(value) => Some(value.clone()),
            _ => None,
        }
    }

    /// Why a held resource's command was not run: its lock, every permit of its semaphore,
    /// or its election is held.
    fn held(&self) -> &'static str {
        match self {
            Self::Lock | Self::Read | Self::Write => HELD,
            Self::Permit(_) => NO_PERMIT,
            Self::Leader(_) => ANOTHER_LEADER,
        }
    }

    /// The lease table's kind of acquisition (an election's is a lock with a campaign).
    fn kind(&self) -> AcquireKind {
        match self {
            Self::Lock | Self::Leader(_) => AcquireKind::Lock,
            Self::Permit(permits) => AcquireKind::Permit(*permits),
            Self::Read => AcquireKind::Read { beside: None },
            Self::Write => AcquireKind::Write,
        }
    }

    /// `REDLEASE_MODE` for a read-write lock's lease.
    fn mode_env(&self) -> Option<(&'static str, String)> {
        match self {
            Self::Read => Some(("REDLEASE_MODE", "read".to_string())),
            Self::Write => Some(("REDLEASE_MODE", "write".to_string())),
            _ => None,
        }
    }
}

/// Runs `lock run` and returns its exit code: the command's, or why it did not run or was
/// stopped.
pub async fn run(args: RunArgs) -> u8 {
    run_holding(args, Holding::Lock).await
}

/// `semaphore run`: [`run`] under `permits.count` permits of the semaphore of
/// `permits.limit` slots instead of the lock; the slots are in the command's environment
/// (`REDLEASE_SLOT`, `REDLEASE_SLOTS`, `REDLEASE_LIMIT`).
pub async fn run_permit(args: RunArgs, permits: Permits) -> u8 {
    run_holding(args, Holding::Permit(permits)).await
}

/// `elect`: [`run`] as the leader of the resource's election, proclaiming `value`; the term
/// and value are in the command's environment (`REDLEASE_TERM`, `REDLEASE_VALUE`).
pub async fn run_leader(args: RunArgs, value: String) -> u8 {
    run_holding(args, Holding::Leader(value)).await
}

/// `lock run --mode read|write`: [`run`] under the resource's read-write lock in that mode
/// (`REDLEASE_MODE` in the command's environment).
pub async fn run_rw(args: RunArgs, write: bool) -> u8 {
    let holding = if write { Holding::Write } else { Holding::Read };
    run_holding(args, holding).await
}

async fn run_holding(args: RunArgs, holding: Holding) -> u8 {
    // The grace is checked before anything is taken, unless the TTL is a sidecar's adaptive
    // one (known once granted).
    let ttl = match &args.target.sidecar {
        Some(_) => args.ttl_ms,
        None => Some(args.ttl_ms.unwrap_or(DEFAULT_CLI_TTL_MS)),
    };
    if let Some(Err(error)) = ttl.map(|ttl| grace(&args, ttl)) {
        eprintln!("redlease: {error}");
        return EXIT_USAGE;
    }
    let owner = args.owner.clone().unwrap_or_else(default_owner);
    match &args.target.sidecar {
        Some(url) => through_sidecar(url, &args, &owner, &holding).await,
        None => match on_masters(&args, &owner, &holding).await {
            Ok(code) => code,
            Err(error) => {
                eprintln!("redlease: {error}");
                EXIT_USAGE
            }
        },
    }
}

// === the masters, through the lease table ===

async fn on_masters(args: &RunArgs, owner: &str, holding: &Holding) -> Result<u8, Error> {
    let fleet = args.target.connect_masters().await?;
    // Renewals may go on for hours: breakers must close and restarted masters rejoin.
    let _probe = fleet.spawn_probe(DEFAULT_PROBE_PERIOD);
    let wakeups = Wakeups::connect(&fleet)?;
    // Listening before the lease is taken: a force release is then heard at once. Bounded as a
    // waiter's queue is (a down master must not delay every run); a master that has not
    // confirmed by then is heard from at the next renewal.
    if !wakeups
        .listening_for_revocations(redlease_engine::wakeup::SUBSCRIBE_TIMEOUT)
        .await
    {
        tracing::warn!("not every master confirmed the revocations subscription yet");
    }
    let policy = in_process_lease_policy(fleet.quarantine());
    let engine = Redlock::new(fleet, EngineOptions::default()).with_wakeups(wakeups);
    let engine = Arc::new(engine);
    let manager = LeaseManager::new(Arc::clone(&engine), policy);
    let request = AcquireRequest {
        kind: holding.kind(),
        resource: args.resource.clone(),
        owner: owner.to_string(),
        ttl: Some(Duration::from_millis(
            args.ttl_ms.unwrap_or(DEFAULT_CLI_TTL_MS),
        )),
        wait: Duration::from_millis(args.wait_ms),
        auto_renew: true,
        idle_timeout: None,
        campaign: holding.campaign(),
        fair: args.fair,
    };
    let code = match manager.acquire(request).await {
        Ok(Acquired::Granted(view)) => match manager.follow(&view) {
            Some(following) => Ok(hold_on_masters(following, args, holding).await),
            None => Ok(not_run(&args.resource, LOST_AT_ONCE, EXIT_LEASE_LOST)),
        },
        Ok(Acquired::Held) => Ok(not_run(&args.resource, holding.held(), EXIT_HELD)),
        Ok(Acquired::Dequeued) => Ok(not_run(&args.resource, DEQUEUED, EXIT_HELD)),
        // `Closing` never comes: this table is not shut down while it acquires.
        Ok(Acquired::NoQuorum | Acquired::Closing) => {
            for master in engine.status_accounts().await {
                let (node, url, why) = (master.node, &master.url, &master.why);
                eprintln!("redlease:   master {node} ({url}): {why}");
            }
            Ok(not_run(&args.resource, NO_QUORUM, EXIT_NO_QUORUM))
        }
        Err(error) => Err(error),
    };
    finish(&engine, code).await
}

/// Runs the command while the lease table renews the lease `following` follows, then lets the
/// lease go: released, or its revocation acknowledged once the command has stopped.
async fn hold_on_masters(mut following: Following, args: &RunArgs, holding: &Holding) -> u8 {
    let lease = following.lease.clone();
    let slots = crate::keys::parse_lock_name(&lease.resource)
        .map(|name| name.kind.slots())
        .unwrap_or_default();
    let id = lease.id.to_string();
    let mut env = child::lease_env(
        lease.fencing_token,
        &id,
        &args.resource,
        holding.limit().map(|limit| (slots, limit)),
    );
    if let Some(value) = holding.campaign() {
        env.extend(child::leader_env(lease.fencing_token, &value));
    }
    env.extend(holding.mode_env());
    let code = match grace(args, lease.ttl.as_millis() as u64) {
        // Checked against this TTL in `run`.
        Err(error) => not_run(
            &args.resource,
            &format!("was taken, but {error}"),
            EXIT_USAGE,
        ),
        Ok(_) if !lease.is_valid(Instant::now()) => {
            eprintln!(
                "redlease: the lease on {} ran out before the command could start",
                args.resource
            );
            EXIT_LEASE_LOST
        }
        Ok(grace) => {
            let valid_until = following.valid_until();
            let lost = async {
                let (state, reason) = following.ended().await;
                format!("on {} was {}", args.resource, ending(state, reason))
            };
            let held = child::Held {
                valid_until,
                lost,
                grace,
            };
            child::supervise(&args.command, &env, held).await
        }
    };
    // The command has stopped: now the resource may go to someone else.
    if following.let_go().await == LetGo::Releasing {
        eprintln!(
            "redlease: too few masters confirmed the release of {}: its keys expire within {} ms",
            args.resource,
            lease.ttl.as_millis()
        );
    }
    code
}

/// How a lease held while the command ran ended, in words.
fn ending(state: LeaseState, reason: &str) -> String {
    let why = match reason {
        "not_ours" => "a majority of masters no longer hold it",
        "revoked" => "a force release revoked it",
        "expired" => "its validity ran out before a renewal succeeded",
        "invalid" => "the engine refused to renew it",
        other => other,
    };
    match state {
        LeaseState::Released => format!("released: {why}"),
        _ => format!("lost: {why}"),
    }
}

// === a sidecar, through the client ===

async fn through_sidecar(url: &str, args: &RunArgs, owner: &str, holding: &Holding) -> u8 {
    let client = match args.target.sidecar_client(url) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    let resource = args.resource.as_str();
    let request = match holding {
        Holding::Lock => client.lock(resource),
        Holding::Permit(permits) => client
            .semaphore(resource, permits.limit)
            .permits(permits.count),
        Holding::Leader(value) => client.campaign(resource, value.as_str()),
        Holding::Read => client.rwlock(resource, RwMode::Read),
        Holding::Write => client.rwlock(resource, RwMode::Write),
    };
    let mut request = request.owner(owner);
    request = request
        .wait(Duration::from_millis(args.wait_ms))
        .fair(args.fair);
    if let Some(ttl_ms) = args.ttl_ms {
        request = request.ttl(Duration::from_millis(ttl_ms));
    }
    let guard = match request.send().await {
        Ok(guard) => guard,
        Err(error) => return refused(&args.resource, &error, holding),
    };
    // `slot` is the lowest of `slots`; a sidecar that does not list `slots` holds that one.
    let slots: SlotSet = guard.slots().iter().copied().chain(guard.slot()).collect();
    let permit = guard.info().limit.map(|limit| (slots, limit));
    let mut env = child::lease_env(
        guard.fencing_token(),
        guard.lease_id(),
        guard.resource(),
        permit,
    );
    if let (Some(term), Some(value)) = (guard.term(), guard.value()) {
        env.extend(child::leader_env(term, value));
    }
    env.extend(holding.mode_env());
    let code = match (guard.ended(), grace(args, guard.info().ttl_ms)) {
        (_, Err(error)) => not_run(
            &args.resource,
            &format!("was taken, but {error}"),
            EXIT_USAGE,
        ),
        (None, Ok(grace)) => {
            let lost = guard.lost();
            let resource = &args.resource;
            let lost = async move { format!("on {resource} {}", lost.await) };
            let valid_until = guard.valid_until();
            let held = child::Held {
                valid_until,
                lost,
                grace,
            };
            child::supervise(&args.command, &env, held).await
        }
        (Some(end), Ok(_)) => {
            eprintln!(
                "redlease: the lease on {} {end} before the command could start",
                args.resource
            );
            EXIT_LEASE_LOST
        }
    };
    match guard.release().await {
        Ok(_) => {}
        Err(error) => eprintln!("redlease: release of {}: {error}", args.resource),
    }
    code
}

/// The exit code and message of an acquisition the sidecar refused or could not answer.
fn refused(resource: &str, error: &ClientError, holding: &Holding) -> u8 {
    match error {
        ClientError::Held { .. } => not_run(resource, holding.held(), EXIT_HELD),
        ClientError::Dequeued { .. } => not_run(resource, DEQUEUED, EXIT_HELD),
        ClientError::NoQuorum { .. } => not_run(resource, NO_QUORUM, EXIT_NO_QUORUM),
        ClientError::Unauthorized { .. } => not_run(resource, TOKEN_REFUSED, EXIT_NO_PERMISSION),
        ClientError::Invalid { .. } | ClientError::InvalidUrl { .. } => {
            not_run(resource, &format!("cannot be taken: {error}"), EXIT_USAGE)
        }
        _ => not_run(
            resource,
            &format!("cannot be taken: {error}"),
            EXIT_UNAVAILABLE,
        ),
    }
}

/// Says why the command was not run; returns `code`.
fn not_run(resource: &str, why: &str, code: u8) -> u8 {
    eprintln!("redlease: {resource} {why}; the command was not run");
    code
}

/// The masters of `$REDLEASE__MASTERS` (none when it is unset).
pub(super) fn masters_from_env() -> Vec<String> {
    let list = std::env::var(MASTERS_ENV).unwrap_or_default();
    let urls = list.split(',').map(str::trim).filter(|url| !url.is_empty());
    urls.map(String::from).collect()
}

/// The grace the command gets with a lease of `ttl_ms` (see [`deadline::grace_for`]).
fn grace(args: &RunArgs, ttl_ms: u64) -> Result<Duration, deadline::GraceTooLong> {
    let asked = args.kill_grace_ms.map(Duration::from_millis);
    deadline::grace_for(Duration::from_millis(ttl_ms), asked)
}

//! `redlease lock acquire|extend|release`: one operation straight against the masters,
//! answered as one JSON object on stdout; `lock run` lives in [`super::run`], and what both
//! share (the masters' flags and their defaults, connecting, finishing) in
//! [`super::fleet_args`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Subcommand;
use serde::Serialize;
use tokio::time::Instant;

use super::fleet_args::DEFAULT_CLI_TTL_MS;
use super::fleet_args::{connect, default_owner, finish, print_json, FleetArgs};
use super::{EXIT_HELD, EXIT_LEASE_LOST, EXIT_NO_QUORUM, EXIT_OK, EXIT_USAGE};
use crate::redlock::{AcquireOutcome, ExtendOutcome, MasterAccount};
use crate::{Error, LeaseId};

#[derive(Debug, Subcommand)]
pub enum LockCommand {
    /// Take a lock; prints the lease with its fencing token.
    Acquire {
        resource: String,
        #[command(flatten)]
        fleet: FleetArgs,
        /// Lease time-to-live in milliseconds.
        #[arg(long, default_value_t = DEFAULT_CLI_TTL_MS)]
        ttl_ms: u64,
        /// Who holds the lock (shown by inspection); defaults to `cli:<pid>@<host>`.
        #[arg(long)]
        owner: Option<String>,
        /// Keep trying for this long while the lock is held or the fleet has no quorum.
        #[arg(long, default_value_t = 0)]
        wait_ms: u64,
    },
    /// Extend a lease to a new TTL from now.
    Extend {
        resource: String,
        /// The lease id printed by `acquire`.
        #[arg(long)]
        lease: String,
        #[arg(long)]
        ttl_ms: u64,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Release a lease; a lease that is not ours changes nothing.
    Release {
        resource: String,
        #[arg(long)]
        lease: String,
        #[command(flatten)]
        fleet: FleetArgs,
    },
    /// Run a command while holding the lock: renewed while it runs, released when it exits.
    Run(LockRunArgs),
}

/// `lock run`'s arguments: the resource's lock, or its read-write lock in a mode.
#[derive(Debug, clap::Args)]
pub struct LockRunArgs {
    /// Take the resource's read-write lock in this mode (`read`: shared with other readers;
    /// `write`: alone) instead of its lock; `REDLEASE_MODE` in the command's environment.
    #[arg(long, value_parser = ["read", "write"])]
    mode: Option<String>,
    #[command(flatten)]
    run: super::run::RunArgs,
}

#[derive(Serialize)]
struct AcquiredJson<'a> {
    acquired: bool,
    lease_id: String,
    resource: &'a str,
    owner: &'a str,
    fencing_token: u64,
    ttl_ms: u64,
    /// Validity left when this line is printed (after the command's settling).
    validity_ms: u64,
    /// When that validity ends, in Unix milliseconds (this host's clock, for humans).
    expires_at: u64,
}

#[derive(Serialize)]
struct ExtendedJson<'a> {
    extended: bool,
    lease_id: String,
    resource: &'a str,
    ttl_ms: u64,
    validity_ms: u64,
    expires_at: u64,
}

/// Runs one lock command and returns the exit code.
pub async fn run(command: LockCommand) -> u8 {
    match execute(command).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("redlease: {error}");
            EXIT_USAGE
        }
    }
}

async fn execute(command: LockCommand) -> Result<u8, Error> {
    match command {
        LockCommand::Acquire {
            resource,
            fleet,
            ttl_ms,
            owner,
            wait_ms,
        } => {
            let owner = owner.unwrap_or_else(default_owner);
            let engine = connect(&fleet).await?;
            let ttl = Duration::from_millis(ttl_ms);
            let wait = Duration::from_millis(wait_ms);
            let outcome = engine.acquire_with_wait(&resource, &owner, ttl, wait).await;
            let accounts = match &outcome {
                Ok(AcquireOutcome::NoQuorum(refusal)) => engine.account(&resource, refusal).await,
                _ => Vec::new(),
            };
            // Printed last, after settling: the validity it shows is what is left then.
            let outcome = finish(&engine, outcome).await;
            outcome.map(|o| print_acquire(&o, &accounts, Instant::now()))
        }
        LockCommand::Extend {
            resource,
            lease,
            ttl_ms,
            fleet,
        } => {
            let id: LeaseId = lease.parse()?;
            let engine = connect(&fleet).await?;
            let outcome = engine
                .extend(&resource, id, Duration::from_millis(ttl_ms))
                .await;
            let accounts = match &outcome {
                Ok(ExtendOutcome::NoQuorum(refusal)) => engine.account(&resource, refusal).await,
                _ => Vec::new(),
            };
            let outcome = finish(&engine, outcome).await;
            let now = Instant::now();
            outcome.map(|o| print_extend(&o, &accounts, (id, &resource), now))
        }
        LockCommand::Release {
            resource,
            lease,
            fleet,
        } => {
            let id: LeaseId = lease.parse()?;
            let engine = connect(&fleet).await?;
            let outcome = engine.release(&resource, id).await;
            let accounts = match &outcome {
                Ok(released) if !released.confirmed() => engine.status_accounts().await,
                _ => Vec::new(),
            };
            let outcome = finish(&engine, outcome).await;
            outcome.map(|o| print_release(o.released(), o.confirmed(), &accounts))
        }
        // `lock run` reports its own errors (its exit codes are the command's).
        LockCommand::Run(args) => Ok(match args.mode.as_deref() {
            None => super::run::run(args.run).await,
            Some(mode) => super::run::run_rw(args.run, mode == "write").await,
        }),
    }
}

/// The validity left at `now` of a lease valid until `valid_until`, and when it ends in Unix
/// milliseconds; says so on stderr when nothing is left.
fn validity_at(valid_until: Instant, now: Instant) -> (u64, u64) {
    let left = valid_until.saturating_duration_since(now);
    if left.is_zero() {
        eprintln!("redlease: the lease's validity ran out before it could be printed");
    }
    let ends = SystemTime::now() + left;
    let expires_at = ends.duration_since(UNIX_EPOCH).unwrap_or_default();
    (left.as_millis() as u64, expires_at.as_millis() as u64)
}

/// The masters of a `no_quorum` answer: each named on stderr with what it did, and the list
/// for the JSON line.
fn no_quorum_masters(accounts: &[MasterAccount]) -> serde_json::Value {
    eprintln!("redlease: no quorum; what each master did:");
    for a in accounts {
        eprintln!("redlease:   master {} ({}): {}", a.node, a.url, a.why);
    }
    let masters = accounts.iter().map(
        |a| serde_json::json!({"node": a.node, "url": a.url, "outcome": a.outcome, "why": a.why}),
    );
    serde_json::Value::Array(masters.collect())
}

fn print_acquire(outcome: &AcquireOutcome, accounts: &[MasterAccount], now: Instant) -> u8 {
    match outcome {
        AcquireOutcome::Acquired(lease) => {
            let (validity_ms, expires_at) = validity_at(lease.valid_until, now);
            print_json(&AcquiredJson {
                acquired: true,
                lease_id: lease.id.to_string(),
                resource: &lease.resource,
                owner: &lease.owner,
                fencing_token: lease.fencing_token,
                ttl_ms: lease.ttl.as_millis() as u64,
                validity_ms,
                expires_at,
            });
            if validity_ms == 0 {
                return EXIT_LEASE_LOST;
            }
            EXIT_OK
        }
        AcquireOutcome::Contended(_) => {
            print_json(&serde_json::json!({"acquired": false, "reason": "held"}));
            EXIT_HELD
        }
        AcquireOutcome::NoQuorum(_) => {
            let masters = no_quorum_masters(accounts);
            print_json(&serde_json::json!({
                "acquired": false, "reason": "no_quorum", "masters": masters,
            }));
            EXIT_NO_QUORUM
        }
    }
}

fn print_extend(
    outcome: &ExtendOutcome,
    accounts: &[MasterAccount],
    (id, resource): (LeaseId, &str),
    now: Instant,
) -> u8 {
    match outcome {
        ExtendOutcome::Extended(renewal) => {
            let (validity_ms, expires_at) = validity_at(renewal.valid_until, now);
            print_json(&ExtendedJson {
                extended: true,
                lease_id: id.to_string(),
                resource,
                ttl_ms: renewal.ttl.as_millis() as u64,
                validity_ms,
                expires_at,
            });
            if validity_ms == 0 {
                return EXIT_LEASE_LOST;
            }
            EXIT_OK
        }
        ExtendOutcome::Lost(_) => {
            print_json(&serde_json::json!({"extended": false, "reason": "lease_lost"}));
            EXIT_HELD
        }
        ExtendOutcome::NoQuorum(refusal) => {
            // The extension may have run on some masters and shortened the key there: the
            // lease is valid at most this much longer, whatever it had before.
            let cap = refusal
                .valid_until_cap
                .map(|cap| cap.saturating_duration_since(now));
            let at_most = cap.map(|left| left.as_millis() as u64);
            let masters = no_quorum_masters(accounts);
            print_json(&serde_json::json!({
                "extended": false, "reason": "no_quorum", "validity_ms_at_most": at_most,
                "masters": masters,
            }));
            EXIT_NO_QUORUM
        }
    }
}

fn print_release(released: bool, confirmed: bool, accounts: &[MasterAccount]) -> u8 {
    if released {
        print_json(&serde_json::json!({"released": true}));
        EXIT_OK
    } else if confirmed {
        print_json(&serde_json::json!({"released": false}));
        EXIT_HELD
    } else {
        let masters = no_quorum_masters(accounts);
        print_json(&serde_json::json!({
            "released": false, "reason": "no_quorum", "masters": masters,
        }));
        EXIT_NO_QUORUM
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The validity printed is what is left at the instant of printing, and none once it ran
    /// out.
    #[test]
    fn validity_is_counted_to_the_instant_it_is_printed() {
        let now = Instant::now();
        let valid_until = now + Duration::from_millis(5_000);
        let (left, _) = validity_at(valid_until, now + Duration::from_millis(2_000));
        assert_eq!(left, 3_000);
        let (left, expires_at) = validity_at(valid_until, now + Duration::from_millis(6_000));
        assert_eq!(left, 0);
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(expires_at <= wall.as_millis() as u64);
    }
}

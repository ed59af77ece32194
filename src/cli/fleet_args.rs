//! What the commands that work straight on the masters share (`lock`, `lock run`, `locks`,
//! `audit`, `fleet`): where the masters are ([`FleetArgs`]) and the defaults of their flags,
//! the fleet options they connect with, how they finish (every write answered, connections
//! closed), the default owner of a lock, and their answer line on stdout.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::access::AccessArgs;
use crate::keys::Keyspace;
use crate::redlock::{EngineOptions, Redlock};
use crate::{Error, Fleet, FleetOptions};

/// Default TTL of `lock acquire` and `lock run`.
pub const DEFAULT_CLI_TTL_MS: u64 = 10_000;
/// Default `--connect-timeout-ms`: with too few masters answering, a command says `no_quorum`
/// within about this long.
pub const DEFAULT_CLI_CONNECT_TIMEOUT_MS: u64 = 750;
/// Once a quorum of masters is ready, how long a command still waits for masters that have
/// not answered at all (frozen, black-holed) before going on without them.
pub const CLI_STRAGGLER_GRACE: Duration = Duration::from_millis(20);
/// How long a command waits, before exiting, for the writes and releases it sent to be
/// answered (a master that misses a release is sent it again meanwhile).
const SETTLE_BEFORE_EXIT: Duration = Duration::from_secs(2);
/// How long it waits for each master to acknowledge `QUIT` (a frozen one never does; the
/// process exit closes the connection anyway).
const QUIT_TIMEOUT: Duration = Duration::from_millis(20);

/// Where the masters are and how keys are named.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// Comma-separated redis:// URLs of the independent masters.
    #[arg(
        long,
        env = "REDLEASE__MASTERS",
        value_delimiter = ',',
        required = true
    )]
    masters: Vec<String>,
    /// Prefix of every key redlease writes.
    #[arg(long, env = "REDLEASE__KEY_PREFIX", default_value = crate::keys::DEFAULT_PREFIX)]
    key_prefix: String,
    /// How long to wait for the masters at start-up (a quorum that is ready answers sooner).
    #[arg(long, default_value_t = DEFAULT_CLI_CONNECT_TIMEOUT_MS)]
    connect_timeout_ms: u64,
    #[command(flatten)]
    access: AccessArgs,
}

// === impl FleetArgs ===

impl FleetArgs {
    /// The fleet options these arguments ask for.
    pub(super) fn options(&self) -> Result<FleetOptions, Error> {
        let options = fleet_options(&self.key_prefix, self.connect_timeout_ms);
        self.access.apply(options)
    }

    pub(super) fn masters(&self) -> &[String] {
        &self.masters
    }
}

/// An engine with default options on the masters `args` name.
pub(super) async fn connect(args: &FleetArgs) -> Result<Redlock, Error> {
    let fleet = Fleet::connect(&args.masters, &args.options()?).await?;
    Ok(Redlock::new(fleet, EngineOptions::default()))
}

/// The fleet options of the lock commands: their key prefix and connect timeout, and the
/// short grace for masters that never answer.
pub(super) fn fleet_options(key_prefix: &str, connect_timeout_ms: u64) -> FleetOptions {
    FleetOptions {
        keyspace: Keyspace::new(key_prefix),
        connect_timeout: Duration::from_millis(connect_timeout_ms),
        straggler_grace: Some(CLI_STRAGGLER_GRACE),
        ..FleetOptions::default()
    }
}

/// Closes the connections once every write and release in flight has been answered.
pub(super) async fn finish<T>(engine: &Redlock, outcome: Result<T, Error>) -> Result<T, Error> {
    engine.settle(SETTLE_BEFORE_EXIT).await;
    engine.fleet().quit(QUIT_TIMEOUT).await;
    outcome
}

/// `cli:<pid>@<host>`, so inspection can tell which cron run holds a lock.
pub(super) fn default_owner() -> String {
    redlease_client::owner_of_this_process("cli")
}

/// Prints `value` as the command's one JSON line on stdout.
pub(super) fn print_json(value: &impl Serialize) {
    match serde_json::to_string(value) {
        Ok(line) => println!("{line}"),
        Err(error) => eprintln!("redlease: cannot encode the answer: {error}"),
    }
}

//! `redlease elect RESOURCE --value V -- CMD`: `lock run` as the leader of the resource's
//! election (the command learns its term and value from `REDLEASE_TERM` and
//! `REDLEASE_VALUE`); and `redlease elect observe RESOURCE`: the election's changes as JSON
//! lines, read on the masters (the engine's observer) or through a sidecar's observe stream.

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use redlease_client::{Election, ElectionState};
use tokio::time::Instant;

use super::fleet_args::print_json;
use super::run::{run_leader, RunArgs, TargetArgs};
use super::{EXIT_NO_PERMISSION, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::client::ClientError;
use crate::keys::validate_value;
use crate::redlock::election::DEFAULT_OBSERVE_POLL;
use crate::redlock::{EngineOptions, Leadership, Redlock};
use crate::{Error, ProbeGuard, Wakeups, DEFAULT_PROBE_PERIOD};

/// `elect`'s arguments: a command to run as the leader, or `observe`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ElectArgs {
    #[command(subcommand)]
    observe: Option<ElectCommand>,
    /// What the leader proclaims (0–4096 bytes, no control characters); in the command's
    /// environment as `REDLEASE_VALUE`.
    #[arg(long, default_value = "")]
    value: String,
    #[command(flatten)]
    run: Option<LeaderRun>,
}

/// `lock run`'s arguments, present when its RESOURCE is. clap's derive leaves the group of a
/// struct that flattens another (as [`RunArgs`] flattens [`TargetArgs`]) without members,
/// so an `Option` of it would always be `None`: this names the one member that tells.
/// Boxed: the command line's other variants are smaller.
#[derive(Debug)]
struct LeaderRun(Box<RunArgs>);

/// The group [`LeaderRun`] adds: present when the resource is.
const LEADER_RUN_GROUP: &str = "LeaderRun";

impl clap::FromArgMatches for LeaderRun {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        RunArgs::from_arg_matches(matches).map(|run| Self(Box::new(run)))
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }
}

impl Args for LeaderRun {
    fn group_id() -> Option<clap::Id> {
        Some(clap::Id::from(LEADER_RUN_GROUP))
    }

    fn augment_args(command: clap::Command) -> clap::Command {
        RunArgs::augment_args(command).group(leader_run_group())
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        RunArgs::augment_args_for_update(command).group(leader_run_group())
    }
}

fn leader_run_group() -> clap::ArgGroup {
    clap::ArgGroup::new(LEADER_RUN_GROUP)
        .multiple(true)
        .arg(super::run::RESOURCE_ARG)
}

/// `elect`'s subcommand.
#[derive(Debug, Subcommand)]
enum ElectCommand {
    /// Print the election's changes as JSON lines (`leader`, `vacant`, `unknown`), the
    /// first at once, until interrupted, `--count` lines or `--timeout-ms`.
    Observe(ObserveArgs),
}

/// `elect observe`'s arguments.
#[derive(Debug, Args)]
struct ObserveArgs {
    resource: String,
    #[command(flatten)]
    target: TargetArgs,
    /// Stop after printing this many lines.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this long (ms).
    #[arg(long)]
    timeout_ms: Option<u64>,
}

/// Runs `elect` and returns its exit code.
pub async fn run(args: ElectArgs) -> u8 {
    match (args.observe, args.run) {
        (Some(ElectCommand::Observe(args)), _) => observe(args).await,
        (None, Some(run)) => {
            if let Err(error) = validate_value(&args.value) {
                eprintln!("redlease: --value: {error}");
                return EXIT_USAGE;
            }
            run_leader(*run.0, args.value).await
        }
        // Clap asks for RESOURCE and CMD when no subcommand is given.
        (None, None) => EXIT_USAGE,
    }
}

/// How long `observe` runs, and how many lines it prints.
struct Limits {
    until: Option<Instant>,
    count: Option<u64>,
}

async fn observe(args: ObserveArgs) -> u8 {
    let limits = Limits {
        until: args
            .timeout_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms)),
        count: args.count,
    };
    let watched = async {
        match &args.target.sidecar {
            Some(url) => through_sidecar(url, &args, &limits).await,
            None => on_masters(&args, &limits).await,
        }
    };
    let stopped = async {
        match limits.until {
            Some(until) => tokio::time::sleep_until(until).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        code = watched => code,
        _ = stopped => EXIT_OK,
        _ = crate::shutdown::signal() => EXIT_OK,
    }
}

/// Follows the election on the masters with the engine's observer (every poll, and at once
/// on the election's messages).
async fn on_masters(args: &ObserveArgs, limits: &Limits) -> u8 {
    let (engine, _probe) = match connect(args).await {
        Ok(connected) => connected,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    let mut observer = match engine.observe(&args.resource, DEFAULT_OBSERVE_POLL) {
        Ok(observer) => observer,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    let mut printed = 0;
    while limits.count.is_none_or(|count| printed < count) {
        print_json(&election_of(&observer.next().await));
        printed += 1;
    }
    EXIT_OK
}

/// An engine with wake-ups on the masters `args` name, and the probe that keeps their
/// breakers current (and lets restarted masters rejoin) while it observes.
async fn connect(args: &ObserveArgs) -> Result<(Arc<Redlock>, ProbeGuard), Error> {
    let fleet = args.target.connect_masters().await?;
    let probe = fleet.spawn_probe(DEFAULT_PROBE_PERIOD);
    let wakeups = Wakeups::connect(&fleet)?;
    let engine = Redlock::new(fleet, EngineOptions::default()).with_wakeups(wakeups);
    Ok((Arc::new(engine), probe))
}

/// Follows the election through a sidecar's observe stream.
async fn through_sidecar(url: &str, args: &ObserveArgs, limits: &Limits) -> u8 {
    let client = match args.target.sidecar_client(url) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    let mut observation = match client.observe(&args.resource).await {
        Ok(observation) => observation,
        Err(error) => return cannot_observe(&error),
    };
    let mut printed = 0;
    while limits.count.is_none_or(|count| printed < count) {
        match observation.next().await {
            Ok(election) => {
                print_json(&election);
                printed += 1;
            }
            Err(error) => return cannot_observe(&error),
        }
    }
    EXIT_OK
}

/// The exit code and message of an observe stream the sidecar refused or could not give.
fn cannot_observe(error: &ClientError) -> u8 {
    eprintln!("redlease: cannot observe the election: {error}");
    match error {
        ClientError::Unauthorized { .. } => EXIT_NO_PERMISSION,
        ClientError::Invalid { .. } | ClientError::InvalidUrl { .. } => EXIT_USAGE,
        _ => EXIT_UNAVAILABLE,
    }
}

/// The engine's leadership as the API (and the client) shows it.
fn election_of(leadership: &Leadership) -> Election {
    let leader = leadership.leader();
    Election {
        state: match leadership {
            Leadership::Leader(_) => ElectionState::Leader,
            Leadership::Vacant => ElectionState::Vacant,
            Leadership::Unknown => ElectionState::Unknown,
        },
        lease_id: leader.map(|l| l.lease_id.to_string()),
        owner: leader.map(|l| l.owner.clone()),
        term: leader.map(|l| l.term),
        value: leader.map(|l| l.value.clone()),
        validity_ms: leader.map(|l| l.validity.as_millis() as u64),
    }
}

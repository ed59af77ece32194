//! `redlease fleet init|status`: the operator's birth of a fleet, and what each master is to
//! it (member, quarantined and why, refused and why), straight on the masters.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::fleet_args::{print_json, FleetArgs};
use super::{EXIT_NO_QUORUM, EXIT_OK, EXIT_USAGE};
use crate::fleet::{BirthRule, Fleet, Node};
use crate::Error;

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Give birth to a fleet whose masters carry no history: marks every master that answers.
    /// Refused when any master shows history, when fewer than a quorum answer, and (unless
    /// --allow-missing) when any does not answer.
    Init(InitArgs),
    /// What each master is to the fleet: member, quarantined (and why, until when), refused
    /// (and why). Exits 4 when fewer than a quorum take lock writes.
    Status(StatusArgs),
    /// Bring back masters whose quarantine is over but that find fewer than a quorum of
    /// members to raise their fence from (a majority lost its memory): their fence counters are
    /// raised to the largest any master holds and to --fence-at, and they vote again.
    Rejoin(RejoinArgs),
}

#[derive(Debug, Args)]
pub struct RejoinArgs {
    #[command(flatten)]
    fleet: FleetArgs,
    /// The smallest fence counter the masters brought back get: at least the largest fencing
    /// token any protected resource has accepted, since no quorum remembers it.
    #[arg(long)]
    fence_at: u64,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    fleet: FleetArgs,
    /// Birth the fleet with the masters that answer, if they are a quorum; the others are
    /// quarantined for a whole period when they come.
    #[arg(long)]
    allow_missing: bool,
    /// The fleet's quarantine, written in its markers: every process then uses it, and one
    /// that may write a longer TTL refuses to start.
    #[arg(long, default_value_t = crate::fleet::DEFAULT_QUARANTINE.as_millis() as u64)]
    quarantine_ms: u64,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    fleet: FleetArgs,
    /// How long to let the masters' preparations run before reporting.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
}

/// Runs one fleet command and returns the exit code.
pub async fn run(command: FleetCommand) -> u8 {
    let outcome = match command {
        FleetCommand::Init(args) => init(args).await,
        FleetCommand::Status(args) => status(args).await,
        FleetCommand::Rejoin(args) => rejoin(args).await,
    };
    outcome.unwrap_or_else(|error| {
        eprintln!("redlease: {error}");
        EXIT_USAGE
    })
}

async fn init(args: InitArgs) -> Result<u8, Error> {
    let mut options = args.fleet.options()?;
    options.birth = BirthRule::Init {
        allow_missing: args.allow_missing,
    };
    options.quarantine = Duration::from_millis(args.quarantine_ms);
    options.longest_ttl = Duration::ZERO;
    options.straggler_grace = None;
    // Connect gives birth to the fleet, or errs saying why it may not.
    let fleet = Fleet::connect(args.fleet.masters(), &options).await?;
    report(&fleet, Duration::from_secs(1)).await;
    Ok(EXIT_OK)
}

async fn status(args: StatusArgs) -> Result<u8, Error> {
    let mut options = args.fleet.options()?;
    options.longest_ttl = Duration::ZERO;
    let fleet = Fleet::connect(args.fleet.masters(), &options).await?;
    let up = report(&fleet, Duration::from_millis(args.settle_ms)).await;
    Ok(if up >= fleet.quorum() {
        EXIT_OK
    } else {
        EXIT_NO_QUORUM
    })
}

async fn rejoin(args: RejoinArgs) -> Result<u8, Error> {
    let mut options = args.fleet.options()?;
    options.longest_ttl = Duration::ZERO;
    let fleet = Fleet::connect(args.fleet.masters(), &options).await?;
    let _ = tokio::time::timeout(Duration::from_secs(1), settled(&fleet)).await;
    let forced = fleet.force_rejoin(args.fence_at).await;
    let refused = forced
        .iter()
        .filter(|(_, outcome)| outcome.is_err())
        .count();
    for (index, outcome) in &forced {
        match outcome {
            Ok(counter) => eprintln!("redlease: master {index} back, its fence at {counter}"),
            Err(why) => eprintln!("redlease: master {index} not brought back: {why}"),
        }
    }
    let settle = Duration::from_secs(1);
    let up = |f: &Fleet| f.nodes().iter().filter(|n| n.is_up()).count();
    let _ = tokio::time::timeout(settle, async {
        while up(&fleet) < fleet.quorum() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    report(&fleet, Duration::ZERO).await;
    Ok(if refused > 0 { EXIT_NO_QUORUM } else { EXIT_OK })
}

/// Lets the masters' preparations run (up to `settle`), prints the fleet and each master's
/// standing, and closes the connections once no preparation is writing; the masters up.
async fn report(fleet: &Fleet, settle: Duration) -> usize {
    let _ = tokio::time::timeout(settle, settled(fleet)).await;
    let birth = fleet.birth();
    let masters: Vec<_> = fleet.nodes().iter().map(|n| master_json(n)).collect();
    let up = fleet.nodes().iter().filter(|n| n.is_up()).count();
    print_json(&json!({
        "born": birth.is_some(),
        "fleet": birth.map(|b| b.fleet),
        "quarantine_ms": fleet.quarantine().as_millis() as u64,
        "quorum": fleet.quorum(),
        "up": up,
        "masters": masters,
    }));
    fleet.settle_preparations(Duration::from_secs(2)).await;
    fleet.quit(Duration::from_millis(20)).await;
    up
}

/// Until every master takes writes or says why not.
async fn settled(fleet: &Fleet) {
    while !fleet
        .nodes()
        .iter()
        .all(|n| n.is_up() || n.exclusion().is_some())
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One master as the fleet commands print it.
fn master_json(node: &Node) -> serde_json::Value {
    let exclusion = node.exclusion();
    json!({
        "url": node.url(),
        "up": node.is_up(),
        "excluded": exclusion.as_ref().map(|e| e.reason()),
        "why": exclusion.as_ref().map(|e| e.to_string()),
    })
}

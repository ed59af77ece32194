//! `redlease semaphore run RESOURCE --limit N [--permits K] -- CMD`: `lock run` under permits
//! of a counting semaphore instead of the lock; the command learns its slots from
//! `REDLEASE_SLOT` (the lowest) and `REDLEASE_SLOTS` (each one).

use clap::{Args, Subcommand};

use super::run::{run_permit, RunArgs};
use super::EXIT_USAGE;
use crate::keys::MAX_SEMAPHORE_LIMIT;
use crate::redlock::Permits;

/// The semaphore commands.
#[derive(Debug, Subcommand)]
pub enum SemaphoreCommand {
    /// Run a command while holding permits: at most LIMIT permits are held at once, across
    /// every host. Renewed while it runs, released when it exits; `REDLEASE_SLOT`,
    /// `REDLEASE_SLOTS`, `REDLEASE_LIMIT` and `REDLEASE_FENCING_TOKEN` in its environment
    /// (fence per slot).
    Run(SemaphoreRunArgs),
}

/// `semaphore run`'s arguments: `lock run`'s and the limit.
#[derive(Debug, Args)]
pub struct SemaphoreRunArgs {
    /// How many permits the semaphore has (1–64), the same for every holder.
    #[arg(long)]
    limit: u32,
    /// How many permits the command needs, all or none (1 to LIMIT): that many slots, held
    /// by one lease with one fencing token.
    #[arg(long, default_value_t = 1)]
    permits: u32,
    #[command(flatten)]
    run: RunArgs,
}

/// Runs one semaphore command and returns the exit code.
pub async fn run(command: SemaphoreCommand) -> u8 {
    match command {
        SemaphoreCommand::Run(args) => {
            if !(1..=MAX_SEMAPHORE_LIMIT).contains(&args.limit) {
                eprintln!("redlease: --limit must be between 1 and {MAX_SEMAPHORE_LIMIT}");
                return EXIT_USAGE;
            }
            if !(1..=args.limit).contains(&args.permits) {
                eprintln!("redlease: --permits must be between 1 and --limit");
                return EXIT_USAGE;
            }
            let permits = Permits {
                limit: args.limit,
                count: args.permits,
            };
            run_permit(args.run, permits).await
        }
    }
}

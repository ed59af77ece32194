//! `redlease semaphore run RESOURCE --limit N -- CMD`: `lock run` under a permit of a counting
//! semaphore instead of the lock; the command learns its slot from `REDLEASE_SLOT`.

use clap::{Args, Subcommand};

use super::run::{run_permit, RunArgs};
use super::EXIT_USAGE;
use crate::keys::MAX_SEMAPHORE_LIMIT;

/// The semaphore commands.
#[derive(Debug, Subcommand)]
pub enum SemaphoreCommand {
    /// Run a command while holding a permit: at most LIMIT commands hold one at once, across
    /// every host. Renewed while it runs, released when it exits; `REDLEASE_SLOT`,
    /// `REDLEASE_LIMIT` and `REDLEASE_FENCING_TOKEN` in its environment (fence per slot).
    Run(SemaphoreRunArgs),
}

/// `semaphore run`'s arguments: `lock run`'s and the limit.
#[derive(Debug, Args)]
pub struct SemaphoreRunArgs {
    /// How many permits the semaphore has (1–64), the same for every holder.
    #[arg(long)]
    limit: u32,
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
            run_permit(args.run, args.limit).await
        }
    }
}

//! The `redlease` command line: argument parsing, logging set-up and exit codes.
//!
//! Exit codes: 0 success, 3 held by another / not ours, 4 no quorum, 64 invalid input, 69 a
//! service unavailable, 74 an output file not written, 77 the sidecar refused the API token.
//! `lock run` passes its command's exit code through, and adds 75 (the lease was lost while
//! the command ran), 126 and 127 (the command could not be started, as shells answer).

mod access;
mod elect;
mod fleet;
mod fleet_args;
mod load;
mod lock;
mod locks;
mod log_fields;
mod openapi;
mod run;
mod semaphore;
mod serve;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Success.
pub const EXIT_OK: u8 = 0;
/// The lock is held by another lease, or the lease is not ours.
pub const EXIT_HELD: u8 = 3;
/// Too few masters answered.
pub const EXIT_NO_QUORUM: u8 = 4;
/// Invalid arguments or configuration (sysexits EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// A service the command needs failed at run time: a listener that cannot be bound, a sidecar
/// or masters that cannot be reached, a local master that cannot be started (sysexits
/// EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// An output file could not be written after the run (sysexits EX_IOERR).
pub const EXIT_IO: u8 = 74;
/// The sidecar refused the API token: none was given, or another one (sysexits EX_NOPERM).
pub const EXIT_NO_PERMISSION: u8 = 77;
/// `lock run`: the lease was lost while the command ran, and the command was stopped
/// (sysexits EX_TEMPFAIL: running it again later may succeed).
pub const EXIT_LEASE_LOST: u8 = 75;

/// Redlock coordinator over independent Redis masters.
#[derive(Debug, Parser)]
#[command(name = "redlease", version, about)]
pub struct Cli {
    /// Log lines on stderr as `text` or one JSON object per line (`json`).
    #[arg(long, global = true, env = crate::config::LOG_FORMAT_ENV, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Acquire, extend or release a lock directly on the masters; run a command under a lock.
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// Run a command under a permit of a counting semaphore (`semaphore run`).
    #[command(subcommand)]
    Semaphore(semaphore::SemaphoreCommand),
    /// Run a command as the leader of an election (`elect RESOURCE --value V -- CMD`), or
    /// print the election's changes (`elect observe RESOURCE`).
    Elect(elect::ElectArgs),
    /// The lock inventory and force release, straight on the masters.
    #[command(subcommand)]
    Locks(locks::LocksCommand),
    /// The force releases recorded on the masters, newest first.
    Audit(locks::AuditArgs),
    /// The fleet's birth (`fleet init`) and each master's standing (`fleet status`).
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
    /// Run the sidecar: the HTTP API on loopback, leases on the configured masters.
    Serve(serve::ServeArgs),
    /// Run the sidecar on a throwaway fleet of local redis-server masters.
    Dev(serve::DevArgs),
    /// Load-test a fleet (library engine) or a sidecar (HTTP) and report latencies.
    Load(load::LoadArgs),
    /// Print the sidecar API's OpenAPI 3.1 document (or write it with `--out`).
    Openapi(openapi::OpenapiArgs),
    /// `lock run`'s watchdog, started by `lock run` itself.
    #[command(name = run::WATCHDOG_COMMAND, hide = true)]
    Watchdog(run::WatchdogArgs),
}

/// Parses the arguments, runs the command and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(if error.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            });
        }
    };
    let default_filter = match &cli.command {
        // Plain threads and blocking reads: no logs, no async runtime.
        Command::Watchdog(args) => return ExitCode::from(run::serve_watchdog(args)),
        Command::Openapi(args) => return ExitCode::from(openapi::run(args)),
        Command::Lock(_)
        | Command::Semaphore(_)
        | Command::Elect(_)
        | Command::Locks(_)
        | Command::Audit(_)
        | Command::Fleet(_)
        | Command::Load(_) => "redlease=warn",
        Command::Serve(_) | Command::Dev(_) => "redlease=info",
    };
    init_tracing(cli.log_format, default_filter);
    // Loaded once, before the runtime: they say which runtime the sidecar runs on.
    let serving = match &cli.command {
        Command::Serve(args) => Some(serve::load_settings(args)),
        _ => None,
    };
    let worker_threads = match &cli.command {
        Command::Serve(_) => {
            let settings = serving.as_ref().and_then(|loaded| loaded.as_ref().ok());
            settings.map(|settings| settings.worker_threads)
        }
        Command::Dev(args) => serve::dev_worker_threads(args),
        Command::Load(args) => Some(args.worker_threads),
        _ => None,
    };
    let mut builder = match worker_threads {
        // The sidecar's default: every task on this thread, no hand-off between threads.
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(threads) if threads > 1 => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(threads);
            builder
        }
        // One worker per CPU: the other commands, and `runtime.worker_threads = 0`.
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("redlease: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Lock(command) => lock::run(command).await,
            Command::Semaphore(command) => semaphore::run(command).await,
            Command::Elect(args) => elect::run(args).await,
            Command::Locks(command) => locks::run(command).await,
            Command::Audit(args) => locks::run_audit(args).await,
            Command::Fleet(command) => fleet::run(command).await,
            Command::Serve(args) => {
                let loaded = serving.unwrap_or_else(|| serve::load_settings(&args));
                serve::serve(loaded).await
            }
            Command::Dev(args) => serve::dev(args).await,
            Command::Load(args) => load::run(args).await,
            // Served above, without a runtime.
            Command::Watchdog(_) | Command::Openapi(_) => EXIT_OK,
        }
    });
    ExitCode::from(code)
}

/// A client of the sidecar at `url` (`http://…` or `unix:/path`), carrying the bearer token
/// read from `token_file` when one is given.
fn sidecar_client(
    url: &str,
    token_file: Option<&std::path::Path>,
) -> Result<crate::client::Client, String> {
    let client = crate::client::Client::new(url).map_err(|e| e.to_string())?;
    let Some(file) = token_file else {
        return Ok(client);
    };
    let token = crate::config::read_token(file)?;
    client.with_token(&token).map_err(|e| e.to_string())
}

/// Logs go to stderr (stdout carries the answers); `RUST_LOG` overrides `default_filter`.
fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    // Colours only for a person at a terminal, never in a file or a log collector.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.fmt_fields(log_fields::EscapedFields).init(),
        LogFormat::Json => {
            let json = tracing_subscriber::fmt::format().json().flatten_event(true);
            let format = log_fields::ListsAsArrays(json);
            logs.json().event_format(format).init()
        }
    }
}

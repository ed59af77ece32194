//! `redlease load`: a load generator for Redis fleets, through the library engine
//! (`--masters`, or `--local-fleet N` masters it starts itself) or a sidecar's HTTP API
//! (`--sidecar`). Prints the report and writes the optional latency files (`--hdr-out`,
//! `--plot`).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use redlease_dev::{redis_server_binary, LocalFleet};

use super::access::AccessArgs;
use super::{EXIT_IO, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::loadtest::renewal::{self, RenewalOptions, RenewalReport};
use crate::loadtest::{self, fault, hdr, plot, LoadOptions, Report, Target, Workload};
use crate::redlock::EngineOptions;
use crate::FleetOptions;

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("target").required(true).args(["masters", "sidecar", "local_fleet"]))]
pub struct LoadArgs {
    /// Comma-separated redis:// URLs: load the fleet through the library engine.
    #[arg(long, value_delimiter = ',')]
    masters: Option<Vec<String>>,
    /// A sidecar's base URL (e.g. http://127.0.0.1:7600, or unix:/path/to/api.sock): load it
    /// end to end over HTTP.
    #[arg(long)]
    sidecar: Option<String>,
    /// TLS and credentials for the masters (--masters).
    #[command(flatten)]
    access: AccessArgs,
    /// With --sidecar: the file holding the sidecar's API token (its `auth.token_file`).
    #[arg(long, env = "REDLEASE__AUTH__TOKEN_FILE", value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// Start N local redis-server masters (`$REDIS_SERVER_BIN` or `redis-server`) on free
    /// loopback ports and load them through the engine; `fault` needs it.
    #[arg(long, value_name = "N")]
    local_fleet: Option<usize>,
    /// Leases held at once (renewal).
    #[arg(long, default_value_t = 1000)]
    leases: usize,
    #[arg(long, value_enum)]
    workload: Workload,
    /// Concurrent clients (parallel, contention).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Shared resources (contention).
    #[arg(long, default_value_t = 4)]
    resources: usize,
    /// Measured acquire+release cycles in all (default 1000 unless --duration is given).
    #[arg(long)]
    ops: Option<u64>,
    /// Run for this long (`10s`, `500ms`, `2m`, or seconds).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Open loop: cycles per second over all clients (latency from the scheduled send time).
    #[arg(long)]
    rate: Option<f64>,
    /// Cycles each client runs before measuring.
    #[arg(long, default_value_t = 20)]
    warmup: u64,
    /// Lease TTL of each cycle.
    #[arg(long, default_value_t = 10_000)]
    ttl_ms: u64,
    /// How long a contended cycle waits for its resource.
    #[arg(long, default_value_t = 5_000)]
    wait_ms: u64,
    /// How long each cycle holds the lock before releasing it.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
    /// Threads of the load generator's runtime: 1 (the default) runs every client on one
    /// thread, which costs the least CPU per cycle for either target; 0: one per CPU.
    #[arg(long, default_value_t = 1)]
    pub worker_threads: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the latency histogram (ms) as HdrHistogram percentile-distribution text.
    #[arg(long, value_name = "FILE")]
    hdr_out: Option<PathBuf>,
    /// Draw the latency distribution as an SVG (percentile on a log scale, latency in ms).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// The files `--hdr-out` and `--plot` go to, created before the run so that a path that
/// cannot be written fails at once rather than after the load.
struct OutputFiles {
    hdr: Option<(PathBuf, File)>,
    plot: Option<(PathBuf, File)>,
}

/// Runs the load and prints the report.
pub async fn run(args: LoadArgs) -> u8 {
    if let Err(problem) = check(&args) {
        eprintln!("redlease: {problem}");
        return EXIT_USAGE;
    }
    if args.workload == Workload::Renewal {
        return run_renewal(&args).await;
    }
    let files = match OutputFiles::create(&args) {
        Ok(files) => files,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    let mut local = match args.local_fleet {
        Some(n) => match LocalFleet::start(n, &redis_server_binary()).await {
            Ok(fleet) => Some(fleet),
            Err(error) => {
                eprintln!("redlease: {error}");
                return EXIT_UNAVAILABLE;
            }
        },
        None => None,
    };
    let report = match (&mut local, args.workload) {
        (Some(fleet), Workload::Fault) => fault::run(fleet, &load_options(&args))
            .await
            .map_err(|error| (error, EXIT_UNAVAILABLE)),
        (fleet, _) => cycle_report(&args, fleet.as_ref().map(LocalFleet::urls))
            .await
            .map_err(|error| (error, EXIT_USAGE)),
    };
    if let Some(fleet) = local {
        fleet.stop().await;
    }
    let report = match report {
        Ok(report) => report,
        Err((error, code)) => {
            eprintln!("redlease: {error}");
            return code;
        }
    };
    print(&report, args.json);
    let written = files.write(&report);
    if let Err(error) = &written {
        eprintln!("redlease: {error}");
    }
    if report.all_failed() {
        let first = report.first_error.as_deref().unwrap_or("unknown");
        eprintln!(
            "redlease: every cycle failed ({} errors, none completed); the first: {first}",
            report.errors
        );
        return EXIT_UNAVAILABLE;
    }
    match written {
        Ok(()) => EXIT_OK,
        Err(_) => EXIT_IO,
    }
}

/// Combinations the flags allow but the workloads do not.
fn check(args: &LoadArgs) -> Result<(), String> {
    if args
        .rate
        .is_some_and(|rate| !(rate > 0.0 && rate.is_finite()))
    {
        return Err("--rate must be a positive number".into());
    }
    // One range for every target: a sidecar grants nothing outside the engine's either.
    let engine = EngineOptions::default();
    let ttl = Duration::from_millis(args.ttl_ms);
    if ttl < engine.min_ttl || ttl > engine.max_ttl {
        return Err(format!(
            "--ttl-ms {} is out of range: a lease TTL is {} to {} ms",
            args.ttl_ms,
            engine.min_ttl.as_millis(),
            engine.max_ttl.as_millis()
        ));
    }
    let fixed_length = matches!(args.workload, Workload::Renewal | Workload::Fault);
    if fixed_length && (args.ops.is_some() || args.rate.is_some()) {
        return Err(
            "--ops and --rate do not apply to renewal and fault (they run for --duration)".into(),
        );
    }
    match args.workload {
        Workload::Renewal if args.sidecar.is_none() => {
            Err("--workload renewal needs --sidecar (auto-renewal lives in the sidecar)".into())
        }
        Workload::Renewal if args.hdr_out.is_some() || args.plot.is_some() => {
            Err("--hdr-out and --plot are for acquire+release cycles, not renewal".into())
        }
        Workload::Renewal if args.leases == 0 => Err("--leases must be at least 1".into()),
        Workload::Fault if args.local_fleet.is_none_or(|n| n < 3) => Err(
            "--workload fault needs --local-fleet N (N >= 3): it kills and restarts a master it started".into(),
        ),
        _ if args.local_fleet.is_some_and(|n| n == 0) => Err("--local-fleet must be at least 1".into()),
        _ => Ok(()),
    }
}

/// Sequential, parallel and contention, on the given target (or on `local` masters).
async fn cycle_report(args: &LoadArgs, local: Option<Vec<String>>) -> Result<Report, String> {
    let target = target(args, local).await?;
    let target = Arc::new(target);
    let report = loadtest::run(Arc::clone(&target), &load_options(args)).await;
    target.close().await;
    Ok(report)
}

async fn run_renewal(args: &LoadArgs) -> u8 {
    let base = args.sidecar.clone().unwrap_or_default();
    let options = RenewalOptions {
        leases: args.leases,
        duration: args.duration.unwrap_or(renewal::DEFAULT_DURATION),
        ttl: Duration::from_millis(args.ttl_ms),
    };
    let client = match super::sidecar_client(&base, args.token_file.as_deref()) {
        Ok(client) => client,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    match renewal::run(&client, &options).await {
        Ok(report) => {
            print_renewal(&report, args.json);
            EXIT_OK
        }
        Err(error) => {
            eprintln!("redlease: {error}");
            EXIT_UNAVAILABLE
        }
    }
}

fn print_renewal(report: &RenewalReport, json: bool) {
    print_report(report, json, || {
        format!("{}\n{}", RenewalReport::table_header(), report.table_row())
    });
}

fn load_options(args: &LoadArgs) -> LoadOptions {
    LoadOptions {
        workload: args.workload,
        clients: args.clients,
        resources: args.resources,
        ops: args.ops,
        duration: args.duration,
        rate: args.rate,
        warmup: args.warmup,
        ttl: Duration::from_millis(args.ttl_ms),
        wait: Duration::from_millis(args.wait_ms),
        hold: Duration::from_millis(args.hold_ms),
    }
}

async fn target(args: &LoadArgs, local: Option<Vec<String>>) -> Result<Target, String> {
    if let Some(base) = &args.sidecar {
        let client = super::sidecar_client(base, args.token_file.as_deref())?;
        return Ok(Target::Sidecar { client });
    }
    let masters = local.or_else(|| args.masters.clone()).unwrap_or_default();
    let options = args
        .access
        .apply(FleetOptions::default())
        .map_err(|e| e.to_string())?;
    Target::connect_engine(&masters, &options, EngineOptions::default())
        .await
        .map_err(|e| e.to_string())
}

fn print(report: &Report, json: bool) {
    print_report(report, json, || {
        let mut table = format!("{}\n{}", Report::table_header(), report.table_row());
        if let Some(dip) = &report.fault {
            table = format!("{table}\n{}", dip.lines());
        }
        table
    });
}

/// One JSON object with `--json`, otherwise the human `table`.
fn print_report(report: &impl serde::Serialize, json: bool, table: impl FnOnce() -> String) {
    if !json {
        println!("{}", table());
        return;
    }
    match serde_json::to_string(report) {
        Ok(line) => println!("{line}"),
        Err(error) => eprintln!("redlease: cannot encode the report: {error}"),
    }
}

// === impl OutputFiles ===

impl OutputFiles {
    fn create(args: &LoadArgs) -> Result<Self, String> {
        let open = |flag: &str, path: &Option<PathBuf>| {
            let Some(path) = path else { return Ok(None) };
            match File::create(path) {
                Ok(file) => Ok(Some((path.clone(), file))),
                Err(error) => Err(cannot_write(flag, path, &error)),
            }
        };
        Ok(Self {
            hdr: open("--hdr-out", &args.hdr_out)?,
            plot: open("--plot", &args.plot)?,
        })
    }

    /// Writes both files, even when the first fails; the first error is returned.
    fn write(self, report: &Report) -> Result<(), String> {
        let hdr = self.hdr.map(|(path, file)| {
            let text = hdr::percentile_distribution(&report.latency, hdr::MICROS_PER_MILLI);
            fill("--hdr-out", &path, file, &text)
        });
        let plot = self.plot.map(|(path, file)| {
            let svg = plot::latency_svg(&report.latency, &report.title());
            fill("--plot", &path, file, &svg)
        });
        hdr.unwrap_or(Ok(())).and(plot.unwrap_or(Ok(())))
    }
}

fn fill(flag: &str, path: &Path, mut file: File, content: &str) -> Result<(), String> {
    file.write_all(content.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|error| cannot_write(flag, path, &error))
}

fn cannot_write(flag: &str, path: &Path, error: &std::io::Error) -> String {
    format!("cannot write {flag} {}: {error}", path.display())
}

/// The longest `--duration` accepted.
const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

/// `10s`, `500ms`, `2m`, or a number of seconds (at most a day).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {text}"))?;
    if !(value > 0.0 && value.is_finite()) {
        return Err(format!("not a positive duration: {text}"));
    }
    match Duration::try_from_secs_f64(value * scale) {
        Ok(duration) if duration <= MAX_DURATION => Ok(duration),
        _ => Err(format!("{text} is longer than a day")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Durations read as people write them.
    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}

//! `redlease serve` (the sidecar) and `redlease dev` (the sidecar on a throwaway local fleet).

use std::path::PathBuf;

use clap::Args;
use redlease_dev::{redis_server_binary, LocalFleet};

use super::{EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::config::{ConfigError, Listen, Overrides, Settings};
use crate::server::{ListenError, Listener, Sidecar};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML configuration file (keys in `docs/operations.md`); env REDLEASE__* and flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Comma-separated redis:// URLs of the independent masters.
    #[arg(long, value_delimiter = ',')]
    masters: Option<Vec<String>>,
    /// Address of the HTTP API: ip:port or unix:/path (default 127.0.0.1:7600).
    #[arg(long)]
    listen: Option<String>,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// How many local masters to start.
    #[arg(long, default_value_t = 5)]
    count: usize,
    /// Address of the HTTP API: ip:port or unix:/path (default 127.0.0.1:7600).
    #[arg(long)]
    listen: Option<String>,
    /// Optional TOML configuration for everything but the masters.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// The settings of `redlease serve`, loaded and validated before the runtime starts (their
/// `runtime.worker_threads` says which runtime it is).
pub fn load_settings(args: &ServeArgs) -> Result<Settings, ConfigError> {
    let overrides = Overrides {
        masters: args.masters.clone(),
        listen: args.listen.clone(),
    };
    Settings::load(args.config.as_deref(), std::env::vars(), overrides)
}

/// The same for `redlease dev`, whose masters are not known before it starts them (any
/// placeholder stands in for them here).
pub fn dev_worker_threads(args: &DevArgs) -> Option<usize> {
    let overrides = Overrides {
        masters: Some(vec!["redis://127.0.0.1:6379".to_string()]),
        listen: args.listen.clone(),
    };
    let env = std::env::vars().filter(|(key, _)| key != "REDLEASE__MASTERS");
    let settings = Settings::load(args.config.as_deref(), env, overrides);
    settings.ok().map(|settings| settings.worker_threads)
}

/// Serves with the settings [`load_settings`] loaded; exit 64 on any invalid key.
pub async fn serve(loaded: Result<Settings, ConfigError>) -> u8 {
    match loaded {
        Ok(settings) => run(settings, Audience::Apps).await,
        Err(error) => {
            eprintln!("redlease: {error}");
            EXIT_USAGE
        }
    }
}

/// Starts `count` local masters and serves the sidecar on them until SIGINT/SIGTERM.
pub async fn dev(args: DevArgs) -> u8 {
    if args.count == 0 {
        eprintln!("redlease: --count must be at least 1");
        return EXIT_USAGE;
    }
    let fleet = match LocalFleet::start(args.count, &redis_server_binary()).await {
        Ok(fleet) => fleet,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_UNAVAILABLE;
        }
    };
    let overrides = Overrides {
        masters: Some(fleet.urls()),
        listen: args.listen,
    };
    let env = std::env::vars().filter(|(key, _)| key != "REDLEASE__MASTERS");
    let code = match Settings::load(args.config.as_deref(), env, overrides) {
        Ok(settings) => run(settings, Audience::AppsAndCli).await,
        Err(error) => {
            eprintln!("redlease: {error}");
            EXIT_USAGE
        }
    };
    fleet.stop().await;
    code
}

/// Who the start-up lines are for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Audience {
    /// The apps of the sidecar (`serve`).
    Apps,
    /// Them and a person at the command line, on a throwaway fleet (`dev`): they also get the
    /// line that points `redlease lock` and the other commands at its masters.
    AppsAndCli,
}

async fn run(settings: Settings, audience: Audience) -> u8 {
    raise_open_files(&settings);
    let listener = match Listener::bind(&settings.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_UNAVAILABLE;
        }
    };
    // Both listeners are bound before the masters are connected to: a port in use is said at
    // once, not after the start-up's waits.
    let metrics = match bind_metrics(&settings).await {
        Ok(metrics) => metrics,
        Err(error) => {
            eprintln!("redlease: metrics.listen: {error}");
            return EXIT_UNAVAILABLE;
        }
    };
    let sidecar = match Sidecar::start(&settings).await {
        Ok(sidecar) => sidecar,
        Err(error) => {
            eprintln!("redlease: {error}");
            return EXIT_USAGE;
        }
    };
    let (sidecar, metrics) = match metrics {
        Some(metrics) => {
            let local = metrics.local().ok();
            (sidecar.with_metrics_listener(metrics), local)
        }
        None => (sidecar, None),
    };
    crate::shutdown::reload_tokens_on_hangup(
        std::sync::Arc::clone(sidecar.token()),
        std::sync::Arc::clone(sidecar.metrics_token()),
    );
    announce(&settings, &listener, metrics.as_ref(), audience);
    sidecar.run(listener, crate::shutdown::signal()).await;
    EXIT_OK
}

/// The metrics listener of `metrics.listen`, bound; `None` when there is none.
async fn bind_metrics(settings: &Settings) -> Result<Option<Listener>, ListenError> {
    match settings.metrics.listen {
        Some(addr) => Listener::bind(&Listen::Tcp(addr)).await.map(Some),
        None => Ok(None),
    }
}

/// Descriptors the sidecar needs besides its API connections: connections to each master
/// (lock, preparation, subscriptions), refusals in flight, files and netlink queries.
fn own_descriptors(masters: usize) -> u64 {
    128 + 4 * masters as u64
}

/// Raises the soft limit on open files to the hard one (as Go's runtime does at start), so
/// that the connection caps decide what is refused, not descriptor exhaustion; warns when even
/// the hard limit is below `http.max_connections` and the sidecar's own descriptors.
fn raise_open_files(settings: &Settings) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let raised = soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok();
    let limit = if raised { hard } else { soft };
    let needed = settings.http.max_connections as u64 + own_descriptors(settings.masters.len());
    if limit < needed {
        tracing::warn!(
            limit,
            needed,
            "the open-file limit is below http.max_connections and the sidecar's own \
             descriptors: connections past it fail at accept instead of being answered 429"
        );
    } else {
        tracing::debug!(limit, raised, "open-file limit");
    }
}

/// Tells the newcomer where the API (and the metrics listener, if any) is, with a first
/// request to try.
fn announce(
    settings: &Settings,
    listener: &Listener,
    metrics: Option<&Listen>,
    audience: Audience,
) {
    let listen = listener.local().unwrap_or_else(|_| settings.listen.clone());
    let masters = settings.masters.len();
    // The threads the runtime really runs on (1 for the current-thread runtime).
    let runtime_threads = tokio::runtime::Handle::current().metrics().num_workers();
    // "none": /metrics is served on the API listener only.
    let metrics_listen = metrics.map_or_else(|| "none".to_string(), Listen::to_string);
    let busy_poll_us = settings.busy_poll.as_micros();
    let busy_poll_after_answer_us = settings.busy_poll_after_answer.as_micros();
    tracing::info!(
        listen = %listen,
        metrics_listen = %metrics_listen,
        masters,
        runtime_threads,
        busy_poll_us,
        busy_poll_after_answer_us,
        "redlease sidecar serving"
    );
    let (base, curl) = match &listen {
        Listen::Tcp(addr) => (format!("http://{addr}"), String::from("curl")),
        Listen::Unix(path) => (
            String::from("http://localhost"),
            format!("curl --unix-socket {}", path.display()),
        ),
    };
    println!("redlease sidecar on {listen} with {masters} masters");
    println!(
        "try: {curl} -s -X POST {base}/v1/locks/demo/acquire \
         -H 'content-type: application/json' -d '{{\"owner\":\"me\"}}'"
    );
    if audience == Audience::AppsAndCli {
        // The throwaway fleet's masters carry no credentials to mask.
        println!("export REDLEASE__MASTERS={}", settings.masters.join(","));
    }
}

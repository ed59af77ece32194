//! The load generator: workloads against the library engine or a sidecar over HTTP.
//!
//! Closed loop by default (each worker sends its next cycle when the last one answered);
//! open loop with a rate, where each cycle has a scheduled send time and its latency is
//! measured from that time (sojourn), so a stall shows up in every cycle it delays instead of
//! being hidden (no coordinated omission). Each worker records into its own HdrHistogram; the
//! first `warmup` cycles of each worker are dropped; the histograms are merged at the end.

pub mod fault;
pub mod hdr;
pub mod plot;
mod progress;
pub mod renewal;
pub mod report;

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

use crate::client::{Client, ClientError};
use crate::fleet::{Fleet, FleetOptions};
use crate::redlock::{AcquireOutcome, EngineOptions, Redlock};
use crate::wakeup::Wakeups;
use crate::Error;
use progress::{Goal, ProgressLine, Tally};
pub use report::Report;

/// What each worker does, one cycle at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// One client: acquire then release one resource.
    Sequential,
    /// `clients` clients, each on its own resource.
    Parallel,
    /// `clients` clients over `resources` shared resources; a held resource is waited for.
    Contention,
    /// `leases` auto-renewed leases held on a sidecar for `duration`: renewal latency and
    /// the sidecar's CPU and memory (see [`renewal`]).
    Renewal,
    /// `parallel` on a local fleet while one master is killed and later restarted: the
    /// availability dip (see [`fault`]).
    Fault,
}

/// Width of the windows of [`Report::timeline`].
pub const TIMELINE_WINDOW: Duration = Duration::from_millis(100);

/// Where the load goes.
pub enum Target {
    /// The library engine straight against the masters; contended cycles wait through the
    /// release wake-ups, as the sidecar does.
    Engine { engine: Arc<Redlock> },
    /// A sidecar's HTTP API through [`crate::client`] (keep-alive connections).
    Sidecar { client: Client },
}

/// A load run.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub workload: Workload,
    pub clients: usize,
    pub resources: usize,
    /// Measured cycles in all (split across the clients); with `duration`, whichever ends first.
    pub ops: Option<u64>,
    pub duration: Option<Duration>,
    /// Open loop: cycles per second over all clients.
    pub rate: Option<f64>,
    /// Cycles each worker runs before measuring.
    pub warmup: u64,
    pub ttl: Duration,
    /// How long a contended cycle waits for the resource.
    pub wait: Duration,
    /// How long each cycle holds the lock before releasing it (the work a holder does).
    pub hold: Duration,
}

/// What one cycle came to.
enum Cycle {
    Done {
        retried: bool,
    },
    /// Failed, and why.
    Failed(String),
}

/// One worker's record.
struct WorkerRecord {
    latency: Histogram<u64>,
    service: Histogram<u64>,
    ops: u64,
    errors: u64,
    retries: u64,
    /// Why this worker's first failed cycle failed (warm-up included).
    first_error: Option<String>,
    /// (completed, failed) cycles per `TIMELINE_WINDOW` since the run started.
    timeline: Vec<[u64; 2]>,
}

/// Runs a cycle workload (sequential, parallel, contention; `fault` cycles like parallel,
/// and [`fault::run`] adds the fault) and reports the merged figures. `renewal` holds leases
/// instead: see [`renewal::run`].
pub async fn run(target: Arc<Target>, options: &LoadOptions) -> Report {
    let clients = match options.workload {
        Workload::Sequential => 1,
        _ => options.clients.max(1),
    };
    let ops = options.ops.or(options.duration.is_none().then_some(1_000));
    let per_worker = ops.map(|ops| ops.div_ceil(clients as u64));
    let interval = options
        .rate
        .map(|rate| Duration::from_secs_f64(clients as f64 / rate.max(0.001)));
    let started = Instant::now();
    let tally = Arc::new(Tally::default());
    let planned = per_worker.map(|n| n * clients as u64);
    let goal = Goal {
        cycles: planned,
        duration: options.duration,
    };
    let progress = ProgressLine::start(Arc::clone(&tally), goal);
    let workers = (0..clients).map(|index| {
        let plan = Plan {
            resource: resource_of(options, index),
            cycles: per_worker.map(|n| n + options.warmup),
            deadline: options.duration.map(|d| started + d),
            interval,
            offset: interval.map_or(Duration::ZERO, |every| {
                every * index as u32 / clients as u32
            }),
            warmup: options.warmup,
            tally: Arc::clone(&tally),
            run_start: started,
        };
        tokio::spawn(worker(Arc::clone(&target), plan, options.clone()))
    });
    let records: Vec<WorkerRecord> = futures_util::future::join_all(workers)
        .await
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    progress.finish().await;
    Report::merge(options, clients, records, started.elapsed(), target.name())
}

/// One worker's share of the run.
struct Plan {
    resource: String,
    cycles: Option<u64>,
    deadline: Option<Instant>,
    interval: Option<Duration>,
    /// Open loop: this worker's schedule is shifted so the clients do not send in bursts.
    offset: Duration,
    warmup: u64,
    /// Measured cycles, shared with the progress line.
    tally: Arc<Tally>,
    /// Where the timeline's windows count from.
    run_start: Instant,
}

async fn worker(target: Arc<Target>, plan: Plan, options: LoadOptions) -> WorkerRecord {
    let mut record = WorkerRecord::new();
    let start = Instant::now();
    let mut k: u64 = 0;
    while plan.cycles.is_none_or(|n| k < n) && plan.deadline.is_none_or(|d| Instant::now() < d) {
        let scheduled = match plan.interval {
            Some(every) => {
                let at = start + plan.offset + every * k as u32;
                tokio::time::sleep_until(at).await;
                at
            }
            None => Instant::now(),
        };
        let begin = Instant::now();
        let cycle = target.cycle(&plan.resource, &options).await;
        let end = Instant::now();
        if let (Cycle::Failed(why), None) = (&cycle, &record.first_error) {
            record.first_error = Some(why.clone());
        }
        if k >= plan.warmup {
            plan.tally.count(&cycle);
            let window = (end - plan.run_start).as_millis() / TIMELINE_WINDOW.as_millis();
            record.add(cycle, end - scheduled, end - begin, window as usize);
        }
        k += 1;
    }
    record
}

async fn hold(options: &LoadOptions) {
    if !options.hold.is_zero() {
        tokio::time::sleep(options.hold).await;
    }
}

fn resource_of(options: &LoadOptions, worker: usize) -> String {
    match options.workload {
        Workload::Sequential => "load:sequential".to_string(),
        Workload::Parallel => format!("load:parallel:{worker}"),
        Workload::Contention => format!("load:contention:{}", worker % options.resources.max(1)),
        Workload::Renewal => format!("load:renewal:{worker}"),
        Workload::Fault => format!("load:fault:{worker}"),
    }
}

// === impl WorkerRecord ===

impl WorkerRecord {
    fn new() -> Self {
        Self {
            latency: report::histogram(),
            service: report::histogram(),
            ops: 0,
            errors: 0,
            retries: 0,
            first_error: None,
            timeline: Vec::new(),
        }
    }

    fn add(&mut self, cycle: Cycle, latency: Duration, service: Duration, window: usize) {
        self.latency.saturating_record(latency.as_micros() as u64);
        self.service.saturating_record(service.as_micros() as u64);
        if self.timeline.len() <= window {
            self.timeline.resize(window + 1, [0, 0]);
        }
        match cycle {
            Cycle::Done { retried } => {
                self.ops += 1;
                self.retries += u64::from(retried);
                self.timeline[window][0] += 1;
            }
            Cycle::Failed(_) => {
                self.errors += 1;
                self.timeline[window][1] += 1;
            }
        }
    }
}

// === impl Target ===

impl Target {
    /// The engine target: connects to `masters` (and their release channels).
    pub async fn connect_engine(
        masters: &[String],
        fleet_options: &FleetOptions,
        engine_options: EngineOptions,
    ) -> Result<Self, Error> {
        let fleet = Fleet::connect(masters, fleet_options).await?;
        let wakeups = Wakeups::connect(&fleet)?;
        let engine = Arc::new(Redlock::new(fleet, engine_options).with_wakeups(wakeups));
        Ok(Self::Engine { engine })
    }

    /// Waits for the engine's calls in flight and closes its connections.
    pub async fn close(&self) {
        if let Self::Engine { engine } = self {
            engine.settle(Duration::from_secs(2)).await;
            engine.fleet().quit(Duration::from_secs(1)).await;
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Engine { .. } => "masters",
            Self::Sidecar { .. } => "sidecar",
        }
    }

    /// Acquire then release `resource`; a contended acquisition waits (and counts a retry).
    async fn cycle(&self, resource: &str, options: &LoadOptions) -> Cycle {
        match self {
            Self::Engine { engine } => engine_cycle(engine, resource, options).await,
            Self::Sidecar { client } => sidecar_cycle(client, resource, options).await,
        }
    }
}

async fn engine_cycle(engine: &Redlock, resource: &str, options: &LoadOptions) -> Cycle {
    let (owner, ttl) = ("redlease-load", options.ttl);
    let mut outcome = engine.acquire(resource, owner, ttl).await;
    let retried = matches!(outcome, Ok(AcquireOutcome::Contended(_)));
    if retried && options.workload == Workload::Contention {
        outcome = engine
            .acquire_with_wait(resource, owner, ttl, options.wait)
            .await;
    }
    let lease = match outcome {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        Ok(AcquireOutcome::Contended(_)) => return Cycle::Failed("acquire: held".into()),
        Ok(AcquireOutcome::NoQuorum(refusal)) => {
            return Cycle::Failed(format!("acquire: no quorum ({:?})", refusal.cause))
        }
        Err(error) => return Cycle::Failed(format!("acquire: {error}")),
    };
    hold(options).await;
    match engine.release(resource, lease.id).await {
        Ok(released) if released.released() => Cycle::Done { retried },
        Ok(_) => Cycle::Failed("release: not confirmed by a quorum".into()),
        Err(error) => Cycle::Failed(format!("release: {error}")),
    }
}

/// The same cycle through the client: a lease the sidecar does not renew, no event stream
/// (nothing to watch over a cycle this short), released by `DELETE`.
async fn sidecar_cycle(client: &Client, resource: &str, options: &LoadOptions) -> Cycle {
    let attempt = |wait: Duration| {
        let request = client
            .lock(resource)
            .owner("redlease-load")
            .ttl(options.ttl);
        request.auto_renew(false).events(false).wait(wait).send()
    };
    let mut acquired = attempt(Duration::ZERO).await;
    let retried = matches!(acquired, Err(ClientError::Held { .. }));
    if retried && options.workload == Workload::Contention {
        acquired = attempt(options.wait).await;
    }
    let guard = match acquired {
        Ok(guard) => guard,
        Err(error) => return Cycle::Failed(format!("acquire: {error}")),
    };
    hold(options).await;
    // Any answer of the sidecar counts, `released: false` (the lease had ended) included.
    match guard.release().await {
        Ok(_) => Cycle::Done { retried },
        Err(error) => Cycle::Failed(format!("release: {error}")),
    }
}

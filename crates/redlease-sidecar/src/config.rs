//! Settings of the sidecar: DEFAULT_* constants, layering (defaults → TOML file →
//! REDLEASE__ env → CLI flags), validation that reports every invalid key at once, and the
//! one place settings become each component's options.
//!
//! Durations are integer milliseconds under `_ms` keys. The raw layers are read into a private
//! struct of primitives that refuses unknown keys (a misspelled key is an error, not a silently
//! ignored default); [`Settings`] only exists once every key is valid.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use ::config::builder::DefaultState;
use ::config::{Config, ConfigBuilder, Environment, File, FileFormat};
use serde::Deserialize;

mod fleet;
mod metrics;
mod server;
mod unknown;

use self::fleet::{check_against_masters, check_masters, RawFleet};
pub use self::fleet::{read_password, FleetSettings};
pub use self::metrics::MetricsSettings;
use self::metrics::RawMetrics;
pub use self::server::{read_token, AuthSettings, HttpSettings, Listen, DEFAULT_LISTEN};
use self::server::{RawAuth, RawHttp};
pub use self::server::{
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_HTTP_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_EVENT_STREAMS, DEFAULT_WAITERS_SHARE, MAX_WAITERS_SHARE,
};
use crate::fleet::mask_credentials;
pub use crate::fleet::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_PROBE_PERIOD, DEFAULT_QUARANTINE};
use crate::keys::Keyspace;
pub use crate::keys::DEFAULT_PREFIX;
use crate::lease::ttl::{RenewalSchedule, TtlPolicy};
use crate::lease::{LeasePolicy, Revocations, DEFAULT_RETAINED_MAX, DEFAULT_RETENTION, NEVER_IDLE};
use crate::{EngineOptions, FleetOptions};

/// Shortest lease a caller may ask for (the engine's own floor is [`MIN_TTL_FLOOR`]).
pub const DEFAULT_MIN_TTL: Duration = Duration::from_millis(500);
/// Longest lease a caller may ask for (same as the engine's default).
pub const DEFAULT_MAX_TTL: Duration = crate::redlock::DEFAULT_MAX_TTL;
/// Adaptive TTL: the lease TTL covers at least this many quorum RTTs.
pub const DEFAULT_RTT_MULTIPLIER: f64 = 3.0;
/// Adaptive TTL: added on top of the RTT term.
pub const DEFAULT_SAFETY_MARGIN: Duration = Duration::from_millis(200);
/// A lease is renewed once this fraction of its TTL has elapsed.
pub const DEFAULT_RENEW_FRACTION: f64 = 0.5;
/// Up to this much random delay is added to each renewal.
pub const DEFAULT_RENEW_JITTER: Duration = Duration::from_millis(100);
/// A lease whose holder has not been heard from for this long is released.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Upper bound on the `idle_timeout_ms` a caller may ask for: a dead app's lease is released
/// at the latest this long after its last sign of life.
pub const DEFAULT_MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Upper bound on the `wait_ms` a caller may ask for.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(60);
/// Shadow TTL = lease TTL × this, capped at the quarantine.
pub const DEFAULT_SHADOW_MULTIPLIER: u32 = 10;
/// How long shutdown waits for held leases to be released.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Threads of the sidecar's async runtime: one, which spares every request the hand-offs and
/// wake-ups between threads (`bench/README.md`, "The sidecar hop").
pub const DEFAULT_WORKER_THREADS: usize = 1;
/// The most `runtime.worker_threads` accepted.
pub const MAX_WORKER_THREADS: usize = 256;
/// `runtime.busy_poll_us` and `runtime.busy_poll_after_answer_us` on a runtime of one thread:
/// above the masters' round trip on a near fleet, and above an app's time between the answer
/// and its next request when it locks back to back (`bench/README.md`, "The sidecar hop");
/// farther masters, and apps whose requests come further apart, stop the polling.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(100);
/// The longest `runtime.busy_poll_us` and `runtime.busy_poll_after_answer_us` accepted: past a
/// millisecond, polling only burns CPU.
pub const MAX_BUSY_POLL: Duration = Duration::from_millis(1);
/// The lowest `lease.min_ttl_ms` accepted: the engine's own minimum TTL.
pub const MIN_TTL_FLOOR: Duration = crate::redlock::DEFAULT_MIN_TTL;

/// Validated settings of the sidecar.
#[derive(Clone, PartialEq)]
pub struct Settings {
    /// Where the HTTP API listens: `ip:port` or a Unix socket.
    pub listen: Listen,
    /// `redis://` or `rediss://` URLs of the independent masters (at least one, no duplicates).
    pub masters: Vec<String>,
    /// Prefix of every key redlease writes.
    pub key_prefix: String,
    /// Keys `lease.*`.
    pub lease: LeaseSettings,
    /// Keys `fleet.*`.
    pub fleet: FleetSettings,
    /// Key `shutdown.grace_ms`.
    pub shutdown_grace: Duration,
    /// Key `runtime.worker_threads`: threads of the async runtime; 0: one per CPU.
    pub worker_threads: usize,
    /// Key `runtime.busy_poll_us`: how long at most the runtime keeps polling for events,
    /// rather than sleeping, after a request comes in and until its answer goes out; zero:
    /// never. By default [`DEFAULT_BUSY_POLL`] on a runtime of one thread, else zero.
    pub busy_poll: Duration,
    /// Key `runtime.busy_poll_after_answer_us`: how long at most the runtime keeps polling
    /// after an answer, for the app's next request; zero: never. By default
    /// [`DEFAULT_BUSY_POLL`] on a runtime of one thread, else zero.
    pub busy_poll_after_answer: Duration,
    /// Keys `auth.*`.
    pub auth: AuthSettings,
    /// Keys `http.*`.
    pub http: HttpSettings,
    /// Keys `metrics.*`.
    pub metrics: MetricsSettings,
}

/// Lease policy: TTL bounds, adaptive TTL, renewal and shadows.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseSettings {
    /// Shortest TTL a caller may ask for.
    pub min_ttl: Duration,
    /// At least `min_ttl` and at most `fleet.quarantine`.
    pub max_ttl: Duration,
    /// Adaptive TTL: quorum RTT × this + `safety_margin`.
    pub rtt_multiplier: f64,
    /// Added to the quorum RTT × `rtt_multiplier` for the adaptive TTL.
    pub safety_margin: Duration,
    /// Renew once this fraction of the TTL has elapsed, in (0, 1).
    pub renew_fraction: f64,
    /// Random delay added to each renewal; less than `min_ttl × renew_fraction`.
    pub renew_jitter: Duration,
    /// Release a lease whose holder has been silent this long.
    pub idle_timeout: Duration,
    /// Upper bound on a caller's `idle_timeout_ms`; at least `idle_timeout`.
    pub max_idle_timeout: Duration,
    /// Upper bound on a caller's `wait_ms`.
    pub max_wait: Duration,
    /// Shadow TTL = TTL × this, capped at `fleet.quarantine`.
    pub shadow_multiplier: u32,
    /// Ended leases kept readable at most (the oldest forgotten first).
    pub retained_max: usize,
}

/// Upper bound of `lease.retained_max` (~6 GiB of ended leases).
pub const MAX_RETAINED_MAX: usize = 10_000_000;

/// Read by the command line before any configuration (it sets up logging), so the
/// configuration layers skip it.
pub const LOG_FORMAT_ENV: &str = "REDLEASE__LOG_FORMAT";

/// CLI flags, the last layer; None = not given.
#[derive(Clone, Default)]
pub struct Overrides {
    /// `--masters`.
    pub masters: Option<Vec<String>>,
    /// `--listen`.
    pub listen: Option<String>,
}

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file or variable that cannot be read or parsed.
    #[error("cannot read configuration: {0}")]
    Load(String),
    /// Every setting that is out of its range, one line each.
    #[error("invalid configuration:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// The layers merged, before validation: primitives only, unknown keys refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    listen: String,
    masters: Vec<String>,
    key_prefix: String,
    lease: RawLease,
    fleet: RawFleet,
    shutdown: RawShutdown,
    runtime: RawRuntime,
    auth: RawAuth,
    http: RawHttp,
    metrics: RawMetrics,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLease {
    min_ttl_ms: u64,
    max_ttl_ms: u64,
    rtt_multiplier: f64,
    safety_margin_ms: u64,
    renew_fraction: f64,
    renew_jitter_ms: u64,
    idle_timeout_ms: u64,
    max_idle_timeout_ms: u64,
    max_wait_ms: u64,
    shadow_multiplier: u32,
    retained_max: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShutdown {
    grace_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuntime {
    worker_threads: usize,
    /// No default of its own: it depends on `worker_threads`.
    busy_poll_us: Option<u64>,
    /// No default of its own: it depends on `worker_threads`.
    busy_poll_after_answer_us: Option<u64>,
}

// === impl Settings ===

impl Settings {
    /// Layers: defaults → optional TOML file → env vars (REDLEASE__SECTION__KEY) → overrides.
    /// `env` is passed in (tests never call env::set_var; the binary passes std::env::vars()).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: Overrides,
    ) -> Result<Settings, ConfigError> {
        let env: Vec<(String, String)> = env_vars(env);
        let unknown = defaults(Config::builder())
            .map(|defaults| unknown::unknown_keys(defaults, file, &env))
            .unwrap_or_default();
        if !unknown.is_empty() {
            return Err(ConfigError::Invalid(unknown));
        }
        let raw = layers(file, env, overrides)
            .and_then(Config::try_deserialize::<Raw>)
            .map_err(|e| ConfigError::Load(e.to_string()))?;
        raw.validate()
    }

    /// Fleet options from these settings: keyspace, connect timeout, quarantine, credentials
    /// and TLS; the rest (breaker threshold and trial interval, RTT window) stay at the library
    /// defaults.
    pub fn fleet_options(&self) -> FleetOptions {
        FleetOptions {
            keyspace: Keyspace::new(self.key_prefix.clone()),
            connect_timeout: self.fleet.connect_timeout,
            quarantine: self.fleet.quarantine,
            // Shadows live up to the quarantine configured here (max TTL is at most that).
            longest_ttl: self.fleet.quarantine,
            credentials: self.fleet.credentials.clone(),
            tls: self.fleet.tls.clone(),
            ..FleetOptions::default()
        }
    }

    /// Engine options from these settings: `max_ttl`; the rest (including the engine's own
    /// `min_ttl` floor) stay at the library defaults.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            max_ttl: self.lease.max_ttl,
            ..EngineOptions::default()
        }
    }

    /// The lease table's policy from these settings (the adaptive TTL, the renewal schedule,
    /// liveness, waits and shadows; the shadow cap is the restart quarantine).
    pub fn lease_policy(&self) -> LeasePolicy {
        let lease = &self.lease;
        LeasePolicy {
            ttl: TtlPolicy {
                min_ttl: lease.min_ttl,
                max_ttl: lease.max_ttl,
                rtt_multiplier: lease.rtt_multiplier,
                safety_margin: lease.safety_margin,
            },
            schedule: RenewalSchedule {
                fraction: lease.renew_fraction,
                jitter: lease.renew_jitter,
            },
            idle_timeout: lease.idle_timeout,
            max_idle_timeout: lease.max_idle_timeout,
            max_wait: lease.max_wait,
            retention: DEFAULT_RETENTION,
            retained_max: lease.retained_max,
            shadow_multiplier: lease.shadow_multiplier,
            shadow_cap: self.fleet.quarantine,
            revocations: Revocations::AcknowledgedAtOnce,
        }
    }
}

/// The lease table's policy for a holder in this very process (`lock run` on the masters):
/// the sidecar's default renewal schedule and shadows (capped at `quarantine`, the fleet's),
/// never idle (the holder is this process, alive as long as the table), any wait, and
/// revocations acknowledged by the holder once it stopped acting on the lease.
pub fn in_process_lease_policy(quarantine: Duration) -> LeasePolicy {
    LeasePolicy {
        ttl: TtlPolicy {
            min_ttl: DEFAULT_MIN_TTL,
            max_ttl: DEFAULT_MAX_TTL,
            rtt_multiplier: DEFAULT_RTT_MULTIPLIER,
            safety_margin: DEFAULT_SAFETY_MARGIN,
        },
        schedule: RenewalSchedule {
            fraction: DEFAULT_RENEW_FRACTION,
            jitter: DEFAULT_RENEW_JITTER,
        },
        idle_timeout: NEVER_IDLE,
        max_idle_timeout: NEVER_IDLE,
        max_wait: Duration::MAX,
        retention: DEFAULT_RETENTION,
        retained_max: DEFAULT_RETAINED_MAX,
        shadow_multiplier: DEFAULT_SHADOW_MULTIPLIER,
        shadow_cap: quarantine,
        revocations: Revocations::ByTheHolder,
    }
}

/// Masters are shown without their passwords.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masters: Vec<String> = self.masters.iter().map(|m| mask_credentials(m)).collect();
        f.debug_struct("Settings")
            .field("listen", &self.listen)
            .field("masters", &masters)
            .field("key_prefix", &self.key_prefix)
            .field("lease", &self.lease)
            .field("fleet", &self.fleet)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("worker_threads", &self.worker_threads)
            .field("busy_poll", &self.busy_poll)
            .field("busy_poll_after_answer", &self.busy_poll_after_answer)
            .field("auth", &self.auth)
            .field("http", &self.http)
            .field("metrics", &self.metrics)
            .finish()
    }
}

// === layering ===

/// Every layer merged into one `Config`, not yet deserialized.
fn layers(
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    overrides: Overrides,
) -> Result<Config, ::config::ConfigError> {
    let mut builder = defaults(Config::builder())?;
    if let Some(path) = file {
        builder = builder.add_source(File::from(path).format(FileFormat::Toml).required(true));
    }
    let (lists, verbatim) = env_sources(env);
    builder = builder.add_source(verbatim).add_source(lists);
    builder
        .set_override_option("listen", overrides.listen)?
        .set_override_option("masters", overrides.masters)?
        .build()
}

/// Every key with its default, durations in milliseconds.
fn defaults(
    b: ConfigBuilder<DefaultState>,
) -> Result<ConfigBuilder<DefaultState>, ::config::ConfigError> {
    let b = metrics::defaults(fleet::defaults(server::defaults(b)?)?)?;
    b.set_default("key_prefix", DEFAULT_PREFIX)?
        .set_default("lease.min_ttl_ms", ms(DEFAULT_MIN_TTL))?
        .set_default("lease.max_ttl_ms", ms(DEFAULT_MAX_TTL))?
        .set_default("lease.rtt_multiplier", DEFAULT_RTT_MULTIPLIER)?
        .set_default("lease.safety_margin_ms", ms(DEFAULT_SAFETY_MARGIN))?
        .set_default("lease.renew_fraction", DEFAULT_RENEW_FRACTION)?
        .set_default("lease.renew_jitter_ms", ms(DEFAULT_RENEW_JITTER))?
        .set_default("lease.idle_timeout_ms", ms(DEFAULT_IDLE_TIMEOUT))?
        .set_default("lease.max_idle_timeout_ms", ms(DEFAULT_MAX_IDLE_TIMEOUT))?
        .set_default("lease.max_wait_ms", ms(DEFAULT_MAX_WAIT))?
        .set_default("lease.shadow_multiplier", DEFAULT_SHADOW_MULTIPLIER)?
        .set_default("lease.retained_max", DEFAULT_RETAINED_MAX as u64)?
        .set_default("shutdown.grace_ms", ms(DEFAULT_SHUTDOWN_GRACE))?
        .set_default("runtime.worker_threads", DEFAULT_WORKER_THREADS as u64)
}

/// The `REDLEASE__*` variables as two sources. `REDLEASE__MASTERS` and
/// `REDLEASE__HTTP__ALLOWED_HOSTS` go to a parsing source that splits them on commas (one value
/// without a comma still becomes a one-element list); every
/// other variable is kept verbatim, because `try_parsing` would turn a `key_prefix` of `0123`
/// into `123` (numbers are parsed from strings when the raw struct is deserialized anyway).
fn env_sources(env: impl IntoIterator<Item = (String, String)>) -> (Environment, Environment) {
    let (lists, verbatim): (::config::Map<_, _>, ::config::Map<_, _>) = env
        .into_iter()
        .partition(|(key, _)| LIST_VARS.contains(&key.as_str()));
    let base = || {
        Environment::with_prefix("REDLEASE")
            .prefix_separator("__")
            .separator("__")
    };
    let lists = base()
        .list_separator(",")
        .with_list_parse_key("masters")
        .with_list_parse_key("http.allowed_hosts")
        .try_parsing(true)
        .source(Some(lists));
    (lists, base().source(Some(verbatim)))
}

/// The variables of the settings: `REDLEASE__*`, but for the log format the command line reads.
fn env_vars(env: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let settings = |key: &String| key.starts_with("REDLEASE__") && key != LOG_FORMAT_ENV;
    env.into_iter().filter(|(key, _)| settings(key)).collect()
}

/// The variables that hold comma-separated lists.
const LIST_VARS: [&str; 2] = ["REDLEASE__MASTERS", "REDLEASE__HTTP__ALLOWED_HOSTS"];

/// A duration in whole milliseconds, as the `_ms` keys hold it.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// === validation ===

impl Raw {
    /// Converts to [`Settings`], reporting every invalid key at once ("key: message" lines).
    fn validate(self) -> Result<Settings, ConfigError> {
        // Defer returning errors until every key has been checked.
        let mut p = Vec::new();
        let listen = server::validate_listen(&self.listen, &mut p);
        let masters = check_masters(self.masters, &mut p);
        if self.key_prefix.is_empty() {
            p.push("key_prefix: must not be empty".into());
        }
        let lease = self.lease.validate(self.fleet.quarantine_ms, &mut p);
        let fleet = self.fleet.validate(&mut p);
        check_against_masters(&fleet, &masters, &mut p);
        let shutdown_grace = positive("shutdown.grace_ms", self.shutdown.grace_ms, &mut p);
        let worker_threads = self.runtime.worker_threads;
        if worker_threads > MAX_WORKER_THREADS {
            p.push(format!(
                "runtime.worker_threads: must be at most {MAX_WORKER_THREADS} (0: one per CPU)"
            ));
        }
        let mut window = |key: &str, set: Option<u64>| match set {
            Some(us) => check_busy_poll(key, us, worker_threads, &mut p),
            None if worker_threads == 1 => DEFAULT_BUSY_POLL,
            None => Duration::ZERO,
        };
        let busy_poll = window("runtime.busy_poll_us", self.runtime.busy_poll_us);
        let busy_poll_after_answer = window(
            "runtime.busy_poll_after_answer_us",
            self.runtime.busy_poll_after_answer_us,
        );
        let auth = self.auth.validate(&mut p);
        let http = self.http.validate(&mut p);
        let metrics = self.metrics.validate(listen.as_ref(), &mut p);
        match listen {
            Some(listen) if p.is_empty() => Ok(Settings {
                listen,
                masters,
                key_prefix: self.key_prefix,
                lease,
                fleet,
                shutdown_grace,
                worker_threads,
                busy_poll,
                busy_poll_after_answer,
                auth,
                http,
                metrics,
            }),
            _ => Err(ConfigError::Invalid(p)),
        }
    }
}

/// A busy-polling window of `us` microseconds set under `key`: at most [`MAX_BUSY_POLL`], and
/// only on a runtime of one thread.
fn check_busy_poll(key: &str, us: u64, worker_threads: usize, p: &mut Vec<String>) -> Duration {
    let window = Duration::from_micros(us);
    if window > MAX_BUSY_POLL {
        let most = MAX_BUSY_POLL.as_micros();
        p.push(format!("{key}: must be at most {most} (0: never)"));
    } else if !window.is_zero() && worker_threads != 1 {
        // With several workers, the one asleep in the I/O driver holds the sockets: the
        // polling one cannot look at them, and polls for nothing.
        p.push(format!("{key}: needs runtime.worker_threads = 1"));
    }
    window
}

impl RawLease {
    fn validate(&self, quarantine_ms: u64, p: &mut Vec<String>) -> LeaseSettings {
        let (min, max, floor) = (self.min_ttl_ms, self.max_ttl_ms, ms(MIN_TTL_FLOOR));
        if min < floor {
            let rule = format!("must be at least {floor} (got {min})");
            p.push(format!("lease.min_ttl_ms: {rule}"));
        }
        if max < min {
            let rule = format!("must be at least lease.min_ttl_ms ({min})");
            p.push(format!("lease.max_ttl_ms: {rule}"));
        }
        if max > quarantine_ms {
            let rule = format!("must be at most fleet.quarantine_ms ({quarantine_ms})");
            p.push(format!("lease.max_ttl_ms: {rule}"));
        }
        let rtt = self.rtt_multiplier;
        if !(rtt.is_finite() && rtt >= 1.0) {
            let rule = format!("must be a finite number of at least 1 (got {rtt})");
            p.push(format!("lease.rtt_multiplier: {rule}"));
        }
        self.validate_renewal(p);
        if self.idle_timeout_ms == 0 {
            p.push("lease.idle_timeout_ms: must be greater than 0".into());
        }
        if self.max_idle_timeout_ms < self.idle_timeout_ms {
            let rule = format!(
                "must be at least lease.idle_timeout_ms ({})",
                self.idle_timeout_ms
            );
            p.push(format!("lease.max_idle_timeout_ms: {rule}"));
        }
        if self.shadow_multiplier == 0 {
            p.push("lease.shadow_multiplier: must be at least 1".into());
        }
        let retained_max = usize::try_from(self.retained_max)
            .ok()
            .filter(|max| *max <= MAX_RETAINED_MAX);
        if retained_max.is_none() {
            let got = self.retained_max;
            p.push(format!(
                "lease.retained_max: must be at most {MAX_RETAINED_MAX} (got {got})"
            ));
        }
        LeaseSettings {
            min_ttl: Duration::from_millis(min),
            max_ttl: Duration::from_millis(max),
            rtt_multiplier: rtt,
            safety_margin: Duration::from_millis(self.safety_margin_ms),
            renew_fraction: self.renew_fraction,
            renew_jitter: Duration::from_millis(self.renew_jitter_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_idle_timeout: Duration::from_millis(self.max_idle_timeout_ms),
            max_wait: Duration::from_millis(self.max_wait_ms),
            shadow_multiplier: self.shadow_multiplier,
            retained_max: retained_max.unwrap_or(DEFAULT_RETAINED_MAX),
        }
    }

    /// `renew_fraction` in (0, 1), and a jitter that cannot push the renewal of the shortest
    /// lease past the point where it is due.
    fn validate_renewal(&self, p: &mut Vec<String>) {
        let fraction = self.renew_fraction;
        if !(fraction > 0.0 && fraction < 1.0) {
            let rule = "must be between 0 and 1, both excluded";
            p.push(format!("lease.renew_fraction: {rule} (got {fraction})"));
            return;
        }
        let renew_at = self.min_ttl_ms as f64 * fraction;
        if self.renew_jitter_ms as f64 >= renew_at {
            let rule = "must be less than lease.min_ttl_ms × lease.renew_fraction";
            p.push(format!("lease.renew_jitter_ms: {rule} ({renew_at})"));
        }
    }
}

/// `value` milliseconds, which must not be 0.
fn positive(key: &str, value: u64, p: &mut Vec<String>) -> Duration {
    if value == 0 {
        p.push(format!("{key}: must be greater than 0"));
    }
    Duration::from_millis(value)
}

#[cfg(test)]
mod tests;

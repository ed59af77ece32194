//! Unit tests of the configuration: layering, defaults and all-at-once validation.

use std::io::Write;
use std::time::Duration;

use super::*;

const ONE_MASTER: &[(&str, &str)] = &[("REDLEASE__MASTERS", "redis://127.0.0.1:6379")];

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn toml(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::load(None, env(pairs), Overrides::default())
}

fn problems(result: Result<Settings, ConfigError>) -> Vec<String> {
    match result.unwrap_err() {
        ConfigError::Invalid(lines) => lines,
        other => panic!("expected invalid settings, got {other}"),
    }
}

fn load_error(result: Result<Settings, ConfigError>) -> String {
    match result.unwrap_err() {
        ConfigError::Load(message) => message,
        other => panic!("expected a load error, got {other}"),
    }
}

/// One master and nothing else gives every documented default.
#[test]
fn one_master_and_nothing_else_gives_the_documented_defaults() {
    let s = load(ONE_MASTER).unwrap();
    assert_eq!(s.listen, Listen::Tcp("127.0.0.1:7600".parse().unwrap()));
    assert_eq!(s.http, HttpSettings::default());
    assert_eq!(s.masters, vec!["redis://127.0.0.1:6379".to_string()]);
    assert_eq!(s.key_prefix, "redlease:");
    assert_eq!(s.shutdown_grace, Duration::from_millis(5000));
    let lease = LeaseSettings {
        min_ttl: Duration::from_millis(500),
        max_ttl: Duration::from_millis(30_000),
        rtt_multiplier: 3.0,
        safety_margin: Duration::from_millis(200),
        renew_fraction: 0.5,
        renew_jitter: Duration::from_millis(100),
        idle_timeout: Duration::from_millis(15_000),
        max_idle_timeout: Duration::from_millis(300_000),
        max_wait: Duration::from_millis(60_000),
        shadow_multiplier: 10,
        retained_max: 50_000,
    };
    assert_eq!(s.lease, lease);
    let fleet = FleetSettings {
        connect_timeout: Duration::from_millis(2000),
        probe_period: Duration::from_millis(500),
        quarantine: Duration::from_millis(300_000),
        credentials: None,
        password_file: None,
        tls: crate::TlsOptions::default(),
    };
    assert_eq!(s.fleet, fleet);
}

/// A TOML file overrides the defaults, sections and top-level keys alike.
#[test]
fn a_toml_file_overrides_the_defaults() {
    let file = toml(
        "listen = \"0.0.0.0:9000\"\nmasters = [\"redis://a:1\", \"redis://b:2\", \"redis://c:3\"]\n\
         key_prefix = \"app:\"\n[lease]\nmin_ttl_ms = 1000\nrenew_fraction = 0.25\n\
         [fleet]\nquarantine_ms = 60000\n[shutdown]\ngrace_ms = 100\n",
    );
    let s = Settings::load(Some(file.path()), env(&[]), Overrides::default()).unwrap();
    assert_eq!(s.listen, Listen::Tcp("0.0.0.0:9000".parse().unwrap()));
    assert_eq!(s.masters, ["redis://a:1", "redis://b:2", "redis://c:3"]);
    assert_eq!(s.key_prefix, "app:");
    assert_eq!(s.lease.min_ttl, Duration::from_secs(1));
    assert_eq!(s.lease.renew_fraction, 0.25);
    assert_eq!(s.lease.max_ttl, DEFAULT_MAX_TTL);
    assert_eq!(s.fleet.quarantine, Duration::from_secs(60));
    assert_eq!(s.shutdown_grace, Duration::from_millis(100));
    assert_eq!(s.worker_threads, DEFAULT_WORKER_THREADS);
}

/// `runtime.worker_threads`: one by default, 0 (one per CPU) up to 256, nothing more.
#[test]
fn the_runtime_takes_one_thread_unless_told_otherwise() {
    let threads =
        |value: &str| load(&[ONE_MASTER[0], ("REDLEASE__RUNTIME__WORKER_THREADS", value)]);
    assert_eq!(load(ONE_MASTER).unwrap().worker_threads, 1);
    assert_eq!(threads("0").unwrap().worker_threads, 0);
    assert_eq!(threads("8").unwrap().worker_threads, 8);
    let refused = problems(threads("257"));
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].starts_with("runtime.worker_threads:"),
        "{refused:?}"
    );
}

/// `runtime.busy_poll_us` and `runtime.busy_poll_after_answer_us`: 100 µs by default on one
/// runtime thread and off on several, up to a millisecond, and only on one thread when set.
#[test]
fn busy_polling_windows_have_their_defaults_and_bounds() {
    const REQUEST: &str = "REDLEASE__RUNTIME__BUSY_POLL_US";
    const AFTER: &str = "REDLEASE__RUNTIME__BUSY_POLL_AFTER_ANSWER_US";
    const THREADS: &str = "REDLEASE__RUNTIME__WORKER_THREADS";
    let with = |vars: &[(&'static str, &'static str)]| {
        let mut all = vec![ONE_MASTER[0]];
        all.extend_from_slice(vars);
        load(&all)
    };
    let defaults = load(ONE_MASTER).unwrap();
    assert_eq!(defaults.busy_poll, DEFAULT_BUSY_POLL);
    assert_eq!(defaults.busy_poll_after_answer, DEFAULT_BUSY_POLL);
    for threads in ["0", "2"] {
        let several = with(&[(THREADS, threads)]).unwrap();
        assert_eq!(
            (several.busy_poll, several.busy_poll_after_answer),
            (Duration::ZERO, Duration::ZERO),
            "off by default on {threads}"
        );
    }
    for key in [REQUEST, AFTER] {
        let window = |value: &'static str| with(&[(key, value)]);
        let read = |s: Settings| {
            if key == REQUEST {
                s.busy_poll
            } else {
                s.busy_poll_after_answer
            }
        };
        assert_eq!(read(window("0").unwrap()), Duration::ZERO);
        assert_eq!(read(window("250").unwrap()), Duration::from_micros(250));
        assert_eq!(read(window("1000").unwrap()), MAX_BUSY_POLL);
        let refused = problems(window("1001"));
        assert_eq!(refused.len(), 1);
        assert!(refused[0].contains("must be at most 1000"), "{refused:?}");
        assert!(window("-1").is_err());
        // One runtime thread polls; with several, the one asleep holds the sockets.
        for threads in ["0", "2"] {
            let refused = problems(with(&[(key, "100"), (THREADS, threads)]));
            let name = key.trim_start_matches("REDLEASE__RUNTIME__").to_lowercase();
            assert_eq!(
                refused,
                [format!("runtime.{name}: needs runtime.worker_threads = 1")]
            );
            assert!(with(&[(key, "0"), (THREADS, threads)]).is_ok());
        }
        assert!(with(&[(key, "100"), (THREADS, "1")]).is_ok());
    }
}

/// An environment variable beats the file; keys the environment does not name keep the file's.
#[test]
fn env_vars_override_the_file() {
    let file = toml("masters = [\"redis://a:1\", \"redis://b:2\"]\n[lease]\nmin_ttl_ms = 1000\nmax_ttl_ms = 9000\n");
    let vars = env(&[
        ("REDLEASE__MASTERS", "redis://c:3"),
        ("REDLEASE__LEASE__MIN_TTL_MS", "2000"),
        ("REDLEASE__LEASE__RTT_MULTIPLIER", "4"),
    ]);
    let s = Settings::load(Some(file.path()), vars, Overrides::default()).unwrap();
    assert_eq!(s.masters, ["redis://c:3"]);
    assert_eq!(s.lease.min_ttl, Duration::from_secs(2));
    assert_eq!(s.lease.max_ttl, Duration::from_secs(9));
    assert_eq!(s.lease.rtt_multiplier, 4.0);
}

/// CLI flags beat the environment.
#[test]
fn overrides_beat_env_vars() {
    let vars = env(&[
        ("REDLEASE__MASTERS", "redis://a:1,redis://b:2"),
        ("REDLEASE__LISTEN", "127.0.0.1:1"),
    ]);
    let flags = Overrides {
        masters: Some(vec!["redis://z:9".into()]),
        listen: Some("[::1]:8000".into()),
    };
    let s = Settings::load(None, vars, flags).unwrap();
    assert_eq!(s.masters, ["redis://z:9"]);
    assert_eq!(s.listen, Listen::Tcp("[::1]:8000".parse().unwrap()));
}

/// A comma-separated `REDLEASE__MASTERS` gives one master per URL, spaces trimmed.
#[test]
fn comma_separated_masters_env_gives_one_master_per_url() {
    let s = load(&[("REDLEASE__MASTERS", "redis://a:1, redis://b:2")]).unwrap();
    assert_eq!(s.masters, ["redis://a:1", "redis://b:2"]);
}

/// A single URL in `REDLEASE__MASTERS` stays a string and becomes a one-element list.
#[test]
fn single_url_masters_env_gives_one_master() {
    let s = load(&[("REDLEASE__MASTERS", "redis://:pw@a:6379/0")]).unwrap();
    assert_eq!(s.masters, ["redis://:pw@a:6379/0"]);
}

/// String keys from the environment are kept verbatim: digits are not parsed as a number.
#[test]
fn numeric_looking_key_prefix_from_env_stays_verbatim() {
    let s = load(&[ONE_MASTER[0], ("REDLEASE__KEY_PREFIX", "0123")]).unwrap();
    assert_eq!(s.key_prefix, "0123");
}

/// Variables without the `REDLEASE__` prefix are ignored, even ones that look alike.
#[test]
fn variables_without_the_prefix_are_ignored() {
    let s = load(&[ONE_MASTER[0], ("REDLEASE_LISTEN", "x"), ("PATH", "/bin")]).unwrap();
    assert_eq!(s.listen, Listen::Tcp(DEFAULT_LISTEN));
}

/// Several invalid keys are all reported in one error, one "key: message" line each.
#[test]
fn every_invalid_key_is_reported_at_once() {
    let lines = problems(load(&[
        ("REDLEASE__LEASE__MIN_TTL_MS", "5"),
        ("REDLEASE__LEASE__RENEW_FRACTION", "1.5"),
        ("REDLEASE__LISTEN", "nope"),
        ("REDLEASE__SHUTDOWN__GRACE_MS", "0"),
    ]));
    let keys: Vec<&str> = lines.iter().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "listen",
            "masters",
            "lease.min_ttl_ms",
            "lease.renew_fraction",
            "shutdown.grace_ms"
        ],
        "{lines:#?}"
    );
}

/// Cross-key rules name the other key and its value.
#[test]
fn cross_key_rules_name_the_other_key() {
    let lines = problems(load(&[
        ONE_MASTER[0],
        ("REDLEASE__LEASE__MAX_TTL_MS", "400"),
        ("REDLEASE__LEASE__RENEW_JITTER_MS", "250"),
    ]));
    assert_eq!(
        lines,
        [
            "lease.max_ttl_ms: must be at least lease.min_ttl_ms (500)",
            "lease.renew_jitter_ms: must be less than lease.min_ttl_ms × lease.renew_fraction (250)",
        ]
    );
    let lines = problems(load(&[
        ONE_MASTER[0],
        ("REDLEASE__FLEET__QUARANTINE_MS", "1000"),
    ]));
    assert_eq!(
        lines,
        ["lease.max_ttl_ms: must be at most fleet.quarantine_ms (1000)"]
    );
}

/// The displayed error starts with a summary line and lists each problem on its own line.
#[test]
fn invalid_error_displays_one_problem_per_line() {
    let err = load(&[("REDLEASE__KEY_PREFIX", "")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration:\nmasters: at least one redis:// URL is required\nkey_prefix: must not be empty"
    );
}

/// A misspelled key in the file is an error, not a silently ignored default.
#[test]
fn unknown_key_in_file_is_an_error() {
    let file = toml("masters = [\"redis://a:1\"]\n[lease]\nmin_tll_ms = 1000\n");
    let lines = problems(Settings::load(
        Some(file.path()),
        env(&[]),
        Overrides::default(),
    ));
    let expected = format!(
        "lease.min_tll_ms: unknown key (in {}); did you mean lease.min_ttl_ms?",
        file.path().display()
    );
    assert_eq!(lines, [expected]);
}

/// A misspelled `REDLEASE__` variable is an error too.
#[test]
fn unknown_env_var_is_an_error() {
    let lines = problems(load(&[ONE_MASTER[0], ("REDLEASE__LEASE__TTL_MS", "1")]));
    assert_eq!(
        lines,
        ["lease.ttl_ms: unknown key (from REDLEASE__LEASE__TTL_MS); did you mean lease.max_ttl_ms?"]
    );
}

/// Every unknown key of the file and of the environment is reported at once, each with its
/// full dotted path, where it came from and the known key it most likely meant; known keys
/// beside them are not.
#[test]
fn every_unknown_key_is_reported_with_its_path_source_and_suggestion() {
    let file = toml(
        "masters = [\"redis://a:1\"]\nlisen = \"127.0.0.1:1\"\n[lease]\nmin_ttl_ms = 900\n\
         renew_fracton = 0.4\n[fleet.tls]\nca_fil = \"/ca.pem\"\n",
    );
    let vars = env(&[
        ("REDLEASE__RENEWAL__JITER", "5"),
        ("REDLEASE__HTTP__MAX_CONECTIONS", "10"),
        ("REDLEASE__HTTP__MAX_WAITERS", "10"),
        ("REDLEASE__COLOUR", "blue"),
    ]);
    let lines = problems(Settings::load(
        Some(file.path()),
        vars,
        Overrides::default(),
    ));
    let path = file.path().display();
    assert_eq!(
        lines,
        [
            format!("fleet.tls.ca_fil: unknown key (in {path}); did you mean fleet.tls.ca_file?"),
            format!("lease.renew_fracton: unknown key (in {path}); did you mean lease.renew_fraction?"),
            format!("lisen: unknown key (in {path}); did you mean listen?"),
            "renewal.jiter: unknown key (from REDLEASE__RENEWAL__JITER); did you mean lease.renew_jitter_ms?".to_string(),
            "http.max_conections: unknown key (from REDLEASE__HTTP__MAX_CONECTIONS); did you mean http.max_connections?".to_string(),
            "colour: unknown key (from REDLEASE__COLOUR)".to_string(),
        ]
    );
}

/// A value of the wrong type is a load error that names the key.
#[test]
fn wrong_type_is_a_load_error_naming_the_key() {
    let message = load_error(load(&[
        ONE_MASTER[0],
        ("REDLEASE__LEASE__MIN_TTL_MS", "soon"),
    ]));
    assert!(message.contains("lease.min_ttl_ms"), "{message}");
}

/// A named file that does not exist is an error.
#[test]
fn missing_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    load_error(Settings::load(
        Some(&path),
        env(ONE_MASTER),
        Overrides::default(),
    ));
}

/// A master listed twice would vote twice, so it is refused; passwords are masked in the line.
#[test]
fn repeated_master_is_refused_without_showing_its_password() {
    let lines = problems(load(&[(
        "REDLEASE__MASTERS",
        "redis://:pw@a:1,redis://:pw@a:1",
    )]));
    assert_eq!(
        lines,
        ["masters[1]: same master as masters[0]: redis://:***@a:1"]
    );
}

/// Debug output of settings does not show master passwords.
#[test]
fn debug_output_masks_master_passwords() {
    let s = load(&[("REDLEASE__MASTERS", "redis://u:secret@a:1")]).unwrap();
    let shown = format!("{s:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("redis://u:***@a:1"), "{shown}");
}

/// The library options carry the configured prefix, timeouts, quarantine and max TTL.
#[test]
fn library_options_carry_the_settings() {
    let s = load(&[
        ONE_MASTER[0],
        ("REDLEASE__KEY_PREFIX", "x:"),
        ("REDLEASE__FLEET__CONNECT_TIMEOUT_MS", "750"),
        ("REDLEASE__FLEET__QUARANTINE_MS", "90000"),
        ("REDLEASE__LEASE__MAX_TTL_MS", "20000"),
    ])
    .unwrap();
    let fleet = s.fleet_options();
    assert_eq!(fleet.keyspace.prefix(), "x:");
    assert_eq!(fleet.connect_timeout, Duration::from_millis(750));
    assert_eq!(fleet.quarantine, Duration::from_secs(90));
    assert_eq!(
        fleet.breaker_trial_interval,
        FleetOptions::default().breaker_trial_interval
    );
    let engine = s.engine_options();
    assert_eq!(engine.max_ttl, Duration::from_secs(20));
    assert_eq!(engine.min_ttl, EngineOptions::default().min_ttl);
}

/// The `http.*` defaults are the documented ones.
#[test]
fn http_defaults_are_the_documented_ones() {
    let http = HttpSettings::default();
    assert_eq!(
        (
            http.max_connections,
            http.max_event_streams,
            http.max_waiters
        ),
        (1024, 512, 256)
    );
    let loaded = load(ONE_MASTER).unwrap();
    assert_eq!(loaded.http, http);
    assert_eq!(http.header_read_timeout, Duration::from_millis(5000));
    assert_eq!(http.idle_timeout, Duration::from_millis(60_000));
    assert!(http.allowed_hosts.is_empty());
}

/// `unix:/path` listens on a Unix socket, shown back in the same form.
#[test]
fn unix_listen_names_a_socket_path() {
    let s = load(&[
        ONE_MASTER[0],
        ("REDLEASE__LISTEN", "unix:/run/redlease/api.sock"),
    ])
    .unwrap();
    assert_eq!(s.listen, Listen::Unix("/run/redlease/api.sock".into()));
    assert_eq!(s.listen.to_string(), "unix:/run/redlease/api.sock");
    let long = format!("unix:/{}", "x".repeat(107));
    for (listen, says) in [
        ("unix:", "needs a socket path"),
        (long.as_str(), "at most 107 bytes"),
        ("localhost:80", "expected ip:port or unix:/path"),
    ] {
        let lines = problems(load(&[ONE_MASTER[0], ("REDLEASE__LISTEN", listen)]));
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("listen: ") && lines[0].contains(says),
            "{lines:?}"
        );
    }
}

/// `http.*` from the environment: a comma-separated host list, lowercased, a trailing dot and
/// empty entries dropped; counts and timeouts as numbers.
#[test]
fn http_settings_come_from_the_environment() {
    let s = load(&[
        ONE_MASTER[0],
        (
            "REDLEASE__HTTP__ALLOWED_HOSTS",
            "Sidecar.Internal, api.example.,",
        ),
        ("REDLEASE__HTTP__MAX_CONNECTIONS", "8"),
        ("REDLEASE__HTTP__MAX_EVENT_STREAMS", "2"),
        ("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "300"),
        ("REDLEASE__HTTP__IDLE_TIMEOUT_MS", "700"),
    ])
    .unwrap();
    let http = HttpSettings {
        max_connections: 8,
        max_event_streams: 2,
        max_waiters: 2,
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_millis(700),
        allowed_hosts: vec!["sidecar.internal".into(), "api.example".into()],
    };
    assert_eq!(s.http, http);
    let one = load(&[ONE_MASTER[0], ("REDLEASE__HTTP__ALLOWED_HOSTS", "box")]).unwrap();
    assert_eq!(one.http.allowed_hosts, ["box"]);
    let none = load(&[ONE_MASTER[0], ("REDLEASE__HTTP__ALLOWED_HOSTS", "")]).unwrap();
    assert!(none.http.allowed_hosts.is_empty());
}

/// `http.max_waiters` is a quarter of `http.max_connections` unless given, and may be at most
/// half of it: holders always find connections left.
#[test]
fn max_waiters_leave_connections_for_holders() {
    let given = |conns: &str, waiters: &str| {
        load(&[
            ONE_MASTER[0],
            ("REDLEASE__HTTP__MAX_CONNECTIONS", conns),
            ("REDLEASE__HTTP__MAX_WAITERS", waiters),
        ])
    };
    let derived = load(&[ONE_MASTER[0], ("REDLEASE__HTTP__MAX_CONNECTIONS", "4096")]);
    assert_eq!(derived.unwrap().http.max_waiters, 1024);
    assert_eq!(given("4096", "2048").unwrap().http.max_waiters, 2048);
    assert_eq!(given("4096", "0").unwrap().http.max_waiters, 0);
    let lines = problems(given("4096", "2049"));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0]
            .starts_with("http.max_waiters: must be at most half of http.max_connections (2048)"),
        "{lines:?}"
    );
    let lines = problems(given("99999999999", "1"));
    assert_eq!(lines, ["http.max_connections: must be at most 1048576"]);
}

/// Zero counts and timeouts and host entries that are not names are each reported.
#[test]
fn invalid_http_settings_are_each_reported() {
    let lines = problems(load(&[
        ONE_MASTER[0],
        (
            "REDLEASE__HTTP__ALLOWED_HOSTS",
            "ok.example,evil.example:80,a b",
        ),
        ("REDLEASE__HTTP__MAX_CONNECTIONS", "0"),
        ("REDLEASE__HTTP__MAX_EVENT_STREAMS", "0"),
        ("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "0"),
        ("REDLEASE__HTTP__IDLE_TIMEOUT_MS", "0"),
    ]));
    let keys: Vec<&str> = lines.iter().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "http.allowed_hosts[1]",
            "http.allowed_hosts[2]",
            "http.max_connections",
            "http.max_event_streams",
            "http.header_read_timeout_ms",
            "http.idle_timeout_ms",
        ],
        "{lines:#?}"
    );
}

/// `lease.retained_max` is taken as given up to its ceiling, and refused above it.
#[test]
fn retained_max_is_bounded() {
    let s = load(&[ONE_MASTER[0], ("REDLEASE__LEASE__RETAINED_MAX", "0")]).unwrap();
    assert_eq!(s.lease.retained_max, 0);
    assert_eq!(s.lease_policy().retained_max, 0);
    let lines = problems(load(&[
        ONE_MASTER[0],
        ("REDLEASE__LEASE__RETAINED_MAX", "10000001"),
    ]));
    assert_eq!(
        lines,
        ["lease.retained_max: must be at most 10000000 (got 10000001)"]
    );
}

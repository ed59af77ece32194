//! The `listen`, `http.*` and `auth.*` settings: where the API listens, how much a client may
//! hold of it (connections, event streams, blocking acquisitions), and how callers prove who
//! they are; their raw form, defaults and validation.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ::config::builder::DefaultState;
use ::config::ConfigBuilder;
use serde::Deserialize;

use super::{ms, positive};

/// Address the HTTP API binds.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 7600));
/// Connections open at once; the next one is answered 429 and closed.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Event streams open at once; the next one is answered 429.
pub const DEFAULT_MAX_EVENT_STREAMS: usize = 512;
/// Blocking acquisitions in progress at once, when `http.max_waiters` is not given: this
/// share of `http.max_connections` (a quarter; 256 of the default 1024).
pub const DEFAULT_WAITERS_SHARE: usize = 4;
/// `http.max_waiters` may be at most this share of `http.max_connections` (half), so that
/// holders always find connections for their renewals, keepalives and releases.
pub const MAX_WAITERS_SHARE: usize = 2;
/// Largest count a connection, stream or waiter cap may take (the kernel's default ceiling on
/// open files, `fs.nr_open`).
const MAX_COUNT: u64 = 1 << 20;
/// Time a client has to send a request's head once it began, and then its body.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection with no request in flight and nothing arriving for this long is closed.
pub const DEFAULT_HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest path a Unix socket address holds (`sun_path` less its closing NUL).
const MAX_UNIX_PATH: usize = 107;

/// Where the API listens: `ip:port`, or `unix:/path` for a Unix domain socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// `ip:port`.
    Tcp(SocketAddr),
    /// `unix:/path`.
    Unix(PathBuf),
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp(addr) => addr.fmt(f),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// How the HTTP server treats its clients (the `http.*` keys).
#[derive(Clone, Debug, PartialEq)]
pub struct HttpSettings {
    /// Key `http.max_connections`: connections open at once (at least 1).
    pub max_connections: usize,
    /// Key `http.max_event_streams`: event streams open at once (at least 1).
    pub max_event_streams: usize,
    /// Key `http.max_waiters`: blocking acquisitions (`wait_ms` > 0) in progress at once; at
    /// most half of `max_connections`, a quarter by default.
    pub max_waiters: usize,
    /// Key `http.header_read_timeout_ms`: a request's head must arrive within this once its
    /// first byte came, and its body within this once the head was read.
    pub header_read_timeout: Duration,
    /// Key `http.idle_timeout_ms`: a connection with no request in flight and nothing
    /// arriving for this long is closed.
    pub idle_timeout: Duration,
    /// Key `http.allowed_hosts`: names a `Host` header may carry besides IP literals and
    /// `localhost` (lowercase, no port).
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
            max_waiters: default_max_waiters(DEFAULT_MAX_CONNECTIONS),
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_HTTP_IDLE_TIMEOUT,
            allowed_hosts: Vec::new(),
        }
    }
}

/// Who may call the API.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthSettings {
    /// Key `auth.token_file`: a file holding the bearer token every request but `/livez` and
    /// `/readyz` must carry (re-read on SIGHUP); `None`: no token asked.
    pub token_file: Option<std::path::PathBuf>,
    /// Key `auth.metrics_open`: `/metrics` answers without the token.
    pub metrics_open: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    pub(super) token_file: String,
    pub(super) metrics_open: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    max_connections: u64,
    max_event_streams: u64,
    /// `None`: a share of `max_connections`.
    max_waiters: Option<u64>,
    header_read_timeout_ms: u64,
    idle_timeout_ms: u64,
    allowed_hosts: Vec<String>,
}

/// The defaults of `listen`, `http.*` and `auth.*`, in their raw form: the values of
/// `HttpSettings::default()` and `AuthSettings::default()`, so each default is written once
/// (`http.max_waiters` has none: left out, it is a share of `http.max_connections`).
pub(super) fn defaults(
    b: ConfigBuilder<DefaultState>,
) -> Result<ConfigBuilder<DefaultState>, ::config::ConfigError> {
    let (http, auth) = (HttpSettings::default(), AuthSettings::default());
    // No token file is the empty path.
    let token_file = auth.token_file.map(|file| file.display().to_string());
    b.set_default("listen", DEFAULT_LISTEN.to_string())?
        .set_default("http.max_connections", http.max_connections as u64)?
        .set_default("http.max_event_streams", http.max_event_streams as u64)?
        .set_default("http.header_read_timeout_ms", ms(http.header_read_timeout))?
        .set_default("http.idle_timeout_ms", ms(http.idle_timeout))?
        .set_default("http.allowed_hosts", http.allowed_hosts)?
        .set_default("auth.token_file", token_file.unwrap_or_default())?
        .set_default("auth.metrics_open", auth.metrics_open)
}

/// The `listen` address (`ip:port` or `unix:/path`), with a problem pushed onto `p` when it is
/// neither.
pub(super) fn validate_listen(listen: &str, p: &mut Vec<String>) -> Option<Listen> {
    if let Some(path) = listen.strip_prefix("unix:") {
        if path.is_empty() {
            p.push("listen: unix: needs a socket path, as in unix:/run/redlease/api.sock".into());
            return None;
        }
        if path.len() > MAX_UNIX_PATH {
            let rule = format!("a Unix socket path holds at most {MAX_UNIX_PATH} bytes");
            p.push(format!("listen: {rule}, got {} in {path:?}", path.len()));
            return None;
        }
        return Some(Listen::Unix(PathBuf::from(path)));
    }
    let parsed = listen.parse::<SocketAddr>().ok().map(Listen::Tcp);
    if parsed.is_none() {
        p.push(format!(
            "listen: expected ip:port or unix:/path, got {listen:?}"
        ));
    }
    parsed
}

impl RawHttp {
    /// The `http.*` settings, with problems pushed onto `p`.
    pub(super) fn validate(self, p: &mut Vec<String>) -> HttpSettings {
        let count = |key: &str, value: u64, p: &mut Vec<String>| {
            if value == 0 {
                p.push(format!("{key}: must be at least 1"));
            }
            if value > MAX_COUNT {
                p.push(format!("{key}: must be at most {MAX_COUNT}"));
            }
            usize::try_from(value.min(MAX_COUNT)).unwrap_or(usize::MAX)
        };
        let mut allowed_hosts = Vec::new();
        for (i, name) in self.allowed_hosts.iter().enumerate() {
            let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
            if name.is_empty() {
                continue; // an empty variable, or a trailing comma
            }
            if !is_host_name(&name) {
                let rule = "expected a DNS name (letters, digits, '-' and '.'; no port)";
                p.push(format!("http.allowed_hosts[{i}]: {rule}, got {name:?}"));
            }
            allowed_hosts.push(name);
        }
        let max_connections = count("http.max_connections", self.max_connections, p);
        HttpSettings {
            max_connections,
            max_event_streams: count("http.max_event_streams", self.max_event_streams, p),
            max_waiters: max_waiters(self.max_waiters, max_connections, p),
            header_read_timeout: positive(
                "http.header_read_timeout_ms",
                self.header_read_timeout_ms,
                p,
            ),
            idle_timeout: positive("http.idle_timeout_ms", self.idle_timeout_ms, p),
            allowed_hosts,
        }
    }
}

/// `http.max_waiters`: given, at most half of `max_connections`; else a quarter of it.
fn max_waiters(given: Option<u64>, max_connections: usize, p: &mut Vec<String>) -> usize {
    let Some(given) = given else {
        return default_max_waiters(max_connections);
    };
    let most = max_connections / MAX_WAITERS_SHARE;
    if given > most as u64 {
        let rule = format!(
            "must be at most half of http.max_connections ({most}), so that holders always \
             find connections for renewals, keepalives and releases; got {given}"
        );
        p.push(format!("http.max_waiters: {rule}"));
    }
    usize::try_from(given.min(most as u64)).unwrap_or(most)
}

/// `http.max_waiters` when it is not given: a share of `max_connections`.
fn default_max_waiters(max_connections: usize) -> usize {
    max_connections / DEFAULT_WAITERS_SHARE
}

/// Labels of letters, digits and '-', separated by dots, 253 bytes at most.
fn is_host_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

impl RawAuth {
    /// The `auth.*` settings; the token file must be readable and hold one word.
    pub(super) fn validate(self, p: &mut Vec<String>) -> AuthSettings {
        AuthSettings {
            token_file: token_file("auth.token_file", &self.token_file, p),
            metrics_open: self.metrics_open,
        }
    }
}

/// The token file of the key `key` (`raw` empty: none), with a problem pushed onto `p` when
/// it cannot be read or does not hold one word.
pub(super) fn token_file(key: &str, raw: &str, p: &mut Vec<String>) -> Option<std::path::PathBuf> {
    let file = (!raw.is_empty()).then(|| std::path::PathBuf::from(raw))?;
    if let Err(problem) = read_token(&file) {
        p.push(format!("{key}: {problem}"));
    }
    Some(file)
}

/// The bearer token in `file`: its content less surrounding whitespace (a trailing newline
/// included); an error naming the file when it cannot be read or holds nothing.
pub fn read_token(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|error| format!("cannot read {}: {error}", file.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("{} holds no token", file.display()));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{}: the token must be one word", file.display()));
    }
    Ok(token.to_string())
}

//! The `masters` and `fleet.*` settings: their raw form, defaults and validation, including
//! the credentials (`fleet.username`, `fleet.password_file`) and TLS (`fleet.tls.*`) used for
//! every master. The password is read when the settings are loaded and never shown.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ::config::builder::DefaultState;
use ::config::ConfigBuilder;
use serde::Deserialize;

use super::{ms, positive};
use crate::fleet::{mask_credentials, uses_tls};
use crate::fleet::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_PROBE_PERIOD, DEFAULT_QUARANTINE};
use crate::{Credentials, Password, TlsOptions};

/// The masters: start-up, health probing and restart quarantine.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    /// How long start-up waits for each master.
    pub connect_timeout: Duration,
    /// How often every master is PINGed.
    pub probe_period: Duration,
    /// How long a restarted master takes no votes.
    pub quarantine: Duration,
    /// Keys `fleet.username` and `fleet.password_file` (the password as read from the file at
    /// load): how redlease authenticates on every master whose URL carries no credentials.
    pub credentials: Option<Credentials>,
    /// Key `fleet.password_file`, for messages (never its content).
    pub password_file: Option<PathBuf>,
    /// Keys `fleet.tls.ca_file`, `fleet.tls.cert_file` and `fleet.tls.key_file`: how
    /// `rediss://` masters are spoken to.
    pub tls: TlsOptions,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    pub(super) connect_timeout_ms: u64,
    pub(super) probe_interval_ms: u64,
    pub(super) quarantine_ms: u64,
    username: String,
    password_file: String,
    tls: RawTls,
}

/// `fleet.tls.*`: paths, empty when not set.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca_file: String,
    cert_file: String,
    key_file: String,
}

/// The defaults of `masters` and `fleet.*`. `masters` defaults to empty so that its absence is
/// reported together with every other problem.
pub(super) fn defaults(
    b: ConfigBuilder<DefaultState>,
) -> Result<ConfigBuilder<DefaultState>, ::config::ConfigError> {
    b.set_default("masters", Vec::<String>::new())?
        .set_default("fleet.connect_timeout_ms", ms(DEFAULT_CONNECT_TIMEOUT))?
        .set_default("fleet.probe_interval_ms", ms(DEFAULT_PROBE_PERIOD))?
        .set_default("fleet.quarantine_ms", ms(DEFAULT_QUARANTINE))?
        .set_default("fleet.username", "")?
        .set_default("fleet.password_file", "")?
        .set_default("fleet.tls.ca_file", "")?
        .set_default("fleet.tls.cert_file", "")?
        .set_default("fleet.tls.key_file", "")
}

impl RawFleet {
    /// The `fleet.*` settings, with problems pushed onto `p`; reads the password file.
    pub(super) fn validate(&self, p: &mut Vec<String>) -> FleetSettings {
        let path = |value: &str| (!value.is_empty()).then(|| PathBuf::from(value));
        let password_file = path(&self.password_file);
        let password = password_file.as_deref().and_then(|file| {
            read_password(file)
                .map_err(|problem| p.push(format!("fleet.password_file: {problem}")))
                .ok()
        });
        if !self.username.is_empty() && password_file.is_none() {
            p.push("fleet.username: needs fleet.password_file".into());
        }
        let username = (!self.username.is_empty()).then(|| self.username.clone());
        let tls = TlsOptions {
            ca_file: path(&self.tls.ca_file),
            cert_file: path(&self.tls.cert_file),
            key_file: path(&self.tls.key_file),
        };
        FleetSettings {
            connect_timeout: positive("fleet.connect_timeout_ms", self.connect_timeout_ms, p),
            probe_period: positive("fleet.probe_interval_ms", self.probe_interval_ms, p),
            quarantine: Duration::from_millis(self.quarantine_ms),
            credentials: password.map(|password| Credentials { username, password }),
            password_file,
            tls,
        }
    }
}

/// The password in `file`, less a trailing newline; an error naming the file (never quoting
/// it) when it cannot be read, holds nothing, or holds more than one line.
pub fn read_password(file: &Path) -> Result<Password, String> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        return Err(format!("{shown} holds no password"));
    }
    if password.contains(['\n', '\r']) {
        return Err(format!("{shown}: the password must be one line"));
    }
    Ok(Password::new(password))
}

/// The rules between `masters` and `fleet.*`: no URL carries credentials while
/// `fleet.password_file` is set (one master's password must not come from two places), and
/// `fleet.tls.*` needs a `rediss://` master and files that make a TLS configuration.
pub(super) fn check_against_masters(
    fleet: &FleetSettings,
    masters: &[String],
    p: &mut Vec<String>,
) {
    if fleet.password_file.is_some() {
        for (i, url) in masters.iter().enumerate() {
            if mask_credentials(url) != *url {
                let rule = "carries credentials while fleet.password_file is set";
                p.push(format!("masters[{i}]: {rule}: {}", mask_credentials(url)));
            }
        }
    }
    let tls = &fleet.tls;
    if !tls.is_set() {
        return;
    }
    if !masters.iter().any(|url| uses_tls(url)) {
        p.push("fleet.tls: set, but no master is a rediss:// URL".into());
        return;
    }
    match (&tls.cert_file, &tls.key_file) {
        (Some(_), None) => p.push("fleet.tls.cert_file: needs fleet.tls.key_file".into()),
        (None, Some(_)) => p.push("fleet.tls.key_file: needs fleet.tls.cert_file".into()),
        _ => {
            if let Err(problem) = tls.client_config() {
                p.push(format!("fleet.tls.{problem}"));
            }
        }
    }
}

/// At least one master, each a `redis://` or `rediss://` URL (surrounding spaces trimmed),
/// none repeated: a master listed twice would cast two votes. Messages show URLs with the
/// password masked.
pub(super) fn check_masters(masters: Vec<String>, p: &mut Vec<String>) -> Vec<String> {
    if masters.is_empty() {
        p.push("masters: at least one redis:// URL is required".into());
    }
    let masters: Vec<String> = masters.into_iter().map(|m| m.trim().to_owned()).collect();
    for (i, url) in masters.iter().enumerate() {
        let shown = mask_credentials(url);
        if !url.starts_with("redis://") && !uses_tls(url) {
            let rule = format!("expected a redis:// or rediss:// URL, got {shown:?}");
            p.push(format!("masters[{i}]: {rule}"));
        } else if let Some(first) = masters[..i].iter().position(|m| m == url) {
            let rule = format!("same master as masters[{first}]: {shown}");
            p.push(format!("masters[{i}]: {rule}"));
        }
    }
    masters
}

#[cfg(test)]
mod tests;

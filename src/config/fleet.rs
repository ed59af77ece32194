//! The `masters` and `fleet.*` settings: their raw form, defaults and validation.

use std::time::Duration;

use ::config::builder::DefaultState;
use ::config::ConfigBuilder;
use serde::Deserialize;

use super::{ms, positive};
use crate::fleet::mask_credentials;
use crate::fleet::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_PROBE_PERIOD, DEFAULT_QUARANTINE};

/// The masters: start-up, health probing and restart quarantine.
#[derive(Clone, Debug, PartialEq)]
pub struct FleetSettings {
    /// How long start-up waits for each master.
    pub connect_timeout: Duration,
    /// How often every master is PINGed.
    pub probe_period: Duration,
    /// How long a restarted master takes no votes.
    pub quarantine: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleet {
    pub(super) connect_timeout_ms: u64,
    pub(super) probe_interval_ms: u64,
    pub(super) quarantine_ms: u64,
}

/// The defaults of `masters` and `fleet.*`. `masters` defaults to empty so that its absence is
/// reported together with every other problem.
pub(super) fn defaults(
    b: ConfigBuilder<DefaultState>,
) -> Result<ConfigBuilder<DefaultState>, ::config::ConfigError> {
    b.set_default("masters", Vec::<String>::new())?
        .set_default("fleet.connect_timeout_ms", ms(DEFAULT_CONNECT_TIMEOUT))?
        .set_default("fleet.probe_interval_ms", ms(DEFAULT_PROBE_PERIOD))?
        .set_default("fleet.quarantine_ms", ms(DEFAULT_QUARANTINE))
}

impl RawFleet {
    /// The `fleet.*` settings, with problems pushed onto `p`.
    pub(super) fn validate(&self, p: &mut Vec<String>) -> FleetSettings {
        FleetSettings {
            connect_timeout: positive("fleet.connect_timeout_ms", self.connect_timeout_ms, p),
            probe_period: positive("fleet.probe_interval_ms", self.probe_interval_ms, p),
            quarantine: Duration::from_millis(self.quarantine_ms),
        }
    }
}

/// At least one master, each a `redis://` URL (surrounding spaces trimmed), none repeated: a
/// master listed twice would cast two votes. Messages show URLs with the password masked.
pub(super) fn check_masters(masters: Vec<String>, p: &mut Vec<String>) -> Vec<String> {
    if masters.is_empty() {
        p.push("masters: at least one redis:// URL is required".into());
    }
    let masters: Vec<String> = masters.into_iter().map(|m| m.trim().to_owned()).collect();
    for (i, url) in masters.iter().enumerate() {
        let shown = mask_credentials(url);
        if url.starts_with("rediss://") {
            let rule = "TLS (rediss://) is not built into this release";
            p.push(format!("masters[{i}]: {rule}: {shown}"));
        } else if !url.starts_with("redis://") {
            let rule = format!("expected a redis:// URL, got {shown:?}");
            p.push(format!("masters[{i}]: {rule}"));
        } else if let Some(first) = masters[..i].iter().position(|m| m == url) {
            let rule = format!("same master as masters[{first}]: {shown}");
            p.push(format!("masters[{i}]: {rule}"));
        }
    }
    masters
}

//! The `metrics.*` settings: an optional listener of its own for `GET /metrics` (for a
//! scraper that cannot reach the API's listener, such as Prometheus outside the pod when the
//! API is on loopback) and its own optional bearer token; their raw form, defaults and
//! validation.

use std::net::SocketAddr;
use std::path::PathBuf;

use ::config::builder::DefaultState;
use ::config::ConfigBuilder;
use serde::Deserialize;

use super::server::{token_file, Listen};

/// Where metrics are served besides the API listener, and who may read them there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSettings {
    /// Key `metrics.listen`: `ip:port` of a listener that serves only `GET /metrics`;
    /// `None` (the default): no such listener, `/metrics` is on the API listener only.
    pub listen: Option<SocketAddr>,
    /// Key `metrics.token_file`: a file holding the bearer token the metrics listener asks
    /// for (read again on SIGHUP); `None`: that listener answers without one.
    pub token_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    /// Empty: no metrics listener.
    listen: String,
    /// Empty: no token.
    token_file: String,
}

/// The defaults of `metrics.*` in their raw form: no listener, no token (empty strings).
pub(super) fn defaults(
    b: ConfigBuilder<DefaultState>,
) -> Result<ConfigBuilder<DefaultState>, ::config::ConfigError> {
    b.set_default("metrics.listen", "")?
        .set_default("metrics.token_file", "")
}

impl RawMetrics {
    /// The `metrics.*` settings, with problems pushed onto `p`; `api` is the API's listener,
    /// which the metrics listener must not take.
    pub(super) fn validate(self, api: Option<&Listen>, p: &mut Vec<String>) -> MetricsSettings {
        let listen = self.listen.trim();
        let listen = match listen {
            "" => None,
            text => match text.parse::<SocketAddr>() {
                Ok(addr) => Some(addr),
                Err(_) => {
                    let rule = "expected ip:port (as in 0.0.0.0:9600), or empty for none";
                    p.push(format!("metrics.listen: {rule}, got {text:?}"));
                    None
                }
            },
        };
        if let (Some(addr), Some(Listen::Tcp(api))) = (listen, api) {
            if addr.port() != 0 && addr.port() == api.port() && overlaps(addr, *api) {
                let rule = format!("must not be the API's address (listen = {api})");
                p.push(format!("metrics.listen: {rule}, got {addr}"));
            }
        }
        let has_token = !self.token_file.is_empty();
        let token_file = if has_token && self.listen.trim().is_empty() {
            let rule = "needs metrics.listen (/metrics on the API listener follows auth.*)";
            p.push(format!("metrics.token_file: {rule}"));
            Some(PathBuf::from(&self.token_file))
        } else {
            token_file("metrics.token_file", &self.token_file, p)
        };
        MetricsSettings { listen, token_file }
    }
}

/// Whether two addresses of one port would collide: the same IP, or either unspecified.
fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::super::{ConfigError, Overrides, Settings};
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let mut env = vec![("REDLEASE__MASTERS", "redis://127.0.0.1:6379")];
        env.extend_from_slice(pairs);
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Settings::load(None, env, Overrides::default())
    }

    fn problems(pairs: &[(&str, &str)]) -> Vec<String> {
        match load(pairs).unwrap_err() {
            ConfigError::Invalid(lines) => lines,
            other => panic!("expected invalid settings, got {other}"),
        }
    }

    /// Unset, there is no metrics listener and no token; set, both come from their variables.
    #[test]
    fn metrics_listener_is_off_unless_set() {
        assert_eq!(load(&[]).unwrap().metrics, MetricsSettings::default());
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"m3trics\n").unwrap();
        let path = file.path().to_str().unwrap();
        let s = load(&[
            ("REDLEASE__METRICS__LISTEN", "0.0.0.0:9600"),
            ("REDLEASE__METRICS__TOKEN_FILE", path),
        ])
        .unwrap();
        assert_eq!(s.metrics.listen, Some("0.0.0.0:9600".parse().unwrap()));
        assert_eq!(s.metrics.token_file.as_deref(), Some(file.path()));
    }

    /// A bad address, the API's own address, and a token without a listener or without a
    /// readable file are configuration errors naming the key.
    #[test]
    fn bad_metrics_settings_name_their_key() {
        for listen in ["9600", "localhost:9600", "unix:/tmp/m.sock", "0.0.0.0"] {
            let found = problems(&[("REDLEASE__METRICS__LISTEN", listen)]);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(
                found[0].starts_with("metrics.listen: expected ip:port"),
                "{found:?}"
            );
        }
        for listen in ["127.0.0.1:7600", "0.0.0.0:7600"] {
            let found = problems(&[("REDLEASE__METRICS__LISTEN", listen)]);
            assert!(
                found[0].contains("must not be the API's address"),
                "{found:?}"
            );
        }
        assert!(load(&[("REDLEASE__METRICS__LISTEN", "127.0.0.2:7600")]).is_ok());
        let found = problems(&[("REDLEASE__METRICS__TOKEN_FILE", "/nonexistent/token")]);
        assert!(
            found[0].starts_with("metrics.token_file: needs metrics.listen"),
            "{found:?}"
        );
        let found = problems(&[
            ("REDLEASE__METRICS__LISTEN", "127.0.0.1:9600"),
            ("REDLEASE__METRICS__TOKEN_FILE", "/nonexistent/token"),
        ]);
        assert!(
            found[0].starts_with("metrics.token_file: cannot read"),
            "{found:?}"
        );
    }
}

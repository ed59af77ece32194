//! A master's URL made into its connections: the fred client (preparation, wake-ups) and the
//! lock connection's [`wire::Target`], both with the same host, credentials, database and TLS;
//! and the masked form of a URL, the only one that reaches logs, errors and the fleet view.
//!
//! `redis://` masters are plain TCP, `rediss://` ones TLS with the fleet's one rustls
//! configuration ([`super::tls`]). Credentials come from the URL or, for every master whose
//! URL has none, from [`FleetOptions::credentials`]; a URL with credentials while those are
//! set is refused.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Builder, Config, ReconnectPolicy, ServerConfig, TcpConfig};
use fred::types::config::{TlsConfig, TlsConnector};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use super::wire::{self, TlsTarget};
use super::{CommandBound, FleetOptions, GENEROUS_COMMAND_TIMEOUT};
use crate::Error;

const PLAIN: &str = "redis://";
const SECURE: &str = "rediss://";

/// Whether `url` asks for TLS.
pub fn uses_tls(url: &str) -> bool {
    url.starts_with(SECURE)
}

/// The fleet's TLS configuration, built once when some master is `rediss://`.
pub(super) fn tls_config(
    urls: &[String],
    options: &FleetOptions,
) -> Result<Option<Arc<ClientConfig>>, Error> {
    let Some(first) = urls.iter().find(|url| uses_tls(url)) else {
        return Ok(None);
    };
    let config = options.tls.client_config();
    config
        .map(Some)
        .map_err(|e| invalid(first, &format!("TLS settings: {e}")))
}

/// A fred client of the master at `url`: one attempt per command, reconnecting in the
/// background, TLS with `tls` for a `rediss://` URL.
pub(crate) fn build_client(
    url: &str,
    options: &FleetOptions,
    tls: Option<&Arc<ClientConfig>>,
    bound: CommandBound,
) -> Result<fred::clients::Client, Error> {
    let mut config = parse_url(url, options)?;
    if uses_tls(url) {
        let config_tls = tls.ok_or_else(|| invalid(url, "no TLS configuration"))?;
        let connector = TlsConnector::from(tokio_rustls::TlsConnector::from(config_tls.clone()));
        config.tls = Some(TlsConfig::from(connector));
    }
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|c| {
            c.connection_timeout = options.connect_timeout;
            c.internal_command_timeout = options.connect_timeout;
            c.max_command_attempts = 1;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
        })
        .with_performance_config(|p| {
            p.default_command_timeout = match bound {
                CommandBound::OursOnly => Duration::ZERO,
                CommandBound::Generous => GENEROUS_COMMAND_TIMEOUT,
            }
        })
        .set_policy(ReconnectPolicy::new_exponential(0, 10, 1_000, 2));
    builder.build().map_err(|e| invalid(url, e.details()))
}

/// Where the lock path's own connection ([`wire`]) to the master at `url` goes.
pub(crate) fn lock_target(
    url: &str,
    options: &FleetOptions,
    tls: Option<&Arc<ClientConfig>>,
) -> Result<wire::Target, Error> {
    let config = parse_url(url, options)?;
    let ServerConfig::Centralized { server } = &config.server else {
        return Err(invalid(url, "expected one server per URL"));
    };
    let host = server.host.to_string();
    let tls = match tls.filter(|_| uses_tls(url)) {
        Some(config) => Some(TlsTarget {
            connector: tokio_rustls::TlsConnector::from(config.clone()),
            server_name: ServerName::try_from(host.clone())
                .map_err(|_| invalid(url, "the host is no valid TLS server name"))?,
        }),
        None if uses_tls(url) => return Err(invalid(url, "no TLS configuration")),
        None => None,
    };
    Ok(wire::Target {
        host,
        port: server.port,
        username: config.username.clone(),
        password: config.password.clone().map(Into::into),
        database: config.database,
        connect_timeout: options.connect_timeout,
        tls,
    })
}

/// Parses a master's URL as fred does (host, port, credentials, database), with the fleet's
/// credentials for a URL that has none. TLS is left for the caller to set: fred would load
/// the system's roots for every `rediss://` URL it parses.
fn parse_url(url: &str, options: &FleetOptions) -> Result<Config, Error> {
    let plain = match url.strip_prefix(SECURE) {
        Some(rest) => format!("{PLAIN}{rest}"),
        None if url.starts_with(PLAIN) => url.to_string(),
        None => return Err(invalid(url, "expected a redis:// or rediss:// URL")),
    };
    let mut config = Config::from_url_centralized(&plain).map_err(|e| invalid(url, e.details()))?;
    config.fail_fast = false;
    if let Some(credentials) = &options.credentials {
        if config.username.is_some() || config.password.is_some() {
            let why = "carries credentials while the fleet's credentials are set";
            return Err(invalid(url, why));
        }
        config.username = credentials.username.clone();
        config.password = Some(credentials.password.expose().to_string());
    }
    Ok(config)
}

fn invalid(url: &str, reason: &str) -> Error {
    Error::InvalidMaster {
        url: mask_credentials(url),
        reason: reason.to_string(),
    }
}

/// `redis://user:secret@host:6379` → `redis://user:***@host:6379`; URLs without a password
/// come back unchanged.
pub fn mask_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None if userinfo.is_empty() => url.to_string(),
        None => format!("{scheme}://***@{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{Credentials, TlsOptions};

    /// The lock connection goes where fred's does, with the same credentials and database.
    #[test]
    fn lock_target_follows_the_url() {
        let options = FleetOptions::default();
        let target = lock_target("redis://:pw@127.0.0.1:6380/2", &options, None).unwrap();
        assert_eq!((target.host.as_str(), target.port), ("127.0.0.1", 6380));
        assert_eq!(target.username, None);
        assert_eq!(target.password, Some("pw".into()));
        assert_eq!(target.database, Some(2));
        assert!(target.tls.is_none());
        let target = lock_target("redis://locker:pw@localhost", &options, None).unwrap();
        assert_eq!((target.host.as_str(), target.port), ("localhost", 6379));
        assert_eq!(target.username.as_deref(), Some("locker"));
        assert_eq!(target.database, None);
        assert!(lock_target("http://h:1", &options, None).is_err());
    }

    /// A `rediss://` master gets TLS with the URL's host as the name to check, an IP address
    /// included; a `redis://` one in the same fleet stays plain.
    #[test]
    fn rediss_masters_get_tls_named_after_their_host() {
        let options = FleetOptions::default();
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, TEST_CA).unwrap();
        let tls = TlsOptions {
            ca_file: Some(ca),
            ..TlsOptions::default()
        };
        let urls = [
            "rediss://10.1.2.3:6390".to_string(),
            "redis://h:1".to_string(),
        ];
        let options = FleetOptions { tls, ..options };
        let config = tls_config(&urls, &options).unwrap();
        let target = lock_target(&urls[0], &options, config.as_ref()).unwrap();
        let name = target.tls.map(|t| t.server_name);
        assert_eq!(name, Some(ServerName::try_from("10.1.2.3").unwrap()));
        assert!(lock_target(&urls[1], &options, config.as_ref())
            .unwrap()
            .tls
            .is_none());
        assert!(build_client(&urls[0], &options, config.as_ref(), CommandBound::OursOnly).is_ok());
        assert!(tls_config(&urls[1..], &options).unwrap().is_none());
    }

    /// The fleet's credentials go to every master whose URL has none; a URL with its own is
    /// refused, and the message shows no password.
    #[test]
    fn fleet_credentials_apply_to_urls_without_any() {
        let options = FleetOptions {
            credentials: Some(Credentials {
                username: Some("redlease".into()),
                password: "from-file".into(),
            }),
            ..FleetOptions::default()
        };
        let target = lock_target("redis://h:1", &options, None).unwrap();
        assert_eq!(target.username.as_deref(), Some("redlease"));
        assert_eq!(target.password, Some("from-file".into()));
        let refused = lock_target("redis://u:in-url@h:1", &options, None).unwrap_err();
        let shown = refused.to_string();
        assert!(
            shown.contains("carries credentials") && !shown.contains("in-url"),
            "{shown}"
        );
        let debug = format!("{target:?} {options:?}");
        assert!(!debug.contains("from-file"), "{debug}");
    }

    /// Passwords never reach logs or the fleet view.
    #[test]
    fn credentials_are_masked() {
        assert_eq!(mask_credentials("redis://u:p@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(mask_credentials("rediss://u:p@h:1"), "rediss://u:***@h:1");
        assert_eq!(mask_credentials("redis://:p@h:1"), "redis://:***@h:1");
        assert_eq!(mask_credentials("redis://p@h:1"), "redis://***@h:1");
        assert_eq!(mask_credentials("redis://h:1"), "redis://h:1");
        assert_eq!(mask_credentials("redis://u:p:q@x@h"), "redis://u:***@h");
    }

    /// A self-signed CA certificate (only parsed, never used to verify anything here).
    const TEST_CA: &str = include_str!("tls/test_ca.pem");
}

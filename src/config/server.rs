//! The `listen` and `auth.*` settings: who can reach the API and how callers prove who they
//! are; their raw form, defaults and validation.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;

use ::config::builder::DefaultState;
use ::config::ConfigBuilder;
use serde::Deserialize;

/// Address the HTTP API binds.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 7600));

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

/// The defaults of `listen` and `auth.*`.
pub(super) fn defaults(
    b: ConfigBuilder<DefaultState>,
) -> Result<ConfigBuilder<DefaultState>, ::config::ConfigError> {
    b.set_default("listen", DEFAULT_LISTEN.to_string())?
        .set_default("auth.token_file", "")?
        .set_default("auth.metrics_open", false)
}

/// The `listen` address, with a problem pushed onto `p` when it is not `ip:port`.
pub(super) fn validate_listen(listen: &str, p: &mut Vec<String>) -> Option<SocketAddr> {
    let parsed = listen.parse::<SocketAddr>().ok();
    if parsed.is_none() {
        p.push(format!("listen: expected ip:port, got {listen:?}"));
    }
    parsed
}

impl RawAuth {
    /// The `auth.*` settings; the token file must be readable and hold one word.
    pub(super) fn validate(self, p: &mut Vec<String>) -> AuthSettings {
        let token_file =
            (!self.token_file.is_empty()).then(|| std::path::PathBuf::from(self.token_file));
        if let Some(file) = &token_file {
            if let Err(problem) = read_token(file) {
                p.push(format!("auth.token_file: {problem}"));
            }
        }
        AuthSettings {
            token_file,
            metrics_open: self.metrics_open,
        }
    }
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

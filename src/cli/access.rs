//! How the command line reaches masters behind TLS and ACL users: the flags (and the same
//! environment variables) as the sidecar's `fleet.tls.*`, `fleet.username` and
//! `fleet.password_file`.

use std::path::PathBuf;

use clap::Args;

use crate::fleet::{Credentials, TlsOptions};
use crate::{Error, FleetOptions};

/// TLS and credentials for the masters.
#[derive(Clone, Debug, Default, Args)]
pub struct AccessArgs {
    /// PEM bundle of the CAs that sign the rediss:// masters' certificates (default: the
    /// system's roots).
    #[arg(long, env = "REDLEASE__FLEET__TLS__CA_FILE", value_name = "FILE")]
    tls_ca_file: Option<PathBuf>,
    /// PEM certificate chain shown to the masters (mutual TLS); needs --tls-key-file.
    #[arg(long, env = "REDLEASE__FLEET__TLS__CERT_FILE", value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "REDLEASE__FLEET__TLS__KEY_FILE", value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// The masters' ACL user; needs --password-file.
    #[arg(long, env = "REDLEASE__FLEET__USERNAME")]
    username: Option<String>,
    /// A file holding the masters' password (for masters whose URLs carry none).
    #[arg(long, env = "REDLEASE__FLEET__PASSWORD_FILE", value_name = "FILE")]
    password_file: Option<PathBuf>,
}

impl AccessArgs {
    /// `options` with these TLS settings and credentials; the password file is read here.
    pub fn apply(&self, options: FleetOptions) -> Result<FleetOptions, Error> {
        let invalid =
            |flag: &str, problem: String| Error::InvalidSetting(format!("{flag}: {problem}"));
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            let problem = "--tls-cert-file and --tls-key-file go together".to_string();
            return Err(invalid("--tls-cert-file", problem));
        }
        let credentials = match (&self.password_file, &self.username) {
            (Some(file), username) => {
                let password = crate::config::read_password(file)
                    .map_err(|problem| invalid("--password-file", problem))?;
                Some(Credentials {
                    username: username.clone(),
                    password,
                })
            }
            (None, Some(_)) => {
                return Err(invalid("--username", "needs --password-file".into()));
            }
            (None, None) => options.credentials,
        };
        let tls = TlsOptions {
            ca_file: self.tls_ca_file.clone(),
            cert_file: self.tls_cert_file.clone(),
            key_file: self.tls_key_file.clone(),
        };
        Ok(FleetOptions {
            credentials,
            tls,
            ..options
        })
    }
}

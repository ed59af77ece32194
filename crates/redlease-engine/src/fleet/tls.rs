//! TLS to `rediss://` masters: the one rustls `ClientConfig` (on ring) that every connection of
//! a fleet shares, the lock connections' ([`super::wire`]) and fred's alike, and how a failed
//! TLS handshake is told apart from a master that is merely unreachable.
//!
//! Trusted roots: the CAs of [`TlsOptions::ca_file`], or else the system's store as
//! `rustls-native-certs` reads it (`SSL_CERT_FILE` / `SSL_CERT_DIR`, else the OS default such as
//! `/etc/ssl/certs`). The server name checked is the URL's host; an IP address is checked
//! against the certificate's IP SANs. TLS 1.2 and 1.3 with rustls' safe defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// How the fleet's `rediss://` connections are made. Only URLs of the `rediss://` scheme use
/// TLS; these settings say whom they trust and which certificate they show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// A PEM bundle of the CAs to trust (every certificate in it); `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A PEM certificate chain shown to the masters (mutual TLS), leaf first; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of `cert_file`.
    pub key_file: Option<PathBuf>,
}

impl TlsOptions {
    /// Whether any setting is made (a fleet without `rediss://` URLs has no use for them).
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }

    /// The client configuration these options describe, built once per fleet. Errors name the
    /// option and the file (never a key's content).
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        let roots = match &self.ca_file {
            Some(file) => roots_from(file)?,
            None => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS versions: {e}"))?
            .with_root_certificates(roots);
        let config = match (&self.cert_file, &self.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = certificates(cert).map_err(|e| format!("cert_file: {e}"))?;
                // `certificates` refuses a file without one: the chain has a first.
                check_client_certificate(cert, &chain[0])?;
                let key = private_key(key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("cert_file, key_file: {e}"))?
            }
            (Some(_), None) => return Err("cert_file: needs key_file".into()),
            (None, Some(_)) => return Err("key_file: needs cert_file".into()),
        };
        Ok(Arc::new(config))
    }
}

/// Every certificate of the PEM bundle `file` as a trusted root.
fn roots_from(file: &Path) -> Result<RootCertStore, String> {
    let certificates = certificates(file).map_err(|e| format!("ca_file: {e}"))?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates {
        roots
            .add(certificate)
            .map_err(|e| format!("ca_file: {}: {e}", file.display()))?;
    }
    Ok(roots)
}

/// The system's trusted roots; an error when none can be loaded.
fn system_roots() -> Result<RootCertStore, String> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _unparsable) = roots.add_parsable_certificates(loaded.certs);
    if added == 0 {
        let why = loaded
            .errors
            .first()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        return Err(format!(
            "ca_file: not set, and no system CA certificates found{why}"
        ));
    }
    Ok(roots)
}

/// The certificates of the PEM file `file`, at least one.
fn certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = file.display();
    let pem = std::fs::read(file).map_err(|e| format!("{shown}: cannot read: {e}"))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown}: not a PEM certificate bundle: {e}"))?;
    if certificates.is_empty() {
        return Err(format!("{shown}: holds no PEM certificate"));
    }
    Ok(certificates)
}

/// How to make a client certificate rustls accepts, for the message refusing a v1 one.
const MAKE_A_V3_CERTIFICATE: &str = "sign it with extensions, e.g. `openssl x509 -req -in \
     client.csr -CA ca.pem -CAkey ca.key -days 365 -out client.pem -extfile client.ext` where \
     client.ext holds `basicConstraints=CA:FALSE`, `keyUsage=digitalSignature` and \
     `extendedKeyUsage=clientAuth`, or make it with `openssl req -x509 ... -addext \
     basicConstraints=CA:FALSE -addext extendedKeyUsage=clientAuth`";

/// Refuses a client certificate (the first of `file`'s chain) that cannot serve, saying which
/// file and why: an X.509 v1 certificate (what `openssl x509 -req` makes
/// without `-extfile`), which rustls reports as an `UnsupportedCertVersion` of the *peer*.
fn check_client_certificate(file: &Path, leaf: &CertificateDer<'_>) -> Result<(), String> {
    let shown = file.display();
    match webpki::EndEntityCert::try_from(leaf) {
        Ok(_) => Ok(()),
        Err(webpki::Error::UnsupportedCertVersion) => Err(format!(
            "cert_file: {shown}: the client certificate is X.509 v1 (made without \
             extensions); it must be v3: {MAKE_A_V3_CERTIFICATE}"
        )),
        // Anything else is the masters' to judge (rustls sends the certificate as it is):
        // said, not refused.
        Err(error) => {
            tracing::warn!(file = %shown, %error, "the client certificate may be refused by the masters");
            Ok(())
        }
    }
}

/// The private key of the PEM file `file`. The parser's own message is left out: it could
/// quote the file.
fn private_key(file: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let shown = file.display();
    let pem = std::fs::read(file).map_err(|e| format!("key_file: {shown}: cannot read: {e}"))?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|_| format!("key_file: {shown}: holds no PEM private key"))
}

/// The TLS failure behind an I/O error of a `rediss://` connection (certificate not trusted
/// or not for this host, client certificate refused, not a TLS port), as text; `None` for
/// anything else (refused, reset, timed out: the master may just be down).
pub(crate) fn tls_failure(error: &std::io::Error) -> Option<String> {
    let inner = error.get_ref()?;
    inner.downcast_ref::<rustls::Error>().map(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A missing or empty CA file, and half a client certificate, are refused naming the
    /// option; a key file's content never shows in the message.
    #[test]
    fn bad_files_are_refused_naming_the_option() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let missing = TlsOptions {
            ca_file: Some(dir.join("absent.pem")),
            ..TlsOptions::default()
        };
        let error = missing.client_config().unwrap_err();
        assert!(
            error.starts_with("ca_file: ") && error.contains("absent.pem"),
            "{error}"
        );
        let empty = TlsOptions {
            ca_file: Some(file_with(dir, "empty.pem", "no pem here\n")),
            ..TlsOptions::default()
        };
        let error = empty.client_config().unwrap_err();
        assert!(error.contains("holds no PEM certificate"), "{error}");
        let half = TlsOptions {
            cert_file: Some(dir.join("c.pem")),
            ..TlsOptions::default()
        };
        assert_eq!(
            half.client_config().unwrap_err(),
            "cert_file: needs key_file"
        );
        let key = file_with(dir, "key.pem", "SECRET-KEY-MATERIAL\n");
        let error = private_key(&key).unwrap_err();
        assert!(!error.contains("SECRET"), "{error}");
    }

    /// An I/O error that carries a rustls error is a TLS failure; a plain one is not.
    #[test]
    fn tls_failures_are_told_apart() {
        let cert = rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, cert);
        let failure = tls_failure(&io).unwrap();
        assert!(failure.contains("NotValidForName"), "{failure}");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(tls_failure(&refused), None);
    }
}

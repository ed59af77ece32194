//! Unit tests of the fleet's credentials and TLS settings: layering through env vars and
//! TOML, the password file, and the rules between them and the masters.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, Overrides, Settings};
use crate::Password;

/// A CA certificate that parses (it signs nothing here).
const CA: &str = include_str!("../../../../redlease-engine/src/fleet/tls/test_ca.pem");

fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    Settings::load(None, env, Overrides::default())
}

fn problems(pairs: &[(&str, &str)]) -> Vec<String> {
    match load(pairs).unwrap_err() {
        ConfigError::Invalid(lines) => lines,
        other => panic!("expected invalid settings, got {other}"),
    }
}

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    path
}

/// `REDLEASE__FLEET__USERNAME`, `…__PASSWORD_FILE` and `…__TLS__CA_FILE` reach the settings
/// and the library options; the password is the file's first line without its newline.
#[test]
fn credentials_and_tls_come_from_env_vars() {
    let dir = tempfile::tempdir().unwrap();
    let password = file(dir.path(), "password", "s3cret word\n");
    let ca = file(dir.path(), "ca.pem", CA);
    let s = load(&[
        ("REDLEASE__MASTERS", "rediss://a:1,rediss://b:2"),
        ("REDLEASE__FLEET__USERNAME", "redlease"),
        ("REDLEASE__FLEET__PASSWORD_FILE", password.to_str().unwrap()),
        ("REDLEASE__FLEET__TLS__CA_FILE", ca.to_str().unwrap()),
    ])
    .unwrap();
    let credentials = s.fleet.credentials.clone().unwrap();
    assert_eq!(credentials.username.as_deref(), Some("redlease"));
    assert_eq!(credentials.password, Password::new("s3cret word"));
    assert_eq!(s.fleet.password_file.as_deref(), Some(password.as_path()));
    assert_eq!(s.fleet.tls.ca_file.as_deref(), Some(ca.as_path()));
    let options = s.fleet_options();
    assert_eq!(options.credentials, Some(credentials));
    assert_eq!(options.tls, s.fleet.tls);
    let shown = format!("{s:?} {options:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

/// The same keys in a TOML file, `[fleet.tls]` as a nested table; a client certificate half
/// given is refused naming the other key.
#[test]
fn tls_keys_nest_in_toml() {
    let dir = tempfile::tempdir().unwrap();
    let ca = file(dir.path(), "ca.pem", CA);
    let text = format!(
        "masters = [\"rediss://a:1\"]\n[fleet.tls]\nca_file = {ca:?}\ncert_file = \"c.pem\"\n"
    );
    let toml = file(dir.path(), "redlease.toml", &text);
    let loaded = Settings::load(Some(&toml), Vec::new(), Overrides::default());
    let Err(ConfigError::Invalid(lines)) = loaded else {
        panic!("expected invalid settings");
    };
    assert_eq!(lines, ["fleet.tls.cert_file: needs fleet.tls.key_file"]);
}

/// A password file that cannot be read, is empty or holds two lines is refused naming the
/// key and the file, never quoting it.
#[test]
fn unusable_password_files_are_refused_without_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let absent = dir.path().join("absent");
    let empty = file(dir.path(), "empty", "\n");
    let two = file(dir.path(), "two", "first-line-secret\nsecond\n");
    for (path, rule) in [
        (&absent, "cannot read"),
        (&empty, "holds no password"),
        (&two, "the password must be one line"),
    ] {
        let lines = problems(&[
            ("REDLEASE__MASTERS", "redis://a:1"),
            ("REDLEASE__FLEET__PASSWORD_FILE", path.to_str().unwrap()),
        ]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(line.starts_with("fleet.password_file: "), "{line}");
        assert!(
            line.contains(rule) && line.contains(path.to_str().unwrap()),
            "{line}"
        );
        assert!(!line.contains("first-line-secret"), "{line}");
    }
}

/// A user without a password file, a URL with credentials while the password file is set,
/// TLS settings without any `rediss://` master, and a CA file that cannot be read are all
/// reported at once; no password is shown.
#[test]
fn credential_and_tls_rules_are_reported_together() {
    let dir = tempfile::tempdir().unwrap();
    let password = file(dir.path(), "password", "pw\n");
    let lines = problems(&[
        ("REDLEASE__MASTERS", "redis://a:1"),
        ("REDLEASE__FLEET__USERNAME", "redlease"),
    ]);
    assert_eq!(lines, ["fleet.username: needs fleet.password_file"]);
    let lines = problems(&[
        ("REDLEASE__MASTERS", "redis://u:url-secret@a:1,redis://b:2"),
        ("REDLEASE__FLEET__PASSWORD_FILE", password.to_str().unwrap()),
        ("REDLEASE__FLEET__TLS__CA_FILE", "/nowhere/ca.pem"),
    ]);
    assert_eq!(
        lines,
        [
            "masters[0]: carries credentials while fleet.password_file is set: redis://u:***@a:1",
            "fleet.tls: set, but no master is a rediss:// URL",
        ]
    );
    let lines = problems(&[
        ("REDLEASE__MASTERS", "rediss://a:1"),
        ("REDLEASE__FLEET__TLS__CA_FILE", "/nowhere/ca.pem"),
    ]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("fleet.tls.ca_file: /nowhere/ca.pem: cannot read"),
        "{lines:?}"
    );
}

/// `rediss://` masters are accepted, alone or with `redis://` ones, with no TLS key set
/// (the system's roots are then trusted).
#[test]
fn rediss_masters_are_accepted() {
    let s = load(&[("REDLEASE__MASTERS", "redis://a:1,rediss://b:2")]).unwrap();
    assert_eq!(s.masters, ["redis://a:1", "rediss://b:2"]);
    assert!(!s.fleet.tls.is_set() && s.fleet.credentials.is_none());
    let lines = problems(&[("REDLEASE__MASTERS", "http://a:1")]);
    assert_eq!(
        lines,
        ["masters[0]: expected a redis:// or rediss:// URL, got \"http://a:1\""]
    );
}

//! The command line on TLS masters with an ACL user, configured as the sidecar is (the
//! `REDLEASE__FLEET__*` variables) or with flags: `lock acquire`/`release`, `lock run` and
//! `locks list` work; without the CA the start fails; the password is never printed.

use std::time::Duration;

use redlease_testkit::tls::{Pki, TlsMaster};
use serde_json::Value;

use super::{tls_env, PASSWORD};

/// `redlease ARGS` with `env` (and no other `REDLEASE__*` variable of this process): exit
/// code, stdout, stderr. The password must be in neither.
async fn redlease(args: &[&str], env: &[(String, String)]) -> (i32, String, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"));
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("REDLEASE__")) {
        command.env_remove(key);
    }
    command
        .args(args)
        .envs(env.iter().cloned())
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(20), command.output());
    let output = output.await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(
        !stdout.contains(PASSWORD) && !stderr.contains(PASSWORD),
        "{stdout}{stderr}"
    );
    (output.status.code().unwrap(), stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_reaches_tls_masters_as_an_acl_user() {
    let pki = Pki::new();
    let masters: Vec<TlsMaster> = (0..3).map(|_| TlsMaster::start(&pki, true)).collect();
    for master in &masters {
        master.add_user("redlease", PASSWORD, &[]);
    }
    let urls = masters
        .iter()
        .map(TlsMaster::url)
        .collect::<Vec<_>>()
        .join(",");
    let mut env = tls_env(&pki, true);
    env.push(("REDLEASE__MASTERS".into(), urls.clone()));

    let (code, stdout, stderr) =
        redlease(&["lock", "acquire", "report", "--ttl-ms", "20000"], &env).await;
    assert_eq!(code, 0, "{stderr}");
    let lease: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(lease["acquired"], true, "{stdout}");
    let (code, stdout, stderr) = redlease(&["locks", "list", "--json"], &env).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("report"), "{stdout}");
    let id = lease["lease_id"].as_str().unwrap();
    let (code, stdout, stderr) =
        redlease(&["lock", "release", "report", "--lease", id], &env).await;
    assert_eq!(
        (code, stdout.trim()),
        (0, r#"{"released":true}"#),
        "{stderr}"
    );

    // The same with flags, for `lock run`.
    let flag_env = vec![("REDLEASE__MASTERS".to_string(), urls)];
    let path = |name: &str| pki.path(name).to_str().unwrap().to_string();
    let password = path("password");
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client.key"));
    let mut run = vec![
        "lock",
        "run",
        "job",
        "--username",
        "redlease",
        "--password-file",
        &password,
    ];
    run.extend([
        "--tls-ca-file",
        &ca,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
    ]);
    run.extend(["--", "sh", "-c", "test -n \"$REDLEASE_FENCING_TOKEN\""]);
    let (code, _, stderr) = redlease(&run, &flag_env).await;
    assert_eq!(code, 0, "{stderr}");

    // Without the CA, the masters' certificates are not trusted: the start fails, naming why.
    let without_ca: Vec<_> = env
        .iter()
        .filter(|(k, _)| !k.ends_with("CA_FILE"))
        .cloned()
        .collect();
    let (code, _, stderr) = redlease(&["lock", "acquire", "other"], &without_ca).await;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("certificate"), "{stderr}");
    // A user without its password file is refused before anything is sent.
    let mut lone_user = vec!["lock", "acquire", "other", "--username", "redlease"];
    lone_user.extend(["--tls-ca-file", &ca]);
    let (code, _, stderr) = redlease(&lone_user, &flag_env).await;
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("--password-file"), "{stderr}");
}

/// A client certificate made by `openssl x509 -req` without extensions (X.509 v1) is refused
/// when the settings are loaded, by the command line (`--tls-cert-file`) and by `redlease
/// serve` (`REDLEASE__FLEET__TLS__CERT_FILE`) alike: exit 64, naming the file, that it must be
/// v3 and how to make one — never calling it the peer's certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_client_certificate_is_refused_naming_the_file_and_the_fix() {
    let pki = Pki::new();
    pki.sign_v1("old");
    let master = TlsMaster::start(&pki, true);
    let path = |name: &str| pki.path(name).to_str().unwrap().to_string();
    let (ca, cert, key) = (path("ca.pem"), path("old.pem"), path("old.key"));
    let says_why = |stderr: &str| {
        assert!(stderr.contains(&cert), "the file is not named: {stderr}");
        assert!(
            stderr.contains("v3") && stderr.contains("-extfile"),
            "{stderr}"
        );
        assert!(!stderr.contains("peer"), "{stderr}");
    };
    let env = vec![("REDLEASE__MASTERS".to_string(), master.url())];
    let mut args = vec!["lock", "acquire", "job", "--tls-ca-file", &ca];
    args.extend(["--tls-cert-file", &cert, "--tls-key-file", &key]);
    let (code, stdout, stderr) = redlease(&args, &env).await;
    assert_eq!((code, stdout.as_str()), (64, ""), "{stderr}");
    says_why(&stderr);

    let mut serve_env = env.clone();
    serve_env.extend([
        ("REDLEASE__FLEET__TLS__CA_FILE".to_string(), ca.clone()),
        ("REDLEASE__FLEET__TLS__CERT_FILE".to_string(), cert.clone()),
        ("REDLEASE__FLEET__TLS__KEY_FILE".to_string(), key.clone()),
        ("REDLEASE__LISTEN".to_string(), "127.0.0.1:0".to_string()),
    ]);
    let (code, _, stderr) = redlease(&["serve"], &serve_env).await;
    assert_eq!(code, 64, "{stderr}");
    says_why(&stderr);
    assert!(stderr.contains("fleet.tls.cert_file"), "{stderr}");
}

//! No password reaches a real `redlease serve` process's output (stdout and stderr, at debug
//! level) or its `/v1/fleet` view, whether it comes from `fleet.password_file` or from the
//! masters' URLs, while masters that refuse it or are down provoke the lines that could carry
//! it; nor does a configuration error that involves a credentialed URL.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use redlease_testkit::tls::{Pki, TlsMaster};
use serde_json::json;

use super::{tls_env, PASSWORD};

/// A password the masters do not accept, which must not be shown either.
const WRONG: &str = "not-the-Pa55word";

/// A `redlease serve` child writing stdout and stderr into one file, killed if the test fails.
struct Serve {
    child: tokio::process::Child,
    listen: String,
}

impl Serve {
    fn start(masters: &[String], env: &[(String, String)], log: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let out = std::fs::File::create(log).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args([
                "serve",
                "--masters",
                &masters.join(","),
                "--listen",
                &listen,
            ])
            .env("RUST_LOG", "redlease=debug")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self { child, listen }
    }

    /// `GET /v1/fleet` once the sidecar answers: its body.
    async fn fleet_view(&self) -> String {
        let url = format!("http://{}/v1/fleet", self.listen);
        for _ in 0..400 {
            if let Ok(response) = reqwest::get(&url).await {
                return response.text().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the sidecar never answered");
    }

    /// An acquisition and its release (a grant, or a refusal, either way logged at debug).
    async fn acquire_and_release(&self) {
        let http = reqwest::Client::new();
        let base = format!("http://{}", self.listen);
        let body = json!({"owner": "logs", "ttl_ms": 5000, "auto_renew": false});
        crate::support::acquire_then_release(&http, &base, "logged", &body).await;
    }

    /// SIGTERM, then the exit code.
    async fn terminate(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), self.child.wait());
        waited.await.unwrap().unwrap().code()
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Neither password appears in `text`.
fn assert_no_password(text: &str, what: &str) {
    for secret in [PASSWORD, WRONG] {
        assert!(!text.contains(secret), "{secret} in the {what}:\n{text}");
    }
}

/// The password from `fleet.password_file`: two masters take it, the third refuses it
/// (WRONGPASS, logged at warn on every retry); the log at debug and the fleet view carry no
/// password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_file_never_reaches_the_log_or_the_fleet_view() {
    let pki = Pki::new();
    let masters: Vec<TlsMaster> = (0..3).map(|_| TlsMaster::start(&pki, false)).collect();
    masters[0].add_user("redlease", PASSWORD, &[]);
    masters[1].add_user("redlease", PASSWORD, &[]);
    masters[2].add_user("redlease", WRONG, &[]);
    let urls: Vec<String> = masters.iter().map(TlsMaster::url).collect();
    let (view, log) = serve_a_while(&urls, &tls_env(&pki, false), &pki.path("serve.log")).await;
    assert_no_password(&log, "log");
    assert_no_password(&view, "fleet view");
}

/// A `redlease serve` on `urls` with `env`, logging into `log`: its fleet view, then a lease
/// taken and released, a while for the refused master to be retried, and SIGTERM. The fleet
/// view and the log, which must tell of the refusal (WRONGPASS).
async fn serve_a_while(urls: &[String], env: &[(String, String)], log: &Path) -> (String, String) {
    let serve = Serve::start(urls, env, log);
    let view = serve.fleet_view().await;
    serve.acquire_and_release().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(serve.terminate().await, Some(0), "{}", read(log));
    let log = read(log);
    assert!(
        log.contains("WRONGPASS"),
        "the refusal was not logged:\n{log}"
    );
    (view, log)
}

/// Passwords in the masters' URLs: one master down, one given a wrong password; the log at
/// debug and the fleet view show the URLs masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_in_urls_never_reach_the_log_or_the_fleet_view() {
    let pki = Pki::new();
    let mut masters: Vec<TlsMaster> = (0..3).map(|_| TlsMaster::start(&pki, false)).collect();
    masters
        .iter()
        .for_each(|m| m.add_user("redlease", PASSWORD, &[]));
    let port = |i: usize| masters[i].tls_port();
    let urls = vec![
        format!("rediss://redlease:{PASSWORD}@127.0.0.1:{}", port(0)),
        format!("rediss://redlease:{PASSWORD}@127.0.0.1:{}", port(1)),
        format!("rediss://redlease:{WRONG}@127.0.0.1:{}", port(2)),
    ];
    masters[1].server.stop();
    let ca = (
        "REDLEASE__FLEET__TLS__CA_FILE".to_string(),
        pki.ca().to_str().unwrap().to_string(),
    );
    let (view, log) = serve_a_while(&urls, &[ca], &pki.path("serve.log")).await;
    assert!(view.contains("rediss://redlease:***@127.0.0.1"), "{view}");
    assert_no_password(&log, "log");
    assert_no_password(&view, "fleet view");
}

/// A credentialed URL while `fleet.password_file` is set is a configuration error (exit 64)
/// that shows the URL masked.
#[tokio::test]
async fn a_configuration_error_shows_no_password() {
    let pki = Pki::new();
    let url = format!("rediss://redlease:{PASSWORD}@127.0.0.1:1");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(["serve", "--masters", &url])
        .envs(tls_env(&pki, false))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("carries credentials while fleet.password_file is set"),
        "{stderr}"
    );
    assert_no_password(&stderr, "error");
    assert_no_password(&String::from_utf8_lossy(&output.stdout), "output");
}

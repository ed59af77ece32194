//! The `redlease lock` command line contract, exactly as scripts will call it.

use std::process::{Command, Output};
use std::time::Duration;

use redlease_testkit::TestFleet;
use serde_json::Value;

mod busy_poll;
mod dev;
mod diagnostics;
mod logs;

fn redlease(args: &[&str], masters: &str) -> (i32, String) {
    let output: Output = crate::support::run_redlease(args, masters);
    let stdout = String::from_utf8(output.stdout).unwrap();
    (output.status.code().unwrap(), stdout.trim().to_string())
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// acquire prints the documented fields; held → exit 3; release → true/0, then false/3.
#[test]
fn acquire_release_contract() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let (code, out) = redlease(
        &[
            "lock", "acquire", "nightly", "--owner", "cron-1", "--ttl-ms", "5000",
        ],
        &masters,
    );
    assert_eq!(code, 0, "{out}");
    let lease = json(&out);
    let keys: Vec<&str> = lease
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = [
        "acquired",
        "lease_id",
        "resource",
        "owner",
        "fencing_token",
        "ttl_ms",
        "validity_ms",
        "expires_at",
    ];
    expected.sort_unstable();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected);
    assert_eq!(lease["acquired"], true);
    assert_eq!(lease["resource"], "nightly");
    assert_eq!(lease["owner"], "cron-1");
    assert_eq!(lease["ttl_ms"], 5000);
    assert!(lease["fencing_token"].as_u64().unwrap() >= 1);
    assert!(lease["validity_ms"].as_u64().unwrap() < 5000);
    let id = lease["lease_id"].as_str().unwrap().to_string();

    let (code, out) = redlease(&["lock", "acquire", "nightly"], &masters);
    assert_eq!(
        (code, out.as_str()),
        (3, r#"{"acquired":false,"reason":"held"}"#)
    );

    let (code, out) = redlease(
        &[
            "lock", "extend", "nightly", "--lease", &id, "--ttl-ms", "8000",
        ],
        &masters,
    );
    assert_eq!(code, 0, "{out}");
    let extended = json(&out);
    assert_eq!(
        (extended["extended"].clone(), extended["ttl_ms"].clone()),
        (Value::Bool(true), Value::from(8000))
    );

    let (code, out) = redlease(&["lock", "release", "nightly", "--lease", &id], &masters);
    assert_eq!((code, out.as_str()), (0, r#"{"released":true}"#));
    let (code, out) = redlease(&["lock", "release", "nightly", "--lease", &id], &masters);
    assert_eq!((code, out.as_str()), (3, r#"{"released":false}"#));
    let (code, out) = redlease(
        &[
            "lock", "extend", "nightly", "--lease", &id, "--ttl-ms", "8000",
        ],
        &masters,
    );
    assert_eq!(
        (code, out.as_str()),
        (3, r#"{"extended":false,"reason":"lease_lost"}"#)
    );
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// Without a quorum, acquire answers no_quorum with exit 4.
#[test]
fn no_quorum_exits_4() {
    let mut fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    fleet.servers[0].stop();
    fleet.servers[1].stop();
    let (code, out) = redlease(
        &["lock", "acquire", "nightly", "--connect-timeout-ms", "200"],
        &masters,
    );
    let answer = json(&out);
    assert_eq!(
        (code, &answer["acquired"], &answer["reason"]),
        (4, &Value::Bool(false), &Value::from("no_quorum"))
    );
    let outcomes: Vec<&str> = (answer["masters"].as_array().unwrap().iter())
        .map(|m| m["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["down", "down", "down"], "{out}");
    assert_eq!(fleet.lock_keys(2), Vec::<String>::new());
}

/// With one master of five frozen (it accepts TCP, never answers) acquire answers as soon as
/// a quorum is ready; with three frozen, no_quorum within a second.
#[test]
fn frozen_masters_do_not_hold_the_cli_up() {
    let mut fleet = TestFleet::start(5);
    let masters = fleet.urls().join(",");
    // Born with every master up (a fleet with a master missing is not born by itself).
    assert_eq!(redlease(&["fleet", "init"], &masters).0, 0);
    fleet.servers[0].pause();
    let start = tokio::time::Instant::now();
    let (code, out) = redlease(&["lock", "acquire", "one-frozen"], &masters);
    let took = start.elapsed();
    assert_eq!(code, 0, "{out}");
    eprintln!("one frozen of five: acquire answered and exited in {took:?}");
    assert!(took < Duration::from_millis(600), "acquire took {took:?}");
    fleet.servers[1].pause();
    fleet.servers[2].pause();
    let start = tokio::time::Instant::now();
    let (code, out) = redlease(&["lock", "acquire", "three-frozen"], &masters);
    let took = start.elapsed();
    assert_eq!(
        (code, json(&out)["reason"].as_str()),
        (4, Some("no_quorum"))
    );
    eprintln!("three frozen of five: no_quorum answered and exited in {took:?}");
    assert!(took < Duration::from_secs(1), "no_quorum took {took:?}");
    for i in 0..3 {
        fleet.servers[i].resume();
    }
}

/// The validity `lock acquire` prints is what is left when it prints (last, after the command
/// settled): never more than the keys' own time to live read right after it exits, and
/// `expires_at` is the same instant on the wall clock.
#[test]
fn printed_validity_is_what_is_left_when_printed() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let wall_ms = || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.unwrap().as_millis() as u64
    };
    let args = ["lock", "acquire", "printed", "--ttl-ms", "5000"];
    let (code, out) = redlease(&args, &masters);
    let exited = wall_ms();
    let pttl = (0..3)
        .map(|i| fleet.command(i, &["PTTL", "redlease:lock:printed"]).int())
        .max()
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let lease = json(&out);
    let validity = lease["validity_ms"].as_i64().unwrap();
    let expires_at = lease["expires_at"].as_u64().unwrap();
    assert!(
        validity <= pttl,
        "validity {validity} ms, keys live {pttl} ms"
    );
    assert!(
        expires_at <= exited + validity as u64,
        "{expires_at} {exited} {validity}"
    );
}

/// One server listed as three masters (two databases, two names for one address) is refused:
/// exit 64, nothing granted.
#[test]
fn one_server_listed_as_several_masters_is_refused() {
    let fleet = TestFleet::start(1);
    let port = fleet.servers[0].port();
    let masters =
        format!("redis://127.0.0.1:{port}/1,redis://127.0.0.1:{port}/2,redis://localhost:{port}/3");
    let (code, out) = redlease(&["lock", "acquire", "job"], &masters);
    assert_eq!((code, out.as_str()), (64, ""));
    assert_eq!(fleet.command(0, &["DBSIZE"]).int(), 0);
}

/// --masters on the command line wins over REDLEASE__MASTERS.
#[test]
fn masters_flag_overrides_the_environment() {
    let fleet = TestFleet::start(1);
    let args = [
        "lock",
        "acquire",
        "job",
        "--masters",
        &fleet.servers[0].url(),
    ];
    let (code, out) = redlease(&args, "redis://127.0.0.1:1");
    assert_eq!(code, 0, "{out}");
}

/// --wait-ms keeps trying until the holder's lease expires.
#[test]
fn wait_ms_outlasts_a_short_lease() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let (code, _) = redlease(&["lock", "acquire", "job", "--ttl-ms", "300"], &masters);
    assert_eq!(code, 0);
    let (code, out) = redlease(&["lock", "acquire", "job", "--wait-ms", "3000"], &masters);
    assert_eq!(code, 0, "{out}");
}

/// Invalid input exits 64 with nothing on stdout and nothing written.
#[test]
fn invalid_input_exits_64() {
    let fleet = TestFleet::start(1);
    let masters = fleet.urls().join(",");
    let cases: [&[&str]; 6] = [
        &["lock", "acquire", ""],
        &["lock", "acquire", "job", "--ttl-ms", "0"],
        &["lock", "acquire", "job", "--ttl-ms", "ten"],
        &["lock", "release", "job", "--lease", "not-a-lease"],
        &[
            "lock",
            "extend",
            "job",
            "--lease",
            "00000000000000000000000000000000",
        ],
        &["lock", "acquire", "job", "--masters", "http://example"],
    ];
    for args in cases {
        let (code, out) = redlease(args, &masters);
        assert_eq!((code, out.as_str()), (64, ""), "{args:?}");
    }
    assert_eq!(fleet.data_keys(0), Vec::<String>::new());
}

/// `serve` reports every invalid setting at once, binds nothing and exits 64.
#[test]
fn serve_reports_all_invalid_settings_and_exits_64() {
    let output = Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args([
            "serve",
            "--masters",
            "http://nope",
            "--listen",
            "not-an-address",
        ])
        .env("REDLEASE__LEASE__RENEW_FRACTION", "2")
        .env_remove("REDLEASE__MASTERS")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8(output.stderr).unwrap();
    for key in ["masters[0]", "listen", "lease.renew_fraction"] {
        assert!(stderr.contains(key), "{key} missing from: {stderr}");
    }
}

/// A `redlease serve` child process on a free port, killed if the test fails.
struct ServeProcess {
    child: tokio::process::Child,
    listen: String,
}

impl ServeProcess {
    fn start(fleet: &TestFleet, extra: &[&str], stderr: std::process::Stdio) -> Self {
        Self::start_with_env(fleet, extra, stderr, &[])
    }

    /// As `start`, with `env` set (and `RUST_LOG` only if `env` sets it).
    fn start_with_env(
        fleet: &TestFleet,
        extra: &[&str],
        stderr: std::process::Stdio,
        env: &[(&str, &str)],
    ) -> Self {
        let listen = free_loopback_addr();
        let masters = fleet.urls().join(",");
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(["serve", "--masters", &masters, "--listen", &listen])
            .args(extra)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Self { child, listen }
    }

    /// Acquires `resource` once the sidecar answers; the lease JSON (status 200 asserted).
    async fn acquire_when_up(&self, resource: &str, body: Value) -> Value {
        let url = format!("http://{}/v1/locks/{resource}/acquire", self.listen);
        let http = reqwest::Client::new();
        for _ in 0..200 {
            if let Ok(response) = http.post(&url).json(&body).send().await {
                assert_eq!(response.status(), 200);
                return response.json().await.unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("the sidecar never answered");
    }

    /// Sends SIGTERM and returns the exit code.
    async fn terminate(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let waited = tokio::time::timeout(std::time::Duration::from_secs(10), self.child.wait());
        waited.await.unwrap().unwrap().code()
    }
}

/// `redlease serve` runs on one runtime thread by default, and on `runtime.worker_threads`
/// workers when told (as its start-up log says, read from the runtime itself); it grants locks
/// either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_on_the_runtime_threads_configured() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let fleet = TestFleet::start(3);
    for (threads, workers) in [(None, 1), (Some("3"), 3)] {
        let env: Vec<(&str, &str)> = threads
            .map(|n| ("REDLEASE__RUNTIME__WORKER_THREADS", n))
            .into_iter()
            .collect();
        let mut serve =
            ServeProcess::start_with_env(&fleet, &[], std::process::Stdio::piped(), &env);
        let stderr = serve.child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let serving = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("redlease sidecar serving") {
                    return line;
                }
            }
            panic!("the sidecar ended without serving");
        });
        let serving = serving.await.expect("no start-up line in 10 s");
        let expected = format!("runtime_threads={workers}");
        assert!(serving.contains(&expected), "{threads:?}: {serving}");
        let resource = format!("threads-{workers}");
        let body = serde_json::json!({"owner": "t", "auto_renew": false});
        let lease = serve.acquire_when_up(&resource, body).await;
        assert_eq!(lease["acquired"], true);
        // Keep reading the log, so that the sidecar never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        assert_eq!(serve.terminate().await, Some(0));
    }
}

/// A loopback address on a port the kernel just handed out.
fn free_loopback_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}

/// A real `redlease serve` process releases every lease on SIGTERM and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_every_lease_and_exits() {
    let fleet = TestFleet::start(3);
    let serve = ServeProcess::start(&fleet, &[], std::process::Stdio::null());
    serve
        .acquire_when_up("job", serde_json::json!({"owner": "a", "ttl_ms": 20000}))
        .await;
    assert!(!fleet.lock_keys_on(&[0, 1, 2]).is_empty());
    assert_eq!(serve.terminate().await, Some(0));
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// `--log-format json` writes one JSON object per event; grants (at debug) and losses carry
/// the resource, owner, lease id, fencing token and TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_every_lease_field() {
    let fleet = TestFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("sidecar.log");
    let stderr = std::fs::File::create(&log_path).unwrap().into();
    let debug = [("RUST_LOG", "redlease=debug")];
    let serve = ServeProcess::start_with_env(&fleet, &["--log-format", "json"], stderr, &debug);
    let body = serde_json::json!({"owner": "cron-7", "ttl_ms": 1000});
    let lease = serve.acquire_when_up("billing", body).await;
    for i in 0..3 {
        fleet.command(i, &["DEL", "redlease:lock:billing"]);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    serve.terminate().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    let events: Vec<Value> = log.lines().map(json).collect();
    for message in ["lease granted", "lease lost"] {
        let event = events.iter().find(|e| e["message"] == message);
        let event = event.unwrap_or_else(|| panic!("no {message:?} in:\n{log}"));
        assert_eq!(event["resource"], "billing");
        assert_eq!(event["owner"], "cron-7");
        assert_eq!(event["lease_id"], lease["lease_id"]);
        assert_eq!(event["fencing_token"], lease["fencing_token"]);
        assert_eq!(event["ttl_ms"], 1000);
    }
}

/// A sidecar logging to a file at the default level writes no colour codes and no line per
/// grant or release, but every loss at warn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_text_logs_in_a_file_are_plain_and_quiet() {
    let fleet = TestFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("sidecar.log");
    let stderr = std::fs::File::create(&log_path).unwrap().into();
    let serve = ServeProcess::start(&fleet, &[], stderr);
    let http = reqwest::Client::new();
    for i in 0..20 {
        let body = serde_json::json!({"owner": "app", "ttl_ms": 5000});
        let lease = serve.acquire_when_up(&format!("job-{i}"), body).await;
        let url = format!(
            "http://{}/v1/leases/{}",
            serve.listen,
            lease["lease_id"].as_str().unwrap()
        );
        assert_eq!(http.delete(url).send().await.unwrap().status(), 200);
    }
    let body = serde_json::json!({"owner": "app", "ttl_ms": 1000});
    serve.acquire_when_up("doomed", body).await;
    for i in 0..3 {
        fleet.command(i, &["DEL", "redlease:lock:doomed"]);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    serve.terminate().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(!log.contains('\u{1b}'), "colour codes in a file:\n{log}");
    assert!(!log.contains("lease granted"), "{log}");
    assert!(!log.contains("lease released"), "{log}");
    let lost = log.lines().find(|l| l.contains("lease lost"));
    let lost = lost.unwrap_or_else(|| panic!("no loss logged:\n{log}"));
    assert!(lost.contains("WARN") && lost.contains("doomed"), "{lost}");
}

/// `redlease serve` reads its API token again on SIGHUP (a file it cannot use leaves the token
/// in force), and no token ever reaches its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reads_the_api_token_again_and_never_logs_it() {
    let fleet = TestFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "first-7c1e9a\n").unwrap();
    let log_path = dir.path().join("sidecar.log");
    let stderr = std::fs::File::create(&log_path).unwrap().into();
    let env = [
        ("REDLEASE__AUTH__TOKEN_FILE", token_path.to_str().unwrap()),
        ("RUST_LOG", "redlease=debug"),
    ];
    let serve = ServeProcess::start_with_env(&fleet, &[], stderr, &env);
    let http = reqwest::Client::new();
    let fleet_url = format!("http://{}/v1/fleet", serve.listen);
    let status = |token: &'static str| {
        let request = http.get(&fleet_url).bearer_auth(token).send();
        async move { request.await.map(|r| r.status().as_u16()).unwrap_or(0) }
    };
    redlease_testkit::assert_eventually!(status("first-7c1e9a").await == 200, 10, "never served");
    let pid = nix::unistd::Pid::from_raw(serve.child.id().unwrap() as i32);
    std::fs::write(&token_path, "second-4b8d2f\n").unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    redlease_testkit::assert_eventually!(
        status("second-4b8d2f").await == 200,
        5,
        "new token refused"
    );
    assert_eq!(status("first-7c1e9a").await, 401);
    std::fs::write(&token_path, "\n").unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        status("second-4b8d2f").await,
        200,
        "an empty file took the token away"
    );
    assert_eq!(serve.terminate().await, Some(0));
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("SIGHUP"), "{log}");
    for token in ["first-7c1e9a", "second-4b8d2f"] {
        assert!(!log.contains(token), "{token} logged:\n{log}");
    }
}

/// Text logs quote a value that could pass for other fields: a resource named
/// `x owner=root lease_id=…` shows as one quoted value, not as a forged owner and lease id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_quote_values_that_could_forge_fields() {
    let fleet = TestFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("sidecar.log");
    let stderr = std::fs::File::create(&log_path).unwrap().into();
    let debug = [("RUST_LOG", "redlease=debug")];
    let serve = ServeProcess::start_with_env(&fleet, &[], stderr, &debug);
    let forged = "x owner=root lease_id=00000000000000000000000000000000";
    let body = serde_json::json!({"owner": "cron \"job\"", "ttl_ms": 5000});
    let lease = serve
        .acquire_when_up(
            "x%20owner=root%20lease_id=00000000000000000000000000000000",
            body,
        )
        .await;
    assert_eq!(lease["resource"], forged);
    serve.terminate().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    let granted = log.lines().find(|l| l.contains("lease granted"));
    let granted = granted.unwrap_or_else(|| panic!("no grant logged:\n{log}"));
    assert!(
        granted.contains(&format!("resource={forged:?}")),
        "{granted}"
    );
    assert!(granted.contains(r#"owner="cron \"job\"""#), "{granted}");
    let outside_quotes = granted.replace(&format!("{forged:?}"), "");
    assert_eq!(outside_quotes.matches(" owner=").count(), 1, "{granted}");
}

//! The API's bearer token: refused without it (401 problem+json), served with it, the probes
//! open, `/metrics` open only when asked, the Rust client carrying it, and the token read
//! again on SIGHUP by a real `redlease serve` process without ever being logged.

use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};

const TOKEN: &str = "tok-9f3a1c7e5b2d";

/// A token file in a temp dir (kept alive by the returned guard).
fn token_file(token: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

async fn call(
    http: &reqwest::Client,
    method: &str,
    url: &str,
    token: Option<&str>,
) -> (u16, String) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = http.request(method, url).json(&json!({"owner": "app"}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response.headers().get("www-authenticate").cloned();
    let body = response.text().await.unwrap();
    if status == 401 {
        assert_eq!(challenge.unwrap(), "Bearer");
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(problem["reason"], "unauthorized", "{body}");
    }
    (status, body)
}

/// Every route but the probes and the OpenAPI document needs the exact token; with it the
/// API works as usual. The document served is the one `redlease openapi` prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_but_the_probes_needs_the_token() {
    let fleet = TestFleet::start(3);
    let (_dir, path) = token_file(TOKEN);
    let sidecar = TestSidecar::start(&fleet, &[("REDLEASE__AUTH__TOKEN_FILE", &path)]).await;
    let http = reqwest::Client::new();
    let base = &sidecar.base;
    let routes = [
        ("POST", "/v1/locks/job/acquire"),
        ("GET", "/v1/locks/job"),
        ("GET", "/v1/locks"),
        ("POST", "/v1/locks/job/force-release"),
        ("GET", "/v1/fleet"),
        ("GET", "/metrics"),
        ("GET", "/v1/leases/00000000000000000000000000000000"),
        ("DELETE", "/v1/leases/00000000000000000000000000000000"),
        ("GET", "/no/such/path"),
    ];
    for (method, path) in routes {
        let url = format!("{base}{path}");
        for token in [
            None,
            Some("tok-9f3a1c7e5b2"),
            Some("tok-9f3a1c7e5b2d0"),
            Some(""),
        ] {
            let (status, body) = call(&http, method, &url, token).await;
            assert_eq!(status, 401, "{method} {path} with {token:?}: {body}");
        }
    }
    assert!(
        fleet.lock_keys_on(&[0, 1, 2]).is_empty(),
        "a refused request wrote"
    );
    for path in ["/livez", "/readyz", "/v1/openapi.json"] {
        let (status, body) = call(&http, "GET", &format!("{base}{path}"), None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let document = http
        .get(format!("{base}/v1/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(document.headers()["content-type"], "application/json");
    let document = document.text().await.unwrap();
    assert_eq!(document, redlease_sidecar::openapi_json());
    let url = format!("{base}/v1/locks/job/acquire");
    let (status, body) = call(&http, "POST", &url, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = call(&http, "GET", &format!("{base}/metrics"), Some(TOKEN)).await;
    assert_eq!(status, 200);

    // The Rust client carries the token, on its event stream too.
    let client = redlease::client::Client::new(base).unwrap();
    let refused = client.lock("other").send().await.err().unwrap();
    assert_eq!(refused.reason(), Some("unauthorized"), "{refused:?}");
    let client = client.with_token(TOKEN).unwrap();
    let guard = client.lock("other").send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(guard.ended(), None);
    assert!(guard.release().await.unwrap());
}

/// The `Bearer` scheme is case-insensitive (RFC 9110): `bearer`, `BEARER` and `Bearer` with
/// the right token pass, another scheme or token does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_read_in_any_case() {
    let fleet = TestFleet::start(1);
    let (_dir, path) = token_file(TOKEN);
    let sidecar =
        TestSidecar::start(&fleet, &[("REDLEASE__AUTH__TOKEN_FILE", path.as_str())]).await;
    let http = reqwest::Client::new();
    let url = format!("{}/v1/fleet", sidecar.base);
    let status = |authorization: String| {
        let request = http.get(&url).header("Authorization", authorization);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        assert_eq!(status(format!("{scheme} {TOKEN}")).await, 200, "{scheme}");
    }
    assert_eq!(status(format!("Basic {TOKEN}")).await, 401);
    assert_eq!(status("bearer wrong".to_string()).await, 401);
}

/// `auth.metrics_open` leaves `/metrics` to the scraper, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_be_left_open() {
    let fleet = TestFleet::start(1);
    let (_dir, path) = token_file(TOKEN);
    let env = [
        ("REDLEASE__AUTH__TOKEN_FILE", path.as_str()),
        ("REDLEASE__AUTH__METRICS_OPEN", "true"),
    ];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let http = reqwest::Client::new();
    let (status, _) = call(&http, "GET", &format!("{}/metrics", sidecar.base), None).await;
    assert_eq!(status, 200);
    let (status, _) = call(&http, "GET", &format!("{}/v1/fleet", sidecar.base), None).await;
    assert_eq!(status, 401);
}

/// `lock run --sidecar` and `load --sidecar` as a real process: refused without the token
/// (the command never runs), served with `--token-file`, and the token never printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_carries_the_token_from_its_file() {
    let fleet = TestFleet::start(3);
    let (_dir, file) = token_file(TOKEN);
    let file: &'static str = file.leak();
    let sidecar = TestSidecar::start(&fleet, &[("REDLEASE__AUTH__TOKEN_FILE", file)]).await;
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("ran");
    let script = format!("touch {}", marker.display());
    let redlease = |args: Vec<&str>, token_file: Option<&str>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"));
        command
            .args(args)
            .env_remove("REDLEASE__MASTERS")
            .env_remove("REDLEASE__AUTH__TOKEN_FILE")
            .env_remove("RUST_LOG")
            .kill_on_drop(true);
        if let Some(file) = token_file {
            command.env("REDLEASE__AUTH__TOKEN_FILE", file);
        }
        async move {
            let output = tokio::time::timeout(Duration::from_secs(20), command.output());
            let output = output.await.unwrap().unwrap();
            let text = String::from_utf8_lossy(&output.stdout).to_string()
                + &String::from_utf8_lossy(&output.stderr);
            assert!(!text.contains(TOKEN), "the token was printed: {text}");
            (output.status.code().unwrap(), text)
        }
    };
    let run = |token_file: Option<&'static str>| {
        let mut args = vec!["lock", "run", "--sidecar", sidecar.base.as_str()];
        if let Some(file) = token_file {
            args.extend(["--token-file", file]);
        }
        args.extend(["job", "--", "sh", "-c", script.as_str()]);
        args
    };
    let (code, text) = redlease(run(None), None).await;
    assert_eq!(code, 77, "{text}");
    assert!(text.contains("refused the API token"), "{text}");
    assert!(text.contains("--token-file") && text.contains("REDLEASE__AUTH__TOKEN_FILE"));
    assert!(!text.contains("invalid request"), "{text}");
    assert!(!marker.exists(), "the command ran without the token");
    let (code, text) = redlease(run(Some(file)), None).await;
    assert_eq!(code, 0, "{text}");
    assert!(marker.exists(), "the command did not run: {text}");
    std::fs::remove_file(&marker).unwrap();
    // The variable the sidecar itself reads works too.
    let (code, text) = redlease(run(None), Some(file)).await;
    assert_eq!(code, 0, "{text}");
    assert!(marker.exists(), "the command did not run: {text}");

    let load = |with_token: bool| {
        let mut args = vec!["load", "--sidecar", sidecar.base.as_str(), "--workload"];
        args.extend(["sequential", "--ops", "20", "--warmup", "1", "--json"]);
        if with_token {
            args.extend(["--token-file", file]);
        }
        args
    };
    // Without the token every cycle is refused (and counted as an error): the run failed, and
    // says why.
    let report =
        |text: &str| -> Value { serde_json::from_str(text.lines().next().unwrap()).unwrap() };
    let (code, text) = redlease(load(false), None).await;
    assert_eq!(code, 69, "{text}");
    assert!(text.contains("every cycle failed"), "{text}");
    assert!(text.contains("refused the API token"), "{text}");
    assert_eq!(
        (
            report(&text)["ops"].as_u64(),
            report(&text)["errors"].as_u64()
        ),
        (Some(0), Some(20))
    );
    let (code, text) = redlease(load(true), None).await;
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        (
            report(&text)["ops"].as_u64(),
            report(&text)["errors"].as_u64()
        ),
        (Some(20), Some(0))
    );
}

//! The API's bearer token: refused without it (401 problem+json), served with it, the probes
//! open, `/metrics` open only when asked, the Rust client carrying it, and the token read
//! again on SIGHUP by a real `redlease serve` process without ever being logged.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::sidecar::TestSidecar;
use crate::support::TestFleet;

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

/// Every route but the probes needs the exact token; with it the API works as usual.
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
    for path in ["/livez", "/readyz"] {
        let (status, body) = call(&http, "GET", &format!("{base}{path}"), None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
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

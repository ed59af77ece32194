//! What on-call relies on: the metrics listener of its own (`metrics.listen`, only `GET
//! /metrics`, its own token), a lease without auto-renewal running out counted apart from
//! the losses the alert pages on, and the alert rules' own `promtool test rules` cases.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Beside an API on a Unix socket (which has no `Host` check), the metrics listener, on TCP,
/// still refuses a `Host` that is neither an IP literal, `localhost` nor allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_checks_host_beside_a_unix_socket_api() {
    use redlease_sidecar::config::{Listen, Overrides, Settings};
    use redlease_sidecar::server::{Listener, Sidecar};

    let fleet = TestFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let socket = format!("unix:{}", dir.path().join("api.sock").display());
    let env = [(
        "REDLEASE__METRICS__LISTEN".to_string(),
        "127.0.0.1:0".to_string(),
    )];
    let overrides = Overrides {
        masters: Some(fleet.urls()),
        listen: Some(socket),
    };
    let settings = Settings::load(None, env, overrides).unwrap();
    let api = Listener::bind(&settings.listen).await.unwrap();
    let metrics_at = Listen::Tcp(settings.metrics.listen.unwrap());
    let metrics = Listener::bind(&metrics_at).await.unwrap();
    let Listen::Tcp(addr) = metrics.local().unwrap() else {
        unreachable!("bound on a TCP address")
    };
    let sidecar = Sidecar::start(&settings).await.unwrap();
    let sidecar = sidecar.with_metrics_listener(metrics);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(sidecar.run(api, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/metrics");
    let rebound = http.get(&url).header("host", "evil.example").send().await;
    assert_eq!(rebound.unwrap().status(), 403);
    let local = http.get(&url).send().await.unwrap();
    assert_eq!(local.status(), 200);
    let _ = stop.send(());
    served.await.unwrap();
}

/// A sidecar with `metrics.listen` serves `/metrics` there, and only that: other paths 404,
/// other methods 405, whatever the token; the API's listener keeps its routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_serves_only_metrics() {
    let fleet = TestFleet::start(1);
    let env = [("REDLEASE__METRICS__LISTEN", "127.0.0.1:0")];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let metrics = format!("http://{}", sidecar.metrics_addr.unwrap());
    assert_ne!(metrics, sidecar.base);
    let http = &sidecar.http;
    let scrape = http.get(format!("{metrics}/metrics")).send().await.unwrap();
    assert_eq!(scrape.status(), 200);
    let text = scrape.text().await.unwrap();
    assert!(text.contains("redis_masters_up 1"), "{text}");
    for path in [
        "/v1/fleet",
        "/v1/locks",
        "/livez",
        "/readyz",
        "/",
        "/metrics/x",
    ] {
        let answer = http.get(format!("{metrics}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), 404, "{path}");
    }
    let acquire = http
        .post(format!("{metrics}/v1/locks/job/acquire"))
        .json(&json!({"owner": "a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(acquire.status(), 404);
    for method in [reqwest::Method::POST, reqwest::Method::DELETE] {
        let answer = http
            .request(method.clone(), format!("{metrics}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 405, "{method}");
    }
    assert!(
        fleet.lock_keys(0).is_empty(),
        "the metrics listener took a lock"
    );
    let (status, _) = sidecar.get("/v1/fleet").await;
    assert_eq!(status, 200);
    let (status, _) = sidecar.get("/metrics").await;
    assert_eq!(status, 200);
}

/// With `metrics.token_file`, the metrics listener answers 401 without its token or with
/// another (the API's included), and 200 with it, under a scheme in any case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_listener_asks_its_own_token() {
    let fleet = TestFleet::start(1);
    let dir = tempfile::tempdir().unwrap();
    let (metrics_file, api_file) = (dir.path().join("metrics"), dir.path().join("api"));
    std::fs::write(&metrics_file, "scrape-4d2f\n").unwrap();
    std::fs::write(&api_file, "api-91ce\n").unwrap();
    let env = [
        ("REDLEASE__METRICS__LISTEN", "127.0.0.1:0"),
        (
            "REDLEASE__METRICS__TOKEN_FILE",
            metrics_file.to_str().unwrap(),
        ),
        ("REDLEASE__AUTH__TOKEN_FILE", api_file.to_str().unwrap()),
    ];
    let sidecar = TestSidecar::start(&fleet, &env).await;
    let url = format!("http://{}/metrics", sidecar.metrics_addr.unwrap());
    let scrape = |authorization: Option<&'static str>| {
        let mut request = sidecar.http.get(&url);
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        async move { request.send().await.unwrap() }
    };
    let refused = scrape(None).await;
    assert_eq!(refused.status(), 401);
    assert_eq!(refused.headers()["www-authenticate"], "Bearer");
    for wrong in ["Bearer api-91ce", "Bearer scrape-4d2", "Basic scrape-4d2f"] {
        assert_eq!(scrape(Some(wrong)).await.status(), 401, "{wrong}");
    }
    for right in [
        "Bearer scrape-4d2f",
        "bearer scrape-4d2f",
        "BEARER scrape-4d2f",
    ] {
        let answer = scrape(Some(right)).await;
        assert_eq!(answer.status(), 200, "{right}");
        assert!(answer.text().await.unwrap().contains("lock_active_leases"));
    }
    // The API's listener still follows auth.*: its /metrics wants the API's token.
    let (status, _) = sidecar.get("/metrics").await;
    assert_eq!(status, 401);
}

/// A lease without auto-renewal running out counts in `lock_leases_expired_total` and is
/// logged at info, never in `lock_leases_lost_total` (what `RedleaseLeaseLost` pages on);
/// an auto-renewed lease whose keys vanish from the masters (`not_ours`) counts as lost and
/// is logged at warn. A `redlease serve` process of its own, read on its metrics listener,
/// so that no other test's leases count; its start-up line names that listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chosen_expiry_is_not_a_lost_lease() {
    let fleet = TestFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::start(&fleet, &dir.path().join("sidecar.log")).await;
    let body = json!({"owner": "cron", "ttl_ms": 300, "auto_renew": false});
    let lease = serve.acquire_when_up("report", body).await;
    assert_eq!(lease["auto_renew"], false);
    let expired = serve.wait_for("lock_leases_expired_total", 1.0).await;
    assert_eq!(
        lost_total(&expired),
        0.0,
        "a chosen expiry counted as lost:\n{expired}"
    );
    let (_, view) = serve.get_lease(&lease).await;
    assert_eq!(
        (view["state"].as_str(), view["reason"].as_str()),
        (Some("lost"), Some("expired"))
    );

    let body = json!({"owner": "billing", "ttl_ms": 1000});
    serve.acquire_when_up("payments", body).await;
    for i in 0..3 {
        fleet.command(i, &["DEL", "redlease:lock:payments"]);
    }
    let lost = serve
        .wait_for("lock_leases_lost_total{reason=\"not_ours\"}", 1.0)
        .await;
    assert_eq!(lost_total(&lost), 1.0, "{lost}");
    assert_eq!(
        crate::support::sample(&lost, "lock_leases_expired_total"),
        1.0,
        "{lost}"
    );
    // Both ended leases stay readable, and the gauge of the cap counts them.
    let retained = serve.wait_for("lock_retained_leases", 2.0).await;
    assert_eq!(
        crate::support::sample(&retained, "lock_retained_leases"),
        2.0,
        "{retained}"
    );

    let metrics_listen = serve.metrics.clone();
    let log = serve.stop().await;
    let line = |message: &str| {
        let found = log.lines().find(|l| l.contains(message));
        found
            .unwrap_or_else(|| panic!("no {message:?} in:\n{log}"))
            .to_string()
    };
    let serving = line("redlease sidecar serving");
    assert!(
        serving.contains(&format!("metrics_listen={metrics_listen}")),
        "{serving}"
    );
    let expiry = line("lease expired");
    assert!(
        expiry.contains("INFO") && expiry.contains("report"),
        "{expiry}"
    );
    let loss = line("lease lost");
    assert!(loss.contains("WARN") && loss.contains("payments"), "{loss}");
    assert!(
        !log.lines()
            .any(|l| l.contains("lease lost") && l.contains("report")),
        "{log}"
    );
}

/// `promtool test rules dashboards/alerts.test.yml`: every alert fires on its cases, naming
/// the instance, and stays silent on the ones that must not page (a chosen expiry, a healthy
/// instance beside a failing one, a blip shorter than `for:`). promtool's output on failure.
#[test]
fn alert_rules_pass_their_promtool_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tests = root.join("dashboards/alerts.test.yml");
    let output = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&tests)
        .current_dir(root.join("dashboards"))
        .output()
        .expect("promtool is not installed: scripts/install-deps.sh installs it");
    let report = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "promtool test rules:\n{report}");
    let rules = std::fs::read_to_string(root.join("dashboards/alerts.yml")).unwrap();
    let cases = std::fs::read_to_string(&tests).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            cases.contains(&format!("alertname: {alert}")),
            "{alert} has no case in alerts.test.yml"
        );
    }
}

/// The sum of every `lock_leases_lost_total` series in exposition `text`.
fn lost_total(text: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with("lock_leases_lost_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The API's and the metrics listener's addresses, from the start-up line of the log `log`
/// (`redlease sidecar serving listen=… metrics_listen=…`), waited for up to 20 s.
async fn bound_addresses(log: &Path) -> (String, String) {
    let field = |line: &str, name: &str| {
        let value = line.split_whitespace().find_map(|w| w.strip_prefix(name))?;
        Some(value.to_string())
    };
    for _ in 0..400 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let line = text
            .lines()
            .find(|l| l.contains("redlease sidecar serving"));
        if let Some(line) = line {
            let api = field(line, "listen=").unwrap_or_else(|| panic!("{line}"));
            let metrics = field(line, "metrics_listen=").unwrap_or_else(|| panic!("{line}"));
            return (api, metrics);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no start-up line:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// A `redlease serve` process on loopback ports the kernel chose, its log in a file.
struct Serve {
    child: tokio::process::Child,
    api: String,
    metrics: String,
    log: std::path::PathBuf,
    http: reqwest::Client,
}

impl Serve {
    /// Starts it on port 0 for both listeners, and reads the ports it bound from its start-up
    /// log line (within 20 s).
    async fn start(fleet: &TestFleet, log: &Path) -> Self {
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args([
                "serve",
                "--masters",
                &fleet.urls().join(","),
                "--listen",
                "127.0.0.1:0",
            ])
            .env("REDLEASE__METRICS__LISTEN", "127.0.0.1:0")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let http = reqwest::Client::new();
        let log = log.to_path_buf();
        let (api, metrics) = bound_addresses(&log).await;
        Self {
            child,
            api,
            metrics,
            log,
            http,
        }
    }

    /// Acquires `resource` once the sidecar answers; the lease JSON (200 asserted).
    async fn acquire_when_up(&self, resource: &str, body: Value) -> Value {
        let url = format!("http://{}/v1/locks/{resource}/acquire", self.api);
        for _ in 0..400 {
            if let Ok(response) = self.http.post(&url).json(&body).send().await {
                assert_eq!(response.status(), 200);
                return response.json().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the sidecar never answered:\n{}", self.log_text());
    }

    async fn get_lease(&self, lease: &Value) -> (u16, Value) {
        let id = lease["lease_id"].as_str().unwrap();
        let url = format!("http://{}/v1/leases/{id}", self.api);
        let response = self.http.get(url).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// The metrics listener's exposition once `series` reaches `value` (within 10 s).
    async fn wait_for(&self, series: &str, value: f64) -> String {
        let url = format!("http://{}/metrics", self.metrics);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self
                .http
                .get(&url)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            // A series not yet exported has not reached it.
            if crate::support::sample_if_any(&text, series).is_some_and(|now| now >= value) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "{series} never reached {value}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, the exit awaited (10 s at most); the log.
    async fn stop(mut self) -> String {
        let pid = nix::unistd::Pid::from_raw(self.child.id().unwrap() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        assert!(waited.is_ok(), "no exit 10 s after SIGTERM");
        self.log_text()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

//! The shipped dashboard and alert rules against a real Prometheus scraping a sidecar under a
//! little load: every PromQL expression must parse and return data.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Every expression of `dashboards/redlease.json` (all panels, collapsed rows' panels too) and
/// `dashboards/alerts.yml` parses and returns data on Prometheus; `promtool` accepts the rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_and_alert_query_returns_data() {
    let Some(prometheus) = which("prometheus") else {
        eprintln!(
            "SKIPPED: the prometheus binary is not installed (scripts/install-deps.sh installs it)"
        );
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    promtool_checks_rules(&root.join("dashboards/alerts.yml"));
    let fleet = TestFleet::start(3);
    let sidecar = std::sync::Arc::new(TestSidecar::start(&fleet, &[]).await);
    let dir = tempfile::tempdir().unwrap();
    let server = start_prometheus(&prometheus, dir.path(), &sidecar.base).await;
    let load = tokio::spawn(generate_load(sidecar.clone(), Duration::from_secs(8)));
    load.await.unwrap();

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("dashboards/redlease.json")).unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    collect_panel_exprs(&dashboard["panels"], &mut exprs);
    let alerts = std::fs::read_to_string(root.join("dashboards/alerts.yml")).unwrap();
    let rules: Vec<String> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr:"))
        .map(|e| e.trim().to_string())
        .collect();
    assert!(
        exprs.len() >= 15 && rules.len() == 6,
        "{} panel and {} rule exprs",
        exprs.len(),
        rules.len()
    );

    exprs.extend(OPERATOR_QUERIES.map(String::from));
    let http = reqwest::Client::new();
    for expr in &exprs {
        let expr = substitute(expr);
        let result = query(&http, &server.url, &expr).await;
        assert!(
            !result.is_empty(),
            "dashboard query returned no data: {expr}"
        );
    }
    for rule in &rules {
        query(&http, &server.url, rule).await;
        let measured = strip_threshold(rule);
        let result = query(&http, &server.url, &measured).await;
        assert!(
            !result.is_empty(),
            "alert rule has no data to compare: {measured}"
        );
    }
}

/// The queries operators already alert on, exactly as they write them.
const OPERATOR_QUERIES: [&str; 3] = [
    "histogram_quantile(0.99, rate(lock_acquisition_latency_bucket[5m]))",
    "rate(lock_renewal_failures_total[5m]) / rate(lock_renewal_attempts_total[5m])",
    "sum(lock_active_leases)",
];

/// Grafana's variables, as a 1 s scrape over a short test needs them.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "1m")
}

/// The alert expression without its final `> 0.005`-style comparison.
fn strip_threshold(rule: &str) -> String {
    let cut = [" > ", " < ", " >= ", " <= ", " == ", " != "]
        .iter()
        .filter_map(|op| rule.rfind(op))
        .max()
        .unwrap_or(rule.len());
    rule[..cut].to_string()
}

fn collect_panel_exprs(panels: &Value, out: &mut Vec<String>) {
    for panel in panels.as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push(expr.to_string());
            }
        }
        collect_panel_exprs(&panel["panels"], out);
    }
}

/// Instant query; panics unless Prometheus parsed it. Returns the result vector.
async fn query(http: &reqwest::Client, base: &str, expr: &str) -> Vec<Value> {
    let url = format!("{base}/api/v1/query?query={}", percent_encode(expr));
    let answer: Value = http.get(url).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["status"], "success", "{expr}: {answer}");
    answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Acquisitions (granted, contended), auto-renewed leases, releases: every series moves.
async fn generate_load(sidecar: std::sync::Arc<TestSidecar>, duration: Duration) {
    let mut renewed = Vec::new();
    for n in 0..3 {
        let (status, lease) = sidecar
            .acquire(
                &format!("renewed-{n}"),
                json!({"owner": "load", "ttl_ms": 1000}),
            )
            .await;
        assert_eq!(status, 200);
        renewed.push(lease["lease_id"].as_str().unwrap().to_string());
    }
    let start = Instant::now();
    let mut round = 0;
    while start.elapsed() < duration {
        let resource = format!("job-{}", round % 4);
        let (status, lease) = sidecar
            .acquire(&resource, json!({"owner": "load", "ttl_ms": 2000}))
            .await;
        sidecar.acquire(&resource, json!({"owner": "rival"})).await;
        if status == 200 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            sidecar
                .delete(&format!(
                    "/v1/leases/{}",
                    lease["lease_id"].as_str().unwrap()
                ))
                .await;
        }
        round += 1;
    }
    for id in renewed {
        sidecar.post(&format!("/v1/leases/{id}/keepalive")).await;
    }
}

struct Prometheus {
    url: String,
    _child: tokio::process::Child,
}

async fn start_prometheus(binary: &Path, dir: &Path, target: &str) -> Prometheus {
    let target = target.trim_start_matches("http://");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
         - job_name: redlease\n    static_configs:\n      - targets: ['{target}']\n"
    );
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(binary)
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if let Ok(response) = http.get(format!("{url}/-/ready")).send().await {
            if response.status() == 200 {
                return Prometheus { url, _child: child };
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "prometheus not ready; log:\n{}",
        std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
    );
}

fn promtool_checks_rules(rules: &Path) {
    let output = std::process::Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(rules)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool check rules: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

fn which(binary: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(binary))
            .find(|path| path.is_file())
    })
}

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
        exprs.len() >= 15 && rules.len() == 8,
        "{} panel and {} rule exprs",
        exprs.len(),
        rules.len()
    );

    for expr in &exprs {
        assert!(
            expr.contains(INSTANCE_FILTER),
            "a panel query without {INSTANCE_FILTER}: {expr}"
        );
    }
    exprs.extend(OPERATOR_QUERIES.map(String::from));
    let http = reqwest::Client::new();
    instance_variable_lists_the_sidecar(&http, &server.url, &dashboard, &sidecar.addr).await;
    for expr in &exprs {
        let expr = substitute(expr);
        let result = query(&http, &server.url, &expr).await;
        assert!(
            !result.is_empty(),
            "dashboard query returned no data: {expr}"
        );
    }
    for rule in &rules {
        let firing = query(&http, &server.url, rule).await;
        if let Some(watched) = absent_of(rule) {
            // An absent() rule is silent while its target is scraped, and watches a series
            // that exists.
            assert!(firing.is_empty(), "{rule} fires with its target up");
            let result = query(&http, &server.url, watched).await;
            assert!(!result.is_empty(), "{rule} watches no series: {watched}");
            continue;
        }
        let measured = strip_threshold(rule);
        let result = query(&http, &server.url, &measured).await;
        assert!(
            !result.is_empty(),
            "alert rule has no data to compare: {measured}"
        );
    }
}

/// What every panel query selects by: the dashboard's `instance` variable.
const INSTANCE_FILTER: &str = r#"instance=~"$instance""#;

/// The dashboard's `instance` variable is `label_values(METRIC, instance)` of a metric whose
/// series carry the scraped sidecar's instance, and takes several values and "All" (`.*`).
async fn instance_variable_lists_the_sidecar(
    http: &reqwest::Client,
    base: &str,
    dashboard: &Value,
    sidecar: &std::net::SocketAddr,
) {
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let variable = variables
        .iter()
        .find(|v| v["name"] == "instance")
        .expect("an instance variable");
    assert_eq!(variable["type"], "query");
    assert_eq!(
        (
            variable["multi"].as_bool(),
            variable["includeAll"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert_eq!(variable["allValue"], ".*");
    let definition = variable["query"]["query"].as_str().unwrap();
    let metric = definition
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(", instance)"))
        .unwrap_or_else(|| panic!("not label_values(METRIC, instance): {definition}"));
    let series = query(http, base, metric).await;
    let instances: Vec<&str> = series
        .iter()
        .filter_map(|s| s["metric"]["instance"].as_str())
        .collect();
    assert_eq!(instances, [sidecar.to_string()], "{definition}");
}

/// The queries operators already alert on, exactly as they write them.
const OPERATOR_QUERIES: [&str; 3] = [
    "histogram_quantile(0.99, rate(lock_acquisition_latency_bucket[5m]))",
    "rate(lock_renewal_failures_total[5m]) / rate(lock_renewal_attempts_total[5m])",
    "sum(lock_active_leases)",
];

/// Grafana's variables, as a 1 s scrape over a short test needs them (`$instance`: every
/// instance, as the dashboard's "All").
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "1m")
        .replace("$instance", ".*")
}

/// The selector inside an `absent(…)` rule.
fn absent_of(rule: &str) -> Option<&str> {
    rule.strip_prefix("absent(")?.strip_suffix(')')
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

//! `/metrics`: the names operators alert on, bounded labels, and a clean `promtool` check.

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::json;

use crate::support::sample;

/// After a little traffic, `/metrics` has the documented series under the exact names the
/// alerts use, never a resource name in a label, and passes `promtool check metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_expose_the_names_operators_query() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let resource = "secret-resource-name";
    let (status, _) = sidecar
        .acquire(resource, json!({"owner": "a", "ttl_ms": 1000}))
        .await;
    assert_eq!(status, 200);
    sidecar.acquire(resource, json!({"owner": "b"})).await;
    let (status, released) = sidecar
        .acquire("released-resource", json!({"owner": "c"}))
        .await;
    assert_eq!(status, 200);
    let id = released["lease_id"].as_str().expect("a lease id");
    let (status, _) = sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let response = sidecar
        .http
        .get(format!("{}/metrics", sidecar.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    for series in [
        "lock_acquisition_latency_bucket{outcome=\"acquired\",le=\"0.001\"}",
        "lock_acquisition_attempts_total{outcome=\"contended\"}",
        "lock_renewal_attempts_total ",
        "lock_renewal_failures_total ",
        "lock_renewal_latency_bucket",
        "lock_active_leases ",
        "lock_adaptive_ttl ",
        "lock_leases_lost_total{reason=\"expired\"}",
        "lock_reentries_total{outcome=\"entered\"}",
        "redis_command_rtt_bucket{node=\"0\"",
        "redis_masters_up 3",
        "redis_masters_quarantined 0",
        "sidecar_busy_poll_seconds_total ",
        "sidecar_busy_poll_requests_total{outcome=\"answered_in_window\"} ",
        "sidecar_busy_poll_requests_total{outcome=\"outlasted_window\"} ",
        "sidecar_busy_poll_requests_total{outcome=\"not_polled\"} ",
        "sidecar_busy_poll_answers_total{outcome=\"next_request_in_window\"} ",
        "sidecar_busy_poll_answers_total{outcome=\"outlasted_window\"} ",
        "sidecar_busy_poll_answers_total{outcome=\"not_polled\"} ",
        "sidecar_busy_poll_cpu_lost_total ",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    // Recorded through instruments bound to their labels once: the samples arrive (other
    // tests in this process may add more).
    for series in [
        "lock_acquisition_latency_count{outcome=\"acquired\"}",
        "lock_acquisition_attempts_total{outcome=\"contended\"}",
        "lock_release_latency_count",
        "redis_command_rtt_count{node=\"0\"}",
    ] {
        let value = sample(&text, series);
        assert!(value >= 1.0, "{series} is {value} after traffic:\n{text}");
    }
    assert!(
        !text.contains(resource),
        "a resource name leaked into a label"
    );
    assert!(!text.contains("otel_scope"), "scope labels on every series");
    promtool_accepts(&text);
}

/// `promtool check metrics` (Debian's prometheus package, installed by scripts/install-deps.sh).
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("SKIPPED promtool check: promtool is not installed (scripts/install-deps.sh installs it)");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && report.trim().is_empty(),
        "promtool: {report}"
    );
}

//! What only this test binary can do: run the built `redlease`, and drive a `redlease serve`
//! over HTTP. Everything else the tests
//! share with the benches is in `redlease-testkit` (crates/redlease-testkit).

/// Runs the built `redlease ARGS` against `masters` (through `REDLEASE__MASTERS`), without the
/// test's `RUST_LOG`, and waits for it.
pub fn run_redlease(args: &[&str], masters: &str) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(args)
        .env("REDLEASE__MASTERS", masters)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Acquires `resource` with `body` on the sidecar at `base` (`http://host:port`), then releases
/// the lease when one was granted: the acquisition's answer, and the release's status (none
/// when nothing was granted).
pub async fn acquire_then_release(
    http: &reqwest::Client,
    base: &str,
    resource: &str,
    body: &serde_json::Value,
) -> (serde_json::Value, Option<u16>) {
    let url = format!("{base}/v1/locks/{resource}/acquire");
    let answer = http.post(url).json(body).send().await.unwrap();
    let lease: serde_json::Value = answer.json().await.unwrap();
    let Some(id) = lease["lease_id"].as_str() else {
        return (lease, None);
    };
    let released = http
        .delete(format!("{base}/v1/leases/{id}"))
        .send()
        .await
        .unwrap();
    let status = released.status().as_u16();
    (lease, Some(status))
}

/// The value of the sample named exactly `series` (name and labels) in exposition `text`;
/// a series missing fails the test.
pub fn sample(text: &str, series: &str) -> f64 {
    sample_if_any(text, series).unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
}

/// The value of the sample named exactly `series` in exposition `text`, if it is there.
pub fn sample_if_any(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

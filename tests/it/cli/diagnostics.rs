//! What the command line says when it cannot do what it was asked: every master named with
//! what it did, and each master reported as it answered, run after run.

use redlease_testkit::closed_port::ClosedPort;
use redlease_testkit::TestFleet;
use serde_json::Value;

use crate::support::run_redlease;

/// With every master refusing connections, `lock acquire` exits 4 and names each master on
/// stderr with the refusal, every run (the one-shot process must not give up before its
/// connection attempts report).
#[test]
fn no_quorum_names_every_master_and_why_every_run() {
    // Ports that refuse while held (a stopped master's port could be taken by another test).
    let closed: Vec<ClosedPort> = (0..3).map(|_| ClosedPort::new()).collect();
    let urls: Vec<String> = closed.iter().map(ClosedPort::url).collect();
    let masters = urls.join(",");
    for run in 0..5 {
        let output = run_redlease(&["lock", "acquire", "nightly"], &masters);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(4),
            "run {run}: {stdout} {stderr}"
        );
        for url in &urls {
            let named =
                |line: &&str| line.contains(url.as_str()) && line.contains("connection refused");
            let line = stderr.lines().find(named);
            assert!(
                line.is_some(),
                "run {run}: {url} not named with why: {stderr:?}"
            );
        }
        let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
        let whys: Vec<&str> = (answer["masters"].as_array().unwrap().iter())
            .map(|m| m["why"].as_str().unwrap())
            .collect();
        assert_eq!(whys.len(), 3, "{stdout}");
        assert!(
            whys.iter().all(|why| why.contains("connection refused")),
            "{stdout}"
        );
    }
}

/// On a healthy fleet of five, `locks show --json` reports every master up next to the lease
/// it holds, run after run: a master still being connected is waited for, not called down.
#[test]
fn locks_show_reports_every_healthy_master_up() {
    let fleet = TestFleet::start(5);
    let masters = fleet.urls().join(",");
    let acquired = run_redlease(&["lock", "acquire", "shown", "--ttl-ms", "30000"], &masters);
    assert_eq!(acquired.status.code(), Some(0), "{acquired:?}");
    for run in 0..20 {
        let output = run_redlease(&["locks", "show", "shown", "--json"], &masters);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "run {run}: {output:?}");
        let view: Value = serde_json::from_str(stdout.trim()).unwrap();
        let up: Vec<bool> = (view["masters"].as_array().unwrap().iter())
            .map(|m| m["up"].as_bool().unwrap())
            .collect();
        assert_eq!(up, [true; 5], "run {run}: {stdout}");
    }
}

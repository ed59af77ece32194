//! `redlease load`: every workload against both targets, closed and open loop.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use redlease::loadtest::{self, LoadOptions, Target, Workload};
use serde_json::Value;

use crate::support::fleet::test_fleet_options;
use crate::support::sidecar::TestSidecar;
use crate::support::TestFleet;

fn options(workload: Workload, clients: usize, ops: u64) -> LoadOptions {
    LoadOptions {
        workload,
        clients,
        resources: 2,
        ops: Some(ops),
        duration: None,
        rate: None,
        warmup: 5,
        ttl: Duration::from_secs(5),
        wait: Duration::from_secs(5),
        hold: Duration::from_millis(5),
    }
}

/// Closed-loop workloads through the engine complete every cycle without error, contention
/// shows up as retries, and nothing is left on the masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_workloads_complete_every_cycle() {
    let fleet = TestFleet::start(3);
    let target = Arc::new(engine_target(&fleet).await);
    for (workload, clients, ops) in [
        (Workload::Sequential, 1, 40),
        (Workload::Parallel, 4, 80),
        (Workload::Contention, 4, 40),
    ] {
        let report = loadtest::run(Arc::clone(&target), &options(workload, clients, ops)).await;
        assert_eq!((report.ops, report.errors), (ops, 0), "{report:?}");
        assert!(
            report.p50_us > 0 && report.p50_us <= report.p99_us && report.p99_us <= report.max_us
        );
        if workload == Workload::Contention {
            assert!(
                report.contention_retries > 0,
                "no contention over 2 resources: {report:?}"
            );
        }
    }
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// The sidecar target runs the same cycles over HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_workloads_complete_every_cycle() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let target = Arc::new(Target::Sidecar {
        http: reqwest::Client::new(),
        base: sidecar.base.clone(),
    });
    for (workload, clients, ops) in [(Workload::Sequential, 1, 30), (Workload::Contention, 4, 40)] {
        let report = loadtest::run(Arc::clone(&target), &options(workload, clients, ops)).await;
        assert_eq!((report.ops, report.errors), (ops, 0), "{report:?}");
    }
}

/// Open loop keeps to its rate: about rate × duration cycles are sent, warm-up excluded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_loop_keeps_its_rate() {
    let fleet = TestFleet::start(3);
    let target = Arc::new(engine_target(&fleet).await);
    let open = LoadOptions {
        ops: None,
        duration: Some(Duration::from_secs(1)),
        rate: Some(200.0),
        warmup: 0,
        ..options(Workload::Parallel, 4, 0)
    };
    let report = loadtest::run(target, &open).await;
    assert!((150..=205).contains(&report.ops), "{report:?}");
    assert_eq!(report.rate, Some(200.0));
}

/// `redlease load --json` prints one object with the documented fields.
#[test]
fn the_cli_prints_one_json_object_per_workload() {
    let fleet = TestFleet::start(3);
    let output = Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args([
            "load",
            "--masters",
            &fleet.urls().join(","),
            "--workload",
            "parallel",
        ])
        .args(["--clients", "2", "--ops", "20", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    for field in [
        "workload",
        "ops",
        "ops_per_s",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "errors",
    ] {
        assert!(report.get(field).is_some(), "{field} missing: {report}");
    }
    assert_eq!(
        (report["workload"].as_str(), report["ops"].as_u64()),
        (Some("parallel"), Some(20))
    );
}

async fn engine_target(fleet: &TestFleet) -> Target {
    let (fleet_options, engine_options) = (test_fleet_options(), Default::default());
    Target::connect_engine(&fleet.urls(), &fleet_options, engine_options)
        .await
        .unwrap()
}

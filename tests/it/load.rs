//! `redlease load`: every workload against both targets, closed and open loop.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use redlease::loadtest::{self, LoadOptions, Target, Workload};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::test_fleet_options;
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::Value;

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
        assert_eq!(
            report.latency.len(),
            ops,
            "the histogram holds every measured cycle"
        );
        assert_eq!(report.latency.max(), report.max_us);
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

/// The sidecar target runs the same cycles over HTTP, through the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_workloads_complete_every_cycle() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let client = redlease::client::Client::new(&sidecar.base).unwrap();
    let target = Arc::new(Target::Sidecar { client });
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
    let masters = fleet.urls().join(",");
    let (code, stdout, stderr) = load_cli(&[
        "--masters",
        &masters,
        "--workload",
        "parallel",
        "--clients",
        "2",
        "--ops",
        "20",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let report = report_of(&stdout);
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

/// `--hdr-out` and `--plot` write the run's merged histogram as HdrHistogram text (its total
/// count is the report's `ops`) and as an SVG; off a terminal no progress line is printed.
#[test]
fn the_cli_writes_the_histogram_text_and_plot_without_progress_off_a_terminal() {
    let fleet = TestFleet::start(3);
    let dir = tempfile::tempdir().unwrap();
    let (hgrm, svg) = (dir.path().join("run.hgrm"), dir.path().join("run.svg"));
    let masters = fleet.urls().join(",");
    let (code, stdout, stderr) = load_cli(&[
        "--masters",
        &masters,
        "--workload",
        "parallel",
        "--clients",
        "2",
        "--ops",
        "40",
        "--json",
        "--hdr-out",
        hgrm.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stderr.contains('\r') && !stderr.contains("cycles") && !stderr.contains("\x1b["),
        "progress output off a terminal: {stderr:?}"
    );
    let report = report_of(&stdout);
    assert_eq!(
        (report["ops"].as_u64(), report["errors"].as_u64()),
        (Some(40), Some(0))
    );
    assert!(
        report.get("latency").is_none(),
        "the histogram stays out of the JSON"
    );

    let text = std::fs::read_to_string(&hgrm).unwrap();
    assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"));
    assert_eq!(footer_total_count(&text), report["ops"].as_u64(), "{text}");
    let max_ms = report["max_us"].as_f64().unwrap() / 1000.0;
    assert!(
        text.contains(&format!("#[Max     = {max_ms:12.3},")),
        "{text}"
    );

    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("parallel workload, masters, 2 clients, 40 ops"));
    let rows = text
        .lines()
        .skip(2)
        .take_while(|l| !l.starts_with('#'))
        .count();
    let points = svg
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(points.split_whitespace().count(), rows);
}

/// An output file that cannot be created is a usage error, reported before any load is sent.
#[test]
fn an_unwritable_output_file_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("run.svg");
    let (code, stdout, stderr) = load_cli(&[
        "--masters",
        "redis://127.0.0.1:1",
        "--workload",
        "sequential",
        "--plot",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("cannot write --plot") && stderr.contains("no-such-dir"),
        "{stderr}"
    );
    assert!(stdout.is_empty());
}

/// The `Total count` of an HdrHistogram text footer.
fn footer_total_count(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("#[Max"))?;
    let count = line.split("Total count    =").nth(1)?;
    count.trim().trim_end_matches(']').trim().parse().ok()
}

async fn engine_target(fleet: &TestFleet) -> Target {
    let (fleet_options, engine_options) = (test_fleet_options(), Default::default());
    Target::connect_engine(&fleet.urls(), &fleet_options, engine_options)
        .await
        .unwrap()
}

/// Runs `redlease load ARGS` and returns (exit code, stdout, stderr).
fn load_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_redlease"))
        .arg("load")
        .args(args)
        .output()
        .unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).to_string();
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// The one JSON object a `--json` run printed.
fn report_of(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The fault workload starts its own masters, kills one at a third of the run and restarts
/// it at two thirds; with 2 of 3 masters left the clients keep going, and the report says when
/// each happened and what each phase cost.
#[test]
fn the_fault_workload_kills_and_restarts_a_master_it_started() {
    let (code, stdout, stderr) = load_cli(&[
        "--local-fleet",
        "3",
        "--workload",
        "fault",
        "--clients",
        "4",
        "--duration",
        "3s",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let report = report_of(&stdout);
    let fault = &report["fault"];
    let killed = fault["killed_at_s"].as_f64().unwrap();
    let restarted = fault["restarted_at_s"].as_f64().unwrap();
    assert!(
        (0.9..1.5).contains(&killed) && (1.9..2.5).contains(&restarted),
        "{report}"
    );
    assert!(
        fault["before_ops_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(
        fault["after_kill"]["ops_per_s"].as_f64().unwrap() > 0.0,
        "quorum kept: {report}"
    );
    assert_eq!(report["workload"], "fault");
}

/// Flag combinations the workloads cannot run are usage errors (exit 64), not panics.
#[test]
fn workloads_refuse_targets_they_cannot_use() {
    let cases: [&[&str]; 7] = [
        &["--masters", "redis://127.0.0.1:1", "--workload", "renewal"],
        &["--masters", "redis://127.0.0.1:1", "--workload", "fault"],
        &["--local-fleet", "2", "--workload", "fault"],
        &["--local-fleet", "3", "--workload", "fault", "--ops", "10"],
        &[
            "--masters",
            "redis://127.0.0.1:1",
            "--workload",
            "parallel",
            "--ttl-ms",
            "0",
        ],
        &[
            "--masters",
            "redis://127.0.0.1:1",
            "--workload",
            "parallel",
            "--duration",
            "1e20",
        ],
        &[
            "--masters",
            "redis://127.0.0.1:1",
            "--workload",
            "parallel",
            "--duration",
            "2000000",
        ],
    ];
    for args in cases {
        let (code, _, stderr) = load_cli(args);
        assert_eq!(code, Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains("--"), "{args:?}: {stderr}");
    }
}

/// The renewal workload holds leases on a sidecar, which renews them while the report reads
/// the sidecar's own metrics; every lease is still held at the end, and all are released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_workload_holds_leases_and_reads_the_sidecars_cost() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let base = sidecar.base.clone();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        load_cli(&[
            "--sidecar",
            &base,
            "--workload",
            "renewal",
            "--leases",
            "40",
            "--ttl-ms",
            "1000",
            "--duration",
            "2s",
            "--json",
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    let report = report_of(&stdout);
    assert_eq!(report["held_at_end"], 40, "{report}");
    // 40 leases renewed every half second or sooner for 2 s (the metrics are process-wide, so
    // other tests' renewals may add to the count, never subtract).
    assert!(report["ops"].as_u64().unwrap() >= 120, "{report}");
    assert!(report["p50_us"].as_u64().unwrap() > 0, "{report}");
    assert!(report["rss_max_bytes"].as_u64().unwrap() > 0, "{report}");
    assert!(report["cpu_percent"].as_f64().unwrap() >= 0.0, "{report}");
    assert_eventually!(
        fleet
            .lock_keys(0)
            .iter()
            .all(|k| !k.contains("load:renewal")),
        5,
        "every lease released after the run"
    );
}

/// An out-of-range `--ttl-ms` is refused the same way whatever the target: exit 64 with one
/// message, before any cycle, through a sidecar as on the masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_range_ttl_is_refused_for_every_target() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let (base, masters) = (sidecar.base.clone(), fleet.urls().join(","));
    let (through_sidecar, on_masters) = tokio::task::spawn_blocking(move || {
        let args = ["--workload", "parallel", "--ttl-ms", "5", "--ops", "16"];
        let through_sidecar = load_cli(&[&["--sidecar", base.as_str()][..], &args].concat());
        let on_masters = load_cli(&[&["--masters", masters.as_str()][..], &args].concat());
        (through_sidecar, on_masters)
    })
    .await
    .unwrap();
    assert_eq!(through_sidecar.0, Some(64), "{through_sidecar:?}");
    assert_eq!(on_masters.0, Some(64), "{on_masters:?}");
    assert_eq!(through_sidecar.1, "", "nothing measured");
    assert_eq!(through_sidecar.2, on_masters.2);
    assert!(
        through_sidecar.2.contains("--ttl-ms 5"),
        "{through_sidecar:?}"
    );
}

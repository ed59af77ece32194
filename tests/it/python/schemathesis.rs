//! Schemathesis against a live sidecar on real masters: every operation of the served OpenAPI
//! document but the event streams, examples, coverage, fuzzing and the stateful phase that
//! follows the document's links from an acquisition to its lease's operations.

use std::path::Path;
use std::time::Duration;

use redlease_testkit::TestFleet;
use tokio::process::Command;

use super::serve::{Serve, TOKEN};
use super::venv;

/// Fixed, so that a run is the same run every time and a failure reproduces.
const SEED: &str = "20261125";
/// Test cases per operation and phase: enough for the stateful phase to follow every link
/// from an acquisition (fewer leave some uncovered), and about 10 s on 2 cores.
const EXAMPLES: &str = "100";
/// What every answer must satisfy; the last is `tests/python/schemathesis_hooks.py`'s.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,problem_json_on_errors";
/// The event streams stay open (a lease's while it lives, an election's observers until the
/// client goes), and schemathesis reads an answer to its end: the lease's is left to
/// `tests/python/test_client.py`, which reads its first event, the observers' to
/// `tests/it/election.rs`.
const EXCLUDED: [&str; 2] = ["leaseEvents", "observeElection"];

/// Schemathesis (fixed seed, bounded examples) finds no 5xx, and no status code, content
/// type or body the document does not declare, and every error is problem+json, through the
/// bearer token, on every operation but the event streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_the_document_does_not_declare() {
    let schemathesis = venv::tool("schemathesis");
    let fleet = TestFleet::start(3);
    // A blocking acquisition the generator asks for waits 200 ms at most (400 beyond).
    let serve = Serve::start(&fleet, &[("REDLEASE__LEASE__MAX_WAIT_MS", "200")]).await;
    let work = tempfile::tempdir().unwrap();
    let hooks = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/schemathesis_hooks.py");
    let mut command = Command::new(schemathesis);
    command
        .arg("run")
        .arg(format!("{}/v1/openapi.json", serve.base))
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--seed", SEED, "--max-examples", EXAMPLES, "--workers", "1"])
        .args(["--checks", CHECKS])
        .args(
            EXCLUDED
                .iter()
                .flat_map(|id| ["--exclude-operation-id", id]),
        )
        .args(["--request-timeout", "10", "--generation-database", "none"])
        .args(["--no-shrink", "--output-truncate", "false"])
        .env("SCHEMATHESIS_HOOKS", hooks)
        .current_dir(work.path());
    let ran = venv::run(command, Duration::from_secs(240)).await;
    eprintln!(
        "schemathesis took {:.1} s:\n{}",
        ran.took.as_secs_f64(),
        summary(&ran.stdout)
    );
    assert!(
        ran.success,
        "schemathesis found failures:\n{}\n----- sidecar log -----\n{}",
        ran.output(),
        serve.log_text()
    );
    assert!(
        ran.stdout.contains(" generated") && !ran.stdout.contains("No test cases were generated"),
        "schemathesis generated nothing:\n{}",
        ran.output()
    );
}

/// The counts schemathesis printed: operations selected and tested, the stateful phase's
/// scenarios and links, test cases generated and failed, failures by kind.
fn summary(stdout: &str) -> String {
    let stateful = stdout
        .lines()
        .filter(|line| line.contains("Scenarios:") || line.contains("API Links:"))
        .chain(stdout.lines().filter(|line| line.starts_with("known: ")));
    let start = stdout.find("API Operations:").unwrap_or(stdout.len());
    let closing = stdout[start..]
        .lines()
        .filter(|line| !line.trim().is_empty());
    stateful
        .chain(closing)
        .take(30)
        .collect::<Vec<_>>()
        .join("\n")
}

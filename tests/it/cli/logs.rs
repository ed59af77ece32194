//! What the command line's JSON log lines carry: plain values an aggregator can split, not
//! strings holding JSON.

use serde_json::Value;

use redlease_testkit::TestFleet;

use crate::support::run_redlease;

/// A force release's log line (`--log-format json`) carries `removed` and `answers` as
/// comma-separated strings, one word per master for `answers`, never a string of JSON.
#[test]
fn force_release_logs_its_lists_as_plain_comma_separated_values() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let acquired = run_redlease(&["lock", "acquire", "stuck", "--owner", "job-7"], &masters);
    assert_eq!(acquired.status.code(), Some(0), "{acquired:?}");
    let lease: Value = serde_json::from_slice(&acquired.stdout).unwrap();
    let args = [
        "--log-format",
        "json",
        "locks",
        "force-release",
        "stuck",
        "--actor",
        "alice",
        "--reason",
        "stuck",
        "--holder-gone",
    ];
    let forced = run_redlease(&args, &masters);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    let stderr = String::from_utf8_lossy(&forced.stderr);
    let line = stderr.lines().find(|l| l.contains("\"force release\""));
    let event: Value = serde_json::from_str(line.unwrap_or_else(|| panic!("{stderr}"))).unwrap();
    let value = format!("{}|job-7", lease["lease_id"].as_str().unwrap());
    assert_eq!(event["removed"], [value.as_str(); 3].join(","), "{event}");
    assert_eq!(event["answers"], "deleted,deleted,deleted", "{event}");
}

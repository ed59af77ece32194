//! What the command line's JSON log lines carry: lists as JSON arrays an aggregator can
//! read, not strings holding JSON.

use serde_json::Value;

use redlease_testkit::TestFleet;

use crate::support::run_redlease;

/// A force release's log line (`--log-format json`) carries `removed` and `answers` as JSON
/// arrays, one word per master for `answers`, never a string of JSON; an owner holding a
/// comma and a quote stays one element.
#[test]
fn force_release_logs_its_lists_as_json_arrays() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let owner = "job-7, \"night\"";
    let acquired = run_redlease(&["lock", "acquire", "stuck", "--owner", owner], &masters);
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
    let value = format!("{}|{owner}", lease["lease_id"].as_str().unwrap());
    assert_eq!(
        event["removed"],
        serde_json::json!([value, value, value]),
        "{event}"
    );
    assert_eq!(
        event["answers"],
        serde_json::json!(["deleted", "deleted", "deleted"]),
        "{event}"
    );
}

/// Every log line names a lease `lease_id`, as the lease events do: no tracing field or span
/// of the sources calls it `lease` (an aggregator would need two queries to follow it).
#[test]
fn every_log_field_naming_a_lease_is_lease_id() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    let mut dirs = vec![root.join("src"), root.join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let field = ["lease = %", "lease = ?", "(lease = "];
                    if field.iter().any(|f| line.contains(f)) {
                        offenders.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(offenders.is_empty(), "{offenders:#?}");
}

//! `redlease elect` and `redlease elect observe`, the built binary against real masters and
//! through a sidecar: the command runs as the leader with its term and value in its
//! environment, a second candidate exits 3, and observe prints the changes as JSON lines.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::Value;
use tokio::time::Instant;

/// `redlease` with `args`, on `masters` (through `REDLEASE__MASTERS`), its output piped.
fn redlease(masters: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redlease"));
    command
        .args(args)
        .env("REDLEASE__MASTERS", masters)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// `redlease elect <args> -- sh -c '…'`: the command prints its term, value and token, then
/// sleeps `hold` seconds.
fn elect(masters: &str, args: &[&str], hold: &str) -> Command {
    let script =
        format!("echo \"$REDLEASE_TERM $REDLEASE_VALUE $REDLEASE_FENCING_TOKEN\"; sleep {hold}");
    let mut command = redlease(masters, &["elect"]);
    command.args(args).args(["--", "sh", "-c", &script]);
    command
}

/// The first line `child` prints (bounded: a child that prints nothing fails the test).
fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        let _ = reader.read_line(&mut line);
        let _ = tx.send((line, reader));
    });
    let (line, reader) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    child.stdout = Some(reader.into_inner());
    if line.is_empty() {
        let mut err = String::new();
        let _ = child.wait();
        child
            .stderr
            .as_mut()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        panic!("printed nothing: {err}");
    }
    line.trim_end().to_string()
}

/// Its exit code, stdout and stderr once it exits (bounded).
fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("redlease still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut out = String::new();
    let mut err = String::new();
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code().unwrap(), out, err)
}

async fn finished(child: Child) -> (i32, String, String) {
    let wait = move || finish(child, Duration::from_secs(30));
    tokio::task::spawn_blocking(wait).await.unwrap()
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Interrupts an observer (SIGINT), a moment after what it must print has happened (longer
/// than its 200 ms poll), and returns how it exited and what it printed.
async fn interrupted(observer: Child) -> (i32, String, String) {
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pid = nix::unistd::Pid::from_raw(observer.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    finished(observer).await
}

/// What an observer printed while a leader came and went: the leader (once, or again after
/// an `unknown` — a read while a campaign's term is being written, or its key released, on
/// some masters only), then the vacancy. `unknown` lines are left out; each leader line must
/// carry `term` and `value`.
fn leader_then_vacant(out: &str, term: &str, value: &str) {
    let lines = json_lines(out);
    let known: Vec<&Value> = lines.iter().filter(|l| l["state"] != "unknown").collect();
    let (last, leaders) = known
        .split_last()
        .unwrap_or_else(|| panic!("nothing: {out}"));
    assert_eq!(**last, serde_json::json!({"state": "vacant"}), "{out}");
    assert!(!leaders.is_empty(), "no leader: {out}");
    for leader in leaders {
        assert_eq!(leader["state"], "leader", "{out}");
        assert_eq!(leader["term"].to_string(), term, "{out}");
        assert_eq!(leader["value"], value, "{out}");
    }
}

/// On the masters: `elect` runs the command as the leader with `REDLEASE_TERM` (its fencing
/// token) and `REDLEASE_VALUE`; a second candidate with no wait exits 3 without running its
/// command; `elect observe` prints the vacancy, the leader with its term and value, and the
/// vacancy after the command exited, and exits 0 when interrupted; `--count 1` ends it after
/// one line, `--timeout-ms` one that saw no change after its first line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_the_command_as_leader_and_observe_prints_the_changes() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let mut observer = redlease(&masters, &["elect", "observe", "db"])
        .spawn()
        .unwrap();
    let vacant: Value = serde_json::from_str(&first_line(&mut observer)).unwrap();
    assert_eq!(vacant, serde_json::json!({"state": "vacant"}));

    let mut leader = elect(&masters, &["db", "--value", "10.0.0.1:80"], "1")
        .spawn()
        .unwrap();
    let printed = first_line(&mut leader);
    let fields: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{printed}");
    assert_eq!(fields[0], fields[2], "the term is the fencing token");
    assert_eq!(fields[1], "10.0.0.1:80");
    let rival = elect(&masters, &["db", "--value", "x", "--wait-ms", "0"], "0")
        .spawn()
        .unwrap();
    let (code, out, err) = finished(rival).await;
    assert_eq!(code, 3, "{err}");
    assert!(out.is_empty(), "ran without the leadership: {out}");
    assert!(err.contains("has another leader"), "{err}");
    let (code, _, err) = finished(leader).await;
    assert_eq!(code, 0, "{err}");

    let (code, out, err) = interrupted(observer).await;
    assert_eq!(code, 0, "{err}");
    leader_then_vacant(&out, fields[0], "10.0.0.1:80");

    let mut one = redlease(&masters, &["elect", "observe", "db", "--count", "1"]);
    let (code, out, err) = finished(one.spawn().unwrap()).await;
    assert_eq!((code, json_lines(&out).len()), (0, 1), "{out}{err}");
    let mut quiet = redlease(&masters, &["elect", "observe", "db", "--timeout-ms", "500"]);
    let (code, out, err) = finished(quiet.spawn().unwrap()).await;
    assert_eq!((code, json_lines(&out).len()), (0, 1), "{out}{err}");
    let mut bad = redlease(
        &masters,
        &["elect", "db", "--value", "a\u{1}b", "--", "true"],
    );
    let (code, _, err) = finished(bad.spawn().unwrap()).await;
    assert_eq!(code, 64, "{err}");
}

/// Through a sidecar: the same environment, the second candidate exits 3, and `elect observe
/// --sidecar` prints the leader and then the vacancy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sidecar_elect_and_observe_work_alike() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let base = sidecar.base.as_str();
    let mut leader = elect("", &["db", "--value", "v", "--sidecar", base], "2")
        .spawn()
        .unwrap();
    let printed = first_line(&mut leader);
    let fields: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!((fields.len(), fields[1]), (3, "v"), "{printed}");
    assert_eq!(fields[0], fields[2]);
    let observe = ["elect", "observe", "db", "--sidecar", base];
    let observer = redlease("", &observe).spawn().unwrap();
    let rival = elect("", &["db", "--sidecar", base], "0").spawn().unwrap();
    let (code, out, err) = finished(rival).await;
    assert_eq!((code, out.as_str()), (3, ""), "{err}");
    let (code, _, err) = finished(leader).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = interrupted(observer).await;
    assert_eq!(code, 0, "{err}");
    leader_then_vacant(&out, fields[0], "v");
}

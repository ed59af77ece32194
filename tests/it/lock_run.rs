//! `redlease lock run RESOURCE -- CMD`, the built binary against real masters (and a sidecar):
//! one command at a time, the lease in its environment, its exit code passed through, stopped
//! when the lease is lost, never run without the lock.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

/// `redlease lock run` with `args`, on `masters` (through `REDLEASE__MASTERS`).
fn lock_run(masters: &str, args: &[impl AsRef<std::ffi::OsStr>]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redlease"));
    command
        .args(["lock", "run"])
        .args(args)
        .env("REDLEASE__MASTERS", masters)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// A running `lock run`, killed if the test ends first.
struct Running(Child);

impl Running {
    fn start(mut command: Command) -> Self {
        Self(command.spawn().unwrap())
    }

    /// Its exit status, or a panic when it runs longer than `limit`.
    fn exit_within(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "lock run still running after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its exit code, once it exits within `limit`, and what it wrote on stderr.
    fn code_within(&mut self, limit: Duration) -> (i32, String) {
        let status = self.exit_within(limit);
        let mut stderr = String::new();
        if let Some(pipe) = self.0.stderr.as_mut() {
            std::io::Read::read_to_string(pipe, &mut stderr).unwrap();
        }
        (status.code().unwrap(), stderr)
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `path` exists (the command got going), for at most `limit`.
fn wait_for_file(path: &Path, limit: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < limit, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A shell command (`sh -c SCRIPT`) run in `dir`.
fn sh(script: &str, dir: &Path) -> Vec<String> {
    let script = format!("cd '{}' && {script}", dir.display());
    vec!["--".into(), "sh".into(), "-c".into(), script]
}

fn with(args: &[&str], command: &[String]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.extend_from_slice(command);
    all
}

/// Three runs of one resource started together all run, one at a time, each with a larger
/// fencing token than the one before.
#[test]
fn concurrent_runs_take_turns_with_growing_tokens() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let script = "echo start $(date +%s%N) $REDLEASE_FENCING_TOKEN >> log; sleep 0.3; \
                  echo end $(date +%s%N) >> log";
    let args = with(&["shared", "--wait-ms", "10000"], &sh(script, dir.path()));
    let mut runs: Vec<Running> = (0..3)
        .map(|_| Running::start(lock_run(&masters, &args)))
        .collect();
    for run in &mut runs {
        let (code, stderr) = run.code_within(Duration::from_secs(15));
        assert_eq!(code, 0, "{stderr}");
    }
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 6, "{log}");
    let (mut last_end, mut last_token) = (0u128, 0u64);
    for pair in lines.chunks(2) {
        let (start, end) = (&pair[0], &pair[1]);
        assert_eq!((start[0], end[0]), ("start", "end"), "overlap:\n{log}");
        let started: u128 = start[1].parse().unwrap();
        assert!(
            started > last_end,
            "a run started before the last ended:\n{log}"
        );
        let token: u64 = start[2].parse().unwrap();
        assert!(token > last_token, "tokens do not grow:\n{log}");
        (last_end, last_token) = (end[1].parse().unwrap(), token);
    }
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// The command's exit code comes back, a signal's as 128 + its number; the command sees
/// its lease; the lock is released after it.
#[test]
fn the_commands_exit_code_passes_through() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let (code, stderr) = Running::start(lock_run(&masters, &["job", "--", "sh", "-c", "exit 7"]))
        .code_within(Duration::from_secs(10));
    assert_eq!(code, 7, "{stderr}");
    let check = r#"test "$REDLEASE_RESOURCE" = job && test ${#REDLEASE_LEASE_ID} = 32 \
                   && test "$REDLEASE_FENCING_TOKEN" -gt 0 || exit 9; kill -TERM $$"#;
    let (code, stderr) = Running::start(lock_run(&masters, &["job", "--", "sh", "-c", check]))
        .code_within(Duration::from_secs(10));
    assert_eq!(code, 128 + 15, "{stderr}");
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// A lease force-released by an operator is revoked at once: `lock run` hears it, stops the
/// command, and only then acknowledges, so the force release answers `holder_told: true`
/// after the command's last write and the next holder takes the lock at once; `lock run`
/// exits 75 saying why.
#[test]
fn a_revoked_lease_stops_the_command_before_the_next_holder_starts() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let command = sh(
        "trap 'touch stopped; exit 143' TERM; touch started; sleep 5 & wait; touch finished",
        dir.path(),
    );
    let args = with(&["job", "--ttl-ms", "10000"], &command);
    let mut run = Running::start(lock_run(&masters, &args));
    wait_for_file(&dir.path().join("started"), Duration::from_secs(5));
    let force = [
        "locks",
        "force-release",
        "job",
        "--actor",
        "ops",
        "--reason",
        "test",
    ];
    let forced = crate::support::run_redlease(&force, &masters);
    let answered = std::time::SystemTime::now();
    assert!(forced.status.success(), "{forced:?}");
    let answer: serde_json::Value = serde_json::from_slice(&forced.stdout).unwrap();
    assert_eq!(answer["holder_told"], true, "{answer}");
    let stopped = dir.path().join("stopped");
    let stopped_at = std::fs::metadata(&stopped).and_then(|m| m.modified());
    let stopped_at = stopped_at.expect("the command was not stopped before the answer");
    assert!(stopped_at <= answered);
    let next = crate::support::run_redlease(&["lock", "acquire", "job"], &masters);
    assert!(next.status.success(), "{next:?}");
    let (code, stderr) = run.code_within(Duration::from_secs(4));
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("revoked"), "{stderr}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!dir.path().join("finished").exists());
}

/// With a majority of masters frozen the lease runs out: a command that ignores SIGTERM is
/// killed after the grace period, and `lock run` exits 75 in bounded time.
#[test]
fn a_frozen_majority_stops_even_a_command_that_ignores_sigterm() {
    let mut fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let command = sh(
        "trap '' TERM; touch started; sleep 5; touch finished",
        dir.path(),
    );
    let args = with(
        &["job", "--ttl-ms", "2000", "--kill-grace-ms", "300"],
        &command,
    );
    let mut run = Running::start(lock_run(&masters, &args));
    wait_for_file(&dir.path().join("started"), Duration::from_secs(5));
    fleet.servers[0].pause();
    fleet.servers[1].pause();
    let start = Instant::now();
    let (code, stderr) = run.code_within(Duration::from_secs(8));
    let took = start.elapsed();
    fleet.servers[0].resume();
    fleet.servers[1].resume();
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
    assert!(!dir.path().join("finished").exists());
    eprintln!("frozen majority: lock run exited 75 after {took:?}");
}

/// A grace that would leave renewals no room in the TTL is refused (64) before anything is
/// taken; without the flag the default grace shrinks to fit a short TTL.
#[test]
fn a_grace_too_long_for_the_ttl_is_refused() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let touch = sh("touch ran", dir.path());
    let args = with(
        &["job", "--ttl-ms", "1000", "--kill-grace-ms", "151"],
        &touch,
    );
    let (code, stderr) =
        Running::start(lock_run(&masters, &args)).code_within(Duration::from_secs(5));
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("--kill-grace-ms 151"), "{stderr}");
    assert!(!dir.path().join("ran").exists());
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
    let args = with(&["job", "--ttl-ms", "1000"], &touch);
    let (code, stderr) =
        Running::start(lock_run(&masters, &args)).code_within(Duration::from_secs(5));
    assert_eq!(code, 0, "{stderr}");
    assert!(dir.path().join("ran").exists());
}

/// A held lock with no wait exits 3, and without a quorum 4: the command never runs.
#[test]
fn without_the_lock_the_command_never_runs() {
    let mut fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let holder = Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args([
            "lock",
            "acquire",
            "job",
            "--ttl-ms",
            "20000",
            "--masters",
            &masters,
        ])
        .output()
        .unwrap();
    assert!(holder.status.success());
    let touch = sh("touch ran", dir.path());
    let args = with(&["job", "--wait-ms", "0"], &touch);
    let (code, stderr) =
        Running::start(lock_run(&masters, &args)).code_within(Duration::from_secs(5));
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("held"), "{stderr}");
    fleet.servers[0].stop();
    fleet.servers[1].stop();
    let args = with(&["other", "--connect-timeout-ms", "200"], &touch);
    let (code, stderr) =
        Running::start(lock_run(&masters, &args)).code_within(Duration::from_secs(5));
    assert_eq!(code, 4, "{stderr}");
    assert!(!dir.path().join("ran").exists());
}

/// SIGTERM to `lock run` reaches the command, which finishes its own way; its exit code
/// comes back and the lock is released after it.
#[test]
fn sigterm_is_passed_on_to_the_command() {
    let fleet = TestFleet::start(3);
    let masters = fleet.urls().join(",");
    let dir = tempfile::tempdir().unwrap();
    let script = "trap 'touch stopped; exit 0' TERM; touch started; while :; do sleep 0.05; done";
    let args = with(&["job"], &sh(script, dir.path()));
    let mut run = Running::start(lock_run(&masters, &args));
    wait_for_file(&dir.path().join("started"), Duration::from_secs(5));
    assert!(!fleet.lock_keys_on(&[0, 1, 2]).is_empty());
    run.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, stderr) = run.code_within(Duration::from_secs(5));
    assert_eq!(code, 0, "{stderr}");
    assert!(dir.path().join("stopped").exists());
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// `lock run` through a sidecar, as a tokio child process (the sidecar runs in this test).
async fn run_through(sidecar: &TestSidecar, args: &[String]) -> (i32, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlease"))
        .args(["lock", "run", "--sidecar", &sidecar.base])
        .args(args)
        .env_remove("REDLEASE__MASTERS")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output());
    let output = output.await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    (output.status.code().unwrap(), stderr)
}

/// Through a sidecar: the command runs with its lease, its exit code comes back, and the
/// lease is released after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sidecar_the_command_runs_with_its_lease() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let script = "echo $REDLEASE_LEASE_ID $REDLEASE_FENCING_TOKEN > lease; exit 5";
    let (code, stderr) = run_through(&sidecar, &with(&["job"], &sh(script, dir.path()))).await;
    assert_eq!(code, 5, "{stderr}");
    let lease = std::fs::read_to_string(dir.path().join("lease")).unwrap();
    let (id, token) = lease.trim().split_once(' ').unwrap();
    assert!(token.parse::<u64>().unwrap() >= 1);
    let (status, view) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!((status, view["state"].as_str()), (200, Some("released")));
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// Through a sidecar, a held lock with no wait exits 3 without running the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sidecar_a_held_lock_exits_3() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let (status, _) = sidecar
        .acquire("job", serde_json::json!({"owner": "other"}))
        .await;
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().unwrap();
    let args = with(&["job", "--wait-ms", "0"], &sh("touch ran", dir.path()));
    let (code, stderr) = run_through(&sidecar, &args).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(!dir.path().join("ran").exists());
}

/// Through a sidecar, a lease lost while the command runs (its keys deleted on every master)
/// stops the command: exit 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sidecar_a_lost_lease_exits_75() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let command = sh("touch started; sleep 5; touch finished", dir.path());
    let args = with(&["job", "--ttl-ms", "1000"], &command);
    let run = run_through(&sidecar, &args);
    let lose = async {
        let started = dir.path().join("started");
        redlease_testkit::assert_eventually!(started.exists(), 5, "the command never started");
        for i in 0..3 {
            fleet.command(i, &["DEL", "redlease:lock:job"]);
        }
    };
    let ((code, stderr), ()) = tokio::join!(run, lose);
    assert_eq!(code, 75, "{stderr}");
    assert!(!dir.path().join("finished").exists());
}

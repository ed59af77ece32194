//! `lock run` contains its command: a command that ignores SIGTERM never writes after its
//! lease's validity ends, nor once the next holder writes, when `lock run` is killed, stopped,
//! or cut off from a majority of masters (directly, or through a sidecar).
//!
//! Each command appends wall-clock timestamps (ns) to a file every 20 ms. The first holder
//! reaches the masters through fault proxies, whose record of what they forwarded bounds the
//! end of its validity: no renewal can have started after the last script call a proxy read,
//! so the validity ends before that instant + the TTL. The next holder talks to the masters
//! directly and waits for the lock.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use redlease_testkit::proxy::{Fault, FaultProxy};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;

const TTL_MS: u64 = 1_500;
const GRACE_MS: &str = "250";
/// The first holder's command: ignores SIGTERM (so do the `date` and `sleep` it starts),
/// says its pid, then writes a timestamp every 20 ms until killed.
const STUBBORN: &str =
    "trap '' TERM; echo $$ > pid; while :; do date +%s%N >> first; sleep 0.02; done";
/// The next holder's command: ten timestamps.
const NEXT: &str = "i=0; while [ $i -lt 10 ]; do date +%s%N >> next; sleep 0.02; i=$((i+1)); done";

/// A process this test started (a `lock run`), SIGKILLed and reaped when the test ends.
struct Process(Child);

/// The first command's process group, known by the pid its leader wrote and that process's
/// start time; SIGKILLed when the test ends if that same process is still running.
struct Group {
    pid: i32,
    started: String,
}

/// Three masters, a proxy in front of each, and a directory for the commands' files.
struct Scene {
    fleet: TestFleet,
    proxies: Vec<FaultProxy>,
    dir: tempfile::TempDir,
}

// === the scene ===

impl Scene {
    async fn start() -> Self {
        let fleet = TestFleet::start(3);
        let mut proxies = Vec::new();
        for server in &fleet.servers {
            proxies.push(FaultProxy::start(server.port()).await);
        }
        let dir = tempfile::tempdir().unwrap();
        Self {
            fleet,
            proxies,
            dir,
        }
    }

    fn proxied(&self) -> String {
        let urls: Vec<String> = self.proxies.iter().map(|p| p.url()).collect();
        urls.join(",")
    }

    /// The first holder: `lock run` through `to` (`--masters URLS` or `--sidecar URL`) running
    /// the stubborn command; returns once it has held the lock for a second (renewals done).
    async fn first(&self, to: [&str; 2]) -> (Process, Group) {
        let mut command = sh_command(STUBBORN, self.dir.path());
        let ttl = TTL_MS.to_string();
        let flags = ["job", "--ttl-ms", &ttl, "--kill-grace-ms", GRACE_MS];
        command.splice(0..0, to.iter().chain(&flags).map(|a| a.to_string()));
        let process = Process::start(&command);
        let group = Group::of(self.dir.path()).await;
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        (process, group)
    }

    /// The next holder, on the masters directly: waits for the lock and writes its ten
    /// timestamps.
    async fn next_holder(&self) {
        let masters = self.fleet.urls().join(",");
        let mut args = vec!["--masters", &masters, "job", "--wait-ms", "15000"];
        let command = sh_command(NEXT, self.dir.path());
        args.extend(command.iter().map(String::as_str));
        let (code, stderr) = Process::start(&args).exit_within(20).await;
        assert_eq!(code, 0, "the next holder: {stderr}");
    }

    /// When the first lease's validity ended at the latest: the last script call (renewal)
    /// read by `proxies` up to `until_ms`, plus the TTL; Unix ms.
    fn validity_end(&self, proxies: &[usize], until_ms: u64) -> u64 {
        let sent = proxies
            .iter()
            .flat_map(|&i| self.proxies[i].sent_at(b"EVALSHA"));
        let last = sent.filter(|&at| at <= until_ms).max();
        last.expect("no renewal was sent") + TTL_MS
    }

    /// The first command wrote nothing at or after `validity_end_ms`, nor once the next
    /// holder had begun; and its group is gone.
    fn assert_contained(&self, group: &Group, validity_end_ms: u64) {
        let first = stamps(&self.dir.path().join("first"));
        let next = stamps(&self.dir.path().join("next"));
        assert!(first.len() >= 10, "the first command hardly ran");
        assert_eq!(next.len(), 10, "the next holder's command did not finish");
        let last = *first.iter().max().unwrap();
        let end = u128::from(validity_end_ms) * 1_000_000;
        assert!(
            last < end,
            "the first command wrote {} ms after its lease's validity ended",
            (last - end) / 1_000_000
        );
        let next_began = *next.iter().min().unwrap();
        assert!(
            last < next_began,
            "the first command wrote {} ms after the next holder began",
            (last - next_began) / 1_000_000
        );
        assert!(!group.alive(), "the first command is still running");
        eprintln!(
            "last write {} ms before the validity's end bound, {} ms before the next holder",
            (end - last) / 1_000_000,
            (next_began - last) / 1_000_000
        );
    }
}

/// `lock run` SIGKILLed: its watchdog sees the pipe close and stops the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_lock_run_leaves_no_command_running() {
    let scene = Scene::start().await;
    let (first, group) = scene.first(["--masters", &scene.proxied()]).await;
    first.signal(Signal::SIGKILL);
    let killed_ms = unix_ms();
    scene.next_holder().await;
    let end = scene.validity_end(&[0, 1, 2], killed_ms);
    scene.assert_contained(&group, end);
}

/// `lock run` SIGSTOPped: its watchdog kills the command before the validity ends; resumed,
/// `lock run` says the lease was lost (75).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_lock_run_leaves_no_command_running() {
    let scene = Scene::start().await;
    let (mut first, group) = scene.first(["--masters", &scene.proxied()]).await;
    first.signal(Signal::SIGSTOP);
    let stopped_ms = unix_ms();
    scene.next_holder().await;
    let end = scene.validity_end(&[0, 1, 2], stopped_ms);
    scene.assert_contained(&group, end);
    first.signal(Signal::SIGCONT);
    let (code, stderr) = first.exit_within(10).await;
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("killed at the end"), "{stderr}");
}

/// Renewals that cannot reach a majority (two masters black-holed): the command is killed
/// before the validity ends, whatever the grace, and `lock run` exits 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_cut_off_from_a_majority_stops_its_command_in_time() {
    let scene = Scene::start().await;
    let (mut first, group) = scene.first(["--masters", &scene.proxied()]).await;
    let cut_ms = cut_two(&scene);
    scene.next_holder().await;
    let end = scene.validity_end(&[0, 1], cut_ms);
    scene.assert_contained(&group, end);
    heal(&scene);
    let (code, stderr) = first.exit_within(15).await;
    assert_eq!(code, 75, "{stderr}");
    assert!(stderr.contains("SIGKILL"), "{stderr}");
}

/// Through a sidecar whose renewals cannot reach a majority: the same, from the validity the
/// sidecar's events report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_sidecar_cut_off_from_a_majority_the_command_stops_in_time() {
    let scene = Scene::start().await;
    let proxied = scene.proxies.iter().map(|p| p.url()).collect();
    let sidecar = TestSidecar::start_on(proxied, &[]).await;
    let (mut first, group) = scene.first(["--sidecar", &sidecar.base]).await;
    let cut_ms = cut_two(&scene);
    scene.next_holder().await;
    let end = scene.validity_end(&[0, 1], cut_ms);
    scene.assert_contained(&group, end);
    heal(&scene);
    let (code, stderr) = first.exit_within(15).await;
    assert_eq!(code, 75, "{stderr}");
}

/// Renewals move the deadline: a command that runs for three TTLs, on the masters and through
/// a sidecar, is never stopped while its lease is renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_a_long_command_running() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let masters = fleet.urls().join(",");
    for to in [["--masters", &masters], ["--sidecar", &sidecar.base]] {
        let args = [to[0], to[1], "job", "--ttl-ms", "800", "--", "sleep", "2.4"];
        let (code, stderr) = Process::start(&args).exit_within(10).await;
        assert_eq!(code, 0, "{}: {stderr}", to[0]);
    }
}

/// Black-holes masters 0 and 1 behind their proxies (dropping what is sent); returns when,
/// in Unix ms: nothing the proxies read after that reached them.
fn cut_two(scene: &Scene) -> u64 {
    scene.proxies[0].set_both(Fault::BlackholeDrop);
    scene.proxies[1].set_both(Fault::BlackholeDrop);
    unix_ms()
}

fn heal(scene: &Scene) {
    for proxy in &scene.proxies {
        proxy.set_both(Fault::Pass);
    }
}

// === processes and files ===

impl Process {
    /// `redlease lock run ARGS`.
    fn start(args: &[impl AsRef<std::ffi::OsStr>]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(["lock", "run"])
            .args(args)
            .env_remove("REDLEASE__MASTERS")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Self(child)
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.0.id() as i32), signal).unwrap();
    }

    /// Its exit code and stderr, once it exits within `secs` seconds (else a panic).
    async fn exit_within(&mut self, secs: u64) -> (i32, String) {
        redlease_testkit::assert_eventually!(
            self.0.try_wait().unwrap().is_some(),
            secs,
            "lock run still running after {secs} s"
        );
        let mut stderr = String::new();
        let pipe = self.0.stderr.as_mut().unwrap();
        std::io::Read::read_to_string(pipe, &mut stderr).unwrap();
        let status = self.0.wait().unwrap();
        (status.code().unwrap(), stderr)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Group {
    /// The group of the command that wrote `pid` in `dir`, once it has.
    async fn of(dir: &Path) -> Self {
        let file = dir.join("pid");
        let read = || std::fs::read_to_string(&file).unwrap_or_default();
        redlease_testkit::assert_eventually!(
            read().ends_with('\n'),
            10,
            "the command never started"
        );
        let pid: i32 = read().trim().parse().unwrap();
        let (_, started) = stat(pid).unwrap();
        Self { pid, started }
    }

    /// Whether the leader still runs (a zombie does not): the same pid, started at the same
    /// instant.
    fn alive(&self) -> bool {
        stat(self.pid).is_some_and(|(state, started)| state != "Z" && started == self.started)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.alive() {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

/// A process's state and start time (clock ticks since boot), from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(String, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's name, which ends with the last ')': the state is the
    // third field of the line, the start time the 22nd.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((fields.first()?.to_string(), fields.get(19)?.to_string()))
}

/// `lock run`'s `-- sh -c SCRIPT`, run in `dir`.
fn sh_command(script: &str, dir: &Path) -> Vec<String> {
    let script = format!("cd '{}' && {script}", dir.display());
    ["--", "sh", "-c", &script].map(String::from).to_vec()
}

/// The timestamps in `path` (a line cut short by a kill is skipped).
fn stamps(path: &Path) -> Vec<u128> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|line| line.parse().ok()).collect()
}

fn unix_ms() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    now.as_millis() as u64
}

/// The watchdog says it killed the command only when its SIGKILL reached a process still
/// running: a command that had already exited (its zombie not yet reaped, as when `lock run`
/// is stopped) is not reported killed; a running one is.
#[test]
fn the_watchdog_reports_only_a_kill_that_reached_a_running_command() {
    let watchdog = |group: u32| {
        let mut watchdog = Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(["__watchdog", "--grace-ms", "100"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = watchdog.stdin.take().unwrap();
        // `kill-at 0`: due at once. The pipe stays open: `lock run` is there, just late.
        std::io::Write::write_all(&mut pipe, format!("group {group}\nkill-at 0\n").as_bytes())
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while watchdog.try_wait().unwrap().is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watchdog did not act"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(pipe);
        let output = watchdog.wait_with_output().unwrap();
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    let in_own_group = |program: &str, args: &[&str]| {
        let mut command = Command::new(program);
        std::os::unix::process::CommandExt::process_group(command.args(args), 0);
        command.spawn().unwrap()
    };
    let mut exited = in_own_group("true", &[]);
    let pid = exited.id();
    // Exited, not reaped: a zombie, as the command of a stopped `lock run` is.
    let stat = format!("/proc/{pid}/stat");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&stat).unwrap().contains(") Z ") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "`true` did not exit"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let said = watchdog(pid);
    assert!(
        !said.contains("kill"),
        "an exited command reported killed: {said}"
    );
    exited.wait().unwrap();

    let mut sleeping = in_own_group("sleep", &["30"]);
    let said = watchdog(sleeping.id());
    assert!(said.contains("killed the command (SIGKILL)"), "{said}");
    let status = sleeping.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
}

//! The watchdog of `lock run`: a process of its own (`redlease __watchdog`, hidden from
//! `--help`) that kills the command's process group when `lock run` cannot: stopped (SIGSTOP,
//! a debugger, Ctrl-Z) or dead (SIGKILL, the OOM killer). `lock run` starts it from its own
//! binary, in a process group of its own (a terminal's Ctrl-Z does not stop it), and talks to
//! it through a pipe on its stdin that only `lock run` holds, one line per message:
//!
//! - `group PGID`: the command's process group;
//! - `kill-at NS`: when the group must be dead, on CLOCK_MONOTONIC (one clock for every
//!   process of the machine), sent again whenever a renewal moves it;
//! - `done`: the command has exited and been reaped; the watchdog exits.
//!
//! At `kill-at` with no newer one, the watchdog SIGKILLs the group and exits. At EOF without
//! `done` (`lock run` died), it SIGTERMs the group at once and SIGKILLs what is left of it
//! after the grace, or at `kill-at` if that comes first. This file owns both ends: the
//! process ([`serve`]) and `lock run`'s handle on it ([`Watchdog`]).

use std::process::Stdio;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

use super::group;
use crate::cli::{EXIT_OK, EXIT_UNAVAILABLE};

/// The hidden subcommand that runs the watchdog.
pub const WATCHDOG_COMMAND: &str = "__watchdog";
/// How often a group told to stop is checked for processes left.
const GROUP_POLL: Duration = Duration::from_millis(10);
/// How long `lock run` waits for the watchdog to exit after `done`.
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// `redlease __watchdog`'s arguments.
#[derive(Debug, clap::Args)]
pub struct WatchdogArgs {
    /// Once `lock run` is gone: how long the command has between SIGTERM and SIGKILL.
    #[arg(long)]
    grace_ms: u64,
}

/// A message from `lock run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Message {
    Group(Pid),
    /// CLOCK_MONOTONIC, in ns.
    KillAt(u64),
    Done,
}

/// What the watchdog knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Watch {
    group: Option<Pid>,
    /// CLOCK_MONOTONIC, in ns.
    kill_at: Option<u64>,
}

// === the watchdog process ===

/// Runs the watchdog until `done`, the SIGKILL of the group, or the end of the group after
/// `lock run` is gone; returns its exit code.
pub fn serve(args: &WatchdogArgs) -> u8 {
    let grace = Duration::from_millis(args.grace_ms);
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::Builder::new().spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if parse(&line).is_some_and(|message| tx.send(message).is_err()) {
                return;
            }
        }
    });
    if let Err(error) = reader {
        eprintln!("redlease: the watchdog cannot read its pipe: {error}");
        return EXIT_UNAVAILABLE;
    }
    let mut watch = Watch::default();
    loop {
        // A message already queued (a newer `kill-at`) is taken even when the time is up.
        let message = match watch.kill_in(now_ns()) {
            None => rx.recv().ok(),
            Some(wait) => match rx.recv_timeout(wait) {
                Ok(message) => Some(message),
                Err(RecvTimeoutError::Timeout)
                    if watch.kill_in(now_ns()) == Some(Duration::ZERO) =>
                {
                    return watch.kill();
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => None,
            },
        };
        match message {
            Some(Message::Group(group)) => watch.group = Some(group),
            Some(Message::KillAt(at)) => watch.kill_at = Some(at),
            Some(Message::Done) => return EXIT_OK,
            None => return watch.orphaned(grace),
        }
    }
}

/// One line of the pipe; `None` for anything else (a group must be a real one: above 1).
fn parse(line: &str) -> Option<Message> {
    let (word, value) = line.split_once(' ').unwrap_or((line, ""));
    match (word, value.parse::<u64>().ok()) {
        ("done", _) if value.is_empty() => Some(Message::Done),
        ("kill-at", Some(at)) => Some(Message::KillAt(at)),
        ("group", Some(group)) if group > 1 => {
            let group = i32::try_from(group).ok()?;
            Some(Message::Group(Pid::from_raw(group)))
        }
        _ => None,
    }
}

// === impl Watch ===

impl Watch {
    /// How long until the group must be killed (zero: now); `None` until both are known.
    fn kill_in(&self, now_ns: u64) -> Option<Duration> {
        self.group?;
        let left = self.kill_at?.saturating_sub(now_ns);
        Some(Duration::from_nanos(left))
    }

    /// When to SIGKILL the group once `lock run` is gone at `now_ns`.
    fn orphan_kill_at(&self, now_ns: u64, grace: Duration) -> u64 {
        let after_grace = now_ns.saturating_add(nanos(grace));
        self.kill_at.map_or(after_grace, |at| at.min(after_grace))
    }

    /// `kill-at` came and `lock run` sent no newer one. Said on stderr only when the kill
    /// reached a command still running: one that exited meanwhile was not killed.
    fn kill(&self) -> u8 {
        if group::kill_running(self.group) {
            eprintln!(
                "redlease: lock run did not stop its command before the end of the lease's \
                 validity (is it stopped?); the watchdog killed the command (SIGKILL)"
            );
        }
        EXIT_OK
    }

    /// `lock run` is gone: SIGTERM now, SIGKILL to what is left at `orphan_kill_at`.
    fn orphaned(&self, grace: Duration) -> u8 {
        if !group::exists(self.group) {
            return EXIT_OK;
        }
        eprintln!("redlease: lock run is gone; the watchdog stops the command (SIGTERM)");
        group::signal(self.group, Signal::SIGTERM);
        let kill_at = self.orphan_kill_at(now_ns(), grace);
        while group::running(self.group) {
            let left = kill_at.saturating_sub(now_ns());
            if left == 0 {
                break;
            }
            std::thread::sleep(GROUP_POLL.min(Duration::from_nanos(left)));
        }
        if group::kill_running(self.group) {
            eprintln!("redlease: the command outlived its grace; the watchdog killed it");
        }
        EXIT_OK
    }
}

// === the clock ===

/// CLOCK_MONOTONIC now, in ns.
fn now_ns() -> u64 {
    // CLOCK_MONOTONIC exists on every Unix kernel redlease runs on; clock_gettime fails only
    // for an unknown clock (EINVAL) or a bad buffer (EFAULT, impossible with nix's own).
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap();
    (now.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec() as u64)
}

/// `at` on CLOCK_MONOTONIC, given that tokio's `now` is `now_ns` there (both clocks advance
/// together: tokio's is CLOCK_MONOTONIC with another origin).
fn monotonic_ns(at: Instant, now: Instant, now_ns: u64) -> u64 {
    if at >= now {
        now_ns.saturating_add(nanos(at - now))
    } else {
        now_ns.saturating_sub(nanos(now - at))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

// === impl Watchdog ===

/// `lock run`'s handle on its watchdog. Dropped without [`done`](Watchdog::done) (`lock run`
/// failing on its way out), it closes the pipe: the watchdog then stops the command.
#[derive(Debug)]
pub struct Watchdog {
    process: Child,
    /// The pipe; `None` once closed, or once a write failed (the watchdog died).
    pipe: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog from this process's own binary (`/proc/self/exe` where it exists,
    /// so a binary replaced on disk since still starts the same code).
    pub fn spawn(grace: Duration) -> std::io::Result<Self> {
        let proc_exe = std::path::Path::new("/proc/self/exe");
        let binary = match proc_exe.exists() {
            true => proc_exe.to_path_buf(),
            false => std::env::current_exe()?,
        };
        let mut process = Command::new(binary)
            .arg0("redlease")
            .args([
                WATCHDOG_COMMAND,
                "--grace-ms",
                &grace.as_millis().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = process.stdin.take();
        Ok(Self { process, pipe })
    }

    /// Tells the watchdog which group to watch and when to kill it.
    pub async fn watch(&mut self, group: Pid, kill_at: Instant) {
        self.send(&format!("group {group}\n")).await;
        self.kill_at(kill_at).await;
    }

    /// Tells the watchdog the group must be dead by `at`.
    pub async fn kill_at(&mut self, at: Instant) {
        let at = monotonic_ns(at, Instant::now(), now_ns());
        self.send(&format!("kill-at {at}\n")).await;
    }

    /// The command has exited and been reaped: lets the watchdog go, and reaps it.
    pub async fn done(mut self) {
        self.send("done\n").await;
        self.pipe = None;
        if tokio::time::timeout(EXIT_WAIT, self.process.wait())
            .await
            .is_err()
        {
            let _ = self.process.start_kill();
            let _ = self.process.wait().await;
        }
    }

    async fn send(&mut self, line: &str) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        if let Err(error) = pipe.write_all(line.as_bytes()).await {
            self.pipe = None;
            // It exits by itself (0) only after `done` or once it has killed the group.
            if !matches!(self.process.try_wait(), Ok(Some(status)) if status.success()) {
                eprintln!(
                    "redlease: the watchdog is gone ({error}); only lock run can stop the \
                     command now"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// The pipe's lines are read strictly; anything else is ignored.
    #[test]
    fn messages_are_parsed_strictly() {
        let group = Some(Message::Group(Pid::from_raw(4242)));
        assert_eq!(parse("group 4242"), group);
        assert_eq!(parse("kill-at 17"), Some(Message::KillAt(17)));
        assert_eq!(parse("done"), Some(Message::Done));
        for junk in [
            "group 0",
            "group 1",
            "group -5",
            "group 99999999999",
            "kill-at x",
        ] {
            assert_eq!(parse(junk), None, "{junk}");
        }
        assert_eq!(parse("done 1"), None);
        assert_eq!(parse(""), None);
    }

    /// The SIGKILL is due at `kill-at`, and only once the group is known.
    #[test]
    fn the_kill_is_due_at_the_deadline() {
        let mut watch = Watch {
            kill_at: Some(1_000 * MS),
            ..Watch::default()
        };
        assert_eq!(watch.kill_in(0), None);
        watch.group = Some(Pid::from_raw(4242));
        assert_eq!(watch.kill_in(400 * MS), Some(Duration::from_millis(600)));
        assert_eq!(watch.kill_in(1_000 * MS), Some(Duration::ZERO));
        assert_eq!(watch.kill_in(2_000 * MS), Some(Duration::ZERO));
    }

    /// With `lock run` gone, the SIGKILL comes after the grace, or at `kill-at` if sooner.
    #[test]
    fn an_orphaned_group_is_killed_after_the_grace_within_the_deadline() {
        let grace = Duration::from_millis(300);
        let mut watch = Watch::default();
        assert_eq!(watch.orphan_kill_at(100 * MS, grace), 400 * MS);
        watch.kill_at = Some(1_000 * MS);
        assert_eq!(watch.orphan_kill_at(100 * MS, grace), 400 * MS);
        assert_eq!(watch.orphan_kill_at(900 * MS, grace), 1_000 * MS);
    }

    /// tokio's instants map onto CLOCK_MONOTONIC by their distance from now.
    #[test]
    fn instants_map_onto_the_monotonic_clock() {
        let now = Instant::now();
        let later = now + Duration::from_millis(250);
        assert_eq!(monotonic_ns(later, now, 1_000 * MS), 1_250 * MS);
        assert_eq!(monotonic_ns(now, later, 1_000 * MS), 750 * MS);
        assert_eq!(monotonic_ns(now, later, MS), 0);
    }
}

//! The command `lock run` runs under the lock: started in a process group of its own with the
//! lease in its environment, watched by the [`Watchdog`]; SIGTERM and SIGINT sent to `lock run`
//! are passed on to that group. The group is stopped (SIGTERM, then SIGKILL for whatever is
//! left) so that it has exited before the lease's validity ends unless a renewal extends it
//! (the instants: [`Stop`]), at once when the lease is reported lost, and when the command
//! exits leaving processes in its group. Its exit status is passed through as a shell would.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio::time::Instant;

use super::deadline::Stop;
use super::group;
use super::watchdog::Watchdog;
use crate::cli::{EXIT_LEASE_LOST, EXIT_UNAVAILABLE};
use crate::keys::SlotSet;

/// The command was found but could not be started (as shells answer).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// No such command (as shells answer).
pub const EXIT_NOT_FOUND: u8 = 127;
/// How often the group is checked for processes left, while it is being stopped.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// The variables that tell the command about its lease (and a permit's slots and limit:
/// `REDLEASE_SLOT`, the lowest; `REDLEASE_SLOTS`, each one, comma-separated).
pub fn lease_env(
    fencing_token: u64,
    lease_id: &str,
    resource: &str,
    permit: Option<(SlotSet, u32)>,
) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("REDLEASE_FENCING_TOKEN", fencing_token.to_string()),
        ("REDLEASE_LEASE_ID", lease_id.to_string()),
        ("REDLEASE_RESOURCE", resource.to_string()),
    ];
    if let Some((slots, limit)) = permit {
        if let Some(lowest) = slots.lowest() {
            env.push(("REDLEASE_SLOT", lowest.to_string()));
            env.push(("REDLEASE_SLOTS", slots.to_string()));
            env.push(("REDLEASE_LIMIT", limit.to_string()));
        }
    }
    env
}

/// What a leader's command gets besides [`lease_env`]: `REDLEASE_TERM` (its term, which is
/// also its fencing token) and `REDLEASE_VALUE` (the value it proclaimed).
pub fn leader_env(term: u64, value: &str) -> [(&'static str, String); 2] {
    [
        ("REDLEASE_TERM", term.to_string()),
        ("REDLEASE_VALUE", value.to_string()),
    ]
}

/// The lease as the supervisor follows it.
pub struct Held<L> {
    /// When the validity ends; moved by every renewal (and shortened by a failed one).
    pub valid_until: watch::Receiver<Instant>,
    /// Resolves, with a sentence saying how, when the lease is lost before that.
    pub lost: L,
    /// How long the command has between SIGTERM and SIGKILL.
    pub grace: Duration,
}

/// The running command: its process, its group and its watchdog, and when to stop it.
struct Running {
    child: Child,
    /// The group's id is the command's pid (`process_group(0)`); a child not yet waited for
    /// always has one.
    group: Option<Pid>,
    watchdog: Watchdog,
    grace: Duration,
    /// When to stop the command unless a renewal moves the validity's end first.
    stop: Stop,
}

/// Runs `command` until it exits, and returns its exit code; or stops it when the lease is
/// lost or about to run out (see the module's header), and returns `EXIT_LEASE_LOST`.
pub async fn supervise(
    command: &[String],
    env: &[(&'static str, String)],
    held: Held<impl Future<Output = String>>,
) -> u8 {
    // Handlers first: from here on SIGTERM and SIGINT are passed on instead of ending
    // `lock run` with the command still running.
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("redlease: cannot handle SIGTERM and SIGINT; the command was not run");
        return EXIT_UNAVAILABLE;
    };
    let Held {
        mut valid_until,
        lost,
        grace,
    } = held;
    let stop = Stop::before(*valid_until.borrow_and_update(), grace, Instant::now());
    let mut running = match start(command, env, grace, stop).await {
        Ok(running) => running,
        Err(code) => return code,
    };
    let mut lost = std::pin::pin!(lost);
    let code = loop {
        tokio::select! {
            biased;
            status = running.child.wait() => break running.exited(status).await,
            why = &mut lost => break running.lost(&why).await,
            _ = tokio::time::sleep_until(running.stop.term_at) => break running.unrenewed().await,
            Ok(()) = valid_until.changed() => {
                running.renewed(*valid_until.borrow_and_update()).await;
            }
            _ = term.recv() => group::signal(running.group, Signal::SIGTERM),
            _ = int.recv() => group::signal(running.group, Signal::SIGINT),
        }
    };
    running.watchdog.done().await;
    code
}

/// Starts the watchdog, then the command, then tells the watchdog the command's group; or says
/// why not and returns the exit code.
async fn start(
    command: &[String],
    env: &[(&'static str, String)],
    grace: Duration,
    stop: Stop,
) -> Result<Running, u8> {
    if stop.term_at <= Instant::now() {
        eprintln!("redlease: the lease ran out before the command could start");
        return Err(EXIT_LEASE_LOST);
    }
    let mut watchdog = Watchdog::spawn(grace).map_err(|error| {
        eprintln!("redlease: cannot start the watchdog: {error}; the command was not run");
        EXIT_UNAVAILABLE
    })?;
    let Some((program, arguments)) = command.split_first() else {
        watchdog.done().await;
        return Err(EXIT_NOT_FOUND); // clap requires a command
    };
    let spawned = Command::new(program)
        .args(arguments)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .process_group(0)
        .spawn();
    let child = match spawned {
        Ok(child) => child,
        Err(error) => {
            eprintln!("redlease: cannot run {program}: {error}");
            watchdog.done().await;
            return Err(match error.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_EXECUTE,
            });
        }
    };
    let group = child.id().map(|pid| Pid::from_raw(pid as i32));
    if let Some(group) = group {
        watchdog.watch(group, stop.kill_at).await;
    }
    Ok(Running {
        child,
        group,
        watchdog,
        grace,
        stop,
    })
}

// === impl Running ===

impl Running {
    /// The command exited: its exit code, once whatever it left in its group is stopped too
    /// (the lock is released after this); 75 when it was killed at the deadline, which only
    /// the watchdog does while `lock run` is not running (stopped).
    async fn exited(&mut self, status: std::io::Result<ExitStatus>) -> u8 {
        let (now, stop) = (Instant::now(), self.stop);
        let killed = matches!(&status, Ok(s) if s.signal() == Some(Signal::SIGKILL as i32));
        if group::exists(self.group) {
            if group::running(self.group) {
                eprintln!(
                    "redlease: the command exited and left processes in its group; stopping \
                     them (SIGTERM) before the lock is released"
                );
            }
            self.stop_group(stop.at_once(self.grace, now)).await;
        }
        if killed && now >= stop.kill_at {
            eprintln!(
                "redlease: the command was killed at the end of the lease's validity, which \
                 was not renewed in time"
            );
            return EXIT_LEASE_LOST;
        }
        exit_code(status)
    }

    /// The lease was reported lost (`why`): the stop begins at once.
    async fn lost(&mut self, why: &str) -> u8 {
        if let Some(status) = self.reaped() {
            return self.exited(status).await;
        }
        eprintln!("redlease: the lease {why}; stopping the command (SIGTERM)");
        let at_once = self.stop.at_once(self.grace, Instant::now());
        self.watchdog.kill_at(at_once.kill_at).await;
        self.stop_group(at_once).await;
        EXIT_LEASE_LOST
    }

    /// No renewal moved the validity's end in time: the stop counted back from it begins.
    async fn unrenewed(&mut self) -> u8 {
        if let Some(status) = self.reaped() {
            return self.exited(status).await;
        }
        let left = self.stop.kill_at.saturating_duration_since(Instant::now());
        eprintln!(
            "redlease: the lease was not renewed in time: stopping the command (SIGTERM), \
             SIGKILL in {} ms, before its validity ends",
            left.as_millis()
        );
        self.stop_group(self.stop).await;
        EXIT_LEASE_LOST
    }

    /// The validity now ends at `valid_until`: the stop moves with it, and the watchdog's.
    async fn renewed(&mut self, valid_until: Instant) {
        self.stop = Stop::before(valid_until, self.grace, Instant::now());
        self.watchdog.kill_at(self.stop.kill_at).await;
    }

    /// The command's exit status if it has exited, reaped now: `wait()` learns of an exit
    /// only once the runtime has polled for it, which may come after a timer that fired in
    /// the same turn (`lock run` resumed after a stop, the watchdog having killed it).
    fn reaped(&mut self) -> Option<std::io::Result<ExitStatus>> {
        self.child.try_wait().transpose()
    }

    /// SIGTERM to the group now; SIGKILL to what is left of it at `stop.kill_at` (at once
    /// when nothing of it runs any more: only zombies, or processes `/proc` hides).
    async fn stop_group(&mut self, stop: Stop) {
        group::signal(self.group, Signal::SIGTERM);
        let _ = tokio::time::timeout_at(stop.kill_at, self.child.wait()).await;
        loop {
            let _ = self.reaped(); // a leader not yet reaped would count as running
            if !group::running(self.group) {
                break;
            }
            let now = Instant::now();
            if now >= stop.kill_at {
                break;
            }
            tokio::time::sleep_until((now + GROUP_POLL).min(stop.kill_at)).await;
        }
        // Reaped once more right before the kill, and told only when the kill reached a process
        // still running: a command that exited in the meantime was not killed.
        let _ = self.reaped();
        if group::kill_running(self.group) {
            eprintln!(
                "redlease: the command was still running {} ms before the lease's validity \
                 ends; killed it (SIGKILL)",
                super::deadline::KILL_MARGIN.as_millis()
            );
        }
        let _ = self.child.wait().await;
    }
}

/// The command's exit code; 128 + the signal's number when a signal ended it, as shells say.
fn exit_code(status: std::io::Result<ExitStatus>) -> u8 {
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => (128 + signal) as u8,
            (None, None) => EXIT_UNAVAILABLE,
        },
        Err(error) => {
            eprintln!("redlease: cannot wait for the command: {error}");
            EXIT_UNAVAILABLE
        }
    }
}

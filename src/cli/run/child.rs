//! The command `lock run` runs under the lock: started in a process group of its own with the
//! lease in its environment; SIGTERM and SIGINT sent to `lock run` are passed on to that
//! group; when the lease is lost the group gets SIGTERM, and SIGKILL for whatever is left of
//! it after the grace period. Its exit status is passed through as a shell would.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::cli::{EXIT_LEASE_LOST, EXIT_UNAVAILABLE};

/// The command was found but could not be started (as shells answer).
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// No such command (as shells answer).
pub const EXIT_NOT_FOUND: u8 = 127;
/// How often the group is checked for processes left, during the grace period.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// The variables that tell the command about its lease.
pub fn lease_env(
    fencing_token: u64,
    lease_id: &str,
    resource: &str,
) -> [(&'static str, String); 3] {
    [
        ("REDLEASE_FENCING_TOKEN", fencing_token.to_string()),
        ("REDLEASE_LEASE_ID", lease_id.to_string()),
        ("REDLEASE_RESOURCE", resource.to_string()),
    ]
}

/// Runs `command` until it exits, and returns its exit code; or, if `lost` resolves first
/// (with a sentence saying how the lease was lost), stops it and returns `EXIT_LEASE_LOST`.
pub async fn supervise(
    command: &[String],
    env: &[(&'static str, String)],
    lost: impl Future<Output = String>,
    grace: Duration,
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
    let Some((program, arguments)) = command.split_first() else {
        return EXIT_NOT_FOUND; // clap requires a command
    };
    let spawned = Command::new(program)
        .args(arguments)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            eprintln!("redlease: cannot run {program}: {error}");
            return match error.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_EXECUTE,
            };
        }
    };
    // The group's id is the command's pid (`process_group(0)`); a child not yet waited for
    // always has one.
    let group = child.id().map(|pid| Pid::from_raw(pid as i32));
    let mut lost = std::pin::pin!(lost);
    loop {
        tokio::select! {
            biased;
            status = child.wait() => return exit_code(status),
            why = &mut lost => {
                eprintln!("redlease: the lease {why}; stopping the command (SIGTERM)");
                stop(&mut child, group, grace).await;
                return EXIT_LEASE_LOST;
            }
            _ = term.recv() => signal_group(group, Signal::SIGTERM),
            _ = int.recv() => signal_group(group, Signal::SIGINT),
        }
    }
}

/// SIGTERM to the group; SIGKILL to what is left of it once `grace` has passed.
async fn stop(child: &mut Child, group: Option<Pid>, grace: Duration) {
    let deadline = Instant::now() + grace;
    signal_group(group, Signal::SIGTERM);
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_alive(group) && Instant::now() < deadline {
        tokio::time::sleep(GROUP_POLL).await;
    }
    if group_alive(group) {
        eprintln!(
            "redlease: the command was still running after --kill-grace-ms {}; SIGKILL",
            grace.as_millis()
        );
        signal_group(group, Signal::SIGKILL);
    }
    let _ = child.wait().await;
}

fn signal_group(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        // The group may be empty already (ESRCH): nothing left to signal.
        let _ = killpg(group, signal);
    }
}

/// Whether any process of the group is left (a leader not yet waited for counts).
fn group_alive(group: Option<Pid>) -> bool {
    group.is_some_and(|group| killpg(group, None).is_ok())
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

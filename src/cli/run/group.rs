//! The command's process group, as `lock run` and its watchdog see it: signals to the whole
//! group, and whether any of it is left. A zombie still counts for kill(2) until its parent
//! reaps it, and the parent of an orphan is init, which may reap late (or, in a container,
//! never): so a group is *running* only while `/proc` shows a member that is not a zombie,
//! while signals go to whatever exists (a signal to a zombie does nothing).

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Sends `signal` to every process of `group` (none yet: nothing to do).
pub fn signal(group: Option<Pid>, signal: Signal) {
    if let Some(group) = group {
        // The group may be empty already (ESRCH): nothing left to signal.
        let _ = killpg(group, signal);
    }
}

/// SIGKILLs the group, and says whether that kill reached a process still running, as far as
/// can be told: one of it runs (not a zombie) right before the signal, and the signal was
/// delivered. A group whose processes have all exited gets the signal too (harmless), and
/// `false`: nothing was killed, and nobody should be told otherwise. (A process that exits in
/// the microseconds between the look and the signal is still reported killed.)
pub fn kill_running(group: Option<Pid>) -> bool {
    let Some(group) = group else {
        return false;
    };
    let was_running = running(Some(group));
    let delivered = killpg(group, Signal::SIGKILL).is_ok();
    was_running && delivered
}

/// Whether any process of the group exists, zombies (and a leader not yet waited for)
/// included.
pub fn exists(group: Option<Pid>) -> bool {
    group.is_some_and(|group| killpg(group, None).is_ok())
}

/// Whether any process of the group is still running: it exists, and `/proc` shows a member
/// that is not a zombie (without a readable `/proc`, whatever exists counts).
pub fn running(group: Option<Pid>) -> bool {
    let Some(group) = group.filter(|&group| exists(Some(group))) else {
        return false;
    };
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return true;
    };
    processes.flatten().any(|process| {
        let stat = process.path().join("stat");
        let stat = std::fs::read_to_string(stat).unwrap_or_default();
        runs_in(&stat, group)
    })
}

/// Whether a `/proc/PID/stat` line shows a process of `group` that is not a zombie.
fn runs_in(stat: &str, group: Pid) -> bool {
    // The fields after the command's name, which ends with the last ')': the state, the
    // parent's pid, the process group.
    let Some((_, fields)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = fields.split_whitespace();
    let state = fields.next();
    let pgrp = fields.nth(1).and_then(|pgrp| pgrp.parse::<i32>().ok());
    pgrp == Some(group.as_raw()) && state.is_some_and(|state| state != "Z" && state != "X")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member is one whose group matches and that is not a zombie, whatever its name holds.
    #[test]
    fn zombies_and_other_groups_do_not_run_in_the_group() {
        let group = Pid::from_raw(4242);
        assert!(runs_in("4243 (sleep) S 4242 4242 4242 0 -1", group));
        assert!(runs_in("4242 (a ) b) R 1 4242 4242 0 -1", group));
        assert!(!runs_in("4243 (sleep) Z 1 4242 4242 0 -1", group));
        assert!(!runs_in("4244 (sh) S 4242 4244 4244 0 -1", group));
        assert!(!runs_in("", group));
    }

    /// A group whose only process has exited (a zombie not yet reaped) is not reported killed;
    /// one that runs is.
    #[test]
    fn only_a_running_group_is_reported_killed() {
        let spawn = |program: &str| {
            let mut command = std::process::Command::new(program);
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
            command.spawn().unwrap()
        };
        let mut exited = spawn("true");
        let group = Some(Pid::from_raw(exited.id() as i32));
        // `true` exits at once; its zombie stays until reaped below.
        while running(group) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(exists(group), "the zombie still exists");
        assert!(!kill_running(group));
        exited.wait().unwrap();
        let mut command = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(command.arg("30"), 0);
        let mut sleeping = command.spawn().unwrap();
        assert!(kill_running(Some(Pid::from_raw(sleeping.id() as i32))));
        sleeping.wait().unwrap();
        assert!(!kill_running(None));
    }

    /// This test's own process runs in its group; a group nobody has does not.
    #[test]
    fn the_own_group_runs() {
        assert!(running(Some(nix::unistd::getpgrp())));
        assert!(!running(None));
    }
}

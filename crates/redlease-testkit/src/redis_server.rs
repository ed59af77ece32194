//! The tests' and benches' `redis-server`: `redlease_dev::RedisServer` (which starts it on a
//! kernel-chosen loopback port, in a temp dir, killed on drop), here also killed when the
//! thread that started it exits, so a killed run leaves no server behind.
//!
//! `$REDIS_SERVER_BIN` overrides the binary. The server can be paused (SIGSTOP), resumed,
//! stopped and restarted on the same port (with empty memory: `--save ""`, no AOF). Failures
//! panic with the server's log.

use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redlease_dev as dev;

/// One `redis-server` on a kernel-chosen loopback port, killed on drop and when the thread
/// that started it exits.
pub struct RedisServer {
    server: dev::RedisServer,
    paused: bool,
}

impl RedisServer {
    /// Starts a server, retrying on a fresh port if another process took the chosen one.
    pub fn start() -> Self {
        Self::start_with(|_| {})
    }

    /// As `start`, with `configure` applied to the command before every spawn (extra
    /// arguments such as a TLS port).
    pub fn start_with(configure: impl Fn(&mut Command) + Send + Sync + 'static) -> Self {
        let configure = move |command: &mut Command| {
            die_with_parent(command);
            configure(command);
        };
        match dev::RedisServer::start_with(&dev::redis_server_binary(), configure) {
            Ok(server) => Self {
                server,
                paused: false,
            },
            Err(error) => panic!("redis-server would not start: {error}"),
        }
    }

    /// Its plain loopback port (kept across `restart`).
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Freezes the process (SIGSTOP): its socket stays open, nothing is answered.
    pub fn pause(&mut self) {
        self.signal(Signal::SIGSTOP);
        self.paused = true;
    }

    /// Resumes a paused process (SIGCONT); it then runs everything queued meanwhile.
    pub fn resume(&mut self) {
        self.signal(Signal::SIGCONT);
        self.paused = false;
    }

    /// Kills the process (SIGKILL) and reaps it. The port is refused until `restart`.
    pub fn stop(&mut self) {
        if self.paused {
            self.resume();
        }
        let _ = self.server.stop();
    }

    /// Stops the server and starts a fresh one (empty memory, new run_id) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(error) = self.server.restart() {
            panic!("restart failed: {error}");
        }
    }

    /// The server's log file, for panic messages.
    pub fn log(&self) -> String {
        self.server.log()
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.server.pid() {
            // Fails only if the process is gone, which the test should hear about.
            kill(Pid::from_raw(pid as i32), signal).unwrap();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Has the server killed when the thread that spawns it exits.
#[allow(
    unsafe_code,
    reason = "pre_exec: one async-signal-safe syscall in the forked child"
)]
fn die_with_parent(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only makes one syscall
    // (prctl), which is async-signal-safe. The server is killed when the thread that started
    // it exits, so a killed test or bench run leaves no server behind; every server is started
    // (and restarted) by the thread that owns it (a test's body, the bench's main) and dropped
    // before that thread ends.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

//! A real `redis-server` on a kernel-chosen loopback port, in a temp dir, killed on drop (and
//! when the thread that started it exits, so a killed run leaves no server behind).
//!
//! `$REDIS_SERVER_BIN` overrides the binary. The server can be paused (SIGSTOP), resumed,
//! stopped and restarted on the same port (with empty memory: `--save ""`, no AOF).

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tempfile::TempDir;

pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    paused: bool,
}

impl RedisServer {
    /// Starts a server, retrying on a fresh port if another process took the chosen one.
    pub fn start() -> Self {
        let mut last_error = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = free_port();
            match spawn(port, &dir) {
                Ok(child) => {
                    return Self {
                        child: Some(child),
                        port,
                        dir,
                        paused: false,
                    }
                }
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server would not start: {last_error}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts a fresh one (empty memory, new run_id) on the same port.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match spawn(self.port, &self.dir) {
                Ok(child) => break self.child = Some(child),
                Err(error) if Instant::now() > deadline => panic!("restart failed: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The server's log file, for panic messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(log_path(&self.dir)).unwrap_or_default()
    }

    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child {
            kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

fn log_path(dir: &TempDir) -> PathBuf {
    dir.path().join("redis.log")
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn spawn(port: u16, dir: &TempDir) -> Result<Child, String> {
    use std::os::unix::process::CommandExt;
    let log = log_path(dir);
    let mut command = Command::new(binary());
    // SAFETY: the closure runs in the forked child before exec and only makes one syscall
    // (prctl), which is async-signal-safe. The server is killed when the thread that started
    // it exits, so a killed test or bench run leaves no server behind; every server is started
    // by the thread that owns it (a test's body, the bench's main) and dropped before that
    // thread ends.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let mut child = command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir.path())
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {} ({e}); install redis-server", binary()))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("redis-server exited with {status}; log:\n{log}"));
        }
        if answers_ping(port) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    Err(format!(
        "redis-server on port {port} not ready in 5 s; log:\n{log}"
    ))
}

fn answers_ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut buf).is_ok()
        && &buf == b"+PONG\r\n"
}

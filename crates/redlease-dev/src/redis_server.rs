//! One `redis-server` process: the only code that starts one, for `redlease dev`, the load
//! tester's local fleet, the tests and the benches.
//!
//! The server listens on a kernel-chosen free loopback port, keeps nothing on disk
//! (`--save ""`, no AOF) and logs into its own temp dir, which is removed on drop. Starting
//! waits until the server answers PING as this very process (its `INFO` `process_id`), at
//! most [`START_TIMEOUT`]; a server that exits before answering (another process took its
//! port) is started again on a fresh port. Every wait is on the real clock: the server runs in
//! real time even while a test's tokio clock is paused.
#![allow(
    clippy::disallowed_types,
    reason = "waits on a real process are bounded by the real clock, not tokio's pausable one"
)]

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::DevError;

/// How long a spawned server may take to answer PING.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);

/// How many fresh ports `start` tries when the server exits before answering.
const START_ATTEMPTS: usize = 5;

/// Pause between two readiness probes.
const POLL: Duration = Duration::from_millis(5);

/// Pause before `restart` spawns again after its server exited (its port still held).
const RESTART_PAUSE: Duration = Duration::from_millis(50);

/// Bound on connecting to, writing to and reading from the server during one probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// Bound on the bytes one probe reads (PONG and the `INFO server` section).
const PROBE_MAX_BYTES: u64 = 64 * 1024;

/// How many temp dir names `start` tries when one already exists.
const DIR_ATTEMPTS: usize = 100;

/// How many of the log's last lines an error carries.
const LOG_TAIL_LINES: usize = 40;

/// The hook that adjusts the `Command` before each spawn.
type Configure = Arc<dyn Fn(&mut Command) + Send + Sync>;

/// A running (or stopped) `redis-server` on 127.0.0.1, killed and reaped on drop, its temp dir
/// then removed.
pub struct RedisServer {
    binary: String,
    configure: Configure,
    port: u16,
    /// `None` once stopped.
    child: Option<Child>,
    /// Removed after the process is gone (`Drop` stops it first).
    dir: ServerDir,
}

impl RedisServer {
    /// Starts `binary` (see [`crate::redis_server_binary`]) on a free loopback port.
    pub fn start(binary: &str) -> Result<Self, DevError> {
        Self::start_with(binary, |_| {})
    }

    /// Like [`start`](Self::start), with `configure` applied to the `Command` before every
    /// spawn (the first, any retry on a fresh port, and each `restart`), after the launcher's
    /// own arguments and stdio: it may add arguments, or a `pre_exec` hook such as a death
    /// signal tied to the caller's thread.
    pub fn start_with<F>(binary: &str, configure: F) -> Result<Self, DevError>
    where
        F: Fn(&mut Command) + Send + Sync + 'static,
    {
        let mut server = Self {
            binary: binary.to_string(),
            configure: Arc::new(configure),
            port: 0,
            child: None,
            dir: ServerDir::create()?,
        };
        let mut attempt = 1;
        loop {
            server.port = free_port()?;
            let child = server.spawn()?;
            match server.wait_ready(child, Instant::now() + START_TIMEOUT) {
                Ok(child) => {
                    server.child = Some(child);
                    return Ok(server);
                }
                Err(DevError::Exited { .. }) if attempt < START_ATTEMPTS => attempt += 1,
                Err(error) => return Err(error),
            }
        }
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's process id; `None` while stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process (SIGKILL, as a crash) and reaps it; the port is then refused until
    /// `restart`. Stopping a stopped server does nothing.
    pub fn stop(&mut self) -> Result<(), DevError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id();
        // Fails only when the process has already exited, which `wait` then reaps.
        let _ = child.kill();
        child
            .wait()
            .map(drop)
            .map_err(|source| DevError::Wait { pid, source })
    }

    /// Stops the server and starts a fresh one (empty memory, new run_id) on the same port,
    /// retrying while another process holds the port, for at most [`START_TIMEOUT`].
    pub fn restart(&mut self) -> Result<(), DevError> {
        self.stop()?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.spawn()?;
            match self.wait_ready(child, deadline) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(DevError::Exited { .. }) if Instant::now() + RESTART_PAUSE < deadline => {
                    std::thread::sleep(RESTART_PAUSE);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The server's log (every run of it since `start`); empty if it cannot be read.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Where its log is written.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn spawn(&self) -> Result<Child, DevError> {
        let (stdout, stderr) = self.log_stdio().map_err(|source| DevError::Log {
            path: self.log_path(),
            source,
        })?;
        let mut command = Command::new(&self.binary);
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        (self.configure)(&mut command);
        command.spawn().map_err(|source| DevError::Spawn {
            binary: self.binary.clone(),
            source,
        })
    }

    /// The log opened for appending, twice: the server's stdout and stderr go there too, as a
    /// bad option is reported on stderr, not logged.
    fn log_stdio(&self) -> std::io::Result<(File, File)> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        Ok((file.try_clone()?, file))
    }

    /// Waits until `child` answers on the port, exits, or `deadline` passes (then kills it).
    fn wait_ready(&self, mut child: Child, deadline: Instant) -> Result<Child, DevError> {
        let pid = child.id();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    return Err(DevError::Exited {
                        port: self.port,
                        status,
                        log: self.log_tail(),
                    })
                }
                Ok(None) => {}
                Err(source) => {
                    kill_and_reap(&mut child);
                    return Err(DevError::Wait { pid, source });
                }
            }
            if answers_as(self.port, pid) {
                return Ok(child);
            }
            if Instant::now() >= deadline {
                kill_and_reap(&mut child);
                return Err(DevError::NotReady {
                    port: self.port,
                    pid,
                    log: self.log_tail(),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // An error leaves nothing to do: the process is gone or cannot be waited for.
        let _ = self.stop();
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// A temp dir named after this process and a counter (unique among this process's servers),
/// removed on drop.
struct ServerDir(PathBuf);

impl ServerDir {
    fn create() -> Result<Self, DevError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut attempt = 1;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("redlease-redis-{}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self(path)),
                // Left behind by an earlier process with the same pid: never reused, never removed.
                Err(error)
                    if error.kind() == std::io::ErrorKind::AlreadyExists
                        && attempt < DIR_ATTEMPTS =>
                {
                    attempt += 1;
                }
                Err(source) => return Err(DevError::TempDir { path, source }),
            }
        }
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ServerDir {
    fn drop(&mut self) {
        // A dir that cannot be removed is left in the system's temp dir.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> Result<u16, DevError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(DevError::FreePort)?;
    Ok(listener.local_addr().map_err(DevError::FreePort)?.port())
}

fn kill_and_reap(child: &mut Child) {
    // Errors mean it has already exited (and `wait` reaps it) or cannot be waited for.
    let _ = child.kill();
    let _ = child.wait();
}

/// Whether the server on `port` answers PING and is process `pid` (not another server that
/// took the port while ours failed to bind it).
fn answers_as(port: u16, pid: u32) -> bool {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match TcpStream::connect_timeout(&address, PROBE_TIMEOUT) {
        Ok(stream) => probe(stream, pid).unwrap_or(false),
        Err(_) => false,
    }
}

fn probe(mut stream: TcpStream, pid: u32) -> std::io::Result<bool> {
    stream.set_read_timeout(Some(PROBE_TIMEOUT))?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT))?;
    stream.write_all(b"PING\r\nINFO server\r\n")?;
    let mut reader = BufReader::new(stream.take(PROBE_MAX_BYTES));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if line != "+PONG\r\n" {
        return Ok(false);
    }
    line.clear();
    reader.read_line(&mut line)?;
    let Some(len) = line
        .strip_prefix('$')
        .and_then(|n| n.trim_end().parse::<usize>().ok())
    else {
        return Ok(false);
    };
    let mut info = vec![0; len.min(PROBE_MAX_BYTES as usize)];
    reader.read_exact(&mut info)?;
    let ours = format!("\nprocess_id:{pid}\r");
    Ok(info
        .windows(ours.len())
        .any(|field| field == ours.as_bytes()))
}

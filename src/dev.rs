//! `redlease dev`: a throwaway local fleet of `redis-server` processes on free loopback
//! ports, each in its own temp dir, killed (and the dirs removed) when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The `redis-server` binary local fleets run: `$REDIS_SERVER_BIN`, or `redis-server` on the
/// PATH.
pub fn redis_server_binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// How long a master may take to answer PING after starting.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the local fleet could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("cannot start {binary} ({source}); install it with scripts/install-deps.sh or set REDIS_SERVER_BIN")]
    Spawn {
        binary: String,
        source: std::io::Error,
    },
    #[error("master on port {port} did not answer within {START_TIMEOUT:?}; its log is in {log}")]
    NotReady { port: u16, log: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One local master.
struct LocalMaster {
    port: u16,
    dir: PathBuf,
    /// The binary it was started from (for `restart`).
    binary: String,
    /// Killed when the fleet stops (and, failing that, when dropped: `kill_on_drop`).
    child: Child,
}

/// The local masters.
pub struct LocalFleet {
    masters: Vec<LocalMaster>,
}

impl LocalFleet {
    /// Starts `n` masters; `binary` is `redis-server` or `$REDIS_SERVER_BIN`.
    pub async fn start(n: usize, binary: &str) -> Result<Self, DevError> {
        let mut masters = Vec::with_capacity(n);
        for index in 0..n {
            masters.push(start_master(index, binary).await?);
        }
        Ok(Self { masters })
    }

    /// Kills every master and waits for it to exit.
    pub async fn stop(mut self) {
        for master in &mut self.masters {
            let _ = master.child.kill().await;
        }
    }

    /// Kills master `index` (SIGKILL, as a crash) and waits for it to exit.
    pub async fn kill(&mut self, index: usize) -> Result<(), DevError> {
        let master = self.master(index)?;
        master.child.kill().await?;
        Ok(())
    }

    /// Starts master `index` again on its port, with an empty dataset (`--save ""`): a
    /// restarted master that forgot every key.
    pub async fn restart(&mut self, index: usize) -> Result<(), DevError> {
        let master = self.master(index)?;
        let _ = master.child.kill().await;
        master.child = spawn_server(&master.binary, master.port, &master.dir)?;
        wait_for_ping(master, START_TIMEOUT).await
    }

    pub fn len(&self) -> usize {
        self.masters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.masters.is_empty()
    }

    fn master(&mut self, index: usize) -> Result<&mut LocalMaster, DevError> {
        let count = self.masters.len();
        self.masters.get_mut(index).ok_or_else(|| {
            DevError::Io(std::io::Error::other(format!(
                "no master {index} in a fleet of {count}"
            )))
        })
    }

    pub fn urls(&self) -> Vec<String> {
        let url = |m: &LocalMaster| format!("redis://127.0.0.1:{}", m.port);
        self.masters.iter().map(url).collect()
    }
}

impl Drop for LocalFleet {
    fn drop(&mut self) {
        for master in &self.masters {
            let _ = std::fs::remove_dir_all(&master.dir);
        }
    }
}

async fn start_master(index: usize, binary: &str) -> Result<LocalMaster, DevError> {
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = std::env::temp_dir().join(format!("redlease-dev-{}-{index}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let child = spawn_server(binary, port, &dir)?;
    let master = LocalMaster {
        port,
        dir,
        binary: binary.to_string(),
        child,
    };
    wait_for_ping(&master, START_TIMEOUT).await?;
    Ok(master)
}

fn spawn_server(binary: &str, port: u16, dir: &std::path::Path) -> Result<Child, DevError> {
    let log = dir.join("redis.log");
    Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| DevError::Spawn {
            binary: binary.to_string(),
            source,
        })
}

async fn wait_for_ping(master: &LocalMaster, timeout: Duration) -> Result<(), DevError> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if answers_ping(master.port).await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let log = master.dir.join("redis.log").display().to_string();
    Err(DevError::NotReady {
        port: master.port,
        log,
    })
}

async fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    let mut pong = [0; 7];
    let exchange = async {
        stream.write_all(b"PING\r\n").await?;
        stream.read_exact(&mut pong).await
    };
    let answered = tokio::time::timeout(Duration::from_millis(200), exchange).await;
    matches!(answered, Ok(Ok(_))) && &pong == b"+PONG\r\n"
}

//! redlease-dev: local `redis-server` processes — [`RedisServer`] (one process, in
//! `redis_server.rs`, the only code that starts one) and [`LocalFleet`], the throwaway fleet
//! `redlease dev` and `redlease load --local-fleet` run on. The tests and benches start their
//! servers through it too (`redlease-testkit`).
//!
//! It knows nothing of Redlock: a server here is a process on a loopback port.
#![warn(unreachable_pub, missing_docs)]
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

mod redis_server;

use std::path::PathBuf;
use std::process::ExitStatus;

pub use redis_server::{RedisServer, START_TIMEOUT};

/// The `redis-server` binary local fleets run: `$REDIS_SERVER_BIN`, or `redis-server` on the
/// PATH.
pub fn redis_server_binary() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// Why a local `redis-server` could not be started, stopped or restarted.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The binary could not be started.
    #[error("cannot start {binary} ({source}); install it with scripts/install-deps.sh or set REDIS_SERVER_BIN")]
    Spawn {
        /// The binary tried.
        binary: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The server exited before it answered PING.
    #[error("redis-server for 127.0.0.1:{port} exited ({status}) before answering PING; log ends:\n{log}")]
    Exited {
        /// Its port.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// The end of its log.
        log: String,
    },
    /// The server never answered PING in time.
    #[error("redis-server (pid {pid}) on 127.0.0.1:{port} gave no PONG within {START_TIMEOUT:?}; log ends:\n{log}")]
    NotReady {
        /// Its port.
        port: u16,
        /// Its pid.
        pid: u32,
        /// The end of its log.
        log: String,
    },
    /// Waiting for the server's exit failed.
    #[error("cannot wait for redis-server (pid {pid}): {source}")]
    Wait {
        /// Its pid.
        pid: u32,
        /// What the system said.
        source: std::io::Error,
    },
    /// The server's temp dir could not be made.
    #[error("cannot create the temp dir {} for redis-server: {source}", .path.display())]
    TempDir {
        /// The dir.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The server's log could not be opened.
    #[error("cannot open the redis-server log {}: {source}", .path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// No free loopback port could be had from the kernel.
    #[error("cannot find a free loopback port for redis-server: {0}")]
    FreePort(std::io::Error),
    /// A master index past the fleet's end.
    #[error("no master {index} in a fleet of {count}")]
    NoMaster {
        /// The index asked for.
        index: usize,
        /// How many masters the fleet has.
        count: usize,
    },
    /// A master whose kill or restart was cancelled half-way.
    #[error("master {index} is gone: a kill or restart of it was cancelled before it finished")]
    Lost {
        /// Its index.
        index: usize,
    },
    /// The task driving the server failed.
    #[error("the task driving redis-server failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A throwaway fleet of local masters, killed (and their temp dirs removed) on `stop` or drop.
///
/// Starting, killing and restarting block on a process for a few milliseconds (at most
/// [`START_TIMEOUT`] per server): they run on tokio's blocking threads, so the load a fault run
/// measures keeps its workers.
pub struct LocalFleet {
    /// A slot is empty while a blocking task owns its server, and stays empty if the caller
    /// was cancelled meanwhile (the task then drops, so kills, the server).
    masters: Vec<Option<RedisServer>>,
    /// The masters' URLs, fixed at start (`restart` keeps the port).
    urls: Vec<String>,
}

impl LocalFleet {
    /// Starts `n` masters; `binary` is `redis-server` or `$REDIS_SERVER_BIN`.
    pub async fn start(n: usize, binary: &str) -> Result<Self, DevError> {
        let binary = binary.to_string();
        let start = move || {
            (0..n)
                .map(|_| RedisServer::start(&binary))
                .collect::<Result<Vec<_>, _>>()
        };
        let masters = blocking(start).await??;
        Ok(Self {
            urls: masters.iter().map(RedisServer::url).collect(),
            masters: masters.into_iter().map(Some).collect(),
        })
    }

    /// Kills every master and waits for it to exit.
    pub async fn stop(self) {
        // Dropping a server kills and reaps it; a failed task has dropped them already.
        let _ = blocking(move || drop(self)).await;
    }

    /// Kills master `index` (SIGKILL, as a crash) and waits for it to exit.
    pub async fn kill(&mut self, index: usize) -> Result<(), DevError> {
        self.on_master(index, RedisServer::stop).await
    }

    /// Starts master `index` again on its port, with an empty dataset (`--save ""`): a
    /// restarted master that forgot every key.
    pub async fn restart(&mut self, index: usize) -> Result<(), DevError> {
        self.on_master(index, RedisServer::restart).await
    }

    /// How many masters the fleet has.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Whether the fleet has no master.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// Every master's `redis://127.0.0.1:<port>` URL, in order.
    pub fn urls(&self) -> Vec<String> {
        self.urls.clone()
    }

    /// Runs `op` on master `index` on a blocking thread.
    async fn on_master(
        &mut self,
        index: usize,
        op: fn(&mut RedisServer) -> Result<(), DevError>,
    ) -> Result<(), DevError> {
        let count = self.masters.len();
        let slot = self
            .masters
            .get_mut(index)
            .ok_or(DevError::NoMaster { index, count })?;
        let mut server = slot.take().ok_or(DevError::Lost { index })?;
        let (server, result) = blocking(move || {
            let result = op(&mut server);
            (server, result)
        })
        .await?;
        *slot = Some(server);
        result
    }
}

async fn blocking<T, F>(f: F) -> Result<T, DevError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Ok(tokio::task::spawn_blocking(f).await?)
}

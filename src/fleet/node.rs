//! One Redis master: its fred client, the per-call timeout, its RTT record and its breaker.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fred::prelude::{ClientLike, ErrorKind, LuaInterface};
use fred::types::scripts::Script;
use fred::types::{Key, Value};
use tokio::time::Instant;

use super::health::Breaker;
use crate::rtt::RttWindow;
use crate::scripts::SCRIPTS;

/// How long a background script reload may take.
pub const SCRIPT_LOAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a call to one master produced no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No reply within the per-node timeout. The command may still run later on the master.
    #[error("timed out")]
    Timeout,
    /// Not sent: the connection is down or the breaker is open.
    #[error("down")]
    Down,
    /// The connection failed while the command was in flight.
    #[error("connection: {0}")]
    Connection(String),
    /// The master answered with an error reply.
    #[error("error reply: {0}")]
    Reply(String),
}

/// Whether a call goes out while the master looks down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Lock writes (acquire, extend, shadow): skipped while the master is down.
    WhenUp,
    /// Releases and fence raises: always sent, so they queue behind any write still in flight.
    Always,
}

/// One master of the fleet.
pub struct Node {
    index: usize,
    /// The URL with its password masked, fit for logs and the fleet view.
    url: String,
    client: fred::clients::Client,
    /// Every script is in this master's cache (set after each (re)connect's SCRIPT LOAD,
    /// cleared by a NOSCRIPT). Lock writes wait for it, since they are never re-sent.
    scripts_ready: Arc<AtomicBool>,
    state: Mutex<NodeState>,
}

struct NodeState {
    rtt: RttWindow,
    breaker: Breaker,
}

// === impl Node ===

impl Node {
    pub(super) fn new(
        index: usize,
        url: String,
        client: fred::clients::Client,
        rtt: RttWindow,
        breaker: Breaker,
    ) -> Arc<Self> {
        let state = Mutex::new(NodeState { rtt, breaker });
        Arc::new(Self {
            index,
            url,
            client,
            scripts_ready: Arc::new(AtomicBool::new(false)),
            state,
        })
    }

    /// Position of this master in the configured list.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The URL with credentials masked.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn client(&self) -> &fred::clients::Client {
        &self.client
    }

    /// Connected, scripts loaded, and not shunned by the breaker.
    pub fn is_up(&self) -> bool {
        self.ready_for_writes() && !self.state().breaker.is_open()
    }

    fn ready_for_writes(&self) -> bool {
        self.client.is_connected() && self.scripts_ready.load(Ordering::Acquire)
    }

    /// The `q`-quantile of recent round trips.
    pub fn rtt_quantile(&self, q: f64, now: Instant) -> Option<Duration> {
        self.state().rtt.quantile(q, now)
    }

    /// Runs `script` here within `timeout`, recording the round trip and feeding the breaker.
    pub async fn eval(
        &self,
        script: &Script,
        keys: Vec<Key>,
        args: Vec<Value>,
        timeout: Duration,
        admission: Admission,
    ) -> Result<i64, CallError> {
        if admission == Admission::WhenUp && !self.admit() {
            return Err(CallError::Down);
        }
        let start = Instant::now();
        let call = self.evalsha(script, keys, args, admission);
        let result = tokio::time::timeout(timeout, call).await;
        self.settle(result, start)
    }

    /// Lock writes are sent exactly once: on NOSCRIPT (a restarted master) the write did not
    /// run, and re-sending it later could put it behind a release of the same lease. The
    /// scripts are reloaded in the background for the next attempt. Releases and fence raises
    /// reload and retry at once: running them late is harmless.
    async fn evalsha(
        &self,
        script: &Script,
        keys: Vec<Key>,
        args: Vec<Value>,
        admission: Admission,
    ) -> Result<i64, fred::error::Error> {
        if admission == Admission::Always {
            return script.evalsha_with_reload(&self.client, keys, args).await;
        }
        let result = self.client.evalsha(script.sha1().clone(), keys, args).await;
        if matches!(&result, Err(e) if e.details().starts_with("NOSCRIPT")) {
            self.scripts_ready.store(false, Ordering::Release);
            let (client, ready) = (self.client.clone(), Arc::clone(&self.scripts_ready));
            tokio::spawn(async move {
                let loaded = load_all(&client, SCRIPT_LOAD_TIMEOUT).await;
                ready.store(loaded, Ordering::Release);
            });
        }
        result
    }

    /// Loads every script into this master's cache; `false` when it did not answer in time.
    pub async fn load_scripts(&self, timeout: Duration) -> bool {
        let loaded = load_all(&self.client, timeout).await;
        self.scripts_ready.store(loaded, Ordering::Release);
        loaded
    }

    /// PINGs this master within `timeout`, feeding the RTT window and the breaker.
    pub async fn ping(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        let ping = self.client.ping::<String>(None);
        let result = tokio::time::timeout(timeout, ping).await;
        self.settle(result.map(|r| r.map(|_pong| 0)), start).is_ok()
    }

    /// Records a round trip measured elsewhere (a PING, a batch).
    pub fn record_rtt(&self, rtt: Duration, now: Instant) {
        let mut state = self.state();
        state.rtt.record(rtt, now);
        state.breaker.record_success();
    }

    fn admit(&self) -> bool {
        self.ready_for_writes() && self.state().breaker.admit(Instant::now())
    }

    fn settle(
        &self,
        result: Result<Result<i64, fred::error::Error>, tokio::time::error::Elapsed>,
        start: Instant,
    ) -> Result<i64, CallError> {
        let now = Instant::now();
        match result {
            Ok(Ok(reply)) => {
                self.record_rtt(now - start, now);
                Ok(reply)
            }
            Ok(Err(error)) if is_connection_error(&error) => {
                self.state().breaker.record_failure(now);
                Err(CallError::Connection(error.details().to_string()))
            }
            Ok(Err(error)) => {
                self.record_rtt(now - start, now);
                Err(CallError::Reply(error.details().to_string()))
            }
            Err(_elapsed) => {
                self.state().breaker.record_failure(now);
                Err(CallError::Timeout)
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, NodeState> {
        // A panic while holding this lock cannot leave the RTT window or the breaker
        // half-updated in a way that matters, so a poisoned lock is used as it is.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

async fn load_all(client: &fred::clients::Client, timeout: Duration) -> bool {
    let load = async {
        for script in SCRIPTS.all() {
            script.load(client).await?;
        }
        Ok::<_, fred::error::Error>(())
    };
    matches!(tokio::time::timeout(timeout, load).await, Ok(Ok(())))
}

fn is_connection_error(error: &fred::error::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Timeout | ErrorKind::Backpressure
    )
}

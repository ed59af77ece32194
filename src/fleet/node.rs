//! One Redis master: its fred client, the per-call timeout, its RTT record and its breaker.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fred::prelude::{ClientLike, ErrorKind};
use fred::types::scripts::Script;
use fred::types::{Key, Value};
use tokio::time::Instant;

use super::health::Breaker;
use crate::rtt::RttWindow;

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

    /// Connected and not shunned by the breaker.
    pub fn is_up(&self) -> bool {
        self.client.is_connected() && !self.state().breaker.is_open()
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
        let call = script.evalsha_with_reload::<i64, _, _>(&self.client, keys, args);
        let result = tokio::time::timeout(timeout, call).await;
        self.settle(result, start)
    }

    /// Loads every script into this master's cache; `false` when it did not answer in time.
    pub async fn load_scripts(&self, scripts: &[&Script], timeout: Duration) -> bool {
        let load_all = async {
            for script in scripts {
                script.load(&self.client).await?;
            }
            Ok::<_, fred::error::Error>(())
        };
        matches!(tokio::time::timeout(timeout, load_all).await, Ok(Ok(())))
    }

    /// Records a round trip measured elsewhere (a PING, a batch).
    pub fn record_rtt(&self, rtt: Duration, now: Instant) {
        let mut state = self.state();
        state.rtt.record(rtt, now);
        state.breaker.record_success();
    }

    fn admit(&self) -> bool {
        self.client.is_connected() && self.state().breaker.admit(Instant::now())
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

fn is_connection_error(error: &fred::error::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Timeout | ErrorKind::Backpressure
    )
}

//! The N independent Redis masters: connecting them in parallel and reading their health.
//!
//! Each master gets its own fred client with `max_command_attempts = 1` (a lock write is never
//! re-sent after a reconnect) and `fail_fast = false` (a master that is down at start-up is
//! reconnected in the background while the others serve).

pub mod health;
pub mod node;

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, EventInterface, ReconnectPolicy, TcpConfig};
use tokio::time::Instant;

use crate::redlock::quorum::quorum_of;
use crate::rtt::{RttWindow, DEFAULT_RTT_WINDOW};
use crate::Error;
pub use health::{Breaker, DEFAULT_BREAKER_THRESHOLD, DEFAULT_PROBE_INTERVAL};
pub use node::{Admission, CallError, Node};

/// How often a long-running fleet PINGs every master.
pub const DEFAULT_PROBE_PERIOD: Duration = Duration::from_millis(500);
/// How long start-up waits for each master's first connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Upper bound fred puts on any command (our per-node timeouts are far shorter).
const CLIENT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of the fleet connections.
#[derive(Clone, Debug)]
pub struct FleetOptions {
    /// How long `connect` waits for each master before going on without it.
    pub connect_timeout: Duration,
    /// Consecutive failures that open a master's breaker.
    pub breaker_threshold: u32,
    /// How often an open breaker lets a trial write through.
    pub probe_interval: Duration,
    /// Length of the RTT window each master keeps.
    pub rtt_window: Duration,
}

impl Default for FleetOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            rtt_window: DEFAULT_RTT_WINDOW,
        }
    }
}

/// The masters, in the configured order.
pub struct Fleet {
    nodes: Vec<Arc<Node>>,
}

// === impl Fleet ===

impl Fleet {
    /// Connects to every master in parallel, waiting at most `connect_timeout` for each.
    /// Only an invalid URL is an error; an unreachable master keeps reconnecting by itself.
    pub async fn connect(urls: &[String], options: &FleetOptions) -> Result<Self, Error> {
        if urls.is_empty() {
            return Err(Error::NoMasters);
        }
        let now = Instant::now();
        let mut nodes = Vec::with_capacity(urls.len());
        for (index, url) in urls.iter().enumerate() {
            let client = build_client(url, options)?;
            let rtt = RttWindow::new(options.rtt_window, now);
            let breaker = Breaker::new(options.breaker_threshold, options.probe_interval);
            nodes.push(Node::new(
                index,
                mask_credentials(url),
                client,
                rtt,
                breaker,
            ));
        }
        let waits = nodes.iter().map(|node| {
            reload_scripts_on_reconnect(node);
            node.client().connect();
            tokio::time::timeout(options.connect_timeout, node.client().wait_for_connect())
        });
        for (node, result) in nodes
            .iter()
            .zip(futures_util::future::join_all(waits).await)
        {
            if !matches!(result, Ok(Ok(()))) {
                tracing::warn!(
                    node = node.index(),
                    url = node.url(),
                    "master not reachable at start-up; reconnecting in the background"
                );
            }
        }
        let fleet = Self { nodes };
        let loaded = fleet.load_scripts(options.connect_timeout).await;
        tracing::debug!(loaded, masters = fleet.len(), "scripts loaded");
        Ok(fleet)
    }

    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Votes needed for a grant: ⌊N/2⌋+1.
    pub fn quorum(&self) -> usize {
        quorum_of(self.nodes.len())
    }

    /// The p99 RTT of the ⌊N/2⌋+1-th fastest master: what a quorum round trip costs.
    /// `None` until a quorum of masters has samples.
    pub fn quorum_rtt_p99(&self, now: Instant) -> Option<Duration> {
        let mut p99s: Vec<Duration> = self
            .nodes
            .iter()
            .filter_map(|node| node.rtt_quantile(0.99, now))
            .collect();
        p99s.sort_unstable();
        p99s.get(self.quorum() - 1).copied()
    }

    /// Loads every script on every connected master in parallel; returns how many took them.
    pub async fn load_scripts(&self, timeout: Duration) -> usize {
        let connected = self.nodes.iter().filter(|n| n.client().is_connected());
        let loads = connected.map(|n| n.load_scripts(timeout));
        let loaded = futures_util::future::join_all(loads).await;
        loaded.into_iter().filter(|ok| *ok).count()
    }

    /// PINGs every master every `interval` in the background, so RTT windows stay fresh and a
    /// master whose breaker opened is let back in as soon as it answers again. The probe stops
    /// when the returned guard is dropped.
    pub fn spawn_probe(self: &Arc<Self>, interval: Duration) -> ProbeGuard {
        let fleet = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let pings = fleet.nodes.iter().map(|node| node.ping(interval));
                futures_util::future::join_all(pings).await;
            }
        });
        ProbeGuard(task)
    }

    /// Closes every connection (best effort, each bounded by `timeout`).
    pub async fn quit(&self, timeout: Duration) {
        let quits = self
            .nodes
            .iter()
            .map(|n| tokio::time::timeout(timeout, n.client().quit()));
        futures_util::future::join_all(quits).await;
    }
}

/// A restarted master comes back with an empty script cache: load the scripts on every
/// (re)connection, before lock writes are let through again.
fn reload_scripts_on_reconnect(node: &Arc<Node>) {
    let weak = Arc::downgrade(node);
    node.client().on_reconnect(move |_server| {
        let weak = weak.clone();
        async move {
            if let Some(node) = weak.upgrade() {
                let loaded = node.load_scripts(node::SCRIPT_LOAD_TIMEOUT).await;
                tracing::info!(
                    node = node.index(),
                    url = node.url(),
                    loaded,
                    "master (re)connected"
                );
            }
            Ok(())
        }
    });
}

/// Stops the fleet's background PINGs when dropped.
pub struct ProbeGuard(tokio::task::JoinHandle<()>);

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn build_client(url: &str, options: &FleetOptions) -> Result<fred::clients::Client, Error> {
    let invalid = |reason: String| Error::InvalidMaster {
        url: mask_credentials(url),
        reason,
    };
    if url.starts_with("rediss://") {
        return Err(invalid(
            "TLS (rediss://) is not built into this release".into(),
        ));
    }
    if !url.starts_with("redis://") {
        return Err(invalid("expected a redis:// URL".into()));
    }
    let mut config = Config::from_url_centralized(url).map_err(|e| invalid(e.details().into()))?;
    config.fail_fast = false;
    let mut builder = Builder::from_config(config);
    builder
        .with_connection_config(|c| {
            c.connection_timeout = options.connect_timeout;
            c.internal_command_timeout = options.connect_timeout;
            c.max_command_attempts = 1;
            c.tcp = TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            };
        })
        .with_performance_config(|p| p.default_command_timeout = CLIENT_COMMAND_TIMEOUT)
        .set_policy(ReconnectPolicy::new_exponential(0, 10, 1_000, 2));
    builder.build().map_err(|e| invalid(e.details().into()))
}

/// `redis://user:secret@host:6379` → `redis://user:***@host:6379`; URLs without a password
/// come back unchanged.
pub fn mask_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None if userinfo.is_empty() => url.to_string(),
        None => format!("{scheme}://***@{host}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Passwords never reach logs or the fleet view.
    #[test]
    fn credentials_are_masked() {
        assert_eq!(mask_credentials("redis://u:p@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(mask_credentials("redis://:p@h:1"), "redis://:***@h:1");
        assert_eq!(mask_credentials("redis://p@h:1"), "redis://***@h:1");
        assert_eq!(mask_credentials("redis://h:1"), "redis://h:1");
        assert_eq!(mask_credentials("redis://u:p:q@x@h"), "redis://u:***@h");
    }
}

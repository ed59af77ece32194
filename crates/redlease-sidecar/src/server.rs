//! The sidecar assembled from [`Settings`]: fleet, probe, engine, lease manager and HTTP API,
//! served on an already-bound listener until a shutdown future resolves. Shutdown releases
//! every held lease, then drains connections, all within the grace period.
//!
//! The HTTP server is our own accept loop over hyper's HTTP/1.1 connections (`accept`,
//! `connection`): connection cap and deadlines on slow or idle clients (`conn_io`). The two
//! requests of a lock's cycle and a lease's keepalive and read, when they come whole and
//! plain, are read and answered by the connection itself (`fast_lane`); hyper parses every
//! other request, and every one after it on its connection. [`Listener`] binds TCP or a Unix socket. An optional second listener
//! (`metrics.listen`, [`Sidecar::with_metrics_listener`]) serves only `GET /metrics`, behind
//! its own token, until the API's server has drained.

mod accept;
mod busy_poll;
mod conn_io;
mod connection;
mod fast_lane;
mod listener;
mod rare;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use self::busy_poll::{BusyPoll, Windows};
pub use self::listener::{ListenError, Listener, SocketFile, UNIX_SOCKET_MODE};
use crate::api::auth::ApiToken;
use crate::api::guard::Guard;
use crate::api::scrape::MetricsToken;
use crate::api::{ApiOptions, AppState};
use crate::config::{HttpSettings, Settings};
use crate::fleet::ProbeGuard;
use crate::lease::LeaseManager;
use crate::wakeup::Wakeups;
use crate::{api, Error, Fleet, Redlock};

/// A connected sidecar, ready to serve.
pub struct Sidecar {
    manager: Arc<LeaseManager>,
    engine: Arc<Redlock>,
    fleet: Arc<Fleet>,
    token: Arc<ApiToken>,
    /// The metrics listener's own token (`metrics.token_file`).
    metrics_token: Arc<MetricsToken>,
    /// Where `GET /metrics` is also served (`metrics.listen`), once bound.
    metrics_listener: Option<Listener>,
    grace: Duration,
    http: HttpSettings,
    /// `runtime.busy_poll_us` and `runtime.busy_poll_after_answer_us`.
    busy_poll: Windows,
    _probe: ProbeGuard,
}

/// How long start-up waits for every master to confirm the revocations subscription.
const REVOCATIONS_WAIT: Duration = Duration::from_secs(2);
/// Connections the metrics listener serves at once (a scraper or two, and a person's curl).
pub const METRICS_MAX_CONNECTIONS: usize = 16;
/// How long a scrape of the metrics listener may take.
const METRICS_REQUEST_LIMIT: Duration = Duration::from_secs(10);

// === impl Sidecar ===

impl Sidecar {
    /// Connects to the masters and builds the lease manager.
    pub async fn start(settings: &Settings) -> Result<Self, Error> {
        // Before the engine records anything: its instruments land in this registry.
        crate::metrics::install();
        // Checked when the settings were loaded; a file that went since is refused here.
        let token = ApiToken::load(&settings.auth).map_err(Error::InvalidToken)?;
        let metrics_token = MetricsToken::load(&settings.metrics)
            .map_err(|problem| Error::InvalidToken(format!("metrics.token_file: {problem}")))?;
        let fleet = Fleet::connect(&settings.masters, &settings.fleet_options()).await?;
        let probe = fleet.spawn_probe(settings.fleet.probe_period);
        for node in fleet.nodes() {
            tracing::info!(
                node = node.index(),
                url = node.url(),
                up = node.is_up(),
                "master"
            );
        }
        let wakeups = Wakeups::connect(&fleet)?;
        // Before any lease is granted: a force release is then heard at once, not at the next
        // renewal. A master that does not confirm in time is listened to once it does.
        if !wakeups.listening_for_revocations(REVOCATIONS_WAIT).await {
            tracing::warn!("not every master confirmed the revocations subscription yet");
        }
        let engine = Redlock::new(Arc::clone(&fleet), settings.engine_options());
        let engine = Arc::new(engine.with_wakeups(wakeups));
        let manager = LeaseManager::new(Arc::clone(&engine), settings.lease_policy());
        Ok(Self {
            manager,
            engine,
            fleet,
            token,
            metrics_token,
            metrics_listener: None,
            grace: settings.shutdown_grace,
            http: settings.http.clone(),
            busy_poll: Windows {
                request: settings.busy_poll,
                after_answer: settings.busy_poll_after_answer,
            },
            _probe: probe,
        })
    }

    /// The API's token, to read again from its file (SIGHUP).
    pub fn token(&self) -> &Arc<ApiToken> {
        &self.token
    }

    /// The metrics listener's token, to read again from its file (SIGHUP).
    pub fn metrics_token(&self) -> &Arc<MetricsToken> {
        &self.metrics_token
    }

    /// Serves `GET /metrics` (only that) on `listener` too, bound from `metrics.listen`, with
    /// the token of `metrics.token_file`; it stops once the API's server has drained.
    pub fn with_metrics_listener(mut self, listener: impl Into<Listener>) -> Self {
        self.metrics_listener = Some(listener.into());
        self
    }

    /// The sidecar's lease table.
    pub fn manager(&self) -> &Arc<LeaseManager> {
        &self.manager
    }

    /// Serves the API on `listener` until `shutdown` resolves, then stops taking leases,
    /// releases every held lease and drains connections, giving up after the grace period.
    /// Nothing here fails: a connection's errors end that connection (and are logged), and
    /// what could fail the whole sidecar (binding, connecting) happened before.
    pub async fn run(
        mut self,
        listener: impl Into<Listener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let listener = listener.into();
        let grace = self.grace;
        let draining = CancellationToken::new();
        let release_then_drain = release_on(shutdown, &self.manager, grace, draining.clone());
        let options = ApiOptions::new(&self.http, listener.is_unix());
        let allowed_hosts = options.allowed_hosts.clone();
        let guard = Guard::new(
            allowed_hosts.clone(),
            Arc::clone(&self.token),
            api::request_timeout(&self.manager),
        );
        let state = AppState::new(Arc::clone(&self.manager), Arc::clone(&self.engine), options);
        let abort = CancellationToken::new();
        let api_done = CancellationToken::new();
        let metrics = self.serve_metrics(state.clone(), &api_done, &abort);
        let busy_poll = BusyPoll::new(self.busy_poll);
        // Its own task, so that its turns wake nothing else; stopped when this returns.
        let _polling = busy_poll
            .clone()
            .map(|busy| AbortOnDropHandle::new(tokio::spawn(busy.run())));
        let serve = async {
            let api = api::Api::new(state);
            let http = &self.http;
            accept::serve(
                listener,
                (api, guard, busy_poll),
                http,
                release_then_drain,
                abort.clone(),
            )
            .await;
            api_done.cancel();
        };
        let deadline = async {
            draining.cancelled().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            _ = async { tokio::join!(serve, metrics) } => {}
            () = deadline => {
                tracing::warn!("grace period expired with connections still open");
                abort.cancel();
            }
        }
        self.engine.settle(Duration::from_secs(1)).await;
        self.fleet.quit(Duration::from_secs(1)).await;
    }

    /// The metrics listener's server, if there is one: `GET /metrics` on the API's `state`,
    /// its own token and connection cap, the `Host` check of a TCP listener (even beside a
    /// Unix-socket API); until `api_done`.
    fn serve_metrics(
        &mut self,
        state: AppState,
        api_done: &CancellationToken,
        abort: &CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        let listener = self.metrics_listener.take();
        let allowed_hosts = ApiOptions::new(&self.http, false).allowed_hosts;
        let router = api::scrape::router(state, Arc::clone(&self.metrics_token));
        // Its own token is checked by its router; the API's is not asked there.
        let guard = Guard::new(allowed_hosts, ApiToken::none(), METRICS_REQUEST_LIMIT);
        let http = HttpSettings {
            max_connections: METRICS_MAX_CONNECTIONS,
            ..self.http.clone()
        };
        let (stop, abort) = (api_done.clone(), abort.clone());
        async move {
            let Some(listener) = listener else {
                return;
            };
            accept::serve(
                listener,
                (api::Api::routed(router), guard, None),
                &http,
                stop.cancelled_owned(),
                abort,
            )
            .await;
        }
    }
}

/// Once `shutdown` resolves: tells `draining`, then releases every lease of `manager` within
/// `grace`. The accept loop stops taking connections when this resolves, and drains them.
fn release_on(
    shutdown: impl Future<Output = ()> + Send + 'static,
    manager: &Arc<LeaseManager>,
    grace: Duration,
    draining: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let manager = Arc::clone(manager);
    async move {
        shutdown.await;
        draining.cancel();
        tracing::info!(
            active = manager.active(),
            "shutting down: releasing every lease"
        );
        if tokio::time::timeout(grace, manager.close()).await.is_err() {
            tracing::warn!("grace period expired before every lease was released");
        }
    }
}

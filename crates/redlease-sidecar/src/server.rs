//! The sidecar assembled from [`Settings`]: fleet, probe, engine, lease manager and HTTP API,
//! served on an already-bound listener until a shutdown future resolves. Shutdown releases
//! every held lease, then drains connections, all within the grace period.
//!
//! The HTTP server is our own accept loop over hyper's HTTP/1.1 connections (`accept`,
//! `connection`): connection cap and deadlines on slow or idle clients (`conn_io`); hyper
//! parses every byte. [`Listener`] binds TCP or a Unix socket.

mod accept;
mod conn_io;
mod connection;
mod listener;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use self::listener::{ListenError, Listener, SocketFile, UNIX_SOCKET_MODE};
use crate::api::auth::ApiToken;
use crate::api::guard::Guard;
use crate::api::ApiOptions;
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
    grace: Duration,
    http: HttpSettings,
    _probe: ProbeGuard,
}

/// How long start-up waits for every master to confirm the revocations subscription.
const REVOCATIONS_WAIT: Duration = Duration::from_secs(2);

// === impl Sidecar ===

impl Sidecar {
    /// Connects to the masters and builds the lease manager.
    pub async fn start(settings: &Settings) -> Result<Self, Error> {
        // Before the engine records anything: its instruments land in this registry.
        crate::metrics::install();
        // Checked when the settings were loaded; a file that went since is refused here.
        let token = ApiToken::load(&settings.auth).map_err(Error::InvalidToken)?;
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
            grace: settings.shutdown_grace,
            http: settings.http.clone(),
            _probe: probe,
        })
    }

    /// The API's token, to read again from its file (SIGHUP).
    pub fn token(&self) -> &Arc<ApiToken> {
        &self.token
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
        self,
        listener: impl Into<Listener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let listener = listener.into();
        let (manager, grace) = (Arc::clone(&self.manager), self.grace);
        let draining = Arc::new(Notify::new());
        let drain_started = Arc::clone(&draining);
        let release_then_drain = async move {
            shutdown.await;
            drain_started.notify_one();
            tracing::info!(
                active = manager.active(),
                "shutting down: releasing every lease"
            );
            if tokio::time::timeout(grace, manager.close()).await.is_err() {
                tracing::warn!("grace period expired before every lease was released");
            }
        };
        let options = ApiOptions::new(&self.http, listener.is_unix());
        let guard = Guard::new(
            options.allowed_hosts.clone(),
            Arc::clone(&self.token),
            api::request_timeout(&self.manager),
        );
        let router = api::app(Arc::clone(&self.manager), Arc::clone(&self.engine), options);
        let abort = CancellationToken::new();
        let serve = accept::serve(
            listener,
            (router, guard),
            &self.http,
            release_then_drain,
            abort.clone(),
        );
        let deadline = async {
            draining.notified().await;
            tokio::time::sleep(grace).await;
        };
        tokio::select! {
            () = serve => {}
            () = deadline => {
                tracing::warn!("grace period expired with connections still open");
                abort.cancel();
            }
        }
        self.engine.settle(Duration::from_secs(1)).await;
        self.fleet.quit(Duration::from_secs(1)).await;
    }
}

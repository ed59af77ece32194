//! The process's signals: SIGINT or SIGTERM shut it down; SIGHUP reads the API token (and the
//! metrics listener's) again.

use std::sync::Arc;

use redlease_sidecar::{ApiToken, MetricsToken};

/// Resolves on the first SIGINT or SIGTERM.
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; only SIGKILL stops this process");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// Reads the API token and the metrics listener's token from their files again on every
/// SIGHUP, for as long as the process runs.
pub fn reload_tokens_on_hangup(token: Arc<ApiToken>, metrics: Arc<MetricsToken>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::error!("cannot install the SIGHUP handler; the API token is read at start only");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match token.reload() {
                Ok(()) => tracing::info!("SIGHUP: API token read again"),
                Err(problem) => {
                    tracing::warn!(%problem, "SIGHUP: API token not read; the one in force stays")
                }
            }
            if let Err(problem) = metrics.reload() {
                tracing::warn!(%problem, "SIGHUP: metrics token not read; the one in force stays");
            }
        }
    });
}

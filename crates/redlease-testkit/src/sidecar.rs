//! The sidecar under test, in-process on 127.0.0.1:0, with a shutdown trigger, plus a small
//! reader of its Server-Sent Events.

use std::time::Duration;

use futures_util::StreamExt;
use redlease_sidecar::config::{Listen, Overrides, Settings};
use redlease_sidecar::server::{Listener, Sidecar};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::TestFleet;

/// A sidecar serving in this process, shut down (or aborted) by the test.
pub struct TestSidecar {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// Where it listens (loopback, a port the kernel chose).
    pub addr: std::net::SocketAddr,
    /// Where its metrics listener listens, when the settings gave `metrics.listen` (with
    /// port 0: a port the kernel chose).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// A client for the test's own requests.
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<()>>,
}

impl TestSidecar {
    /// A sidecar on `fleet` with settings given as `REDLEASE__…` pairs (never the process env).
    pub async fn start(fleet: &TestFleet, env: &[(&str, &str)]) -> Self {
        Self::start_on(fleet.urls(), env).await
    }

    /// A sidecar on the masters at `urls` (for example fault proxies in front of a fleet).
    pub async fn start_on(urls: Vec<String>, env: &[(&str, &str)]) -> Self {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let overrides = Overrides {
            masters: Some(urls),
            listen: Some("127.0.0.1:0".into()),
        };
        // Settings the test wrote that do not load, bind or start fail the test.
        let settings = Settings::load(None, env, overrides).unwrap();
        let listener = Listener::bind(&settings.listen).await.unwrap();
        let Listen::Tcp(addr) = listener.local().unwrap() else {
            unreachable!("bound on 127.0.0.1:0")
        };
        let base = format!("http://{addr}");
        let mut sidecar = Sidecar::start(&settings).await.unwrap();
        let mut metrics_addr = None;
        if let Some(metrics) = settings.metrics.listen {
            // A metrics address the test chose that cannot be bound fails the test.
            let listener = Listener::bind(&Listen::Tcp(metrics)).await.unwrap();
            let Listen::Tcp(bound) = listener.local().unwrap() else {
                unreachable!("bound on a TCP address")
            };
            metrics_addr = Some(bound);
            sidecar = sidecar.with_metrics_listener(listener);
        }
        let (tx, rx) = oneshot::channel::<()>();
        let served = tokio::spawn(sidecar.run(listener, async {
            let _ = rx.await;
        }));
        Self {
            base,
            addr,
            metrics_addr,
            http: reqwest::Client::new(),
            shutdown: Some(tx),
            served: Some(served),
        }
    }

    /// What SIGTERM does: stop, release every lease, drain. Waits until it is done.
    pub async fn shut_down(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(served) = self.served.take() {
            // A sidecar that panicked fails the test.
            served.await.unwrap();
        }
    }

    /// A POST of `body` to `/v1/locks/{resource}/acquire`: its status and JSON body.
    pub async fn acquire(&self, resource: &str, body: Value) -> (u16, Value) {
        let url = format!("{}/v1/locks/{resource}/acquire", self.base);
        // A request that cannot be sent, or gets no answer, fails the test.
        let response = self.http.post(url).json(&body).send().await.unwrap();
        answer(response).await
    }

    /// A POST of the JSON `body` to `path`: its status and JSON body.
    pub async fn post_json(&self, path: &str, body: Value) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        // A request that cannot be sent, or gets no answer, fails the test.
        let response = self.http.post(url).json(&body).send().await.unwrap();
        answer(response).await
    }

    /// A GET of `path`: its status and JSON body (a string when not JSON).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path).await
    }

    /// A body-less POST to `path`: its status and JSON body.
    pub async fn post(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::POST, path).await
    }

    /// A DELETE of `path`: its status and JSON body.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path).await
    }

    /// A body-less `method` request to `path`: its status and JSON body.
    async fn call(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        // A request that cannot be sent, or gets no answer, fails the test.
        let response = self.http.request(method, url).send().await.unwrap();
        answer(response).await
    }

    /// Opens the event stream of a lease.
    pub async fn events(&self, lease_id: &str) -> EventStream {
        let url = format!("{}/v1/leases/{lease_id}/events", self.base);
        // A request that cannot be sent, or gets no answer, fails the test.
        let response = self.http.get(url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        EventStream::new(response)
    }
}

/// Opens the event stream at `url` (`…/v1/leases/{id}/events`); `None` when the request
/// fails or is refused, for tests whose sidecars may be going away.
pub async fn open_events(http: &reqwest::Client, url: &str) -> Option<EventStream> {
    let response = http.get(url).send().await.ok()?;
    (response.status() == 200).then(|| EventStream::new(response))
}

impl Drop for TestSidecar {
    fn drop(&mut self) {
        if let Some(served) = &self.served {
            served.abort();
        }
    }
}

async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    // A body that is not text fails the test.
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

type Body = futures_util::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>;

/// The event stream ended (the lease ended, or the connection went).
#[derive(Debug)]
pub struct StreamEnded;

/// Reads `event:`/`data:` pairs off an SSE response.
pub struct EventStream {
    body: Body,
    buffer: String,
}

impl EventStream {
    /// Reads the events of `response`, a stream already answered 200 (an election's observe
    /// stream, say).
    pub fn from_response(response: reqwest::Response) -> Self {
        Self::new(response)
    }

    fn new(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// Like `next`, but tells a stream that ended (`Err`) from a `timeout` that passed first
    /// (`Ok(None)`).
    pub async fn next_or_end(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<(String, Value)>, StreamEnded> {
        match tokio::time::timeout(timeout, self.next_event()).await {
            Ok(Some(event)) => Ok(Some(event)),
            Ok(None) => Err(StreamEnded),
            Err(_) => Ok(None),
        }
    }

    /// The next event (name, data), or `None` when the stream ended or `timeout` passed.
    pub async fn next(&mut self, timeout: Duration) -> Option<(String, Value)> {
        tokio::time::timeout(timeout, self.next_event())
            .await
            .ok()
            .flatten()
    }

    async fn next_event(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_block(&block) {
                    return Some(event);
                }
                continue;
            }
            let chunk = self.body.next().await?.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

fn parse_block(block: &str) -> Option<(String, Value)> {
    let field = |name: &str| {
        block
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|v| v.trim_start().to_string())
    };
    let data = serde_json::from_str(&field("data:")?).ok()?;
    Some((field("event:")?, data))
}

//! Connections that hold the server: slow partial heads closed after the header-read timeout,
//! a flood of idle connections past `http.max_connections` (429 for the excess, the API still
//! serving, memory bounded), and event streams past `http.max_event_streams` (429). Each
//! starts its own sidecar, as each needs a setting of its own.

use std::time::Duration;

use futures_util::future::join_all;
use redlease::config::{Overrides, Settings};
use redlease_testkit::http::{Answer, Conn};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

use super::{acquire, addr_of, call, check, ctx_for, release, Case, ANSWER_WITHIN};

/// Idle connections of the flood (fewer when the open-file limit is too low for them).
const FLOOD: usize = 2000;
const MAX_CONNECTIONS: usize = 256;
const MAX_STREAMS: usize = 50;
/// The sidecar's memory may grow by less than this under the floods.
const RSS_GROWTH_KIB: u64 = 200 * 1024;

/// A sidecar with `env`, refused with a clear message while the settings are unknown.
async fn sidecar_with(fleet: &TestFleet, env: &[(&str, &str)]) -> TestSidecar {
    let pairs = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let overrides = Overrides {
        masters: Some(fleet.urls()),
        listen: Some("127.0.0.1:0".into()),
    };
    if let Err(error) = Settings::load(None, pairs, overrides) {
        panic!("the sidecar refuses the settings {env:?}: {error}");
    }
    TestSidecar::start(fleet, env).await
}

/// Checks `answer` as the refusal `status` `reason`.
fn refusal(answer: &Answer, status: u16, reason: &'static str) -> Result<(), String> {
    check(&Case::refused("", Vec::new(), status, reason), answer)
}

/// Resident memory of this process in KiB. The tests of this binary run as threads of one
/// process (`cargo test`), so it counts whatever other tests do meanwhile: the bound is loose.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS:"));
    let kib = line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    kib.unwrap_or(0)
}

/// `FLOOD`, or fewer when the soft open-file limit cannot hold both ends of every connection
/// (the sidecar runs in this process) with room left for the other tests.
fn flood_size() -> usize {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let line = limits.lines().find(|l| l.starts_with("Max open files"));
    let soft = line.and_then(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok());
    let soft = soft.unwrap_or(1024);
    let n = FLOOD.min(soft.saturating_sub(1024) / 2);
    if n < FLOOD {
        eprintln!("hostile flood: {n} connections, not {FLOOD}: open files limited to {soft}");
    }
    n
}

/// A head that stops halfway is closed after `http.header_read_timeout_ms` (with nothing
/// sent, or a 408); one that trickles in within it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_partial_heads_are_closed_after_the_header_read_timeout() {
    let fleet = TestFleet::start(1);
    let env = [("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "500")];
    let sidecar = sidecar_with(&fleet, &env).await;
    let addr = addr_of(&sidecar);
    let partial: [&[u8]; 5] = [
        b"G",
        b"GET /v1/fle",
        b"GET /livez HTTP/1.1\r\n",
        b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: b",
        b"POST /v1/locks/x/acquire HTTP/1.1\r\nContent-Ty",
    ];
    let started = Instant::now();
    let mut held = Vec::new();
    for raw in partial {
        let mut connection = Conn::connect(addr, ANSWER_WITHIN).await.unwrap();
        connection.try_send(raw).await.unwrap();
        held.push(connection);
    }
    let mut trickle = Conn::connect(addr, ANSWER_WITHIN).await.unwrap();
    trickle.try_send(b"GET /livez HT").await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    trickle.try_send(b"TP/1.1\r\n\r\n").await.unwrap();
    let served = trickle.answer_within(ANSWER_WITHIN).await;
    let mut failures = Vec::new();
    if !served.as_ref().is_ok_and(|a| a.status == 200) {
        failures.push(format!("a head complete in 150 ms: {served:?}"));
    }
    let closes = held.iter_mut().map(|connection| async {
        let closed = connection.closed_within(Duration::from_secs(5)).await;
        let closed = closed.map(|closed| closed.bytes);
        (closed, started.elapsed())
    });
    for ((closed, after), raw) in join_all(closes).await.into_iter().zip(partial) {
        let name = String::from_utf8_lossy(raw);
        let Some(bytes) = closed else {
            failures.push(format!("{name:?}: still open after 5 s"));
            continue;
        };
        if after < Duration::from_millis(400) || after > Duration::from_secs(3) {
            failures.push(format!(
                "{name:?}: closed after {after:?}, not about 500 ms"
            ));
        }
        if !bytes.is_empty() {
            let answer = Conn::new(bytes.as_slice()).read_answer().await;
            let timed_out = answer.and_then(|a| refusal(&a, 408, "request_timeout"));
            if let Err(error) = timed_out {
                failures.push(format!("{name:?}: {error}"));
            }
        }
    }
    eprintln!("hostile slow-head: {} requests", partial.len() + 1);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Past `http.max_connections` every extra connection hears 429 `too_many_connections` and
/// is closed, the held ones wait idle, and once they close the API serves again; memory stays
/// bounded meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_is_refused_past_the_limit_and_the_api_recovers() {
    let fleet = TestFleet::start(1);
    let limit = MAX_CONNECTIONS.to_string();
    // The held connections stay idle for seconds: the head timeout must not end them first.
    let env = [
        ("REDLEASE__HTTP__MAX_CONNECTIONS", limit.as_str()),
        ("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "30000"),
    ];
    let sidecar = sidecar_with(&fleet, &env).await;
    let addr = addr_of(&sidecar);
    let host = addr.to_string();
    let flood = flood_size();
    assert!(
        flood > 2 * MAX_CONNECTIONS,
        "a flood of {flood} proves nothing"
    );
    let rss_before = vm_rss_kib();
    let mut held = Vec::with_capacity(flood);
    for i in 0..flood {
        let connection = Conn::connect(addr, ANSWER_WITHIN).await;
        held.push(connection.unwrap_or_else(|e| panic!("connection {i}: {e}")));
    }
    let answers = join_all(
        held.iter_mut()
            .map(|c| c.answer_within(Duration::from_secs(3))),
    )
    .await;
    let (mut refused, mut idle, mut failures) = (0, 0, Vec::new());
    for (i, answer) in answers.iter().enumerate() {
        match answer
            .as_ref()
            .map(|a| refusal(a, 429, "too_many_connections"))
        {
            Ok(Ok(())) => refused += 1,
            Err(error) if error.starts_with("no answer") => idle += 1,
            Ok(Err(error)) => failures.push(format!("connection {i}: {error}")),
            Err(error) => failures.push(format!("connection {i}: {error}")),
        }
    }
    // The server is full: one more, with a request this time, is one too many.
    let fresh = call(addr, ctx_for(&host).get("/livez")).await;
    if let Err(error) = fresh.and_then(|a| refusal(&a, 429, "too_many_connections")) {
        failures.push(format!("a request while full: {error}"));
    }
    let rss_flooded = vm_rss_kib();
    drop(held);
    // Closed, the idle connections free their places (once the server has seen them go).
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        match acquire(addr, &host, "after-flood", r#"{"owner":"flood"}"#).await {
            Ok(id) => break release(addr, &host, &id).await,
            Err(error) if Instant::now() > deadline => break Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    if let Err(error) = after {
        failures.push(format!("acquire and release after the flood: {error}"));
    }
    eprintln!(
        "hostile flood: {flood} connections + 3 requests; {refused} refused, {idle} idle; \
         RSS {rss_before} -> {rss_flooded} KiB"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        refused >= flood - MAX_CONNECTIONS,
        "{refused} refused, {idle} idle"
    );
    assert!(
        idle <= MAX_CONNECTIONS,
        "{idle} connections held past the limit"
    );
    let growth = rss_flooded.saturating_sub(rss_before);
    assert!(
        growth < RSS_GROWTH_KIB,
        "RSS grew by {growth} KiB under the flood"
    );
}

/// Past `http.max_event_streams` a stream request hears 429 `too_many_streams`; a closed
/// stream frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_past_the_limit_are_refused() {
    let fleet = TestFleet::start(1);
    let limit = MAX_STREAMS.to_string();
    let sidecar = sidecar_with(&fleet, &[("REDLEASE__HTTP__MAX_EVENT_STREAMS", &limit)]).await;
    let addr = addr_of(&sidecar);
    let host = addr.to_string();
    let body = r#"{"owner":"streams","idle_timeout_ms":60000}"#;
    let id = acquire(addr, &host, "streamed", body).await.unwrap();
    let request = ctx_for(&host).get(&format!("/v1/leases/{id}/events"));
    let rss_before = vm_rss_kib();
    let (mut open, mut failures) = (Vec::new(), Vec::new());
    for i in 0..2 * MAX_STREAMS {
        let mut connection = Conn::connect(addr, ANSWER_WITHIN).await.unwrap();
        connection.try_send(&request).await.unwrap();
        let head = connection.head_within(ANSWER_WITHIN).await;
        let outcome = match head {
            Ok(head) if i < MAX_STREAMS => stream_opened(&head),
            Ok(head) if head.status == 200 => Err("a stream opened past the limit".into()),
            Ok(mut head) => {
                let body =
                    tokio::time::timeout(ANSWER_WITHIN, connection.read_body(&mut head)).await;
                let body = body.unwrap_or_else(|_| Err("no body within the limit".into()));
                body.and_then(|()| refusal(&head, 429, "too_many_streams"))
            }
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) if i < MAX_STREAMS => open.push(connection),
            Ok(()) => {}
            Err(error) => failures.push(format!("stream {}: {error}", i + 1)),
        }
    }
    // Ten streams closed: a new one opens (once the server has seen them go).
    open.truncate(open.len().saturating_sub(10));
    let deadline = Instant::now() + Duration::from_secs(3);
    let reopened = loop {
        let mut connection = Conn::connect(addr, ANSWER_WITHIN).await.unwrap();
        connection.try_send(&request).await.unwrap();
        let opened = connection
            .head_within(ANSWER_WITHIN)
            .await
            .and_then(|h| stream_opened(&h));
        if opened.is_ok() || Instant::now() > deadline {
            break opened;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if let Err(error) = reopened {
        failures.push(format!("a stream after ten closed: {error}"));
    }
    if let Err(error) = release(addr, &host, &id).await {
        failures.push(error);
    }
    let growth = vm_rss_kib().saturating_sub(rss_before);
    eprintln!(
        "hostile streams: {} requests + 1 or more",
        2 * MAX_STREAMS + 2
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        growth < RSS_GROWTH_KIB,
        "RSS grew by {growth} KiB under the streams"
    );
}

fn stream_opened(head: &Answer) -> Result<(), String> {
    let media = head.header("content-type").unwrap_or("");
    if head.status != 200 || !media.starts_with("text/event-stream") {
        return Err(format!(
            "expected an event stream, got {} [{media}]",
            head.status
        ));
    }
    Ok(())
}

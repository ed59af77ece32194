//! The HTTP layer as a hostile client meets it, byte by byte over loopback TCP: deadlines on
//! slow and idle clients, limits on targets, heads and bodies, encodings, the `Host` check,
//! caps on connections and event streams, problem+json for every refusal of the API, and the
//! parser's own empty answer to what it cannot parse or hold.

use std::time::Duration;

use redlease_testkit::assert_eventually;
use redlease_testkit::http::{request, Answer, Closed, Conn};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::time::Instant;

async fn start(env: &[(&str, &str)]) -> (TestFleet, TestSidecar) {
    let fleet = TestFleet::start(1);
    let sidecar = TestSidecar::start(&fleet, env).await;
    (fleet, sidecar)
}

async fn connect(sidecar: &TestSidecar) -> Conn<TcpStream> {
    Conn::new(TcpStream::connect(sidecar.addr).await.unwrap())
}

/// One raw request on a new connection: its answer's status and reason.
async fn refused(sidecar: &TestSidecar, bytes: &[u8]) -> (u16, String) {
    connect(sidecar).await.exchange(bytes).await.problem()
}

/// One raw request the HTTP parser refuses itself: its status, after checking the answer is
/// empty (no body, no content type) and the connection closes after it.
async fn refused_by_parser(sidecar: &TestSidecar, bytes: &[u8]) -> u16 {
    let mut conn = connect(sidecar).await;
    let answer = conn.exchange(bytes).await;
    assert_eq!(answer.header("content-type"), None, "{answer:?}");
    assert!(answer.body.is_empty(), "{answer:?}");
    assert!(conn.closed_within(Duration::from_secs(2)).await.is_some());
    answer.status
}

async fn lease(sidecar: &TestSidecar, resource: &str) -> String {
    let (status, lease) = sidecar.acquire(resource, json!({"owner": "a"})).await;
    assert_eq!(status, 200, "{lease}");
    lease["lease_id"].as_str().unwrap().to_string()
}

/// A request head begun and never finished is closed after `http.header_read_timeout_ms`,
/// with no answer, on every such connection at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_heads_are_closed_after_the_header_read_timeout() {
    let env = [("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "300")];
    let (_fleet, sidecar) = start(&env).await;
    let mut conns = Vec::new();
    for _ in 0..50 {
        let mut conn = connect(&sidecar).await;
        conn.send(b"GET /livez HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
            .await;
        conns.push(conn);
    }
    let start = Instant::now();
    for conn in &mut conns {
        let closed = conn.closed_within(Duration::from_secs(5)).await;
        let closed = closed.map(Closed::silent);
        assert!(closed.is_some(), "a partial head was kept past 5 s");
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(250), "closed early: {took:?}");
    assert!(took < Duration::from_secs(3), "closed late: {took:?}");
}

/// A keep-alive connection with no request in flight is closed after
/// `http.idle_timeout_ms`, not after the (shorter) header read timeout; a connection that
/// never sends a byte likewise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed() {
    let env = [
        ("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "200"),
        ("REDLEASE__HTTP__IDLE_TIMEOUT_MS", "1200"),
    ];
    let (_fleet, sidecar) = start(&env).await;
    let mut conn = connect(&sidecar).await;
    assert_eq!(
        conn.exchange(&request("GET", "/livez", "")).await.status,
        200
    );
    let idle = conn.closed_within(Duration::from_secs(6)).await;
    let idle = idle.map(Closed::silent).unwrap();
    assert!(idle >= Duration::from_millis(1000), "closed at {idle:?}");
    assert!(idle < Duration::from_millis(2400), "closed at {idle:?}");
    let mut silent = connect(&sidecar).await;
    let idle = silent.closed_within(Duration::from_secs(6)).await;
    let idle = idle.map(Closed::silent).unwrap();
    assert!(idle >= Duration::from_millis(1000), "closed at {idle:?}");
    // A client that keeps asking is never idle.
    let mut busy = connect(&sidecar).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            busy.exchange(&request("GET", "/livez", "")).await.status,
            200
        );
    }
}

/// A body that trickles in is answered 408 `request_timeout` once the header read timeout
/// passed, not after the route's long request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_body_gets_408() {
    let env = [("REDLEASE__HTTP__HEADER_READ_TIMEOUT_MS", "300")];
    let (_fleet, sidecar) = start(&env).await;
    let mut conn = connect(&sidecar).await;
    let head = "POST /v1/locks/job/acquire HTTP/1.1\r\nhost: 127.0.0.1\r\n\
                content-type: application/json\r\ncontent-length: 40\r\n\r\n{\"ow";
    let start = Instant::now();
    conn.send(head.as_bytes()).await;
    let answer = conn.answer().await;
    assert_eq!(answer.problem(), (408, "request_timeout".into()));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

/// A declared body over 64 KiB is refused before a byte of it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_content_length_is_refused_at_once() {
    let (_fleet, sidecar) = start(&[]).await;
    for path in ["/v1/locks/job/acquire", "/v1/leases/00/renew", "/livez"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             content-length: 10000000000\r\n\r\n"
        );
        let start = Instant::now();
        assert_eq!(
            refused(&sidecar, head.as_bytes()).await,
            (413, "body_too_large".into())
        );
        assert!(start.elapsed() < Duration::from_secs(2));
    }
    // A chunked body over the limit on renew: 413 too, as problem+json.
    let id = lease(&sidecar, "job").await;
    let chunk = "x".repeat(8000);
    let mut body = String::new();
    for _ in 0..10 {
        body.push_str(&format!("{:x}\r\n{chunk}\r\n", chunk.len()));
    }
    body.push_str("0\r\n\r\n");
    let renew = format!(
        "POST /v1/leases/{id}/renew HTTP/1.1\r\nhost: 127.0.0.1\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{body}"
    );
    assert_eq!(
        refused(&sidecar, renew.as_bytes()).await,
        (413, "body_too_large".into())
    );
}

/// A known path with another method is 405 problem+json with `Allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_is_405_with_allow() {
    let (_fleet, sidecar) = start(&[]).await;
    let id = "0".repeat(32);
    for (method, path, allow) in [
        ("DELETE", "/v1/fleet".to_string(), "GET,HEAD"),
        ("PUT", format!("/v1/leases/{id}"), "GET,HEAD,DELETE"),
        ("GET", "/v1/locks/job/acquire".to_string(), "POST"),
        ("OPTIONS", "/livez".to_string(), "GET,HEAD"),
    ] {
        let answer = connect(&sidecar)
            .await
            .exchange(&request(method, &path, ""))
            .await;
        assert_eq!(
            answer.problem(),
            (405, "method_not_allowed".into()),
            "{path}"
        );
        assert_eq!(answer.header("allow"), Some(allow), "{method} {path}");
    }
    let answer = connect(&sidecar)
        .await
        .exchange(&request("GET", "/v2/x", ""))
        .await;
    assert_eq!(answer.problem(), (404, "not_found".into()));
}

/// What hyper cannot parse (a broken request line or header, an unknown version, a transfer
/// encoding without `chunked` last, a second request gone wrong after a good one) gets its
/// empty 400 and the connection closes; an HTTP/2 preface is not answered, only closed. A body
/// whose chunks are malformed is the API's to read: 400 `bad_request` problem+json.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unparsable_requests_get_the_parsers_empty_400() {
    let (_fleet, sidecar) = start(&[]).await;
    for bytes in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /livez HTTP/9.9\r\nhost: 127.0.0.1\r\n\r\n",
        b"GET /livez HTTP/1.1\r\nbad header line\r\n\r\n",
        b"GET /livez HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1, 2\r\n\r\n",
        b"GET /li vez HTTP/1.1\r\n\r\n",
        b"POST /v1/locks/a/acquire HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: gzip\r\n\r\n",
    ] {
        let shown = String::from_utf8_lossy(bytes);
        assert_eq!(refused_by_parser(&sidecar, bytes).await, 400, "{shown}");
    }
    let mut h2 = connect(&sidecar).await;
    h2.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    assert!(h2.closed_within(Duration::from_secs(2)).await.is_some());
    let mut conn = connect(&sidecar).await;
    conn.send(b"GET /livez HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nNOT HTTP AT ALL\r\n\r\n")
        .await;
    assert_eq!(conn.answer().await.status, 200);
    let answer = conn.answer().await;
    assert_eq!((answer.status, answer.body.len()), (400, 0), "{answer:?}");
    assert!(conn.closed_within(Duration::from_secs(2)).await.is_some());
    let bad_chunk = b"POST /v1/locks/a/acquire HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
        transfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n";
    assert_eq!(
        refused(&sidecar, bad_chunk).await,
        (400, "bad_request".into())
    );
}

/// A request target over 8 KiB is 414 `uri_too_long`, also in a head over 16 KiB; one too
/// long for the parser to hold (a head over 32 KiB) gets the parser's empty 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_uri_is_414() {
    let (_fleet, sidecar) = start(&[]).await;
    for size in [8 * 1024 + 1, 9000, 20_000, 32_000] {
        let path = format!("/v1/locks/{}", "x".repeat(size));
        let answer = connect(&sidecar)
            .await
            .exchange(&request("GET", &path, ""))
            .await;
        assert_eq!(answer.problem(), (414, "uri_too_long".into()), "{size}");
    }
    let path = format!("/v1/locks/{}", "x".repeat(100_000));
    let status = refused_by_parser(&sidecar, &request("GET", &path, "")).await;
    assert_eq!(status, 431);
    let fits = format!("/v1/locks?prefix=a&x={}", "y".repeat(8000));
    let answer = connect(&sidecar)
        .await
        .exchange(&request("GET", &fits, ""))
        .await;
    assert_eq!(answer.problem(), (400, "invalid_query".into()));
}

/// A head over 16 KiB is 431 `headers_too_large`; 100 fields are fine. One over what the
/// parser holds (32 KiB, or more than its 100 fields) gets the parser's empty 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_are_431() {
    let (_fleet, sidecar) = start(&[]).await;
    let fields = |n: usize| -> String { (0..n).map(|i| format!("x-f{i}: v\r\n")).collect() };
    let head =
        |extra: &str| format!("GET /livez HTTP/1.1\r\nhost: 127.0.0.1\r\n{extra}\r\n").into_bytes();
    let big = format!("x-big: {}\r\n", "v".repeat(17 * 1024));
    let bigger = format!("x-big: {}\r\n", "v".repeat(31 * 1024));
    for extra in [big.as_str(), &bigger] {
        assert_eq!(
            refused(&sidecar, &head(extra)).await,
            (431, "headers_too_large".into())
        );
    }
    let huge = format!("x-big: {}\r\n", "v".repeat(200 * 1024));
    for extra in [huge.as_str(), &fields(100), &fields(200)] {
        assert_eq!(refused_by_parser(&sidecar, &head(extra)).await, 431);
    }
    let answer = connect(&sidecar).await.exchange(&head(&fields(99))).await;
    assert_eq!(answer.status, 200, "100 fields (host included) refused");
}

/// `Content-Encoding` other than `identity` and `Transfer-Encoding` other than exactly
/// `chunked` (with `chunked` last: the parser refuses any other) are 415
/// `unsupported_encoding`, never read as plain JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encodings_are_refused_with_415() {
    let (fleet, sidecar) = start(&[]).await;
    let body = r#"{"owner":"a"}"#;
    let gzip = format!(
        "POST /v1/locks/job/acquire HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         content-encoding: gzip\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    assert_eq!(
        refused(&sidecar, gzip.as_bytes()).await,
        (415, "unsupported_encoding".into())
    );
    let chunked = format!(
        "POST /v1/locks/job/acquire HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         transfer-encoding: gzip, chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    assert_eq!(
        refused(&sidecar, chunked.as_bytes()).await,
        (415, "unsupported_encoding".into())
    );
    assert_eq!(fleet.data_keys(0), Vec::<String>::new());
}

/// `Host` must name an IP literal, `localhost` or an allowed name (DNS rebinding); a request
/// without `Host` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_other_than_ip_literals_localhost_or_allowed_names_are_403() {
    let env = [("REDLEASE__HTTP__ALLOWED_HOSTS", "sidecar.internal")];
    let (_fleet, sidecar) = start(&env).await;
    let port = sidecar.addr.port();
    let with_host = |host: &str| format!("GET /v1/fleet HTTP/1.1\r\nhost: {host}\r\n\r\n");
    for host in [
        "evil.example",
        "evil.example:7600",
        "127.0.0.1.nip.io",
        "2130706433",
    ] {
        let answer = connect(&sidecar)
            .await
            .exchange(with_host(host).as_bytes())
            .await;
        assert_eq!(answer.problem(), (403, "host_not_allowed".into()), "{host}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        "[::1]:1".into(),
        "localhost".into(),
        format!("LocalHost:{port}"),
        "sidecar.internal".into(),
    ] {
        let answer = connect(&sidecar)
            .await
            .exchange(with_host(&host).as_bytes())
            .await;
        assert_eq!(answer.status, 200, "{host}: {answer:?}");
    }
    let bare = b"GET /v1/fleet HTTP/1.1\r\n\r\n";
    assert_eq!(connect(&sidecar).await.exchange(bare).await.status, 200);
    let empty = b"GET /v1/fleet HTTP/1.1\r\nhost:\r\n\r\n";
    assert_eq!(connect(&sidecar).await.exchange(empty).await.status, 200);
    let two = b"GET /v1/fleet HTTP/1.1\r\nhost: 127.0.0.1\r\nhost: 127.0.0.1\r\n\r\n";
    assert_eq!(refused(&sidecar, two).await, (400, "bad_request".into()));
    let absolute = b"GET http://evil.example/v1/fleet HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    assert_eq!(
        refused(&sidecar, absolute).await,
        (403, "host_not_allowed".into())
    );
}

/// Past `http.max_connections` open connections the next one is answered 429
/// `too_many_connections` and closed; a slot frees when a connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_429() {
    let env = [("REDLEASE__HTTP__MAX_CONNECTIONS", "8")];
    let (_fleet, sidecar) = start(&env).await;
    let mut open = Vec::new();
    for _ in 0..8 {
        let mut conn = connect(&sidecar).await;
        assert_eq!(
            conn.exchange(&request("GET", "/livez", "")).await.status,
            200
        );
        open.push(conn);
    }
    let mut ninth = connect(&sidecar).await;
    let answer = ninth.exchange(&request("GET", "/livez", "")).await;
    assert_eq!(answer.problem(), (429, "too_many_connections".into()));
    assert_eq!(answer.header("connection"), Some("close"));
    let closed = ninth.closed_within(Duration::from_secs(3)).await;
    assert!(closed.map(Closed::silent).is_some());
    drop(open.pop());
    assert_eventually!(
        {
            let mut conn = connect(&sidecar).await;
            conn.exchange(&request("GET", "/livez", "")).await.status == 200
        },
        5,
        "no slot freed after a connection closed"
    );
}

/// Past `http.max_event_streams` open streams the next is 429 `too_many_streams`; a stream
/// whose client went away frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_over_the_cap_get_429() {
    let env = [("REDLEASE__HTTP__MAX_EVENT_STREAMS", "2")];
    let (_fleet, sidecar) = start(&env).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(lease(&sidecar, &format!("job-{i}")).await);
    }
    let events = |id: &str| request("GET", &format!("/v1/leases/{id}/events"), "");
    let mut streams = Vec::new();
    for id in &ids[..2] {
        let mut conn = connect(&sidecar).await;
        conn.send(&events(id)).await;
        let head = conn.head().await;
        assert_eq!(head.status, 200);
        assert_eq!(head.header("content-type"), Some("text/event-stream"));
        streams.push(conn);
    }
    let third = connect(&sidecar).await.exchange(&events(&ids[2])).await;
    assert_eq!(third.problem(), (429, "too_many_streams".into()));
    drop(streams.pop());
    assert_eventually!(
        {
            let mut conn = connect(&sidecar).await;
            conn.send(&events(&ids[2])).await;
            conn.head().await.status == 200
        },
        5,
        "a stream whose client left kept its slot"
    );
}

/// Renew reads its body like acquire: 415 for a non-JSON type (an empty body needs none),
/// 422 for the wrong shape, 400 for what is not JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_bodies_are_checked_like_acquire() {
    let (_fleet, sidecar) = start(&[]).await;
    let id = lease(&sidecar, "job").await;
    let path = format!("/v1/leases/{id}/renew");
    let typed = |content_type: &str, body: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {content_type}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let plain = typed("text/plain", r#"{"ttl_ms":5000}"#);
    assert_eq!(
        refused(&sidecar, plain.as_bytes()).await,
        (415, "invalid_body".into())
    );
    let acquire =
        b"POST /v1/locks/x/acquire HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: text/plain\r\n\
        content-length: 13\r\n\r\n{\"owner\":\"a\"}";
    assert_eq!(
        refused(&sidecar, acquire).await,
        (415, "invalid_body".into())
    );
    for (body, status) in [
        (r#"{"ttl":5000}"#, 422),
        (r#"{"ttl_ms":5000,"ttl_ms":6000}"#, 422),
        (r#"[5000]"#, 422),
        (r#"{"ttl_ms":"#, 400),
        ("nope", 400),
    ] {
        let answer = connect(&sidecar)
            .await
            .exchange(&request("POST", &path, body))
            .await;
        assert_eq!(answer.problem(), (status, "invalid_body".into()), "{body}");
    }
    let empty = format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n");
    let answer = connect(&sidecar).await.exchange(empty.as_bytes()).await;
    assert_eq!(answer.status, 200, "{answer:?}");
}

/// A duration field of a wrong kind gets that field's own reason, on acquire and on renew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_of_a_wrong_kind_get_their_own_reason() {
    let (fleet, sidecar) = start(&[]).await;
    let id = lease(&sidecar, "held").await;
    for value in [
        "-1",
        "1.5",
        "\"10\"",
        "1e30",
        "18446744073709551616",
        "true",
    ] {
        for (field, reason) in [
            ("ttl_ms", "invalid_ttl"),
            ("wait_ms", "invalid_wait"),
            ("idle_timeout_ms", "invalid_idle_timeout"),
        ] {
            let body = format!(r#"{{"owner":"a","{field}":{value}}}"#);
            let answer = exchange_json(&sidecar, "/v1/locks/job/acquire", &body).await;
            assert_eq!(answer.problem(), (400, reason.into()), "{body}");
        }
        let body = format!(r#"{{"ttl_ms":{value}}}"#);
        let answer = exchange_json(&sidecar, &format!("/v1/leases/{id}/renew"), &body).await;
        assert_eq!(answer.problem(), (400, "invalid_ttl".into()), "{body}");
    }
    let deep = format!(r#"{{"owner":{}{}}}"#, "[".repeat(3000), "]".repeat(3000));
    let answer = exchange_json(&sidecar, "/v1/locks/job/acquire", &deep).await;
    assert_eq!(answer.problem(), (422, "invalid_body".into()));
    assert_eq!(
        fleet.lock_keys_on(&[0]).len(),
        1,
        "only the first lease was written"
    );
}

async fn exchange_json(sidecar: &TestSidecar, path: &str, body: &str) -> Answer {
    connect(sidecar)
        .await
        .exchange(&request("POST", path, body))
        .await
}

/// The two requests of a lock's cycle are answered straight by their handlers, and through
/// the router when their segment is percent-encoded: both ways give the same answers, the
/// same header names and the same refusals, for good and bad bodies and ids alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cycles_requests_answer_alike_with_and_without_the_router() {
    let (_fleet, sidecar) = start(&[]).await;
    let shape = |answer: &Answer| {
        let mut names: Vec<String> = answer.headers.iter().map(|(n, _)| n.clone()).collect();
        names.sort();
        let body = answer.json();
        let mut keys: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        let problem = (body.get("reason").cloned(), body.get("detail").cloned());
        (answer.status, names, keys, problem)
    };
    let exchange = |method: &'static str, path: String, body: &'static str| {
        let sidecar = &sidecar;
        async move {
            let bytes = request(method, &path, body);
            connect(sidecar).await.exchange(&bytes).await
        }
    };
    let bodies = [
        r#"{"owner":"a","auto_renew":false,"ttl_ms":30000}"#,
        r#"{"owner":"a","ttl_ms":60000}"#,
        r#"{"owner":7}"#,
        r#"{"owner":"a","ttl_ms":-1}"#,
        r#"["a"]"#,
        r#"{"owner":"a""#,
        "",
    ];
    let mut released_both_ways = 0;
    for (i, body) in bodies.into_iter().enumerate() {
        // `%2D` is `-`: the router decodes the segment to the same kind of name.
        let direct = exchange("POST", format!("/v1/locks/direct-{i}/acquire"), body).await;
        let routed = exchange("POST", format!("/v1/locks/routed%2D{i}/acquire"), body).await;
        assert_eq!(shape(&direct), shape(&routed), "{body}");
        if direct.status != 200 {
            continue;
        }
        assert_eq!(routed.json()["resource"], format!("routed-{i}"));
        for (answer, encode) in [(&direct, false), (&routed, true)] {
            let id = answer.json()["lease_id"].as_str().unwrap().to_string();
            // The id's first digit percent-encoded takes the router's way to the same lease.
            let segment = match encode {
                true => format!("%{:02X}{}", id.as_bytes()[0], &id[1..]),
                false => id,
            };
            let released = exchange("DELETE", format!("/v1/leases/{segment}"), "").await;
            assert_eq!(released.status, 200, "{released:?}");
            assert_eq!(released.json()["released"], true, "{released:?}");
            released_both_ways += 1;
        }
    }
    assert_eq!(released_both_ways, 2, "the good body was granted both ways");
    let direct = exchange("DELETE", "/v1/leases/nothex".into(), "").await;
    let routed = exchange("DELETE", "/v1/leases/nothe%78".into(), "").await;
    assert_eq!(direct.problem(), (404, "unknown_lease".into()));
    assert_eq!(shape(&direct), shape(&routed));
}

//! The connection's own path for the requests of a lock's cycle and of a lease held without
//! an event stream (`server::fast_lane`) against hyper's: the same answers, a client that
//! hangs up mid-request no longer waited for, one that stops sending answered as hyper answers
//! it, pipelined and split requests answered in order, and hyper taking over mid-connection.

use redlease_testkit::http::{exchange, request, Answer, Conn};
use tokio::net::TcpStream;

use super::*;

/// A connection of its own; with `to_hyper`, its first request is one the lane does not take,
/// so that hyper serves every request after it.
async fn conn(sidecar: &TestSidecar, to_hyper: bool) -> Conn<TcpStream> {
    let mut conn = Conn::new(TcpStream::connect(sidecar.addr).await.unwrap());
    if to_hyper {
        let live = conn.exchange(&request("GET", "/livez", "")).await;
        assert_eq!(live.status, 200);
    }
    conn
}

/// An answer's status, headers and body fields.
type Comparable = (u16, Vec<(String, String)>, Vec<(String, Value)>);

/// An answer with what differs between two leases taken out left out: its date, and the
/// lease's id, resource, fencing token and times (and so its length, checked against its
/// body here).
fn comparable(answer: &Answer) -> Comparable {
    let length = answer.header("content-length").map(str::parse::<usize>);
    assert_eq!(length, Some(Ok(answer.body.len())), "{answer:?}");
    assert!(answer.header("date").is_some(), "{answer:?}");
    let headers = answer
        .headers
        .iter()
        .filter(|(name, _)| name != "date" && name != "content-length");
    let body = answer.json();
    let fields = body.as_object().map_or_else(Vec::new, |object| {
        let varying = [
            "lease_id",
            "resource",
            "fencing_token",
            "validity_ms",
            "expires_at",
        ];
        let mut kept = Vec::new();
        for (key, value) in object {
            let value = if varying.contains(&key.as_str()) {
                json!("…")
            } else {
                value.clone()
            };
            kept.push((key.clone(), value));
        }
        kept
    });
    (answer.status, headers.cloned().collect(), fields)
}

/// `raw` (a request) with `fields` after its request line.
fn with_fields(raw: Vec<u8>, fields: &str) -> Vec<u8> {
    let text = String::from_utf8(raw).unwrap();
    let (line, rest) = text.split_once("\r\n").unwrap();
    format!("{line}\r\n{fields}{rest}").into_bytes()
}

/// A cycle's requests and their refusals get the same answers, fields in the same order,
/// from the lane and from hyper.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lane_answers_as_hyper_does() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let mut answers = Vec::new();
    for (to_hyper, resource) in [(false, "lane-job"), (true, "hyper-job")] {
        let mut conn = conn(&sidecar, to_hyper).await;
        let path = format!("/v1/locks/{resource}/acquire");
        let acquire = |body: &str| request("POST", &path, body);
        let mut seen = Vec::new();
        let granted = conn
            .exchange(&acquire(r#"{"owner":"a","ttl_ms":5000}"#))
            .await;
        let id = lease_id(&granted.json());
        seen.push(granted);
        // What an app without an event stream sends while it holds the lease.
        let keepalive = |id: &str| request("POST", &format!("/v1/leases/{id}/keepalive"), "");
        let read = |id: &str| request("GET", &format!("/v1/leases/{id}"), "");
        seen.push(conn.exchange(&keepalive(&id)).await);
        seen.push(conn.exchange(&read(&id)).await);
        seen.push(conn.exchange(&acquire(r#"{"owner":"b"}"#)).await);
        seen.push(conn.exchange(&acquire(r#"{"owner":""}"#)).await);
        seen.push(conn.exchange(&acquire(r#"{"owner":"b","ttl_ms":1}"#)).await);
        let unknown = "00112233445566778899aabbccddeeff";
        seen.push(
            conn.exchange(&request("DELETE", &format!("/v1/leases/{unknown}"), ""))
                .await,
        );
        seen.push(conn.exchange(&keepalive(unknown)).await);
        seen.push(conn.exchange(&read(unknown)).await);
        let release = request("DELETE", &format!("/v1/leases/{id}"), "");
        seen.push(conn.exchange(&release).await);
        seen.push(conn.exchange(&release).await);
        seen.push(conn.exchange(&keepalive(&id)).await);
        seen.push(conn.exchange(&read(&id)).await);
        // With the fields other clients send, which nothing reads.
        let other_client = with_fields(
            acquire(r#"{"owner":"c"}"#),
            "Accept-Encoding: gzip, deflate\r\nUser-Agent: python-httpx/0.28\r\n\
             traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n",
        );
        let granted = conn.exchange(&other_client).await;
        let id = lease_id(&granted.json());
        seen.push(granted);
        let release = request("DELETE", &format!("/v1/leases/{id}"), "");
        seen.push(
            conn.exchange(&with_fields(release, "accept: */*\r\n"))
                .await,
        );
        answers.push(seen.iter().map(comparable).collect::<Vec<_>>());
    }
    let statuses: Vec<u16> = answers[0].iter().map(|answer| answer.0).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 409, 400, 400, 404, 404, 404, 200, 200, 410, 200, 200, 200]
    );
    assert_eq!(answers[0], answers[1]);
}

/// A client that hangs up while its acquisition waits is no longer waited for, as under
/// hyper: the wait ends at once, and the lock goes to the next caller when released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_hangs_up_stops_waiting() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let holder = held(&sidecar, "gone-job", json!({"owner": "a", "ttl_ms": 10000})).await;
    let mut waiter = conn(&sidecar, false).await;
    let body = json!({"owner": "gone", "wait_ms": 8000}).to_string();
    waiter
        .send(&request("POST", "/v1/locks/gone-job/acquire", &body))
        .await;
    assert_eventually!(waiting(&sidecar).await == 1, 5, "the acquisition waits");
    drop(waiter);
    assert_eventually!(
        waiting(&sidecar).await == 0,
        2,
        "the acquisition stopped waiting"
    );
    let (status, _) = sidecar.delete(&format!("/v1/leases/{holder}")).await;
    assert_eq!(status, 200);
    let (status, next) = sidecar.acquire("gone-job", json!({"owner": "next"})).await;
    assert_eq!(
        (status, next["owner"].as_str()),
        (200, Some("next")),
        "{next}"
    );
}

/// Requests sent in one write are answered in order, the lane's and then hyper's (from the
/// first it does not take); a request whose head or body comes in pieces is answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_and_split_requests_are_answered_in_order() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = r#"{"owner":"a","ttl_ms":5000}"#;
    let mut raw = request("POST", "/v1/locks/piped/acquire", body);
    raw.extend(request("POST", "/v1/locks/piped/acquire", body));
    raw.extend(request("GET", "/livez", ""));
    raw.extend(request("POST", "/v1/locks/piped/acquire", body));
    let answers = exchange(sidecar.addr, &raw, 4, Duration::from_secs(10)).await;
    let statuses: Vec<_> = answers
        .iter()
        .map(|a| a.as_ref().map(|a| a.status))
        .collect();
    assert_eq!(statuses, [Ok(200), Ok(409), Ok(200), Ok(409)]);
    let whole = request("POST", "/v1/locks/split/acquire", r#"{"owner":"s"}"#);
    let head_end = whole.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    // A body written right after its head (as httpx writes it) is waited for on the lane;
    // one later than that is hyper's.
    let cuts = [
        (10, 50),
        (head_end, 0),
        (whole.len() - 1, 0),
        (head_end, 50),
    ];
    for (number, (cut, pause_ms)) in cuts.into_iter().enumerate() {
        let mut conn = conn(&sidecar, false).await;
        conn.send(&whole[..cut]).await;
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        conn.send(&whole[cut..]).await;
        let answer = conn.answer().await;
        let expected = if number == 0 { 200 } else { 409 };
        assert_eq!(answer.status, expected, "cut at {cut}, {pause_ms} ms");
        let again = request("POST", "/v1/locks/split/acquire", r#"{"owner":"t"}"#);
        let again = conn.exchange(&again).await;
        assert_eq!(again.status, 409, "cut at {cut}, {pause_ms} ms, then whole");
    }
}

/// A client that stops sending (a TCP half-close) gets from the lane what it gets from hyper.
/// A request whose body is cut short gets hyper's refusal: the lane, having waited for the
/// body, leaves the request to hyper, which reads the end of the stream again. A whole request
/// found followed by the end of the stream gets nothing, even where its answer would be ready
/// at once: hyper drops it before it polls the handler. Such requests come here behind an
/// acquisition that waits, so that the end of the stream is there when they are taken up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_sending_is_answered_as_hyper_answers_it() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    held(
        &sidecar,
        "stop-held",
        json!({"owner": "a", "ttl_ms": 20000}),
    )
    .await;
    let waits = request(
        "POST",
        "/v1/locks/stop-held/acquire",
        r#"{"owner":"b","wait_ms":300}"#,
    );
    let behind = |bytes: Vec<u8>| [waits.clone(), bytes].concat();
    let unknown = "/v1/leases/00112233445566778899aabbccddeeff";
    let whole = request("POST", "/v1/locks/stop/acquire", r#"{"owner":"s"}"#);
    let cases = [
        ("a body cut short", whole[..whole.len() - 3].to_vec()),
        (
            "a keepalive",
            behind(request("POST", &format!("{unknown}/keepalive"), "")),
        ),
        ("a lease read", behind(request("GET", unknown, ""))),
        (
            "a refused acquisition",
            behind(request("POST", "/v1/locks/stop/acquire", r#"{"owner":""}"#)),
        ),
    ];
    for (what, bytes) in cases {
        let mut seen = Vec::new();
        for to_hyper in [false, true] {
            let mut conn = conn(&sidecar, to_hyper).await;
            conn.send(&bytes).await;
            conn.finish_sending().await;
            let closed = conn.closed_within(Duration::from_secs(5)).await;
            let bytes = closed.expect("the connection was closed").bytes;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            // The date aside.
            let text = text
                .lines()
                .filter(|line| !line.starts_with("date: "))
                .collect::<Vec<_>>()
                .join("\n");
            seen.push(text);
        }
        assert_eq!(seen[0], seen[1], "{what}: the lane, then hyper");
        let statuses: Vec<&str> = seen[0]
            .lines()
            .filter_map(|line| line.strip_prefix("HTTP/1.1 "))
            .collect();
        let expected = if what == "a body cut short" {
            ["400 Bad Request"]
        } else {
            ["409 Conflict"]
        };
        assert_eq!(statuses, expected, "{what}");
    }
}

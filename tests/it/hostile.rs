//! Hostile input over raw HTTP/1.x bytes against an in-process sidecar on real masters: every
//! answer follows the error catalogue (`docs/api.md`, "Errors": problem+json with a stable
//! `reason`, or the HTTP parser's own empty 400 or 431 for what it cannot parse or hold; never
//! a 5xx), no refused request writes to a master, and the sidecar still serves after. The corpus: `hostile/inputs.rs` (paths, names), `hostile/bodies.rs` (bodies),
//! `hostile/wire.rs` (lease ids, methods, framing), `hostile/headers.rs` (encodings, `Host`,
//! sizes); slow heads, connection floods and stream limits: `hostile/floods.rs`.

mod bodies;
mod floods;
mod headers;
mod inputs;
mod wire;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use redlease_testkit::http::{exchange, Answer};
use redlease_testkit::resp::Resp;
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;

/// How long any one exchange may take (the server is on loopback; a case that waits for
/// input it will never get fails at this bound).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(4);
/// Connections of the corpus in flight at once.
const IN_FLIGHT: usize = 12;
/// A well-formed lease id that no sidecar gave out.
pub const UNKNOWN_LEASE: &str = "0123456789abcdef0123456789abcdef";
/// The `reason` a case expects when the HTTP parser (hyper) refuses the request before the API
/// sees it: its own answer, the status alone, with no body and no content type.
pub const PARSER: &str = "(the parser's own answer)";

/// One request of the corpus and the answer the catalogue gives it.
pub struct Case {
    pub name: String,
    pub raw_request: Vec<u8>,
    pub expect_status: u16,
    /// The problem's `reason`; `None` for the valid controls (2xx).
    pub expect_reason: Option<&'static str>,
    /// A second answer the catalogue allows where it leaves the choice open (said at the case).
    pub or_else: Option<(u16, Option<&'static str>)>,
    /// A method the `Allow` header of a 405 must list.
    pub allow: Option<&'static str>,
}

impl Case {
    pub fn refused(
        name: impl Into<String>,
        raw: Vec<u8>,
        status: u16,
        reason: &'static str,
    ) -> Self {
        Self {
            name: name.into(),
            raw_request: raw,
            expect_status: status,
            expect_reason: Some(reason),
            or_else: None,
            allow: None,
        }
    }

    pub fn served(name: impl Into<String>, raw: Vec<u8>) -> Self {
        Self {
            expect_reason: None,
            ..Self::refused(name, raw, 200, "")
        }
    }

    pub fn or_else(mut self, status: u16, reason: Option<&'static str>) -> Self {
        self.or_else = Some((status, reason));
        self
    }

    pub fn allowing(mut self, method: &'static str) -> Self {
        self.allow = Some(method);
        self
    }
}

/// Cases of one kind; each inner list goes over one connection (in one write when it holds
/// more than one request: pipelining).
pub struct Family {
    pub name: &'static str,
    pub connections: Vec<Vec<Case>>,
}

impl Family {
    pub fn one_per_connection(name: &'static str, cases: Vec<Case>) -> Self {
        let connections = cases.into_iter().map(|case| vec![case]).collect();
        Self { name, connections }
    }

    pub fn requests(&self) -> usize {
        self.connections.iter().map(Vec::len).sum()
    }
}

/// What every request builder needs: the `Host` to send, the live lease the renew, keepalive
/// and lease-id cases aim at, and a counter for resource names used once.
pub struct Ctx {
    pub host: String,
    pub lease: String,
    used: Cell<usize>,
}

pub const JSON: &str = "Content-Type: application/json";

impl Ctx {
    /// A resource name no other case uses (so no grant answers another case with 409).
    pub fn fresh(&self, stem: &str) -> String {
        self.used.set(self.used.get() + 1);
        format!("{stem}-{}", self.used.get())
    }

    /// `METHOD target HTTP/1.1`, `Host`, `headers`, the blank line; nothing else.
    pub fn head(&self, method: &str, target: &str, headers: &[&str]) -> Vec<u8> {
        let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {}\r\n", self.host);
        for header in headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        head.into_bytes()
    }

    /// A request with `Content-Length` (always for POST, PUT and PATCH) and `body`.
    pub fn request(&self, method: &str, target: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
        let length = format!("Content-Length: {}", body.len());
        let mut headers = headers.to_vec();
        if !body.is_empty() || ["POST", "PUT", "PATCH"].contains(&method) {
            headers.push(&length);
        }
        let mut raw = self.head(method, target, &headers);
        raw.extend_from_slice(body);
        raw
    }

    pub fn get(&self, target: &str) -> Vec<u8> {
        self.request("GET", target, &[], b"")
    }

    /// An acquire of `resource` (as it goes in the path) with a JSON `body`.
    pub fn acquire(&self, resource: &str, body: &str) -> Vec<u8> {
        let target = format!("/v1/locks/{resource}/acquire");
        self.request("POST", &target, &[JSON], body.as_bytes())
    }

    /// A renew of the live lease.
    pub fn renew(&self, headers: &[&str], body: &[u8]) -> Vec<u8> {
        let target = format!("/v1/leases/{}/renew", self.lease);
        self.request("POST", &target, headers, body)
    }

    pub fn force_release(&self, resource: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
        let target = format!("/v1/locks/{resource}/force-release");
        self.request("POST", &target, headers, body)
    }
}

/// Every byte of `text` percent-encoded but the unreserved ones.
pub fn pct(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `body` in chunks of 8 KiB, with the last chunk.
pub fn chunked(body: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    for piece in body.chunks(8 * 1024) {
        raw.extend(format!("{:x}\r\n", piece.len()).bytes());
        raw.extend_from_slice(piece);
        raw.extend(b"\r\n");
    }
    raw.extend(b"0\r\n\r\n");
    raw
}

/// Checks an answer against its case: the status (or the allowed alternative), never a 5xx,
/// and for every 4xx a problem+json body with the expected `reason` and the same `status`, or
/// the parser's empty answer where the case expects [`PARSER`].
fn check(case: &Case, answer: &Answer) -> Result<(), String> {
    let body = answer.json();
    let parser = answer.header("content-type").is_none() && answer.body.is_empty();
    let reason = if parser {
        Some(PARSER)
    } else {
        body["reason"].as_str()
    };
    let got = format!(
        "{} [{}] {}",
        answer.status,
        answer.header("content-type").unwrap_or("no content-type"),
        answer.body_text()
    );
    if answer.status >= 500 {
        return Err(format!("a 5xx: {got}"));
    }
    let fits = |(status, want): (u16, Option<&str>)| {
        answer.status == status && (want.is_none() || reason == want)
    };
    let expected = (case.expect_status, case.expect_reason);
    if !fits(expected) && !case.or_else.is_some_and(fits) {
        let also = case
            .or_else
            .map(|e| format!(" (or {e:?})"))
            .unwrap_or_default();
        return Err(format!("expected {expected:?}{also}, got {got}"));
    }
    if (400..500).contains(&answer.status) && !parser {
        let media = answer
            .header("content-type")
            .unwrap_or("")
            .split(';')
            .next();
        if media.map(str::trim) != Some("application/problem+json") {
            return Err(format!("a 4xx that is not application/problem+json: {got}"));
        }
        let reason = reason.unwrap_or("");
        let fields_ok = body["status"] == answer.status
            && body["type"] == format!("/problems/{reason}")
            && body["title"].is_string()
            && body["detail"].is_string();
        if !fields_ok {
            return Err(format!(
                "a problem body without type/title/status/detail: {got}"
            ));
        }
    }
    if answer.status == 405 {
        let allow = answer.header("allow").unwrap_or("");
        let lists = |method: &str| allow.split(',').any(|a| a.trim() == method);
        if allow.is_empty() || case.allow.is_some_and(|method| !lists(method)) {
            let want = case.allow.unwrap_or("a method");
            return Err(format!("405 with Allow {allow:?}, not listing {want}"));
        }
    }
    Ok(())
}

/// The lease id of a grant the corpus made (not the live lease), to release at once.
fn granted(answer: &Answer, live: &str) -> Option<String> {
    let body = answer.json();
    let id = body["lease_id"].as_str()?;
    (answer.status == 200 && body["acquired"] == true && id != live).then(|| id.to_string())
}

/// Sends one connection's cases, checks each answer and releases what they were granted.
/// Gives the failures and the number of grants.
async fn run_connection(
    addr: SocketAddr,
    ctx_host: &str,
    live: &str,
    cases: &[Case],
) -> (Vec<String>, u64) {
    let raw: Vec<u8> = cases.iter().flat_map(|c| c.raw_request.clone()).collect();
    let answers = exchange(addr, &raw, cases.len(), ANSWER_WITHIN).await;
    let (mut failures, mut grants) = (Vec::new(), 0);
    for (case, answer) in cases.iter().zip(answers) {
        let grant = answer
            .as_ref()
            .ok()
            .and_then(|answer| granted(answer, live));
        if let Err(error) = answer.and_then(|answer| check(case, &answer)) {
            failures.push(format!("{}: {error}", case.name));
        }
        // Released whether it was due or not, so no lock outlives the corpus.
        if let Some(id) = grant {
            grants += 1;
            if let Err(error) = release(addr, ctx_host, &id).await {
                failures.push(format!("{}: releasing its grant: {error}", case.name));
            }
        }
    }
    (failures, grants)
}

/// One request on its own connection, expected to be answered.
pub async fn call(addr: SocketAddr, raw: Vec<u8>) -> Result<Answer, String> {
    exchange(addr, &raw, 1, ANSWER_WITHIN).await.remove(0)
}

/// Acquires `resource` (a plain name); the lease id.
pub async fn acquire(
    addr: SocketAddr,
    host: &str,
    resource: &str,
    body: &str,
) -> Result<String, String> {
    let raw = ctx_for(host).acquire(resource, body);
    let answer = call(addr, raw).await?;
    let id = answer.json()["lease_id"].as_str().map(str::to_string);
    id.filter(|_| answer.status == 200).ok_or_else(|| {
        format!(
            "acquire of {resource}: {} {}",
            answer.status,
            answer.body_text()
        )
    })
}

/// Releases lease `id`: 200 with `released: true`.
pub async fn release(addr: SocketAddr, host: &str, id: &str) -> Result<(), String> {
    let raw = ctx_for(host).request("DELETE", &format!("/v1/leases/{id}"), &[], b"");
    let answer = call(addr, raw).await?;
    if answer.status != 200 || answer.json()["released"] != true {
        return Err(format!("release: {} {}", answer.status, answer.body_text()));
    }
    Ok(())
}

pub fn ctx_for(host: &str) -> Ctx {
    Ctx {
        host: host.to_string(),
        lease: UNKNOWN_LEASE.to_string(),
        used: Cell::new(0),
    }
}

pub fn addr_of(sidecar: &TestSidecar) -> SocketAddr {
    sidecar.base.trim_start_matches("http://").parse().unwrap()
}

/// Every key on master `i` (`SCAN` with its cursor until it comes back to 0).
fn keyspace(fleet: &TestFleet, i: usize) -> BTreeSet<String> {
    let (mut keys, mut cursor) = (BTreeSet::new(), "0".to_string());
    loop {
        let reply = fleet.command(i, &["SCAN", &cursor, "MATCH", "*", "COUNT", "1000"]);
        let Resp::Array(parts) = reply else {
            panic!("SCAN answered {reply:?}")
        };
        cursor = parts[0].bulk().unwrap();
        keys.extend(parts[1].strings());
        if cursor == "0" {
            return keys;
        }
    }
}

/// The whole corpus on one sidecar over 3 masters, then: the sidecar still serves, and the
/// masters hold exactly what the valid controls left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_catalogue_answers_and_write_nothing() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let addr = addr_of(&sidecar);
    let host = addr.to_string();
    let probe = ctx_for(&host);
    redlease_testkit::assert_eventually!(
        call(addr, probe.get("/readyz"))
            .await
            .is_ok_and(|a| a.status == 200),
        10,
        "the sidecar never became ready"
    );
    let before: Vec<_> = (0..3)
        .map(|i| (keyspace(&fleet, i), fleet.fence(i)))
        .collect();
    let body = r#"{"owner":"hostile","ttl_ms":5000,"idle_timeout_ms":120000}"#;
    let live = acquire(addr, &host, "hostile-live", body).await.unwrap();
    let ctx = Ctx {
        lease: live.clone(),
        ..ctx_for(&host)
    };
    let mut families = inputs::families(&ctx);
    families.extend(bodies::families(&ctx));
    families.extend(wire::families(&ctx));
    families.extend(headers::families(&ctx));

    let jobs = families
        .iter()
        .flat_map(|f| f.connections.iter().map(move |c| (f.name, c)));
    let runs = futures_util::stream::iter(jobs)
        .map(|(family, cases)| {
            let (host, live) = (&host, &live);
            async move { (family, run_connection(addr, host, live, cases).await) }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    // The live lease and the acquire after the corpus.
    let mut grants = 2;
    let mut failures = Vec::new();
    for (family, (failed, granted)) in runs {
        grants += granted;
        failures.extend(failed.into_iter().map(|f| format!("[{family}] {f}")));
    }

    // Still serving: the probe, a grant and its release, the live lease's release.
    match call(addr, probe.get("/livez")).await {
        Ok(answer) if answer.status == 200 => {}
        other => failures.push(format!("/livez after the corpus: {other:?}")),
    }
    let after = acquire(addr, &host, "hostile-after", r#"{"owner":"after"}"#).await;
    for id in [after, Ok(live)] {
        if let Err(error) = async { release(addr, &host, &id?).await }.await {
            failures.push(format!("after the corpus: {error}"));
        }
    }

    // Nothing but the controls wrote. Allowed: the fence counter each grant INCRs (created by
    // the first one); released locks leave no lock key; nothing audits, as no force release
    // passes its checks. The last master's release may trail the quorum's answer.
    let fence = "redlease:fence".to_string();
    for (i, (keys_before, fence_before)) in before.iter().enumerate() {
        let mut allowed = keys_before.clone();
        allowed.insert(fence.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut keys = keyspace(&fleet, i);
        while keys != allowed && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            keys = keyspace(&fleet, i);
        }
        if keys != allowed {
            failures.push(format!("master {i} keys {keys:?}, expected {allowed:?}"));
        }
        if fleet.fence(i) > fence_before + grants {
            let got = fleet.fence(i);
            failures.push(format!(
                "master {i} fence {got} > {fence_before} + {grants} grants"
            ));
        }
    }

    let counts: Vec<String> = families
        .iter()
        .map(|f| format!("{} {}", f.name, f.requests()))
        .collect();
    let total: usize = families.iter().map(Family::requests).sum();
    eprintln!(
        "hostile corpus: {} = {total} requests, {grants} grants",
        counts.join(", ")
    );
    assert!(total >= 200, "only {total} requests");
    assert!(
        failures.is_empty(),
        "{} of {total} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

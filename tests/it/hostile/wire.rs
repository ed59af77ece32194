//! The corpus of how a request is framed: lease ids, methods, HTTP versions and malformed
//! heads, pipelining.

use super::{pct, Case, Ctx, Family, JSON, PARSER, UNKNOWN_LEASE};

pub fn families(ctx: &Ctx) -> Vec<Family> {
    vec![
        Family::one_per_connection("lease-id", lease_ids(ctx)),
        Family::one_per_connection("method", methods(ctx)),
        Family::one_per_connection("protocol", protocol(ctx)),
        Family {
            name: "pipelined",
            connections: pipelines(ctx),
        },
    ]
}

/// Malformed and unknown ids on every lease route: 404 `unknown_lease`, never the live lease.
fn lease_ids(ctx: &Ctx) -> Vec<Case> {
    let live = &ctx.lease;
    let mut ids = vec![
        ("unknown", UNKNOWN_LEASE.to_string()),
        ("31 digits of the live one", live[..31].to_string()),
        ("the live one and a digit", format!("{live}0")),
        ("non-hex", "g".repeat(32)),
        ("the live one, last digit g", format!("{}g", &live[..31])),
        ("4 KiB", "a".repeat(4096)),
        (
            "percent-encoded unknown",
            UNKNOWN_LEASE.bytes().map(|b| format!("%{b:02X}")).collect(),
        ),
        ("NUL first", format!("%00{}", &live[1..])),
        ("the live one and a space", format!("{live}%20")),
        ("signed", format!("+{}", &live[1..])),
        ("Arabic-Indic digits", pct(&"\u{660}".repeat(32))),
    ];
    // Without a letter in it, the live id has no uppercase form (1 in 3 million).
    if live.to_uppercase() != *live {
        ids.push(("the live one uppercased", live.to_uppercase()));
    }
    let mut cases = Vec::new();
    for (name, id) in &ids {
        let lease = format!("/v1/leases/{id}");
        for (method, target) in [
            ("GET", lease.clone()),
            ("DELETE", lease.clone()),
            ("POST", format!("{lease}/renew")),
            ("POST", format!("{lease}/keepalive")),
            ("POST", format!("{lease}/reenter")),
            ("POST", format!("{lease}/downgrade")),
            ("GET", format!("{lease}/events")),
        ] {
            let raw = ctx.request(method, &target, &[], b"");
            let route = target
                .rsplit('/')
                .next()
                .filter(|_| target.len() > lease.len());
            let name = format!("{method} {} id {name}", route.unwrap_or("lease"));
            cases.push(Case::refused(name, raw, 404, "unknown_lease"));
        }
    }
    cases
}

fn methods(ctx: &Ctx) -> Vec<Case> {
    let lease = format!("/v1/leases/{UNKNOWN_LEASE}");
    let routes: [(String, &str, &[&str]); 12] = [
        (
            "/v1/locks/m/acquire".into(),
            "POST",
            &["GET", "PUT", "PATCH", "DELETE", "FOO"],
        ),
        (
            "/v1/locks".into(),
            "GET",
            &["POST", "PUT", "PATCH", "DELETE", "FOO"],
        ),
        (
            "/v1/locks/m".into(),
            "GET",
            &["POST", "PUT", "PATCH", "DELETE"],
        ),
        (
            "/v1/locks/m/force-release".into(),
            "POST",
            &["GET", "PUT", "PATCH", "DELETE"],
        ),
        (lease.clone(), "GET", &["POST", "PUT", "PATCH"]),
        (
            format!("{lease}/renew"),
            "POST",
            &["GET", "PUT", "PATCH", "DELETE"],
        ),
        (
            format!("{lease}/keepalive"),
            "POST",
            &["GET", "PUT", "DELETE"],
        ),
        (format!("{lease}/events"), "GET", &["POST", "PUT", "DELETE"]),
        (
            "/v1/fleet".into(),
            "GET",
            &["POST", "PUT", "PATCH", "DELETE", "FOO"],
        ),
        (
            "/livez".into(),
            "GET",
            &["POST", "PUT", "DELETE", "OPTIONS"],
        ),
        ("/readyz".into(), "GET", &["POST", "DELETE"]),
        ("/metrics".into(), "GET", &["POST", "PUT", "DELETE"]),
    ];
    let mut cases = Vec::new();
    for (target, allowed, wrong) in &routes {
        for method in *wrong {
            let raw = ctx.request(method, target, &[], b"");
            let case = Case::refused(format!("{method} {target}"), raw, 405, "method_not_allowed");
            cases.push(case.allowing(allowed));
        }
    }
    for (method, target) in [
        ("GET", "/"),
        ("GET", "/v1"),
        ("GET", "/v1/"),
        ("GET", "/v2/fleet"),
        ("GET", "/V1/FLEET"),
        ("GET", "/v1/leases"),
        ("GET", "/v1/locks/a/b/c"),
        ("POST", "/nope"),
        ("FOO", "/nope"),
        ("DELETE", "/metrics/x"),
    ] {
        let raw = ctx.request(method, target, &[], b"");
        cases.push(Case::refused(
            format!("{method} {target}"),
            raw,
            404,
            "not_found",
        ));
    }
    cases
}

fn protocol(ctx: &Ctx) -> Vec<Case> {
    let host = &ctx.host;
    let mut cases = vec![
        Case::served(
            "HTTP/1.0 without Host",
            b"GET /livez HTTP/1.0\r\n\r\n".to_vec(),
        ),
        Case::served(
            "HTTP/1.0 with Host",
            format!("GET /v1/fleet HTTP/1.0\r\nHost: {host}\r\n\r\n").into_bytes(),
        ),
        Case::served(
            "HTTP/1.1 without Host",
            b"GET /livez HTTP/1.1\r\n\r\n".to_vec(),
        ),
    ];
    let body = r#"{"owner":""}"#;
    let old = format!(
        "POST /v1/locks/{}/acquire HTTP/1.0\r\n{JSON}\r\nContent-Length: {}\r\n\r\n{body}",
        ctx.fresh("old"),
        body.len()
    );
    cases.push(Case::refused(
        "HTTP/1.0 acquire, empty owner",
        old.into_bytes(),
        400,
        "invalid_owner",
    ));
    // A lowercase method is another method (methods are case-sensitive, RFC 9110 §9.1).
    cases.push(Case::refused(
        "get /livez",
        ctx.request("get", "/livez", &[], b""),
        405,
        "method_not_allowed",
    ));
    let with_host =
        |line: &str, extra: &str| format!("{line}\r\nHost: {host}\r\n{extra}\r\n").into_bytes();
    // What the parser cannot read it answers itself, with its empty 400. (An HTTP/2 preface
    // it does not answer at all: `http_limits::unparsable_requests_get_the_parsers_empty_400`.)
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        ("HTTP/3.0", with_host("GET / HTTP/3.0", "")),
        (
            "HTTP/2.0 request line",
            with_host("GET /livez HTTP/2.0", ""),
        ),
        ("HTTP/1.2", with_host("GET /livez HTTP/1.2", "")),
        ("HTTP/0.9", b"GET /livez\r\n\r\n".to_vec()),
        (
            "TLS ClientHello",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n".to_vec(),
        ),
        ("words", b"hello world\r\n\r\n".to_vec()),
        ("method alone", b"GET\r\n\r\n".to_vec()),
        ("extra word", with_host("GET /livez HTTP/1.1 extra", "")),
        ("space in target", with_host("GET /li vez HTTP/1.1", "")),
        (
            "header without colon",
            with_host("GET /livez HTTP/1.1", "BadHeader\r\n"),
        ),
        (
            "NUL in a header",
            with_host("GET /livez HTTP/1.1", "X-A: a\0b\r\n"),
        ),
        (
            "space in a header name",
            with_host("GET /livez HTTP/1.1", "X A: b\r\n"),
        ),
        (
            "obs-fold",
            with_host("GET /livez HTTP/1.1", "X-A: a\r\n b\r\n"),
        ),
        (
            "bare CR in a header",
            with_host("GET /livez HTTP/1.1", "X-A: a\rb\r\n"),
        ),
        (
            "Content-Length abc",
            with_host("GET /livez HTTP/1.1", "Content-Length: abc\r\n"),
        ),
        (
            "Content-Length -1",
            with_host("GET /livez HTTP/1.1", "Content-Length: -1\r\n"),
        ),
        (
            "two Content-Lengths",
            with_host(
                "POST /livez HTTP/1.1",
                "Content-Length: 1\r\nContent-Length: 2\r\n",
            ),
        ),
    ];
    for (name, raw) in malformed {
        cases.push(Case::refused(name, raw, 400, PARSER));
    }
    let target = format!("/v1/locks/{}/acquire", ctx.fresh("chunk"));
    for (name, body) in [
        ("bad chunk size", &b"zz\r\nhello\r\n0\r\n\r\n"[..]),
        (
            "chunk size overflow",
            b"ffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
        ),
        ("chunk without its CRLF", b"5\r\nhelloXX0\r\n\r\n"),
    ] {
        let mut raw = ctx.head("POST", &target, &[JSON, "Transfer-Encoding: chunked"]);
        raw.extend_from_slice(body);
        cases.push(Case::refused(name, raw, 400, "bad_request"));
    }
    // Both framings (a smuggling vector): refused, or the chunked one wins (RFC 9112 §6.3).
    let mut raw = ctx.head(
        "GET",
        "/livez",
        &["Content-Length: 5", "Transfer-Encoding: chunked"],
    );
    raw.extend(b"0\r\n\r\n");
    cases.push(Case::refused("Content-Length and chunked", raw, 400, PARSER).or_else(200, None));
    cases
}

/// Several requests in one write; the answers come in order. Refusals only last: the
/// connection may close after an error.
fn pipelines(ctx: &Ctx) -> Vec<Vec<Case>> {
    let get = |target: &str| Case::served(format!("pipelined GET {target}"), ctx.get(target));
    let unknown = format!("/v1/leases/{UNKNOWN_LEASE}");
    let lease = format!("/v1/leases/{}", ctx.lease);
    let bad_owner = ctx.acquire(&ctx.fresh("pipe"), r#"{"owner":""}"#);
    vec![
        vec![
            get("/livez"),
            get("/v1/fleet"),
            Case::refused(
                "pipelined unknown lease",
                ctx.get(&unknown),
                404,
                "unknown_lease",
            ),
        ],
        vec![
            get("/readyz"),
            get("/metrics"),
            Case::refused("pipelined empty owner", bad_owner, 400, "invalid_owner"),
        ],
        vec![
            Case::served("pipelined renew", ctx.renew(&[JSON], br#"{"ttl_ms":5000}"#)),
            Case::served(
                "pipelined keepalive",
                ctx.request("POST", &format!("{lease}/keepalive"), &[], b""),
            ),
            get(&lease),
        ],
        vec![
            get("/livez"),
            get("/livez"),
            Case::refused("pipelined GET /nope", ctx.get("/nope"), 404, "not_found"),
        ],
    ]
}

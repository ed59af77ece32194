//! The corpus of request headers: content and transfer encodings, `Host` (the DNS-rebinding
//! guard), and the size limits of the target and the head.

use super::{chunked, Case, Ctx, Family, JSON, PARSER};

pub fn families(ctx: &Ctx) -> Vec<Family> {
    vec![
        Family::one_per_connection("encoding", encodings(ctx)),
        Family::one_per_connection("host", hosts(ctx)),
        Family::one_per_connection("limits", limits(ctx)),
    ]
}

fn encodings(ctx: &Ctx) -> Vec<Case> {
    let body = br#"{"owner":"enc"}"#;
    let acquire = |headers: &[&str]| {
        let target = format!("/v1/locks/{}/acquire", ctx.fresh("enc"));
        let mut headers = headers.to_vec();
        headers.push(JSON);
        ctx.request("POST", &target, &headers, body)
    };
    let mut cases = Vec::new();
    for coding in ["gzip", "br", "deflate", "gzip, identity", "x-unknown"] {
        let header = format!("Content-Encoding: {coding}");
        let raw = acquire(&[&header]);
        cases.push(Case::refused(
            format!("acquire {header}"),
            raw,
            415,
            "unsupported_encoding",
        ));
    }
    cases.push(Case::served(
        "acquire Content-Encoding: identity",
        acquire(&["Content-Encoding: identity"]),
    ));
    let gzip = "Content-Encoding: gzip";
    let raw = ctx.renew(&[JSON, gzip], br#"{"ttl_ms":5000}"#);
    cases.push(Case::refused(
        "renew gzip",
        raw,
        415,
        "unsupported_encoding",
    ));
    let raw = ctx.force_release(
        &ctx.fresh("fr"),
        &[JSON, gzip],
        br#"{"actor":"a","reason":"r"}"#,
    );
    cases.push(Case::refused(
        "force-release gzip",
        raw,
        415,
        "unsupported_encoding",
    ));
    let chunked_acquire = |coding: &str| {
        let target = format!("/v1/locks/{}/acquire", ctx.fresh("te"));
        let header = format!("Transfer-Encoding: {coding}");
        let mut raw = ctx.head("POST", &target, &[JSON, &header]);
        raw.extend(chunked(body));
        raw
    };
    for coding in ["gzip, chunked", "deflate, chunked"] {
        let raw = chunked_acquire(coding);
        cases.push(Case::refused(
            format!("Transfer-Encoding: {coding}"),
            raw,
            415,
            "unsupported_encoding",
        ));
    }
    // Without chunked last the body has no framing at all (RFC 9112 §6.3): the parser
    // refuses that as malformed before the encoding is looked at.
    for coding in ["chunked, gzip", "identity", "gzip"] {
        let raw = chunked_acquire(coding);
        let name = format!("Transfer-Encoding: {coding}");
        cases.push(Case::refused(name, raw, 400, PARSER));
    }
    let case = Case::served("Transfer-Encoding: chunked", chunked_acquire("chunked"));
    cases.push(case.or_else(411, Some("length_required")));
    cases
}

fn hosts(ctx: &Ctx) -> Vec<Case> {
    let port = ctx.host.rsplit(':').next().unwrap_or("");
    let with = |target: &str, host: &str| {
        format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes()
    };
    let mut cases = Vec::new();
    let evil_port = format!("evil.example:{port}");
    for host in [
        "evil.example",
        "attacker.com:7600",
        &evil_port,
        "127.0.0.1.evil.com",
        "localhost.evil.com",
    ] {
        cases.push(Case::refused(
            format!("Host {host}"),
            with("/v1/fleet", host),
            403,
            "host_not_allowed",
        ));
    }
    let lease = format!("/v1/leases/{}", ctx.lease);
    cases.push(Case::refused(
        "Host evil on a lease",
        with(&lease, "evil.example"),
        403,
        "host_not_allowed",
    ));
    cases.push(Case::refused(
        "Host evil on /metrics",
        with("/metrics", "evil.example"),
        403,
        "host_not_allowed",
    ));
    let body = r#"{"owner":"h"}"#;
    let acquire = format!(
        "POST /v1/locks/{}/acquire HTTP/1.1\r\nHost: evil.example\r\n{JSON}\r\nContent-Length: {}\r\n\r\n{body}",
        ctx.fresh("host"),
        body.len()
    );
    cases.push(Case::refused(
        "Host evil on acquire",
        acquire.into_bytes(),
        403,
        "host_not_allowed",
    ));
    // Two Host fields: 400 (RFC 9112 §3.2), or refused for the one that is not allowed.
    let two = format!(
        "GET /v1/fleet HTTP/1.1\r\nHost: {}\r\nHost: evil.example\r\n\r\n",
        ctx.host
    );
    let case = Case::refused("two Host fields", two.into_bytes(), 400, "bad_request");
    cases.push(case.or_else(403, Some("host_not_allowed")));
    let allowed = [
        format!("localhost:{port}"),
        "localhost".to_string(),
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_string(),
        format!("[::1]:{port}"),
        "127.0.0.2".to_string(),
    ];
    for host in &allowed {
        cases.push(Case::served(
            format!("Host {host}"),
            with("/v1/fleet", host),
        ));
    }
    cases
}

fn refs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

fn limits(ctx: &Ctx) -> Vec<Case> {
    let long = "a".repeat(9000);
    let mut cases = vec![
        Case::refused(
            "target 9 KB",
            ctx.get(&format!("/v1/fleet?pad={long}")),
            414,
            "uri_too_long",
        ),
        Case::refused(
            "resource 9 KB",
            ctx.acquire(&long, r#"{"owner":"l"}"#),
            414,
            "uri_too_long",
        ),
        // The 10 KiB lease id is over the target limit before it is a lease id.
        Case::refused(
            "lease id 10 KiB",
            ctx.get(&format!("/v1/leases/{}", "a".repeat(10240))),
            414,
            "uri_too_long",
        ),
        Case::refused(
            "unknown path 9 KB",
            ctx.get(&format!("/nope/{long}")),
            414,
            "uri_too_long",
        ),
        Case::served(
            "target 8014 bytes",
            ctx.get(&format!("/v1/fleet?pad={}", "a".repeat(8000))),
        ),
    ];
    let kib = format!("X-Pad: {}", "p".repeat(1024));
    let seventeen = vec![kib.as_str(); 17];
    let huge = format!("X-Pad: {}", "p".repeat(17 * 1024));
    let under = format!("X-Pad: {}", "p".repeat(15_000));
    let beyond_target = "p".repeat(40_000);
    let beyond = format!("X-Pad: {beyond_target}");
    let fields = |n: usize| (0..n).map(|i| format!("X-F{i}: 1")).collect::<Vec<_>>();
    let (hundred, ninety_nine, parser_max) = (fields(100), fields(99), fields(200));
    let head = |headers: &[&str]| ctx.request("GET", "/livez", headers, b"");
    cases.extend([
        Case::refused(
            "17 headers of 1 KiB",
            head(&seventeen),
            431,
            "headers_too_large",
        ),
        Case::refused(
            "one header of 17 KiB",
            head(&[&huge]),
            431,
            "headers_too_large",
        ),
        Case::served("100 header fields", head(&refs(&ninety_nine))),
        Case::served("a head of 15 KB", head(&[&under])),
        // Over what the parser holds (32 KiB, 100 fields): its own empty 431, whatever it holds.
        Case::refused("101 header fields", head(&refs(&hundred)), 431, PARSER),
        Case::refused("201 header fields", head(&refs(&parser_max)), 431, PARSER),
        Case::refused("one header of 40 KB", head(&[&beyond]), 431, PARSER),
        Case::refused(
            "target 40 KB",
            ctx.get(&format!("/{beyond_target}")),
            431,
            PARSER,
        ),
    ]);
    cases
}

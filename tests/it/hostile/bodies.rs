//! The corpus of request bodies: JSON shapes, durations, content types, sizes. Each case names
//! the catalogue's answer (`docs/api.md`); a 200 is a valid control, released at once by the
//! runner.

use super::inputs::owned;
use super::{chunked, Case, Ctx, Family, JSON};

pub fn families(ctx: &Ctx) -> Vec<Family> {
    vec![
        Family::one_per_connection("json", shapes(ctx)),
        Family::one_per_connection("numbers", numbers(ctx)),
        Family::one_per_connection("content-type", content_types(ctx)),
        Family::one_per_connection("oversized", oversized(ctx)),
    ]
}

fn shapes(ctx: &Ctx) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut acquire = |name: &str, body: Vec<u8>, status, reason: Option<&'static str>| {
        let target = format!("/v1/locks/{}/acquire", ctx.fresh("shape"));
        let raw = ctx.request("POST", &target, &[JSON], &body);
        let case = match reason {
            Some(reason) => Case::refused(name, raw, status, reason),
            None => Case::served(name, raw),
        };
        cases.push(case);
    };
    let deep = |open: &str, close: &str| [open.repeat(10_000), close.repeat(10_000)].concat();
    // Nesting too deep is JSON of the wrong shape (422); unclosed, it is also not JSON.
    acquire(
        "[ x 10000, closed",
        deep("[", "]").into_bytes(),
        422,
        Some("invalid_body"),
    );
    acquire(
        "{\"a\": x 10000, closed",
        deep("{\"a\":", "}").into_bytes(),
        422,
        Some("invalid_body"),
    );
    let nested = format!(r#"{{"owner":"a","auto_renew":{}}}"#, deep("[", "]"));
    acquire(
        "deep auto_renew",
        nested.into_bytes(),
        422,
        Some("invalid_body"),
    );
    let padded = |size: usize| {
        let head = br#"{"owner":"huge""#;
        let mut body = head.to_vec();
        body.resize(size - 1, b' ');
        body.push(b'}');
        body
    };
    acquire("65535 bytes (just under 64 KiB)", padded(65_535), 200, None);
    acquire("65537 bytes", padded(65_537), 413, Some("body_too_large"));
    acquire(
        "65537 bytes of [",
        vec![b'['; 65_537],
        413,
        Some("body_too_large"),
    );
    for body in [
        r#"{"owner":5}"#,
        r#"{"owner":[]}"#,
        r#"{"owner":{}}"#,
        r#"{"owner":true}"#,
        r#"{"owner":"a","auto_renew":"yes"}"#,
        r#"{"owner":"a","auto_renew":1}"#,
        r#"{"owner":"a","foo":1}"#,
        r#"{"owner":"a","Owner":"b"}"#,
        r#"{"owner":"a","ttl":100}"#,
        r#"{"owner":"a","__proto__":{}}"#,
        r#"{"owner":"a","owner":"b"}"#,
        r#"{"owner":"a","ttl_ms":1000,"ttl_ms":2000}"#,
        r#"[]"#,
        r#"[{"owner":"a"}]"#,
        r#""owner""#,
        "5",
        "null",
        "true",
    ] {
        acquire(body, body.as_bytes().to_vec(), 422, Some("invalid_body"));
    }
    for body in [
        "",
        "   \r\n ",
        "{",
        "[",
        r#"{"owner":"a"} x"#,
        r#"{"owner":"a"}{"owner":"b"}"#,
        "{'owner':'a'}",
        r#"{"owner":"a",}"#,
        r#"{owner:"a"}"#,
        "\0",
    ] {
        acquire(
            &format!("not JSON: {body:?}"),
            body.as_bytes().to_vec(),
            400,
            Some("invalid_body"),
        );
    }
    // `null` is the same as leaving a field out (docs/api.md); `auto_renew` is no duration.
    acquire(
        "auto_renew null",
        br#"{"owner":"a","auto_renew":null}"#.to_vec(),
        200,
        None,
    );
    let renew = |name: &str, body: &str, status, reason| {
        Case::refused(
            format!("renew {name}"),
            ctx.renew(&[JSON], body.as_bytes()),
            status,
            reason,
        )
    };
    cases.push(renew(
        "unknown field",
        r#"{"ttl":5000}"#,
        422,
        "invalid_body",
    ));
    cases.push(renew("array", "[]", 422, "invalid_body"));
    cases.push(renew(
        "duplicate",
        r#"{"ttl_ms":5000,"ttl_ms":6000}"#,
        422,
        "invalid_body",
    ));
    cases.push(renew("not JSON", "ttl_ms=5000", 400, "invalid_body"));
    cases.push(renew("truncated", r#"{"ttl_ms":"#, 400, "invalid_body"));
    cases
}

fn numbers(ctx: &Ctx) -> Vec<Case> {
    // A duration that is not a whole number of milliseconds in range is that field's error,
    // whatever JSON kind carries it. `null` is the same as leaving the field out (docs/api.md),
    // and `1e400` is past what a JSON number can hold here, so the body is not readable JSON.
    let wrong = [
        "18446744073709551616",
        "18446744073709551615",
        "-1",
        "1.5",
        "\"100\"",
        "true",
    ];
    let fields = [
        ("ttl_ms", "invalid_ttl", &["0", "9", "30001"][..]),
        ("wait_ms", "invalid_wait", &["60001"][..]),
        (
            "idle_timeout_ms",
            "invalid_idle_timeout",
            &["0", "300001"][..],
        ),
    ];
    let mut cases = Vec::new();
    for (field, reason, out_of_range) in fields {
        for value in wrong.iter().chain(out_of_range) {
            let body = format!(r#"{{"owner":"n","{field}":{value}}}"#);
            let raw = ctx.acquire(&ctx.fresh("num"), &body);
            cases.push(Case::refused(
                format!("acquire {field}: {value}"),
                raw,
                400,
                reason,
            ));
        }
    }
    for field in ["ttl_ms", "wait_ms", "idle_timeout_ms"] {
        let absent = format!(r#"{{"owner":"n","{field}":null}}"#);
        let raw = ctx.acquire(&ctx.fresh("num"), &absent);
        cases.push(Case::served(format!("acquire {field}: null"), raw));
        let huge = format!(r#"{{"owner":"n","{field}":1e400}}"#);
        let raw = ctx.acquire(&ctx.fresh("num"), &huge);
        cases.push(Case::refused(
            format!("acquire {field}: 1e400"),
            raw,
            400,
            "invalid_body",
        ));
    }
    cases.push(Case::served(
        "renew ttl_ms: null",
        ctx.renew(&[JSON], br#"{"ttl_ms":null}"#),
    ));
    let raw = ctx.renew(&[JSON], br#"{"ttl_ms":1e400}"#);
    cases.push(Case::refused(
        "renew ttl_ms: 1e400",
        raw,
        400,
        "invalid_body",
    ));
    for value in wrong.iter().chain(&["0", "9", "30001"]) {
        let raw = ctx.renew(&[JSON], format!(r#"{{"ttl_ms":{value}}}"#).as_bytes());
        cases.push(Case::refused(
            format!("renew ttl_ms: {value}"),
            raw,
            400,
            "invalid_ttl",
        ));
    }
    cases.push(Case::served(
        "renew ttl_ms 5000",
        ctx.renew(&[JSON], br#"{"ttl_ms":5000}"#),
    ));
    cases.push(Case::served("renew without a body", ctx.renew(&[], b"")));
    cases
}

fn content_types(ctx: &Ctx) -> Vec<Case> {
    let body = owned("ct");
    let mut cases = Vec::new();
    let refused = [
        Some("Content-Type: text/plain"),
        Some("Content-Type: application/x-www-form-urlencoded"),
        None,
        Some("Content-Type: multipart/form-data; boundary=x"),
        Some("Content-Type: text/json"),
        Some("Content-Type: application/jsonx"),
    ];
    for header in refused {
        let headers: Vec<&str> = header.into_iter().collect();
        let name = header.unwrap_or("no content-type");
        let target = format!("/v1/locks/{}/acquire", ctx.fresh("ct"));
        let raw = ctx.request("POST", &target, &headers, body.as_bytes());
        cases.push(Case::refused(
            format!("acquire {name}"),
            raw,
            415,
            "invalid_body",
        ));
        let raw = ctx.renew(&headers, br#"{"ttl_ms":5000}"#);
        cases.push(Case::refused(
            format!("renew {name}"),
            raw,
            415,
            "invalid_body",
        ));
        let raw = ctx.force_release(&ctx.fresh("fr"), &headers, br#"{"actor":"a","reason":"r"}"#);
        cases.push(Case::refused(
            format!("force-release {name}"),
            raw,
            415,
            "invalid_body",
        ));
    }
    // `application/json` with any parameters is JSON; media types ignore case (RFC 9110 §8.3.1).
    for header in [
        "Content-Type: application/json; charset=latin1",
        "Content-Type: application/json;charset=utf-8",
        "Content-Type: Application/JSON",
    ] {
        let target = format!("/v1/locks/{}/acquire", ctx.fresh("ct"));
        let raw = ctx.request("POST", &target, &[header], body.as_bytes());
        cases.push(Case::served(format!("acquire {header}"), raw));
    }
    let raw = ctx.renew(
        &["Content-Type: application/json; charset=utf-8"],
        br#"{"ttl_ms":5000}"#,
    );
    cases.push(Case::served("renew application/json; charset=utf-8", raw));
    let raw = ctx.renew(&["Content-Type: text/plain"], b"");
    cases.push(Case::served("renew text/plain, empty body", raw));
    cases
}

fn oversized(ctx: &Ctx) -> Vec<Case> {
    let padded = |size: usize| {
        let mut body = br#"{"ttl_ms":5000"#.to_vec();
        body.resize(size - 1, b' ');
        body.push(b'}');
        body
    };
    let mut cases = Vec::new();
    let lease = ctx.lease.clone();
    let targets = [
        ("acquire", format!("/v1/locks/{}/acquire", ctx.fresh("big"))),
        ("renew", format!("/v1/leases/{lease}/renew")),
        ("reenter", format!("/v1/leases/{lease}/reenter")),
        (
            "semaphore",
            format!("/v1/semaphores/{}/acquire", ctx.fresh("big")),
        ),
        (
            "rwlock",
            format!("/v1/rwlocks/{}/acquire", ctx.fresh("big")),
        ),
        (
            "force-release",
            format!("/v1/locks/{}/force-release", ctx.fresh("big")),
        ),
    ];
    for (route, target) in &targets {
        for (size, name) in [(65 * 1024, "65 KiB"), (1024 * 1024, "1 MiB")] {
            let raw = ctx.request("POST", target, &[JSON], &padded(size));
            cases.push(Case::refused(
                format!("{route} {name}"),
                raw,
                413,
                "body_too_large",
            ));
        }
        // The length alone says too much: answered before any body byte.
        let raw = ctx.head("POST", target, &[JSON, "Content-Length: 10000000000"]);
        cases.push(Case::refused(
            format!("{route} Content-Length 1e10"),
            raw,
            413,
            "body_too_large",
        ));
        // Chunked bodies are accepted (or refused 411 by a server that wants a length).
        let mut raw = ctx.head("POST", target, &[JSON, "Transfer-Encoding: chunked"]);
        raw.extend(chunked(&padded(70 * 1024)));
        let case = Case::refused(
            format!("{route} chunked 70 KiB"),
            raw,
            413,
            "body_too_large",
        );
        cases.push(case.or_else(411, Some("length_required")));
    }
    // Any route: a keepalive, a GET.
    let target = format!("/v1/leases/{lease}/keepalive");
    let raw = ctx.request("POST", &target, &[JSON], &padded(65 * 1024));
    cases.push(Case::refused(
        "keepalive 65 KiB",
        raw,
        413,
        "body_too_large",
    ));
    let raw = ctx.head("GET", "/v1/fleet", &["Content-Length: 10000000000"]);
    cases.push(Case::refused(
        "GET fleet Content-Length 1e10",
        raw,
        413,
        "body_too_large",
    ));
    cases
}

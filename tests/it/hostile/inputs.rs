//! The corpus of what names a request: paths and percent-encodings, resource names, owners,
//! actors and reasons. Each case names the catalogue's answer (`docs/api.md`); a 200 is a
//! valid control, released at once by the runner.

use super::{pct, Case, Ctx, Family, JSON, PARSER, UNKNOWN_LEASE};

pub fn families(ctx: &Ctx) -> Vec<Family> {
    vec![
        Family::one_per_connection("path", paths(ctx)),
        Family::one_per_connection("resource", resources(ctx)),
        Family::one_per_connection("owner", owners(ctx)),
    ]
}

/// A valid acquire body for `owner`.
pub fn owned(owner: &str) -> String {
    format!(r#"{{"owner":"{owner}"}}"#)
}

fn paths(ctx: &Ctx) -> Vec<Case> {
    let ok = owned("p");
    let mut cases = vec![
        // Decoded, these are resource names like any other (1-512 bytes, no control or format
        // characters): routes match the raw path, and nothing is normalised.
        Case::served("acquire %2e%2e", ctx.acquire("%2e%2e", &ok)),
        Case::served(
            "acquire a%2Fb",
            ctx.acquire(&format!("{}%2Fb", ctx.fresh("a")), &ok),
        ),
        Case::served("show %2E%2e (mixed case)", ctx.get("/v1/locks/%2E%2e")),
        Case::served(
            "show ../../admin encoded",
            ctx.get("/v1/locks/%2e%2e%2f%2e%2e%2fadmin"),
        ),
        // Not a valid escape: the text stays as sent ("%u002e"), a valid name.
        Case::served("show %u002e", ctx.get("/v1/locks/%u002e")),
        Case::refused(
            "lease %u002e",
            ctx.get("/v1/leases/%u002e"),
            404,
            "unknown_lease",
        ),
        Case::refused(
            "lease %2E%2E",
            ctx.get("/v1/leases/%2E%2E"),
            404,
            "unknown_lease",
        ),
    ];
    let not_found = [
        "//v1/fleet",
        "/v1//fleet",
        "/v1/leases/../fleet",
        "/v1/leases/%2e%2e/fleet",
        "/v1/./fleet",
        "/./v1/fleet",
        "/v1/fleet/.",
        "/v1/%66leet",
        "/v1%2Ffleet",
        "/%2e%2e/v1/fleet",
        "/v1/fleet/",
        "/livez/",
        "/v1/locks/x/",
    ];
    for target in not_found {
        cases.push(Case::refused(
            format!("GET {target}"),
            ctx.get(target),
            404,
            "not_found",
        ));
    }
    let lease_slash = format!("/v1/leases/{UNKNOWN_LEASE}/");
    cases.push(Case::refused(
        "GET lease with /",
        ctx.get(&lease_slash),
        404,
        "not_found",
    ));
    let trailing = ctx.request("POST", "/v1/locks/job/acquire/", &[JSON], ok.as_bytes());
    cases.push(Case::refused("acquire with /", trailing, 404, "not_found"));
    for (name, escape) in [
        ("%00", "%00"),
        ("%ff", "%ff"),
        ("overlong %c0%af", "%c0%af"),
        ("surrogate %ed%a0%80", "%ed%a0%80"),
        ("truncated %e2%80", "%e2%80"),
    ] {
        let raw = ctx.acquire(&format!("a{escape}b"), &ok);
        cases.push(Case::refused(
            format!("acquire {name}"),
            raw,
            400,
            "invalid_resource",
        ));
    }
    for (target, status, reason) in [
        ("/v1/locks?prefix=job&bogus=1", 400, "invalid_query"),
        ("/v1/locks?limit=abc", 400, "invalid_query"),
        ("/v1/locks?limit=-1", 400, "invalid_query"),
        ("/v1/locks?prefix=a&prefix=b", 400, "invalid_query"),
        ("/v1/locks?limit=0", 400, "invalid_limit"),
        ("/v1/locks?limit=1001", 400, "invalid_limit"),
        ("/v1/locks?prefix=%01", 400, "invalid_prefix"),
        ("/v1/locks?prefix=%E2%80%AE", 400, "invalid_prefix"),
        ("/v1/leases/x?junk=%zz", 404, "unknown_lease"),
    ] {
        cases.push(Case::refused(
            format!("GET {target}"),
            ctx.get(target),
            status,
            reason,
        ));
    }
    for target in [
        "/v1/fleet?x=%zz&&=;",
        "/livez?%00%ff",
        "/v1/locks?prefix=job&limit=5",
    ] {
        cases.push(Case::served(format!("GET {target}"), ctx.get(target)));
    }
    // A fragment is no part of a request target (RFC 9112 §3.2): dropped by the parser (the
    // route answers) or refused as malformed (the parser's empty 400); the catalogue does not
    // choose.
    let fragment = Case::served("GET /v1/fleet#frag", ctx.get("/v1/fleet#frag"));
    cases.push(fragment.or_else(400, Some(PARSER)));
    let fragment = Case::refused("GET /nope#x", ctx.get("/nope#x"), 404, "not_found");
    cases.push(fragment.or_else(400, Some(PARSER)));
    // Absolute form: the authority names the host (RFC 9112 §3.2.2).
    let evil = b"GET http://evil/v1/fleet HTTP/1.1\r\nHost: evil\r\n\r\n".to_vec();
    cases.push(Case::refused(
        "absolute-form evil",
        evil,
        403,
        "host_not_allowed",
    ));
    let own = format!(
        "GET http://{0}/v1/fleet HTTP/1.1\r\nHost: {0}\r\n\r\n",
        ctx.host
    );
    cases.push(Case::served("absolute-form own host", own.into_bytes()));
    // The catalogue checks the Host header; RFC 9112 says the authority of the target wins.
    let mixed = format!(
        "GET http://evil/v1/fleet HTTP/1.1\r\nHost: {}\r\n\r\n",
        ctx.host
    );
    let mixed = Case::refused(
        "absolute-form evil, Host ours",
        mixed.into_bytes(),
        403,
        "host_not_allowed",
    );
    cases.push(mixed.or_else(200, None));
    // Asterisk and authority forms name no route; the parser may also refuse them outright.
    let host = &ctx.host;
    for (name, raw) in [
        (
            "OPTIONS *",
            format!("OPTIONS * HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        ),
        ("GET *", format!("GET * HTTP/1.1\r\nHost: {host}\r\n\r\n")),
        (
            "CONNECT",
            format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        ),
    ] {
        let case = Case::refused(name, raw.into_bytes(), 404, "not_found");
        cases.push(case.or_else(400, Some(PARSER)));
    }
    cases
}

fn resources(ctx: &Ctx) -> Vec<Case> {
    let ok = owned("r");
    let valid = |name: &str| ctx.acquire(name, &ok);
    let mut cases = vec![
        Case::served("acquire 512 bytes", valid(&"r".repeat(512))),
        Case::served(
            "show 512 bytes",
            ctx.get(&format!("/v1/locks/{}", "a".repeat(512))),
        ),
        Case::served(
            "show 512 bytes of é",
            ctx.get(&format!("/v1/locks/{}", pct(&"é".repeat(256)))),
        ),
        Case::refused(
            "acquire 513 bytes",
            valid(&"a".repeat(513)),
            400,
            "invalid_resource",
        ),
        Case::refused(
            "acquire 4096 bytes",
            valid(&"a".repeat(4096)),
            400,
            "invalid_resource",
        ),
        Case::refused(
            "acquire 257 é (514 bytes)",
            valid(&pct(&"é".repeat(257))),
            400,
            "invalid_resource",
        ),
        Case::refused(
            "show 513 bytes",
            ctx.get(&format!("/v1/locks/{}", "a".repeat(513))),
            400,
            "invalid_resource",
        ),
        // The empty segment matches the route; an empty name is invalid (docs/api.md).
        Case::refused("acquire empty", valid(""), 400, "invalid_resource"),
    ];
    let body = br#"{"actor":"ops","reason":"test"}"#;
    let long = ctx.force_release(&"a".repeat(513), &[JSON], body);
    cases.push(Case::refused(
        "force-release 513 bytes",
        long,
        400,
        "invalid_resource",
    ));
    let controls = [
        "%00", "%01", "%07", "%09", "%0a", "%0d", "%1b", "%7f", "%c2%80", "%c2%85",
    ];
    let formats = [
        ("U+202E", "%E2%80%AE"),
        ("U+200B", "%E2%80%8B"),
        ("U+200D", "%E2%80%8D"),
        ("U+200E", "%E2%80%8E"),
        ("U+2028", "%E2%80%A8"),
        ("U+2029", "%E2%80%A9"),
        ("U+2066", "%E2%81%A6"),
        ("BOM", "%EF%BB%BF"),
        ("U+00AD", "%C2%AD"),
        ("tag U+E0041", "%F3%A0%81%81"),
    ];
    let all = controls.iter().map(|c| (*c, *c)).chain(formats);
    for (name, escape) in all {
        let raw = valid(&format!("x{escape}y"));
        cases.push(Case::refused(
            format!("acquire {name}"),
            raw,
            400,
            "invalid_resource",
        ));
    }
    let show = ctx.get("/v1/locks/a%E2%80%AEb");
    cases.push(Case::refused("show U+202E", show, 400, "invalid_resource"));
    let forced = ctx.force_release("a%0ab", &[JSON], body);
    cases.push(Case::refused(
        "force-release %0a",
        forced,
        400,
        "invalid_resource",
    ));
    cases
}

fn owners(ctx: &Ctx) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut acquire = |name: String, body: Vec<u8>, status, reason| {
        let target = format!("/v1/locks/{}/acquire", ctx.fresh("owner"));
        let raw = ctx.request("POST", &target, &[JSON], &body);
        cases.push(Case::refused(name, raw, status, reason));
    };
    // Not UTF-8, or not JSON (a raw control byte inside a string is not JSON).
    for (name, body) in [
        ("invalid UTF-8 in owner", b"{\"owner\":\"a\xffb\"}".to_vec()),
        ("invalid UTF-8 body", b"\xff\xfe{\"owner\":\"a\"}".to_vec()),
        (
            "UTF-16 body",
            "{\"owner\":\"a\"}"
                .encode_utf16()
                .flat_map(u16::to_le_bytes)
                .collect(),
        ),
        ("lone surrogate escape", br#"{"owner":"\ud800"}"#.to_vec()),
        (
            "raw control byte in owner",
            b"{\"owner\":\"a\x01b\"}".to_vec(),
        ),
    ] {
        acquire(name.into(), body, 400, "invalid_body");
    }
    let escapes = [
        "\\u0000", "\\u0001", "\\u001f", "\\u007f", "\\n", "\\t", "\\r", "\\u0085", "\\u202e",
        "\\u200b", "\\u2028", "\\ufeff",
    ];
    for escape in escapes {
        let body = format!(r#"{{"owner":"a{escape}b"}}"#).into_bytes();
        acquire(format!("owner with {escape}"), body, 400, "invalid_owner");
    }
    let long = owned(&"o".repeat(257)).into_bytes();
    for (name, body) in [
        ("owner empty", br#"{"owner":""}"#.to_vec()),
        ("owner missing", b"{}".to_vec()),
        ("owner null (same as absent)", br#"{"owner":null}"#.to_vec()),
        ("owner 257 bytes", long),
    ] {
        acquire(name.into(), body, 400, "invalid_owner");
    }
    let forced = |body: &str| ctx.force_release(&ctx.fresh("fr"), &[JSON], body.as_bytes());
    for (body, reason) in [
        (r#"{"reason":"r"}"#, "invalid_actor"),
        (r#"{"actor":"a\u0001","reason":"r"}"#, "invalid_actor"),
        (r#"{"actor":"","reason":"r"}"#, "invalid_actor"),
        (r#"{"actor":"a"}"#, "invalid_reason"),
        (r#"{"actor":"a","reason":"r\u202e"}"#, "invalid_reason"),
        (r#"{"actor":"a","reason":"r\n"}"#, "invalid_reason"),
    ] {
        cases.push(Case::refused(
            format!("force-release {body}"),
            forced(body),
            400,
            reason,
        ));
    }
    cases
}

//! Which problem+json `reason`s each operation can answer, per status ([`ROUTES`]), and those
//! every request can get before it is routed ([`GUARD`], the token, the request timeout),
//! merged per status for the document ([`merged`]).
//!
//! The reasons are the catalogue of `docs/api.md`; the tests hold the two together and check
//! each reason against the source that answers it.

use std::collections::BTreeMap;

/// Where an operation needs the API token (when `auth.token_file` is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Token {
    Required,
    /// Needed unless `auth.metrics_open`.
    MetricsOpen,
    Never,
}

/// Reasons answered with one status that carry the same extension members (a component
/// schema's name), if any.
#[derive(Clone, Copy)]
pub(super) struct Group {
    pub status: u16,
    pub reasons: &'static [&'static str],
    pub extension: Option<&'static str>,
}

/// What one operation refuses besides what every request can get.
pub(super) struct Route {
    pub operation: &'static str,
    pub token: Token,
    /// Bound by the request timeout (every route but the event stream).
    pub timeout: bool,
    pub groups: &'static [Group],
}

const fn group(status: u16, reasons: &'static [&'static str]) -> Group {
    Group {
        status,
        reasons,
        extension: None,
    }
}

const fn extended(status: u16, reasons: &'static [&'static str], schema: &'static str) -> Group {
    Group {
        status,
        reasons,
        extension: Some(schema),
    }
}

/// A JSON body's refusals (`body`, `JsonBody`): 415 without a JSON content type, 400 not JSON
/// (or a body that could not be read), 422 the wrong shape, 408 a body late.
const JSON_BODY: [Group; 4] = [
    group(400, &["invalid_body", "bad_request"]),
    group(408, &["request_timeout"]),
    group(415, &["invalid_body"]),
    group(422, &["invalid_body"]),
];

const fn route(operation: &'static str, groups: &'static [Group]) -> Route {
    Route {
        operation,
        token: Token::Required,
        timeout: true,
        groups,
    }
}

/// The acquire body's own refusals, on every route that takes it.
const ACQUIRE_FIELDS: [&str; 5] = [
    "invalid_resource",
    "invalid_owner",
    "invalid_ttl",
    "invalid_wait",
    "invalid_idle_timeout",
];

/// An acquisition route's refusals: the acquire body's, those of the route's own fields
/// (`own`, 400), the JSON body's, its 409 reasons (`conflicts`), and the waiters' and the
/// quorum's.
macro_rules! acquisition {
    ($operation:literal, [$($own:literal),*], [$($conflicts:literal),*]) => {
        route(
            $operation,
            &[
                group(400, &ACQUIRE_FIELDS),
                group(400, &[$($own),*]),
                JSON_BODY[0],
                JSON_BODY[1],
                JSON_BODY[2],
                JSON_BODY[3],
                extended(409, &[$($conflicts),*], "AcquireRefusal"),
                extended(429, &["too_many_waiters"], "AcquireRefusal"),
                extended(503, &["no_quorum", "shutting_down"], "AcquireRefusal"),
            ],
        )
    };
}

/// Every operation's own refusals (see the handlers).
pub(super) const ROUTES: &[Route] = &[
    acquisition!("acquireLock", [], ["held", "dequeued"]),
    acquisition!(
        "acquirePermit",
        ["invalid_limit", "invalid_permits"],
        ["held", "dequeued", "limit_mismatch"]
    ),
    acquisition!(
        "acquireRwLock",
        ["invalid_mode"],
        ["held", "dequeued", "upgrade_refused"]
    ),
    acquisition!("campaign", ["invalid_value"], ["held", "dequeued"]),
    route(
        "downgradeLease",
        &[
            group(404, &["unknown_lease"]),
            group(409, &["not_a_writer", "held"]),
            group(410, &["lease_lost"]),
            group(503, &["no_quorum", "shutting_down"]),
        ],
    ),
    route(
        "proclaimLease",
        &[
            group(400, &["invalid_value"]),
            JSON_BODY[0],
            JSON_BODY[1],
            JSON_BODY[2],
            JSON_BODY[3],
            group(404, &["unknown_lease"]),
            group(409, &["not_a_campaign"]),
            group(410, &["lease_lost"]),
            group(503, &["no_quorum"]),
        ],
    ),
    route("showElection", &[group(400, &["invalid_resource"])]),
    Route {
        operation: "observeElection",
        token: Token::Required,
        timeout: false,
        groups: &[
            group(400, &["invalid_resource"]),
            group(429, &["too_many_streams"]),
        ],
    },
    route("getLease", &[group(404, &["unknown_lease"])]),
    route(
        "renewLease",
        &[
            group(400, &["invalid_ttl"]),
            JSON_BODY[0],
            JSON_BODY[1],
            JSON_BODY[2],
            JSON_BODY[3],
            group(404, &["unknown_lease"]),
            group(410, &["lease_lost"]),
            group(503, &["no_quorum"]),
        ],
    ),
    route(
        "reenterLease",
        &[
            group(400, &["invalid_ttl"]),
            JSON_BODY[0],
            JSON_BODY[1],
            JSON_BODY[2],
            JSON_BODY[3],
            group(404, &["unknown_lease"]),
            group(409, &["too_many_holds"]),
            group(410, &["lease_lost"]),
            group(503, &["no_quorum"]),
        ],
    ),
    route(
        "keepaliveLease",
        &[group(404, &["unknown_lease"]), group(410, &["lease_lost"])],
    ),
    route(
        "releaseLease",
        &[
            group(404, &["unknown_lease"]),
            extended(503, &["no_quorum"], "ReleaseRefusal"),
        ],
    ),
    Route {
        operation: "leaseEvents",
        token: Token::Required,
        timeout: false,
        groups: &[
            group(404, &["unknown_lease"]),
            group(429, &["too_many_streams"]),
        ],
    },
    route(
        "listLocks",
        &[group(
            400,
            &[
                "invalid_query",
                "invalid_prefix",
                "invalid_limit",
                "invalid_resource",
            ],
        )],
    ),
    route("showLock", &[group(400, &["invalid_resource"])]),
    route("showSemaphore", &[group(400, &["invalid_resource"])]),
    route(
        "forceReleaseLock",
        &[
            group(
                400,
                &[
                    "invalid_resource",
                    "invalid_actor",
                    "invalid_reason",
                    "invalid_lease_id",
                    "invalid_slot",
                    "invalid_kind",
                ],
            ),
            JSON_BODY[0],
            JSON_BODY[1],
            JSON_BODY[2],
            JSON_BODY[3],
            extended(409, &["lease_mismatch"], "ForceReleaseJson"),
            extended(503, &["no_quorum"], "ForceReleaseJson"),
        ],
    ),
    route("getFleet", &[]),
    Route {
        operation: "livez",
        token: Token::Never,
        timeout: true,
        groups: &[],
    },
    Route {
        operation: "readyz",
        token: Token::Never,
        timeout: true,
        groups: &[group(503, &["no_quorum"])],
    },
    Route {
        operation: "metrics",
        token: Token::MetricsOpen,
        timeout: true,
        groups: &[],
    },
    Route {
        operation: "openapi",
        token: Token::Never,
        timeout: true,
        groups: &[],
    },
];

/// The refusals every request can get before it is routed (`guard`, the accept loop's
/// connection cap, `refusal_for`), and a bug.
pub(super) const GUARD: &[Group] = &[
    group(400, &["bad_request"]),
    group(403, &["host_not_allowed"]),
    group(413, &["body_too_large"]),
    group(414, &["uri_too_long"]),
    group(415, &["unsupported_encoding"]),
    group(429, &["too_many_connections"]),
    group(431, &["headers_too_large"]),
    group(500, &["internal"]),
];

pub(super) const UNAUTHORIZED: Group = group(401, &["unauthorized"]);
pub(super) const TIMEOUT: Group = group(408, &["request_timeout"]);

/// The reasons of one status that carry the same extension members, once merged.
pub(super) struct Merged {
    pub reasons: Vec<&'static str>,
    pub extension: Option<&'static str>,
}

/// The route's refusals and those every request can get, merged per status.
pub(super) fn merged(route: &Route) -> BTreeMap<u16, Vec<Merged>> {
    let mut statuses: BTreeMap<u16, Vec<Merged>> = BTreeMap::new();
    let token = (route.token != Token::Never).then_some(&UNAUTHORIZED);
    let timeout = route.timeout.then_some(&TIMEOUT);
    let shared = GUARD.iter().chain(token).chain(timeout);
    for g in route.groups.iter().chain(shared) {
        let groups = statuses.entry(g.status).or_default();
        let at = match groups.iter().position(|k| k.extension == g.extension) {
            Some(at) => at,
            None => {
                groups.push(Merged {
                    reasons: Vec::new(),
                    extension: g.extension,
                });
                groups.len() - 1
            }
        };
        let known = &mut groups[at];
        for reason in g.reasons {
            if !known.reasons.contains(reason) {
                known.reasons.push(reason);
            }
        }
    }
    statuses
}

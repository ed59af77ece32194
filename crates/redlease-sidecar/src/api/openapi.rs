//! The OpenAPI 3.1 document of the v1 API, generated from the handlers' annotations and the
//! answers' types (so it cannot drift from them), served at `GET /v1/openapi.json` and printed
//! by `redlease openapi` (committed as `docs/openapi.json`). What the annotations cannot say
//! is added by [`refusals`]: every route's problem+json answers with their exact `reason`s,
//! the refusals of the checks before routing, the bearer token, and the links that follow an
//! acquisition to its lease.

mod catalogue;
mod names;
mod refusals;

use names::Names;
use refusals::Refusals;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use utoipa::OpenApi;

use super::answers::{AcquireRefusal, FleetAnswer, Live, Problem, Ready, ReleaseRefusal};
use super::elections::ElectionEvent;
use super::events::StreamEvent;
use super::inventory::ForceReleaseJson;
use super::{elections, events, handlers, inventory, reentry, rwlocks, semaphores};

/// The document's `info.description`: what holds for every operation.
const DESCRIPTION: &str = "The redlease sidecar's HTTP API: leases on a Redlock fleet for apps \
on loopback. Behaviour is described in docs/api.md; this document gives the exact shapes.\n\n\
Every refusal is `application/problem+json` with a stable `reason` to match on; each \
operation lists the reasons it can answer per status, those of the checks every request \
passes before routing included (`Host`, head and target size, encodings, declared body \
length, the token, the connection cap). Any other path answers 404 `not_found`; a known path \
with another method answers 405 `method_not_allowed` with an `Allow` header. Bytes that are \
not HTTP/1.x, and heads over 32 KiB or with more than 100 fields, get the HTTP parser's own \
empty 400 or 431, which no operation lists.\n\n\
With `auth.token_file` set, every operation but `livez`, `readyz` and `openapi` (and \
`metrics` with `auth.metrics_open`) needs `Authorization: Bearer <token>`; without it, none \
does.";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "redlease sidecar API",
        version = "1",
        description = DESCRIPTION,
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        handlers::acquire,
        semaphores::acquire,
        rwlocks::acquire,
        rwlocks::downgrade,
        elections::campaign,
        handlers::get_lease,
        handlers::renew,
        handlers::keepalive,
        reentry::reenter,
        elections::proclaim,
        handlers::release,
        events::events,
        elections::show,
        elections::observe,
        inventory::list,
        inventory::show,
        inventory::show_semaphore,
        inventory::force_release,
        handlers::fleet,
        handlers::livez,
        handlers::readyz,
        handlers::metrics,
        openapi,
    ),
    components(schemas(
        Problem,
        AcquireRefusal,
        ReleaseRefusal,
        ForceReleaseJson,
        StreamEvent,
        ElectionEvent,
        FleetAnswer,
        Live,
        Ready
    )),
    modifiers(&Refusals, &Names),
    tags(
        (name = "leases", description = "Acquire, keep, renew and release leases; their events"),
        (name = "elections", description = "Campaign, proclaim, read and observe the leader of an election"),
        (name = "inventory", description = "The locks on the masters; force release"),
        (name = "health", description = "The fleet, the probes, the metrics"),
        (name = "meta", description = "This document"),
    ),
)]
struct ApiDoc;

/// The OpenAPI document of the API, as JSON.
pub fn document() -> Value {
    // The document is maps with string keys, strings, numbers and booleans: it encodes.
    let mut document = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    camel_case_links(&mut document);
    document
}

/// The document as `redlease openapi` prints it and `GET /v1/openapi.json` serves it: pretty
/// JSON and a trailing newline.
pub fn openapi_json() -> String {
    // As above: a JSON value always encodes.
    let mut json = serde_json::to_string_pretty(&document()).unwrap_or_default();
    json.push('\n');
    json
}

/// utoipa 5 writes a Link Object's fields in snake case (`operation_id`); OpenAPI names them
/// in camel case (`operationId`).
fn camel_case_links(document: &mut Value) {
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    let operations = paths.values_mut().filter_map(Value::as_object_mut);
    let responses = operations
        .flat_map(|item| item.values_mut())
        .filter_map(|operation| operation.get_mut("responses")?.as_object_mut())
        .flat_map(|responses| responses.values_mut());
    let links = responses
        .filter_map(|response| response.get_mut("links")?.as_object_mut())
        .flat_map(|links| links.values_mut())
        .filter_map(Value::as_object_mut);
    for link in links {
        for (snake, camel) in LINK_FIELDS {
            if let Some(value) = link.remove(snake) {
                link.insert(camel.to_string(), value);
            }
        }
    }
}

/// The Link Object's fields that have two words.
const LINK_FIELDS: [(&str, &str); 3] = [
    ("operation_id", "operationId"),
    ("operation_ref", "operationRef"),
    ("request_body", "requestBody"),
];

/// This OpenAPI document.
///
/// Needs no token, like the probes: it describes the public contract and holds no data, so
/// that generators and test tools can fetch it. It is still behind the `Host` check.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API",
         content_type = "application/json", body = Object),
    ),
)]
pub(super) async fn openapi() -> Response {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    let json = DOCUMENT.get_or_init(openapi_json).as_str();
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

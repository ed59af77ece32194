//! What the handlers' annotations cannot say, added to the document: each operation's
//! problem+json answers with the exact `reason`s it can give per status, those of the checks
//! before routing included, the bearer scheme and where it applies, the links from an
//! acquisition to the operations on its lease and from a re-entry to its hold's release, the
//! event stream's item schema, the optional renewal and re-entry bodies, and path parameters
//! that are never empty.
//!
//! The reasons per operation are in [`super::catalogue`].

use std::collections::BTreeMap;

use axum::http::StatusCode;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, OneOfBuilder, Schema, Type};
use utoipa::openapi::security::SecurityScheme;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Required, Response, ResponseBuilder};
use utoipa::Modify;

use super::catalogue::{merged, Merged, Route, Token, GUARD, ROUTES, TIMEOUT, UNAUTHORIZED};

/// The name of the bearer scheme in `components.securitySchemes`.
const BEARER: &str = "bearer";

/// The operations a granted lease links to, by the `lease_id` of the acquisition's answer.
const LEASE_LINKS: [&str; 6] = [
    "getLease",
    "renewLease",
    "keepaliveLease",
    "reenterLease",
    "releaseLease",
    "leaseEvents",
];

/// The operations a leader's lease links to besides [`LEASE_LINKS`].
const CAMPAIGN_LINKS: [&str; 1] = ["proclaimLease"];

/// The link from a re-entry to the release of the hold it opened, by its `hold_id`.
const HOLD_LINK: &str = "releaseHold";

/// Adds the refusals, the security and the links to the document.
pub(super) struct Refusals;

impl Modify for Refusals {
    fn modify(&self, openapi: &mut OpenApi) {
        add_bearer_scheme(openapi);
        let mut shared = BTreeMap::new();
        for item in openapi.paths.paths.values_mut() {
            let operations = [&mut item.get, &mut item.post, &mut item.delete];
            for operation in operations.into_iter().flatten() {
                let id = operation.operation_id.clone().unwrap_or_default();
                let Some(route) = ROUTES.iter().find(|r| r.operation == id) else {
                    continue; // the tests require every operation to have its route
                };
                operation.security = security(route.token);
                for (status, response) in refusals(route, &mut shared) {
                    operation.responses.responses.insert(status, response);
                }
                amend(&id, operation);
            }
        }
        let components = openapi.components.get_or_insert_with(Default::default);
        components.responses.extend(shared);
    }
}

/// What one operation needs besides its refusals and security.
fn amend(id: &str, operation: &mut Operation) {
    let responses = &mut operation.responses.responses;
    match id {
        "acquireLock" => link_lease(responses, &LEASE_LINKS),
        "campaign" => link_lease(responses, &[&LEASE_LINKS[..], &CAMPAIGN_LINKS].concat()),
        "leaseEvents" => describe_events(responses, "StreamEvent"),
        "observeElection" => describe_events(responses, "ElectionEvent"),
        // The re-entry's body may be left out, as the renewal's.
        "reenterLease" => {
            link_hold(responses);
            let body = operation.request_body.as_mut();
            body.into_iter()
                .for_each(|b| b.required = Some(Required::False));
        }
        // The renewal's body may be left out (`OptionalJsonBody`).
        "renewLease" => {
            let body = operation.request_body.as_mut();
            body.into_iter()
                .for_each(|b| b.required = Some(Required::False));
        }
        _ => {}
    }
    // An empty segment matches no route (404 `not_found`): no path parameter is.
    let parameters = operation.parameters.iter_mut().flatten();
    for parameter in parameters.filter(|p| p.parameter_in == ParameterIn::Path) {
        if let Some(RefOr::T(Schema::Object(schema))) = &mut parameter.schema {
            schema.min_length = Some(1);
        }
    }
}

fn add_bearer_scheme(openapi: &mut OpenApi) {
    let http = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .description(Some(
            "`Authorization: Bearer <token>` (the scheme in any case), the token of \
             `auth.token_file`; asked only when that is set",
        ))
        .build();
    let components = openapi.components.get_or_insert_with(Default::default);
    components.add_security_scheme(BEARER, SecurityScheme::Http(http));
}

fn security(token: Token) -> Option<Vec<SecurityRequirement>> {
    let bearer = || SecurityRequirement::new(BEARER, Vec::<String>::new());
    match token {
        Token::Required => Some(vec![bearer()]),
        // Either the token or nothing: `auth.metrics_open` opens it.
        Token::MetricsOpen => Some(vec![bearer(), SecurityRequirement::default()]),
        Token::Never => None,
    }
}

/// The route's answers per status. One that only the checks before routing give is a
/// reference to a response of `components.responses` (named after its reason), added to
/// `shared`.
fn refusals(
    route: &Route,
    shared: &mut BTreeMap<String, RefOr<Response>>,
) -> Vec<(String, RefOr<Response>)> {
    let everyone = GUARD.iter().chain([&UNAUTHORIZED, &TIMEOUT]);
    let everyone: Vec<(u16, &str)> = everyone.map(|g| (g.status, g.reasons[0])).collect();
    let answer = |(status, groups): (u16, Vec<Merged>)| {
        let response = response(status, &groups);
        let reference = match groups.as_slice() {
            [Merged {
                reasons,
                extension: None,
            }] if reasons.len() == 1 && everyone.contains(&(status, reasons[0])) => {
                Some(reasons[0])
            }
            _ => None,
        };
        let answer = match reference {
            Some(name) => {
                shared.insert(name.to_string(), response.into());
                Ref::from_response_name(name).into()
            }
            None => response.into(),
        };
        (status.to_string(), answer)
    };
    merged(route).into_iter().map(answer).collect()
}

fn response(status: u16, groups: &[Merged]) -> Response {
    let reasons: Vec<&str> = groups
        .iter()
        .flat_map(|g| g.reasons.iter().copied())
        .collect();
    let text = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Refused");
    let description = format!("{text}: `{}`", reasons.join("`, `"));
    let schema = match groups {
        [one] => problem_schema(status, one),
        many => {
            let each = many.iter().map(|g| problem_schema(status, g));
            each.fold(OneOfBuilder::new(), OneOfBuilder::item).into()
        }
    };
    let content = ContentBuilder::new().schema(Some(schema)).build();
    let mut builder = ResponseBuilder::new()
        .description(description)
        .content(super::super::error::PROBLEM_JSON, content);
    builder = match status {
        401 => builder.header("WWW-Authenticate", header("Always `Bearer`")),
        429 if reasons.contains(&"too_many_waiters") => builder
            .header("Retry-After", header("`1` with `too_many_waiters`"))
            .header("Connection", header("`close` with `too_many_waiters`")),
        _ => builder,
    };
    builder.build()
}

fn header(description: &str) -> utoipa::openapi::header::Header {
    let string = ObjectBuilder::new().schema_type(Type::String);
    HeaderBuilder::new()
        .schema(string)
        .description(Some(description))
        .build()
}

/// `Problem`, the extension members of the group, and its exact reasons and status.
fn problem_schema(status: u16, g: &Merged) -> RefOr<Schema> {
    let exact = ObjectBuilder::new()
        .property(
            "reason",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(g.reasons.iter().copied())),
        )
        .property(
            "status",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .enum_values(Some([status])),
        );
    let mut all = AllOfBuilder::new().item(Ref::from_schema_name("Problem"));
    if let Some(extension) = g.extension {
        all = all.item(Ref::from_schema_name(extension));
    }
    all.item(exact).into()
}

/// Links from the acquisition's (or campaign's) 200 to the `operations` on the lease it
/// granted.
fn link_lease(responses: &mut BTreeMap<String, RefOr<Response>>, operations: &[&str]) {
    let Some(RefOr::T(granted)) = responses.get_mut("200") else {
        return;
    };
    for &operation in operations {
        let link = LinkBuilder::new()
            .operation_id(operation)
            .parameter("id", "$response.body#/lease_id")
            .description(format!("`{operation}` on the lease just granted"))
            .build();
        granted.links.insert(operation.to_string(), link.into());
    }
}

/// A link from the re-entry's 200 to the release of the hold it opened.
fn link_hold(responses: &mut BTreeMap<String, RefOr<Response>>) {
    let Some(RefOr::T(entered)) = responses.get_mut("200") else {
        return;
    };
    let link = LinkBuilder::new()
        .operation_id("releaseLease")
        .parameter("id", "$response.body#/hold_id")
        .description("`releaseLease` of the hold just opened: that hold only, never the lease")
        .build();
    entered.links.insert(HOLD_LINK.to_string(), link.into());
}

/// OpenAPI 3.1 has no schema for the items of a stream: an event stream's media type names
/// `schema`, each event's shape (`StreamEvent` of a lease's, `ElectionEvent` of an
/// observer's), in an extension (`x-item-schema`, after 3.2's `itemSchema`).
fn describe_events(responses: &mut BTreeMap<String, RefOr<Response>>, schema: &str) {
    let Some(RefOr::T(stream)) = responses.get_mut("200") else {
        return;
    };
    let Some(content) = stream.content.get_mut("text/event-stream") else {
        return;
    };
    let item = serde_json::json!({ "$ref": format!("#/components/schemas/{schema}") });
    let extensions: Extensions = [("x-item-schema", item)].into_iter().collect();
    content
        .extensions
        .get_or_insert_with(Default::default)
        .merge(extensions);
}

//! The OpenAPI document against what it describes: the committed `docs/openapi.json`, the
//! router's routes, the OpenAPI 3.1 rules a validator checks, and the reason catalogue of
//! `docs/api.md` and the code.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::catalogue::{GUARD, ROUTES};
use super::{document, openapi_json};

/// The workspace's root, where `docs/` is.
fn workspace_file(path: &str) -> std::path::PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.join("../..").join(path)
}

/// Every operation of the document: (method, path, operation).
fn operations(document: &Value) -> Vec<(String, String, Value)> {
    let mut all = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            all.push((method.clone(), path.clone(), operation.clone()));
        }
    }
    all
}

/// `docs/openapi.json` is what the code generates; regenerate it when this fails.
#[test]
fn docs_openapi_json_is_current() {
    let path = workspace_file("docs/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = openapi_json();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or(
                committed.lines().count().min(generated.lines().count()),
                |i| i,
            );
        panic!(
            "docs/openapi.json differs from the document the code generates (first at line {}); \
             regenerate it: cargo run -- openapi --out docs/openapi.json",
            first + 1
        );
    }
}

/// The operations are exactly the router's routes, each with its stable operationId.
#[test]
fn every_route_of_the_router_is_an_operation() {
    let router = include_str!("../../api.rs");
    let mut routes = BTreeSet::new();
    for call in router.split(".route(").skip(1) {
        let path = call.split('"').nth(1).unwrap();
        let method = call.split('"').nth(2).unwrap();
        let method = method.trim_start_matches([',', ' ', '\n']);
        let method = method.split('(').next().unwrap();
        routes.insert((method.to_string(), path.to_string()));
    }
    let documented: BTreeSet<(String, String)> = operations(&document())
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect();
    assert_eq!(documented, routes);
    let mut ids: Vec<String> = operations(&document())
        .iter()
        .map(|(_, _, op)| op["operationId"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected = [
        "acquireLock",
        "acquirePermit",
        "acquireRwLock",
        "downgradeLease",
        "campaign",
        "observeElection",
        "proclaimLease",
        "showElection",
        "forceReleaseLock",
        "getFleet",
        "getLease",
        "keepaliveLease",
        "leaseEvents",
        "listLocks",
        "livez",
        "metrics",
        "openapi",
        "readyz",
        "reenterLease",
        "releaseLease",
        "renewLease",
        "showLock",
        "showSemaphore",
    ];
    expected.sort();
    assert_eq!(ids, expected);
    let refusals: BTreeSet<&str> = ROUTES.iter().map(|r| r.operation).collect();
    assert_eq!(refusals, expected.into_iter().collect());
}

/// Resolves a local `$ref` (`#/a/b`) in `document`.
fn resolve<'a>(document: &'a Value, reference: &str) -> Option<&'a Value> {
    document.pointer(reference.strip_prefix('#')?)
}

/// Every `$ref` under `value`, with where it is.
fn references(value: &Value, at: &str, found: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "$ref" {
                    found.push((at.to_string(), inner.as_str().unwrap_or("").to_string()));
                } else {
                    references(inner, &format!("{at}/{key}"), found);
                }
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                references(inner, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// What an OpenAPI 3.1 validator checks: the version, every `$ref` resolves, every operation
/// has a unique operationId, responses with descriptions, its path parameters, and known
/// security schemes; links name operations and their parameters.
#[test]
fn the_document_is_valid_openapi_3_1() {
    let document = document();
    let version = document["openapi"].as_str().unwrap();
    assert!(version.starts_with("3.1."), "{version}");
    assert!(document["info"]["title"].is_string() && document["info"]["version"].is_string());
    let mut found = Vec::new();
    references(&document, "", &mut found);
    assert!(found.len() > 50, "{}", found.len());
    for (at, reference) in &found {
        assert!(resolve(&document, reference).is_some(), "{at}: {reference}");
    }
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .unwrap();
    let mut ids = BTreeMap::new();
    for (method, path, operation) in operations(&document) {
        let id = operation["operationId"].as_str().unwrap().to_string();
        assert!(
            ids.insert(id.clone(), operation.clone()).is_none(),
            "{id} twice"
        );
        let responses = operation["responses"].as_object().unwrap();
        assert!(responses.contains_key("200"), "{method} {path}");
        for (status, response) in responses {
            assert!(status.parse::<u16>().is_ok(), "{id} {status}");
            let response = match response.get("$ref") {
                Some(reference) => resolve(&document, reference.as_str().unwrap()).unwrap(),
                None => response,
            };
            assert!(response["description"].is_string(), "{id} {status}");
        }
        let declared: BTreeSet<&str> = operation["parameters"]
            .as_array()
            .map(|params| params.iter().filter(|p| p["in"] == "path"))
            .into_iter()
            .flatten()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        let in_path: BTreeSet<&str> = path
            .split('{')
            .skip(1)
            .map(|rest| rest.split('}').next().unwrap())
            .collect();
        assert_eq!(declared, in_path, "{id}");
        for requirement in operation["security"].as_array().into_iter().flatten() {
            for scheme in requirement.as_object().unwrap().keys() {
                assert!(schemes.contains_key(scheme), "{id}: {scheme}");
            }
        }
    }
    links_name_operations_and_parameters(&ids);
}

/// Every link names an operation and parameters that operation has.
fn links_name_operations_and_parameters(ids: &BTreeMap<String, Value>) {
    for (id, operation) in ids {
        let links = operation["responses"]["200"]["links"].as_object();
        for (name, link) in links.into_iter().flatten() {
            let target = link["operationId"].as_str().unwrap();
            let target = &ids[target];
            for parameter in link["parameters"].as_object().unwrap().keys() {
                let params = target["parameters"].as_array().unwrap();
                assert!(
                    params.iter().any(|p| p["name"] == *parameter),
                    "{id}: {name}"
                );
            }
        }
    }
}

/// The acquisition's 200 links to every operation on the lease it granted.
#[test]
fn an_acquisition_links_to_its_lease() {
    let document = document();
    let ok = &document["paths"]["/v1/locks/{resource}/acquire"]["post"]["responses"]["200"];
    let links = ok["links"].as_object().unwrap();
    let names: BTreeSet<&str> = links.keys().map(String::as_str).collect();
    let expected = [
        "getLease",
        "keepaliveLease",
        "leaseEvents",
        "reenterLease",
        "releaseLease",
        "renewLease",
    ];
    assert_eq!(names, expected.into_iter().collect());
    for link in links.values() {
        assert_eq!(link["parameters"]["id"], "$response.body#/lease_id");
    }
}

/// A re-entry's 200 links to the release of the hold it opened, by its `hold_id`, and its
/// body, like a renewal's, may be left out.
#[test]
fn a_reentry_links_to_its_hold() {
    let document = document();
    let operation = &document["paths"]["/v1/leases/{id}/reenter"]["post"];
    let links = operation["responses"]["200"]["links"].as_object().unwrap();
    let names: Vec<&str> = links.keys().map(String::as_str).collect();
    assert_eq!(names, ["releaseHold"]);
    assert_eq!(links["releaseHold"]["operationId"], "releaseLease");
    assert_eq!(
        links["releaseHold"]["parameters"]["id"],
        "$response.body#/hold_id"
    );
    assert_eq!(operation["requestBody"]["required"], false);
}

/// Every `reason` enum of the document, as (status, reason).
fn documented_reasons(document: &Value) -> BTreeSet<(u16, String)> {
    let mut found = BTreeSet::new();
    collect_reasons(document, &mut found);
    found
}

fn collect_reasons(value: &Value, found: &mut BTreeSet<(u16, String)>) {
    match value {
        Value::Object(map) => {
            if let (Some(reasons), Some(statuses)) = (
                map.get("properties")
                    .and_then(|p| p["reason"]["enum"].as_array()),
                map.get("properties")
                    .and_then(|p| p["status"]["enum"].as_array()),
            ) {
                let status = statuses[0].as_u64().unwrap() as u16;
                for reason in reasons {
                    found.insert((status, reason.as_str().unwrap().to_string()));
                }
            }
            map.values().for_each(|inner| collect_reasons(inner, found));
        }
        Value::Array(items) => items.iter().for_each(|inner| collect_reasons(inner, found)),
        _ => {}
    }
}

/// The `reason`s of `docs/api.md`'s Errors table, with their statuses.
fn catalogue() -> BTreeSet<(u16, String)> {
    let api = std::fs::read_to_string(workspace_file("docs/api.md")).unwrap();
    let errors = api.split("## Errors").nth(1).unwrap();
    let mut found = BTreeSet::new();
    for line in errors.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let statuses: Vec<u16> = cells[2]
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        for reason in cells[1].split(',') {
            let reason = reason.trim().trim_matches('`');
            for status in &statuses {
                found.insert((*status, reason.to_string()));
            }
        }
    }
    found
}

/// The document's reasons are `docs/api.md`'s catalogue, with the same statuses; each is a
/// string the sidecar's source answers with. (The parser's own empty 400 and 431, and the
/// metrics listener's, are no operation's.)
#[test]
fn the_reasons_are_the_catalogue() {
    let documented = documented_reasons(&document());
    let mut catalogue = catalogue();
    // 404 `not_found` and 405 `method_not_allowed` answer paths and methods that are no
    // operation's (the document's description says so).
    catalogue.remove(&(404, "not_found".to_string()));
    catalogue.remove(&(405, "method_not_allowed".to_string()));
    assert_eq!(documented, catalogue);
    let source = [
        include_str!("../error.rs"),
        include_str!("../guard.rs"),
        include_str!("../auth.rs"),
        include_str!("../body.rs"),
        include_str!("../handlers.rs"),
        include_str!("../semaphores.rs"),
        include_str!("../rwlocks.rs"),
        include_str!("../reentry.rs"),
        include_str!("../elections.rs"),
        include_str!("../inventory.rs"),
        include_str!("../events.rs"),
        include_str!("../../server/accept.rs"),
    ]
    .concat();
    for (_, reason) in &documented {
        let quoted = format!("\"{reason}\"");
        assert!(source.contains(&quoted), "no source answers {reason}");
    }
    for shared in GUARD {
        assert!(documented.contains(&(shared.status, shared.reasons[0].to_string())));
    }
}

/// The event stream names each event's shape, and the event names are those the lease's
/// task and the stream send.
#[test]
fn the_event_stream_names_its_events() {
    let document = document();
    let stream = &document["paths"]["/v1/leases/{id}/events"]["get"]["responses"]["200"];
    let item = &stream["content"]["text/event-stream"]["x-item-schema"]["$ref"];
    assert_eq!(item, "#/components/schemas/StreamEvent");
    let names = document["components"]["schemas"]["LeaseEventName"]["enum"].clone();
    let expected = ["renewed", "degraded", "recovered", "lost", "released"];
    assert_eq!(names, serde_json::json!(expected));
    let source = [
        include_str!("../../lease.rs"),
        include_str!("../../lease/renewal.rs"),
        include_str!("../events.rs"),
    ]
    .concat();
    for name in expected {
        assert!(source.contains(&format!("\"{name}\"")), "{name}");
    }
}

//! The two requests of every lock's cycle, `POST /v1/locks/{resource}/acquire` and
//! `DELETE /v1/leases/{id}`, and those an app sends while it holds a lease without an event
//! stream, `POST /v1/leases/{id}/keepalive` and `GET /v1/leases/{id}`, handed to their
//! handlers without the router: no route matching, no path parameters stored in the request
//! and decoded again, no boxed route service per request. Every other request, and these with
//! a `%` in their segment (which the router percent-decodes) or an id that is not one, goes
//! through the router, which routes these to the same handlers.

use std::convert::Infallible;
use std::future::Future;
use std::task::Context;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{FromRequest, Path, State};
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use axum::{BoxError, Router};
use futures_util::future::{lazy, Either, Lazy};
use futures_util::FutureExt;

use super::body::{decode_plain, plain_json_type, JsonBody};
use super::error::ApiError;
use super::handlers::{kept_alive, lease_of};
use super::requests::AcquireBody;
use super::{handlers, AppState};
use crate::LeaseId;

/// A router, and the state its hot routes are answered with (none for a router without
/// them, the metrics listener's).
#[derive(Clone)]
pub(crate) struct Api {
    router: Router,
    hot: Option<AppState>,
}

impl Api {
    /// The API's router ([`super::app`]) with its hot routes taken straight.
    pub(crate) fn new(state: AppState) -> Self {
        Self {
            router: super::app(state.clone()),
            hot: Some(state),
        }
    }

    /// The state the hot routes are answered with; `None` for a router without them.
    pub(crate) fn hot_state(&self) -> Option<&AppState> {
        self.hot.as_ref()
    }

    /// `router` alone.
    pub(crate) fn routed(router: Router) -> Self {
        Self { router, hot: None }
    }

    /// The answer to `request`.
    pub(crate) fn call<B>(&self, request: Request<B>) -> impl Future<Output = Response> + Send
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let route = self
            .hot
            .as_ref()
            .and_then(|state| Some((state.clone(), hot_route(&request)?)));
        match route {
            // Boxed where it is made, as the router boxes a handler's future: a handler's
            // future is kilobytes, moved on every step to the connection's boxed future.
            Some((state, route)) => {
                Either::Left(Box::pin(answer(state, route, request.map(Body::new))))
            }
            None => {
                let mut router = self.router.clone();
                // A `Router` is always ready: `poll_ready` need not be called first.
                let answer = tower_service::Service::call(&mut router, request);
                Either::Right(answer.map(|answer: Result<Response, Infallible>| {
                    answer.unwrap_or_else(|never| match never {})
                }))
            }
        }
    }
}

/// A hot route, with its path segment: the resource as sent, the lease (or hold) id read.
#[derive(Debug, PartialEq)]
pub(crate) enum HotRoute {
    Acquire(String),
    /// A request on a lease, with no body to read.
    Lease(LeaseRoute),
}

/// A hot route on lease (or hold) `id`, whose request has no body.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum LeaseRoute {
    /// `DELETE /v1/leases/{id}`.
    Release(LeaseId),
    /// `POST /v1/leases/{id}/keepalive`.
    Keepalive(LeaseId),
    /// `GET /v1/leases/{id}`.
    Read(LeaseId),
}

impl HotRoute {
    /// Whether a request of this route sent with the `Content-Type` `content_type` and a body
    /// of `length` bytes may be one [`HotRequest::read`] takes, once its body is there: an
    /// acquisition sent as `application/json` exactly, any other with no body.
    pub(crate) fn may_read(&self, content_type: Option<&[u8]>, length: usize) -> bool {
        match self {
            HotRoute::Acquire(_) => content_type.is_some_and(plain_json_type),
            HotRoute::Lease(_) => length == 0,
        }
    }
}

/// The hot route `request` takes, if any.
fn hot_route<B>(request: &Request<B>) -> Option<HotRoute> {
    hot_route_of(request.method().as_str(), request.uri().path())
}

/// The hot route a request of `method` to `path` takes, if any: a segment that is not empty,
/// holds no `/` (the router would not match it either) and no `%` (left to the router, which
/// decodes it). An id that is not one is left to the router too, whose handler refuses it.
pub(crate) fn hot_route_of(method: &str, path: &str) -> Option<HotRoute> {
    let plain = |segment: &&str| !segment.bytes().any(|byte| byte == b'/' || byte == b'%');
    let segment = |prefix: &str, suffix: &str| segment_between(path, prefix, suffix).filter(plain);
    let lease = |suffix: &str, route: fn(LeaseId) -> LeaseRoute| {
        let id = segment("/v1/leases/", suffix)?.parse::<LeaseId>().ok()?;
        Some(HotRoute::Lease(route(id)))
    };
    match method {
        "POST" => match segment("/v1/locks/", "/acquire") {
            Some(resource) => Some(HotRoute::Acquire(resource.into())),
            None => lease("/keepalive", LeaseRoute::Keepalive),
        },
        "DELETE" => lease("", LeaseRoute::Release),
        "GET" => lease("", LeaseRoute::Read),
        _ => None,
    }
}

/// A hot route's request read whole by the server itself (`server::fast_lane`): the
/// acquisition's body decoded, any other's empty.
pub(crate) struct HotRequest(Read);

enum Read {
    Acquire(String, AcquireBody),
    Lease(LeaseRoute),
}

impl HotRequest {
    /// `route`'s request with `body`, sent with the `Content-Type` `content_type`: an
    /// acquisition's a JSON object sent as `application/json` exactly, any other's empty.
    /// `None` for any other, whose refusal (if any) the router's path words.
    pub(crate) fn read(route: HotRoute, content_type: Option<&[u8]>, body: &[u8]) -> Option<Self> {
        match route {
            HotRoute::Acquire(resource) => {
                if !content_type.is_some_and(plain_json_type) {
                    return None;
                }
                let body = decode_plain::<AcquireBody>(body)?;
                Some(Self(Read::Acquire(resource, body)))
            }
            HotRoute::Lease(route) => body.is_empty().then_some(Self(Read::Lease(route))),
        }
    }
}

/// The answer to a hot request read by the server, from the handler its route has.
pub(crate) fn answer_read(
    state: AppState,
    request: HotRequest,
) -> impl Future<Output = Response> + Send {
    match request.0 {
        Read::Acquire(resource, body) => {
            Either::Left(acquired(state, resource, Ok(JsonBody(body))))
        }
        Read::Lease(route) => Either::Right(lease_answered(state, route)),
    }
}

/// The answer to a request on a lease, from the handler its route has: what both the
/// router's path and the fast lane answer with.
fn lease_answered(state: AppState, route: LeaseRoute) -> impl Future<Output = Response> + Send {
    match route {
        LeaseRoute::Release(id) => Either::Left(released(state, id)),
        LeaseRoute::Keepalive(id) => Either::Right(on_poll(state, id, kept_alive)),
        LeaseRoute::Read(id) => Either::Right(on_poll(state, id, lease_of)),
    }
}

/// The answer of `handler` (a keepalive, a lease read: made without waiting) to a request
/// on lease `id`, made when first polled, as a handler's future is: a request dropped before
/// (its client hung up) changes nothing.
fn on_poll(
    state: AppState,
    id: LeaseId,
    handler: fn(&AppState, LeaseId) -> Result<Response, ApiError>,
) -> Lazy<impl FnOnce(&mut Context<'_>) -> Response> {
    lazy(move |_| handler(&state, id).into_response())
}

/// What `path` holds between `prefix` and `suffix`, when that is not empty.
pub(crate) fn segment_between<'a>(path: &'a str, prefix: &str, suffix: &str) -> Option<&'a str> {
    let segment = path.strip_prefix(prefix)?.strip_suffix(suffix)?;
    (!segment.is_empty()).then_some(segment)
}

/// The answer to a hot route's request. The acquisition's body is read, then its handler
/// run, as two steps of one future whose size is the larger step's (`then`): in one async fn
/// the two were laid out side by side, 10 KiB to move into the connection's box per request
/// (3.3 KiB now, with the rarer kinds of acquisition waiting in boxes of their own).
fn answer(
    state: AppState,
    route: HotRoute,
    request: Request<Body>,
) -> impl Future<Output = Response> + Send {
    match route {
        HotRoute::Acquire(resource) => {
            let read = async move {
                let body = JsonBody::from_request(request, &state).await;
                (state, body)
            };
            Either::Left(read.then(|(state, body)| acquired(state, resource, body)))
        }
        HotRoute::Lease(route) => Either::Right(lease_answered(state, route)),
    }
}

/// The acquisition of `resource` with `body` (read, or refused), answered by its handler:
/// what both the router's path and the fast lane answer with.
fn acquired(
    state: AppState,
    resource: String,
    body: Result<JsonBody<AcquireBody>, ApiError>,
) -> impl Future<Output = Response> + Send {
    handlers::acquire(State(state), Ok(Path(resource)), body).map(IntoResponse::into_response)
}

/// The release of lease (or hold) `id`, answered by its handler.
async fn released(state: AppState, id: LeaseId) -> Response {
    handlers::release_lease_or_hold(&state, id)
        .await
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    /// Only the four routes, by their method, with a plain segment, are hot.
    #[test]
    fn hot_routes_are_four_with_plain_segments() {
        let route = |method: Method, path: &str| {
            hot_route(
                &Request::builder()
                    .method(method)
                    .uri(path)
                    .body(())
                    .unwrap(),
            )
        };
        let acquire = |resource: &str| Some(HotRoute::Acquire(resource.into()));
        let release = |id: &str| Some(HotRoute::Lease(LeaseRoute::Release(id.parse().unwrap())));
        assert_eq!(
            route(Method::POST, "/v1/locks/job-1/acquire"),
            acquire("job-1")
        );
        assert_eq!(
            route(Method::POST, "/v1/locks/a:b/acquire?x=1"),
            acquire("a:b")
        );
        let id = "00112233445566778899aabbccddeeff";
        let path = format!("/v1/leases/{id}");
        assert_eq!(route(Method::DELETE, &path), release(id));
        let lease_id = id.parse().unwrap();
        let on_lease = |route: fn(LeaseId) -> LeaseRoute| Some(HotRoute::Lease(route(lease_id)));
        assert_eq!(route(Method::GET, &path), on_lease(LeaseRoute::Read));
        let keepalive = format!("{path}/keepalive");
        assert_eq!(
            route(Method::POST, &keepalive),
            on_lease(LeaseRoute::Keepalive)
        );
        let other = |suffix: &str| format!("{path}{suffix}");
        for (method, path) in [
            (Method::GET, "/v1/locks/job-1/acquire"),
            (Method::POST, "/v1/locks//acquire"),
            (Method::POST, "/v1/locks/a/b/acquire"),
            (Method::POST, "/v1/locks/a%2Fb/acquire"),
            (Method::POST, "/v1/semaphores/job/acquire"),
            (Method::POST, "/v1/locks/job/acquire/"),
            (Method::GET, "/v1/leases/00ff"),
            (Method::DELETE, "/v1/leases/"),
            (Method::DELETE, "/v1/leases/00ff/"),
            (Method::DELETE, "/v1/leases/00ff/renew"),
            (Method::DELETE, "/v1/leases/0%30"),
            (Method::DELETE, "/v1/leases/nothex"),
            (Method::GET, "/v1/leases/nothex/keepalive"),
            (Method::POST, "/v1/leases/00ff/keepalive"),
        ] {
            assert_eq!(route(method.clone(), path), None, "{method} {path}");
        }
        for (method, path) in [
            (Method::GET, other("/keepalive")),
            (Method::POST, other("")),
            (Method::POST, other("/renew")),
            (Method::POST, other("/keepalive/")),
            (Method::GET, other("/")),
            (Method::GET, other("/events")),
            (Method::HEAD, other("")),
            (Method::PUT, other("/keepalive")),
        ] {
            assert_eq!(route(method.clone(), &path), None, "{method} {path}");
        }
    }
}

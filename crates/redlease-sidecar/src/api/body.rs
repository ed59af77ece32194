//! The one reader of JSON request bodies (acquire, renew, force release) on axum's `Json`:
//! its rejections (415 content type, 400 not JSON, 422 wrong shape, 413 from the router's body
//! limit) become the catalogue's reasons, and the body must arrive in time (408). What axum
//! does not do is here: a body must be a JSON object ([`Object`]), and [`Millis`], the
//! duration fields, gives every wrong kind of value the field's own reason (400
//! `invalid_ttl`, …) rather than a deserializer's message. A body sent as
//! `application/json` exactly is read first without `Json`'s content-type parsing and
//! tracking of field paths, and through `Json` only when it fails, for the same rejection.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::de::value::MapAccessDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde::{Deserialize, Deserializer};

use super::error::ApiError;
use super::guard::{bad_request, body_too_large, request_timeout};
use super::AppState;

/// Deepest nesting of arrays and objects a body may have: one level short of serde_json's own
/// limit (127), which reads deeper nesting as malformed JSON (400), not the wrong shape (422).
const MAX_DEPTH: usize = 126;

/// A JSON object body of shape `T`, sent with `content-type: application/json`.
pub(crate) struct JsonBody<T>(pub T);

/// As [`JsonBody`], but an empty body (whitespace only), with any content type or none, is
/// `T::default()`.
pub(super) struct OptionalJsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        if !plain_json(request.headers()) {
            // axum's own reading of every other content type: parameters, `+json` suffixes,
            // refusals.
            let read = Json::<Object<T>>::from_request(request, state);
            let Json(Object(value)) = in_time(state.body_timeout, read).await?.map_err(rejected)?;
            return Ok(JsonBody(value));
        }
        let read = Bytes::from_request(request, state);
        let bytes = in_time(state.body_timeout, read).await?;
        let bytes = bytes.map_err(|rejection| rejected(rejection.into()))?;
        decode(&bytes).map(JsonBody)
    }
}

/// Whether the request says `content-type: application/json`, exactly (in any case): the
/// content type of nearly every request, checked without parsing it as axum's `Json` does.
fn plain_json(headers: &HeaderMap) -> bool {
    let mut types = headers.get_all(CONTENT_TYPE).iter();
    let first = types.next();
    types.next().is_none() && first.is_some_and(|value| plain_json_type(value.as_bytes()))
}

/// Whether a `Content-Type` value is `application/json`, exactly (in any case).
pub(super) fn plain_json_type(value: &[u8]) -> bool {
    value.eq_ignore_ascii_case(b"application/json")
}

/// A JSON object of shape `T` from `bytes`, as axum's `Json` reads it. The body is read
/// without tracking the path to each field, and checked as UTF-8 once, whole (read from bytes,
/// serde_json checks each string on its own); a body that fails is read again through `Json`,
/// whose rejection (naming the field at fault) is the one a client gets.
fn decode<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    match decode_plain(bytes) {
        Some(value) => Ok(value),
        None => match Json::<Object<T>>::from_bytes(bytes) {
            Ok(Json(Object(value))) => Ok(value),
            Err(rejection) => Err(rejected(rejection)),
        },
    }
}

/// A JSON object of shape `T` from `bytes` sent as `application/json`, when they are one;
/// `None` when they are not, whose refusal only [`decode`] (or the extractor) words.
pub(super) fn decode_plain<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let text = std::str::from_utf8(bytes).ok()?;
    serde_json::from_str::<Object<T>>(text)
        .ok()
        .map(|Object(value)| value)
}

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        // The body is limited by the router's layer, whatever the request it is read from.
        let read = Bytes::from_request(Request::new(body), state);
        let bytes = in_time(state.body_timeout, read).await?;
        let bytes = bytes.map_err(|rejection| rejected(rejection.into()))?;
        if bytes.trim_ascii().is_empty() {
            return Ok(OptionalJsonBody(T::default()));
        }
        if plain_json(&parts.headers) {
            return decode(&bytes).map(OptionalJsonBody);
        }
        let request = Request::from_parts(parts, Body::from(bytes));
        let Json(Object(value)) = Json::from_request(request, state).await.map_err(rejected)?;
        Ok(OptionalJsonBody(value))
    }
}

/// `read` (of a body) unless it takes longer than `timeout` (`http.header_read_timeout_ms`).
async fn in_time<F: Future>(timeout: Duration, read: F) -> Result<F::Output, ApiError> {
    let read = tokio::time::timeout(timeout, read).await;
    read.map_err(|_| request_timeout())
}

/// axum's refusal as the catalogue's: `invalid_body` with axum's status (415, 400, 422),
/// `body_too_large` (413), or `bad_request` for a body that could not be read (its chunked
/// encoding malformed).
fn rejected(rejection: JsonRejection) -> ApiError {
    let (status, detail) = (rejection.status(), rejection.body_text());
    match rejection {
        JsonRejection::BytesRejection(_) if status == StatusCode::PAYLOAD_TOO_LARGE => {
            body_too_large()
        }
        JsonRejection::BytesRejection(_) => bad_request(detail),
        _ => ApiError::new(status, "invalid_body", detail),
    }
}

/// A JSON object of shape `T`: any other JSON value (an array, which serde would read as the
/// struct's fields in order, a number, `null`) is JSON of the wrong shape, once it was read
/// whole (an array cut short is not JSON).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjectVisitor(PhantomData))
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = Object<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Object)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Object<T>, A::Error> {
        MillisVisitor { depth: 1 }.visit_seq(seq)?;
        Err(de::Error::invalid_type(de::Unexpected::Seq, &self))
    }
}

/// A duration field in milliseconds as sent: left out (or `null`), a whole number, or a value
/// of a wrong kind (negative, fractional, a string, out of range, …), described.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) enum Millis {
    #[default]
    Absent,
    Valid(u64),
    Invalid(&'static str),
}

impl Millis {
    /// The duration, `None` when left out; a wrong kind is 400 with `reason`.
    pub(super) fn get(
        self,
        field: &str,
        reason: &'static str,
    ) -> Result<Option<Duration>, ApiError> {
        match self {
            Millis::Absent => Ok(None),
            Millis::Valid(ms) => Ok(Some(Duration::from_millis(ms))),
            Millis::Invalid(kind) => Err(ApiError::bad_request(
                reason,
                format!("{field} {kind}; expected a whole number of milliseconds"),
            )),
        }
    }
}

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A duration is a field of the body's object: its value is at depth 2.
        MillisVisitor { depth: 2 }.deserialize(deserializer)
    }
}

/// Reads a duration, or a value of any other kind, which it skips whole: arrays and objects
/// with their elements (read the same way, one level deeper). A body that is an array is
/// skipped so too.
#[derive(Clone, Copy)]
struct MillisVisitor {
    /// How deep the value read is nested in the body.
    depth: usize,
}

impl MillisVisitor {
    /// The reader of the elements of the array or object being read; one nested over
    /// [`MAX_DEPTH`] is the wrong shape.
    fn elements<E: de::Error>(self) -> Result<Self, E> {
        if self.depth > MAX_DEPTH {
            return Err(E::custom(format_args!("nesting deeper than {MAX_DEPTH}")));
        }
        Ok(Self {
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for MillisVisitor {
    type Value = Millis;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Millis, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MillisVisitor {
    type Value = Millis;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number of milliseconds")
    }

    fn visit_u64<E>(self, ms: u64) -> Result<Millis, E> {
        Ok(Millis::Valid(ms))
    }

    fn visit_i64<E>(self, ms: i64) -> Result<Millis, E> {
        Ok(u64::try_from(ms).map_or(Millis::Invalid("is negative"), Millis::Valid))
    }

    fn visit_f64<E>(self, ms: f64) -> Result<Millis, E> {
        Ok(Millis::Invalid(if ms < 0.0 {
            "is negative"
        } else if ms >= u64::MAX as f64 {
            "is out of range"
        } else {
            "is not an integer"
        }))
    }

    fn visit_str<E>(self, _: &str) -> Result<Millis, E> {
        Ok(Millis::Invalid("is a string"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Millis, E> {
        Ok(Millis::Invalid("is a boolean"))
    }

    fn visit_unit<E>(self) -> Result<Millis, E> {
        Ok(Millis::Absent)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Millis, A::Error> {
        let elements = self.elements()?;
        while seq.next_element_seed(elements)?.is_some() {}
        Ok(Millis::Invalid("is an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Millis, A::Error> {
        let elements = self.elements()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(elements)?;
        }
        Ok(Millis::Invalid("is an object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Shape {
        name: Option<String>,
        #[serde(default)]
        ttl_ms: Millis,
    }

    fn judged(body: &str) -> Result<Shape, (u16, &'static str)> {
        let judged = Json::<Object<Shape>>::from_bytes(body.as_bytes()).map_err(rejected);
        judged
            .map(|Json(Object(shape))| shape)
            .map_err(|e| (e.status.as_u16(), e.reason))
    }

    /// Not JSON is 400 (an array cut short included); JSON of another shape 422, deep nesting
    /// included, even cut short.
    #[test]
    fn bodies_are_judged_by_kind() {
        let shape = judged(r#"{"name":"a","ttl_ms":5}"#).unwrap();
        assert_eq!(
            (shape.name.as_deref(), shape.ttl_ms),
            (Some("a"), Millis::Valid(5))
        );
        for body in [
            "",
            "{",
            "[",
            "[1, 2",
            "nope",
            "{\"name\":\"a\",}",
            "{\"name\":\"\\ud800x\"}",
        ] {
            assert_eq!(judged(body).unwrap_err(), (400, "invalid_body"), "{body}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let nested = |n: usize| format!("{{\"ttl_ms\":{}{}}}", "[".repeat(n), "]".repeat(n));
        let deep_field = nested(200);
        // With the object, 125 arrays are 126 levels deep: the most a body may nest.
        assert_eq!(
            judged(&nested(125)).unwrap().ttl_ms,
            Millis::Invalid("is an array")
        );
        assert_eq!(judged(&nested(126)).unwrap_err(), (422, "invalid_body"));
        for body in [
            "[\"a\", 5]",
            "5",
            "null",
            "{\"name\":7}",
            "{\"other\":1}",
            "{\"name\":\"a\",\"name\":\"b\"}",
            deep.as_str(),
            deep_field.as_str(),
            &"[".repeat(5000),
        ] {
            assert_eq!(
                judged(body).map(|_| ()),
                Err((422, "invalid_body")),
                "{body:.40}"
            );
        }
    }

    /// Every wrong kind of duration is told apart from a valid one.
    #[test]
    fn durations_of_a_wrong_kind_are_invalid() {
        let ttl = |body: &str| judged(body).unwrap().ttl_ms;
        assert_eq!(ttl("{}"), Millis::Absent);
        assert_eq!(ttl(r#"{"ttl_ms":null}"#), Millis::Absent);
        assert_eq!(ttl(r#"{"ttl_ms":0}"#), Millis::Valid(0));
        assert_eq!(
            ttl(r#"{"ttl_ms":18446744073709551615}"#),
            Millis::Valid(u64::MAX)
        );
        for (body, kind) in [
            (r#"{"ttl_ms":-1}"#, "is negative"),
            (r#"{"ttl_ms":-1.5}"#, "is negative"),
            (r#"{"ttl_ms":1.5}"#, "is not an integer"),
            (r#"{"ttl_ms":1.0}"#, "is not an integer"),
            (r#"{"ttl_ms":1e30}"#, "is out of range"),
            (r#"{"ttl_ms":18446744073709551616}"#, "is out of range"),
            (r#"{"ttl_ms":"10"}"#, "is a string"),
            (r#"{"ttl_ms":true}"#, "is a boolean"),
            (r#"{"ttl_ms":[1]}"#, "is an array"),
            (r#"{"ttl_ms":{"a":1}}"#, "is an object"),
        ] {
            assert_eq!(ttl(body), Millis::Invalid(kind), "{body}");
        }
        let error = Millis::Invalid("is negative")
            .get("ttl_ms", "invalid_ttl")
            .unwrap_err();
        assert_eq!((error.status.as_u16(), error.reason), (400, "invalid_ttl"));
    }

    /// `application/json` and `+json` types, with parameters, are JSON (415 otherwise); a body
    /// that streams past the limit the server reads it through is 413 `body_too_large`.
    #[tokio::test]
    async fn content_types_and_sizes() {
        use axum::routing::post;
        let judge = |body: Result<Json<Object<Shape>>, JsonRejection>| async move {
            body.map(|_| StatusCode::OK).map_err(rejected)
        };
        let router = axum::Router::new().route("/", post(judge));
        let answer = |content_type: &'static str, body: &'static str| {
            // No `content-length`: the body is judged as it streams in, through the limit.
            let request = Request::post("/").header("content-type", content_type);
            let limited = http_body_util::Limited::new(Body::from(body), 16);
            let request = request.body(Body::new(limited)).unwrap();
            let mut router = router.clone();
            async move {
                tower_service::Service::call(&mut router, request)
                    .await
                    .unwrap()
            }
        };
        let status = |content_type, body| async move { answer(content_type, body).await.status() };
        for json in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert_eq!(status(json, "{}").await, StatusCode::OK, "{json}");
        }
        for other in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "json",
            "text/json",
            "application/jsonx",
        ] {
            let refused = status(other, "{}").await;
            assert_eq!(refused, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{other}");
        }
        let long = r#"{"name":"0123456789abcdef"}"#;
        let refused = answer("application/json", long).await;
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let problem = refused.headers().get("content-type").unwrap();
        assert_eq!(problem, "application/problem+json");
    }

    /// `application/json` as sent by nearly every client is read without axum's parsing of
    /// the type; a parameter, a `+json` suffix, another type or two types go through axum's
    /// `Json`, which accepts or refuses them.
    #[test]
    fn only_a_plain_json_type_skips_axums_check() {
        use axum::http::HeaderValue;
        let headers = |types: &[&'static str]| {
            let mut headers = HeaderMap::new();
            for content_type in types {
                headers.append(CONTENT_TYPE, HeaderValue::from_static(content_type));
            }
            headers
        };
        for plain in ["application/json", "Application/JSON"] {
            assert!(plain_json(&headers(&[plain])), "{plain}");
        }
        for other in [
            &[][..],
            &["application/json; charset=utf-8"],
            &["application/merge-patch+json"],
            &["text/plain"],
            &["application/json", "text/plain"],
        ] {
            assert!(!plain_json(&headers(other)), "{other:?}");
        }
    }

    /// A body read without the path to each field is read as axum's `Json` reads it: the same
    /// value, and for a body at fault the same rejection, naming the field.
    #[test]
    fn decoding_matches_axums_json() {
        let read = |body: &'static [u8]| decode::<Shape>(&Bytes::from_static(body));
        let axums = |body: &'static [u8]| {
            Json::<Object<Shape>>::from_bytes(body)
                .map(|Json(Object(value))| value)
                .map_err(rejected)
        };
        for body in [
            &br#"{"name": "a"}"#[..],
            b"{}",
            br#"{"name": 7}"#,
            b"[]",
            b"7",
            br#"{"name": "a"} x"#,
            b"{",
            b"",
            "{\"name\": \"\u{e9}t\u{e9}\"}".as_bytes(),
            br#"{"name": "\u00e9"}"#,
            b"{\"name\": \"\xff\"}",
            b"{\"\xc3\": 1}",
        ] {
            let shown = String::from_utf8_lossy(body);
            match (read(body), axums(body)) {
                (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "{shown}"),
                (Err(ours), Err(theirs)) => {
                    let ours = (ours.status, ours.reason, ours.detail);
                    assert_eq!(
                        ours,
                        (theirs.status, theirs.reason, theirs.detail),
                        "{shown}"
                    );
                }
                (ours, theirs) => panic!("{shown}: {ours:?} against axum's {theirs:?}"),
            }
        }
        let wrong = read(br#"{"name": 7}"#).unwrap_err();
        assert!(wrong.detail.contains("name"), "{}", wrong.detail);
    }

    /// A body that does not arrive in time is 408.
    #[tokio::test(start_paused = true)]
    async fn a_body_late_is_408() {
        let never = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let read = Bytes::from_request(Request::new(Body::from_stream(never)), &());
        let late = in_time(Duration::from_secs(5), read).await.unwrap_err();
        assert_eq!(
            (late.status.as_u16(), late.reason),
            (408, "request_timeout")
        );
    }
}

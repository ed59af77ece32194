//! The one reader of JSON request bodies (acquire, renew, force release): the content type
//! (415), the size (413), the time it takes to arrive (408), then JSON (400) of the route's
//! shape (422); and [`Millis`], the duration fields, whose every wrong kind of value gets the
//! field's own reason (400 `invalid_ttl`, …) rather than a deserializer's message.

use std::fmt;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use futures_util::StreamExt;
use serde::de::{DeserializeOwned, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::error::ApiError;
use super::guard::{bad_request, body_too_large, request_timeout};
use super::{AppState, MAX_BODY_BYTES};

/// Nesting at which a body is refused as too deep (serde_json's own limit is 128).
const MAX_DEPTH: usize = 128;

/// A JSON object body of shape `T`, sent with `content-type: application/json`.
pub struct JsonBody<T>(pub T);

/// As [`JsonBody`], but an empty body (whitespace only), with any content type or none, is
/// `T::default()`.
pub struct OptionalJsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        if !is_json(request.headers()) {
            return Err(not_json());
        }
        let bytes = read(request.into_body(), state.body_timeout).await?;
        parse(&bytes).map(JsonBody)
    }
}

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let json = is_json(request.headers());
        let bytes = read(request.into_body(), state.body_timeout).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        if !json {
            return Err(not_json());
        }
        parse(&bytes).map(OptionalJsonBody)
    }
}

/// `application/json` or `application/<something>+json`, parameters allowed.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json") && !subtype.contains('/'))
}

fn not_json() -> ApiError {
    let detail = "expected a body with `content-type: application/json`";
    ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_body", detail)
}

/// The whole body, at most [`MAX_BODY_BYTES`], arrived within `timeout`.
async fn read(body: Body, timeout: Duration) -> Result<Vec<u8>, ApiError> {
    let collect = async {
        let mut chunks = body.into_data_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| bad_request(format!("cannot read the body: {e}")))?;
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(body_too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    tokio::time::timeout(timeout, collect)
        .await
        .unwrap_or_else(|_| Err(request_timeout()))
}

/// A JSON object of shape `T`: 400 for what is not JSON, 422 for JSON of another shape (not
/// an object, unknown or repeated fields, wrong types) and for any nesting too deep.
fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if depth(bytes) >= MAX_DEPTH {
        return Err(wrong_shape(format!("nesting deeper than {MAX_DEPTH}")));
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let error = if first == Some(&b'{') {
        match serde_json::from_slice::<T>(bytes) {
            Ok(value) => return Ok(value),
            Err(error) if error.classify() == serde_json::error::Category::Data => {
                return Err(wrong_shape(error.to_string()));
            }
            Err(error) => error,
        }
    } else {
        match serde_json::from_slice::<IgnoredAny>(bytes) {
            Ok(_) => return Err(wrong_shape("expected a JSON object".into())),
            Err(error) => error,
        }
    };
    Err(ApiError::bad_request(
        "invalid_body",
        format!("not JSON: {error}"),
    ))
}

fn wrong_shape(detail: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", detail)
}

/// How deep arrays and objects nest in `bytes`, strings skipped.
fn depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A duration field in milliseconds as sent: left out (or `null`), a whole number, or a value
/// of a wrong kind (negative, fractional, a string, out of range, …), described.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Millis {
    #[default]
    Absent,
    Valid(u64),
    Invalid(&'static str),
}

impl Millis {
    /// The duration, `None` when left out; a wrong kind is 400 with `reason`.
    pub fn get(self, field: &str, reason: &'static str) -> Result<Option<Duration>, ApiError> {
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
        deserializer.deserialize_any(MillisVisitor)
    }
}

struct MillisVisitor;

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
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Millis::Invalid("is an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Millis, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Millis::Invalid("is an object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Shape {
        name: Option<String>,
        #[serde(default)]
        ttl_ms: Millis,
    }

    fn judged(body: &str) -> Result<Shape, (u16, &'static str)> {
        parse::<Shape>(body.as_bytes()).map_err(|e| (e.status.as_u16(), e.reason))
    }

    /// Not JSON is 400; JSON of another shape 422, deep nesting included.
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
            "nope",
            "{\"name\":\"a\",}",
            "{\"name\":\"\\ud800x\"}",
        ] {
            assert_eq!(judged(body).unwrap_err(), (400, "invalid_body"), "{body}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let deep_field = format!("{{\"ttl_ms\":{}{}}}", "[".repeat(200), "]".repeat(200));
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

    /// `application/json` and `+json` types, with parameters, are JSON; nothing else is.
    #[test]
    fn content_types() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        for other in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "json",
            "text/json",
        ] {
            assert!(!with(other), "{other}");
        }
        assert!(!is_json(&HeaderMap::new()));
    }
}

//! The client's one error type: a variant per kind of answer a caller acts on, read from the
//! API's problem+json `reason`; transport failures; answers that are not the API's.

use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::http::{Answer, TransportError};

/// Why a request to the sidecar did not succeed. [`ClientError::reason`] gives the API's
/// `reason` string whenever the sidecar sent one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// 409 `held`: another lease holds the resource (after the wait, if one was asked).
    #[error("held by another lease: {detail}")]
    Held {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 409 `dequeued`: a fair waiter's heartbeats came too late and a majority of masters
    /// took it out of its queue ([`crate::LockRequest::fair`]); it waits no more.
    #[error("taken out of the fair queue: {detail}")]
    Dequeued {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 503 `no_quorum`: too few masters answered. Worth retrying later.
    #[error("no quorum: {detail}")]
    NoQuorum {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 503 `no_quorum` on a release, state `releasing`: too few masters confirmed it yet. The
    /// sidecar keeps trying until a quorum does or the keys expire; the lease is no longer
    /// yours to act on.
    #[error("release not confirmed by a quorum yet, the sidecar keeps trying: {detail}")]
    Releasing {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 503 `shutting_down`: the sidecar is stopping and grants nothing.
    #[error("the sidecar is shutting down: {detail}")]
    ShuttingDown {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 404 `unknown_lease`: the sidecar has no such lease (never, or ended over 60 s ago).
    #[error("unknown lease: {detail}")]
    UnknownLease {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 409 `too_many_holds`: a re-entry found 1,000 holds open on the lease; no hold was
    /// opened. Release one first.
    #[error("too many holds: {detail}")]
    TooManyHolds {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 410 `lease_lost`: the lease has ended.
    #[error("lease lost: {detail}")]
    LeaseLost {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// 401 `unauthorized`: the sidecar has an API token (`auth.token_file`) and the request
    /// carried none, or another one. Give the client the token ([`crate::Client::with_token`]).
    #[error("the sidecar refused the API token (none was sent, or another one): {detail}")]
    Unauthorized {
        /// The sidecar's `detail`, in words.
        detail: String,
    },
    /// Any other 4xx with a `reason`: the request was refused as invalid (`invalid_resource`,
    /// `invalid_owner`, `invalid_ttl`, `invalid_wait`, `invalid_idle_timeout`, `invalid_body`,
    /// `body_too_large`, `not_found`). Retrying the same request will not help.
    #[error("invalid request ({reason}): {detail}")]
    Invalid {
        /// The HTTP status.
        status: u16,
        /// The problem's stable `reason`.
        reason: String,
        /// The problem's `detail`, in words.
        detail: String,
    },
    /// Any other 5xx: the sidecar failed (`internal`), or timed the request out (503 with an
    /// empty body).
    #[error("the sidecar failed with {status}: {detail}")]
    Unavailable {
        /// The HTTP status.
        status: u16,
        /// The problem's `reason`, when the answer was problem+json.
        reason: Option<String>,
        /// What the sidecar said, in words.
        detail: String,
    },
    /// The sidecar could not be reached, or did not answer in time.
    #[error("cannot reach the sidecar: {0}")]
    Transport(#[from] TransportError),
    /// A sidecar URL the client cannot use.
    #[error("invalid sidecar url {url}: {detail}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
    /// An answer that is not the API's (another server on that port?).
    #[error("unexpected answer with status {status}: {detail}")]
    Unexpected {
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        detail: String,
    },
}

/// The fields of a problem+json body the client reads.
#[derive(Debug, Default, Deserialize)]
struct Problem {
    reason: Option<String>,
    #[serde(default)]
    detail: String,
    /// A release's state (`releasing`).
    state: Option<String>,
}

// === impl ClientError ===

impl ClientError {
    /// The API's `reason` string (`held`, `no_quorum`, `invalid_ttl`, …), when the sidecar
    /// sent one.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Held { .. } => Some("held"),
            Self::Dequeued { .. } => Some("dequeued"),
            Self::TooManyHolds { .. } => Some("too_many_holds"),
            Self::NoQuorum { .. } | Self::Releasing { .. } => Some("no_quorum"),
            Self::ShuttingDown { .. } => Some("shutting_down"),
            Self::UnknownLease { .. } => Some("unknown_lease"),
            Self::LeaseLost { .. } => Some("lease_lost"),
            Self::Unauthorized { .. } => Some("unauthorized"),
            Self::Invalid { reason, .. } => Some(reason),
            Self::Unavailable { reason, .. } => reason.as_deref(),
            Self::Transport(_) | Self::InvalidUrl { .. } | Self::Unexpected { .. } => None,
        }
    }

    /// The HTTP status of the answer, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Held { .. } | Self::Dequeued { .. } | Self::TooManyHolds { .. } => Some(409),
            Self::NoQuorum { .. } | Self::Releasing { .. } | Self::ShuttingDown { .. } => Some(503),
            Self::UnknownLease { .. } => Some(404),
            Self::LeaseLost { .. } => Some(410),
            Self::Unauthorized { .. } => Some(401),
            Self::Invalid { status, .. }
            | Self::Unavailable { status, .. }
            | Self::Unexpected { status, .. } => Some(*status),
            Self::Transport(_) | Self::InvalidUrl { .. } => None,
        }
    }

    /// The error an answer with `status` (not a success) and `body` stands for.
    pub(super) fn from_answer(status: u16, body: &str) -> Self {
        let problem: Problem = serde_json::from_str(body).unwrap_or_default();
        let detail = problem.detail;
        let Some(reason) = problem.reason else {
            let detail = if body.is_empty() { "no body" } else { body };
            return match status {
                500..=599 => Self::Unavailable {
                    status,
                    reason: None,
                    detail: detail.to_string(),
                },
                _ => Self::Unexpected {
                    status,
                    detail: detail.to_string(),
                },
            };
        };
        match (status, reason.as_str()) {
            (409, "held") => Self::Held { detail },
            (409, "dequeued") => Self::Dequeued { detail },
            (409, "too_many_holds") => Self::TooManyHolds { detail },
            (503, "no_quorum") if problem.state.as_deref() == Some("releasing") => {
                Self::Releasing { detail }
            }
            (503, "no_quorum") => Self::NoQuorum { detail },
            (503, "shutting_down") => Self::ShuttingDown { detail },
            (404, "unknown_lease") => Self::UnknownLease { detail },
            (410, "lease_lost") => Self::LeaseLost { detail },
            (401, "unauthorized") => Self::Unauthorized { detail },
            (400..=499, _) => Self::Invalid {
                status,
                reason,
                detail,
            },
            (500..=599, _) => Self::Unavailable {
                status,
                reason: Some(reason),
                detail,
            },
            _ => Self::Unexpected { status, detail },
        }
    }
}

/// The JSON body of a successful answer, or the error a refusal stands for.
pub(super) fn read<T: DeserializeOwned>(answer: Answer) -> Result<T, ClientError> {
    let status = answer.status;
    if !(200..300).contains(&status) {
        let body = String::from_utf8_lossy(&answer.body);
        return Err(ClientError::from_answer(status, &body));
    }
    let unexpected = |error: &dyn std::fmt::Display| ClientError::Unexpected {
        status,
        detail: format!("{error}: {}", String::from_utf8_lossy(&answer.body)),
    };
    // The body is checked as UTF-8 once, whole: read from bytes, serde_json checks each of its
    // strings on its own, at about five times the cost for a lease's answer.
    let text = std::str::from_utf8(&answer.body).map_err(|error| unexpected(&error))?;
    serde_json::from_str(text).map_err(|error| unexpected(&error))
}

/// The text body of a successful answer, or the error a refusal stands for.
pub(super) fn read_text(answer: Answer) -> Result<String, ClientError> {
    let status = answer.status;
    let body = String::from_utf8_lossy(&answer.body).into_owned();
    if !(200..300).contains(&status) {
        return Err(ClientError::from_answer(status, &body));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(status: u16, reason: &str, extra: &str) -> ClientError {
        let body = format!(
            r#"{{"type":"/problems/{reason}","title":"t","status":{status},"reason":"{reason}","detail":"d"{extra}}}"#
        );
        ClientError::from_answer(status, &body)
    }

    /// Each reason a caller acts on gets its variant; the raw reason stays available.
    #[test]
    fn reasons_map_to_variants() {
        let held = problem(409, "held", r#","acquired":false"#);
        assert!(matches!(&held, ClientError::Held { detail } if detail == "d"));
        assert_eq!(held.reason(), Some("held"));
        let dequeued = problem(409, "dequeued", r#","acquired":false"#);
        assert!(matches!(&dequeued, ClientError::Dequeued { detail } if detail == "d"));
        assert_eq!(
            (dequeued.reason(), dequeued.status()),
            (Some("dequeued"), Some(409))
        );
        let full = problem(409, "too_many_holds", "");
        assert!(matches!(full, ClientError::TooManyHolds { .. }));
        assert_eq!(
            (full.reason(), full.status()),
            (Some("too_many_holds"), Some(409))
        );
        let releasing = problem(503, "no_quorum", r#","released":false,"state":"releasing""#);
        assert!(matches!(releasing, ClientError::Releasing { .. }));
        assert_eq!(releasing.reason(), Some("no_quorum"));
        assert!(matches!(
            problem(503, "no_quorum", ""),
            ClientError::NoQuorum { .. }
        ));
        assert!(matches!(
            problem(410, "lease_lost", ""),
            ClientError::LeaseLost { .. }
        ));
        let invalid = problem(400, "invalid_ttl", "");
        assert!(matches!(&invalid, ClientError::Invalid { reason, .. } if reason == "invalid_ttl"));
        assert_eq!(
            (invalid.reason(), invalid.status()),
            (Some("invalid_ttl"), Some(400))
        );
        let unauthorized = problem(401, "unauthorized", "");
        assert!(matches!(unauthorized, ClientError::Unauthorized { .. }));
        assert_eq!(
            (unauthorized.reason(), unauthorized.status()),
            (Some("unauthorized"), Some(401))
        );
        let internal = problem(500, "internal", "");
        assert_eq!(internal.reason(), Some("internal"));
        assert!(matches!(internal, ClientError::Unavailable { .. }));
    }

    /// Answers without a problem body: a 5xx is the sidecar failing, anything else unexpected.
    #[test]
    fn answers_without_a_reason_are_told_apart() {
        let timeout = ClientError::from_answer(503, "");
        assert!(matches!(
            timeout,
            ClientError::Unavailable { reason: None, .. }
        ));
        let other = ClientError::from_answer(405, "");
        assert!(matches!(other, ClientError::Unexpected { status: 405, .. }));
        let text = ClientError::from_answer(413, "length limit exceeded");
        assert_eq!(text.reason(), None);
    }

    /// A successful answer's body is decoded, or told unexpected with its status when it is
    /// not JSON of the type, or not UTF-8.
    #[test]
    fn successful_answers_are_decoded_or_told_unexpected() {
        let answer = |body: &'static [u8]| crate::http::Answer {
            status: 200,
            body: bytes::Bytes::from_static(body),
        };
        let read_u64 = |body| read::<std::collections::BTreeMap<String, u64>>(answer(body));
        let decoded = read_u64(br#"{"fencing_token":7,"\u00e9t\u00e9":2}"#).unwrap();
        assert_eq!((decoded["fencing_token"], decoded["été"]), (7, 2));
        for body in [&br#"{"a":"x"}"#[..], b"{\"a\":1", b"{\"\xff\":1}"] {
            let refused = read_u64(body).unwrap_err();
            assert!(
                matches!(&refused, ClientError::Unexpected { status: 200, .. }),
                "{refused:?}"
            );
        }
    }
}

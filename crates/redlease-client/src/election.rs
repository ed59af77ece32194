//! Leader election through the sidecar: a campaign is a lock request
//! ([`Client::campaign`], `POST /v1/elections/{resource}/campaign`) whose guard is the
//! leader's lease, its fencing token the term ([`LockGuard::term`]); the leader proclaims a
//! new value with [`LockGuard::proclaim`] and resigns by releasing the guard. Anyone reads
//! the leader ([`Client::leader`]) or follows its changes ([`Client::observe`], the
//! `…/observe` event stream, opened again when it breaks).

use std::collections::VecDeque;
use std::time::Duration;

use hyper::Method;
use serde::{Deserialize, Serialize};

use crate::error::{self, ClientError};
use crate::events::SseParser;
use crate::http::{Streaming, Transport};
use crate::{Client, LeaseInfo, LockGuard, LockRequest, REQUEST_MARGIN};

/// Who leads an election, as a quorum of the sidecar's masters says (`GET
/// /v1/elections/{resource}`, and each observed event). It serialises as the API answers it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct Election {
    /// The leader's lease (32 lowercase hex digits); only with `Leader`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The leader's owner; only with `Leader`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// `Leader`, `Vacant` or `Unknown`.
    pub state: ElectionState,
    /// The leader's term: its fencing token, larger than every earlier leader's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// How long a quorum of masters still keeps the leader, in ms, when the sidecar read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity_ms: Option<u64>,
    /// The value the leader proclaimed last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Where an election stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ElectionState {
    /// A quorum of masters carries the leader's lease, term and value.
    Leader,
    /// A quorum of masters answered and no lease is, or can be, on a quorum of them.
    Vacant,
    /// The masters cannot tell (too few answered or agree), or a term lower than one this
    /// observer was told already.
    Unknown,
    /// A state this client does not know (a newer sidecar).
    #[serde(other)]
    Other,
}

/// The changes of one election's leadership, from [`Client::observe`]. Each
/// [`Observation::next`] is the next change; the stream is opened again when it breaks (the
/// first event of a new stream is the state then, told only if it differs). What it tells
/// never goes back in term: a leader with a lower term than one already told comes as
/// `Unknown`.
pub struct Observation {
    http: Transport,
    /// `…/v1/elections/{resource}/observe`.
    path: String,
    stream: Option<(Streaming, SseParser)>,
    /// Events read and not handed out yet.
    read: VecDeque<Election>,
    last: Option<Election>,
    highest_term: u64,
}

impl std::fmt::Debug for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observation")
            .field("path", &self.path)
            .field("open", &self.stream.is_some())
            .field("last", &self.last)
            .finish()
    }
}

/// The body of a proclamation.
#[derive(Serialize)]
struct ProclaimBody<'a> {
    value: &'a str,
}

// === impl Client ===

impl Client {
    /// A campaign for the leadership of the election `resource`, the leader proclaiming
    /// `value` (0–4096 bytes, no control characters), to adjust like a lock request (`owner`,
    /// `ttl`, `wait`, …) and [`send`](LockRequest::send): the guard is the leader's lease,
    /// [`LockGuard::term`] its term. Another leader: [`ClientError::Held`].
    pub fn campaign(
        &self,
        resource: impl Into<String>,
        value: impl Into<String>,
    ) -> LockRequest<'_> {
        LockRequest {
            campaign: Some(value.into()),
            ..self.lock(resource)
        }
    }

    /// Who leads the election `resource` now (`GET /v1/elections/{resource}`).
    pub async fn leader(&self, resource: &str) -> Result<Election, ClientError> {
        let path = self.path(&["v1", "elections", resource]);
        let answer = self.http.call(Method::GET, &path, None, REQUEST_MARGIN);
        error::read(answer.await?)
    }

    /// Follows the election `resource`: opens its observe stream, whose first event is the
    /// leadership now. Refused as a request is (`too_many_streams`, `unauthorized`, …).
    pub async fn observe(&self, resource: &str) -> Result<Observation, ClientError> {
        let mut observation = Observation {
            http: self.http.clone(),
            path: self.path(&["v1", "elections", resource, "observe"]),
            stream: None,
            read: VecDeque::new(),
            last: None,
            highest_term: 0,
        };
        observation.open().await?;
        Ok(observation)
    }
}

// === impl LockGuard ===

impl LockGuard {
    /// The term of a leader's lease (its fencing token); `None` for a lock or a permit.
    pub fn term(&self) -> Option<u64> {
        self.lease.term
    }

    /// The value a leader proclaimed last; `None` for a lock or a permit.
    pub fn value(&self) -> Option<&str> {
        self.lease.value.as_deref()
    }

    /// The leader proclaims `value` (`POST /v1/leases/{id}/proclaim`): written on a quorum of
    /// masters, the term kept. Refused: [`ClientError::NoQuorum`] (some masters may hold the
    /// new value, the others the old one: proclaim again), [`ClientError::LeaseLost`],
    /// [`ClientError::Invalid`] with `not_a_campaign` (a lock's or a permit's lease) or
    /// `invalid_value`.
    pub async fn proclaim(&mut self, value: &str) -> Result<&LeaseInfo, ClientError> {
        let path = format!("{}/proclaim", self.lease_path);
        // A string field: serialising it cannot fail.
        let body = serde_json::to_vec(&ProclaimBody { value }).unwrap_or_default();
        let answer = self
            .http
            .call(Method::POST, &path, Some(body), REQUEST_MARGIN);
        self.lease = error::read(answer.await?)?;
        Ok(&self.lease)
    }
}

// === impl Observation ===

impl Observation {
    /// The next change of the leadership. A stream that broke is opened again once; `Err`
    /// when that fails (call again to retry).
    pub async fn next(&mut self) -> Result<Election, ClientError> {
        loop {
            while let Some(read) = self.read.pop_front() {
                if let Some(told) = self.admit(read) {
                    return Ok(told);
                }
            }
            if self.stream.is_none() {
                self.open().await?;
            }
            self.read_more().await;
        }
    }

    /// What to tell of `read`: nothing when it is what was told last (validity aside); a
    /// leader of a lower term than one told, as `Unknown`.
    fn admit(&mut self, read: Election) -> Option<Election> {
        let lower = read.term.is_some_and(|term| term < self.highest_term);
        let told = match lower {
            true => unknown(),
            false => read,
        };
        self.highest_term = self.highest_term.max(told.term.unwrap_or(0));
        let same = |last: &Election| {
            let key = |e: &Election| (e.state, e.lease_id.clone(), e.term, e.value.clone());
            key(last) == key(&told)
        };
        if self.last.as_ref().is_some_and(same) {
            return None;
        }
        self.last = Some(told.clone());
        Some(told)
    }

    async fn open(&mut self) -> Result<(), ClientError> {
        let response = self.http.stream(&self.path).await?;
        if response.status != 200 {
            return Err(refusal(response).await);
        }
        self.stream = Some((response, SseParser::default()));
        Ok(())
    }

    /// Reads the next chunk of the stream into `read`; a stream that ended is dropped.
    async fn read_more(&mut self) {
        let Some((response, parser)) = &mut self.stream else {
            return;
        };
        let Some(chunk) = response.next().await else {
            self.stream = None;
            // Not at once again: a sidecar that closes every stream is not hammered.
            tokio::time::sleep(REOPEN_PAUSE).await;
            return;
        };
        let events = parser.push(&chunk);
        let elections = events
            .iter()
            .filter_map(|event| serde_json::from_str::<Election>(&event.data).ok());
        self.read.extend(elections);
    }
}

/// The pause before an observe stream that ended is opened again.
const REOPEN_PAUSE: Duration = Duration::from_millis(50);

fn unknown() -> Election {
    Election {
        state: ElectionState::Unknown,
        lease_id: None,
        owner: None,
        term: None,
        value: None,
        validity_ms: None,
    }
}

/// The error a refused stream's answer stands for (its body read whole, within a bound).
async fn refusal(mut response: Streaming) -> ClientError {
    let mut body = Vec::new();
    let read = async {
        while let Some(chunk) = response.next().await {
            body.extend_from_slice(&chunk);
        }
    };
    let _ = tokio::time::timeout(REQUEST_MARGIN, read).await;
    ClientError::from_answer(response.status, &String::from_utf8_lossy(&body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, value: &str) -> Election {
        Election {
            state: ElectionState::Leader,
            lease_id: Some("ab".into()),
            owner: Some("a".into()),
            term: Some(term),
            value: Some(value.into()),
            validity_ms: Some(900),
        }
    }

    fn observation() -> Observation {
        let endpoint = crate::http::Endpoint::Tcp("127.0.0.1:1".into());
        let host = hyper::header::HeaderValue::from_static("127.0.0.1:1");
        Observation {
            http: Transport::new(endpoint, host),
            path: "/v1/elections/x/observe".into(),
            stream: None,
            read: VecDeque::new(),
            last: None,
            highest_term: 0,
        }
    }

    /// Each change is told once (validity aside); a lower term than one told comes as
    /// unknown, never as the leader.
    #[test]
    fn changes_are_told_once_and_terms_never_go_back() {
        let mut seen = observation();
        assert!(seen.admit(leader(5, "x")).is_some());
        let mut later = leader(5, "x");
        later.validity_ms = Some(100);
        assert_eq!(seen.admit(later), None);
        assert_eq!(
            seen.admit(leader(5, "y")).and_then(|e| e.value),
            Some("y".into())
        );
        assert_eq!(
            seen.admit(leader(4, "z")).map(|e| e.state),
            Some(ElectionState::Unknown)
        );
        assert_eq!(seen.admit(leader(4, "z")), None);
        assert_eq!(seen.admit(leader(6, "w")).and_then(|e| e.term), Some(6));
    }

    /// The sidecar's answers parse, states unknown to this client included.
    #[test]
    fn elections_parse() {
        let vacant: Election = serde_json::from_str(r#"{"state":"vacant"}"#).unwrap();
        assert_eq!((vacant.state, vacant.term), (ElectionState::Vacant, None));
        let later: Election = serde_json::from_str(r#"{"state":"contested"}"#).unwrap();
        assert_eq!(later.state, ElectionState::Other);
    }
}

//! The JSON bodies the lease, fleet and probe routes answer, and the problem+json body of every
//! refusal, as typed structs: what is sent is what the OpenAPI document describes
//! ([`super::openapi`]). The inventory's bodies live in [`super::inventory`].
//!
//! Fields are declared in name order: the answers were built as `serde_json` maps, which write
//! their keys sorted, and the bytes on the wire stay the same.

use std::cell::RefCell;

use axum::body::Bytes;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::ToSchema;

use crate::lease::{LeaseEndReason, LeaseState, LeaseView};

/// Room for a lease's answer (about 200 bytes, more with a long resource or owner), so that
/// most answers are written without the buffer growing.
const ANSWER_CAPACITY: usize = 384;
/// A thread's answer buffer larger than this after an answer (an inventory's page) is let go.
const SCRATCH_KEPT: usize = 64 * 1024;

thread_local! {
    /// Where answers are written before being copied out at their exact size: a `Vec` handed
    /// to the body with room to spare takes a second allocation (`Bytes`' shared header).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(ANSWER_CAPACITY));
}

/// A JSON answer (`application/json`): as axum's `Json`, but written by [`encoded`].
pub(crate) struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        encoded(StatusCode::OK, "application/json", &self.0)
    }
}

/// `body` as JSON of `media` with `status`, written into the thread's buffer with room for a
/// lease at once (axum's `Json` grows a `BytesMut` from 128 bytes, through a writer that
/// checks its room at every piece), then copied into a body of its exact size: one allocation.
/// Every answer and every refusal of the API is encoded here.
pub(crate) fn encoded(status: StatusCode, media: &'static str, body: &impl Serialize) -> Response {
    written(status, media, |scratch| {
        serde_json::to_writer(scratch, body)
    })
}

/// A lease's answer (`200`, `application/json`), its view written by hand
/// ([`LeaseView::write_json`]), as [`encoded`] writes an answer.
pub(crate) fn lease_answer(view: &LeaseView) -> Response {
    written(StatusCode::OK, "application/json", |scratch| {
        view.write_json(scratch);
        Ok(())
    })
}

/// The answer whose body `write` writes, as [`encoded`] describes it.
fn written(
    status: StatusCode,
    media: &'static str,
    write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> Response {
    let written = SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        let written = write(&mut *scratch);
        let bytes = written.map(|()| Bytes::copy_from_slice(scratch));
        if scratch.capacity() > SCRATCH_KEPT {
            *scratch = Vec::with_capacity(ANSWER_CAPACITY);
        }
        bytes
    });
    match written {
        Ok(bytes) => {
            let media = HeaderValue::from_static(media);
            (status, [(header::CONTENT_TYPE, media)], bytes).into_response()
        }
        // Only a map with keys that are not strings fails to encode: no body has one.
        Err(error) => {
            tracing::error!(%error, "cannot encode an answer");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// An `application/problem+json` body (RFC 9457). Match on `reason`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct Problem {
    /// A sentence for people.
    pub detail: String,
    /// Stable and machine-readable: what to match on.
    pub reason: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// The HTTP status text.
    pub title: &'static str,
    /// `/problems/<reason>`, a relative reference.
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub problem_type: String,
}

/// What an acquisition's 409, 503 and 429 `too_many_waiters` add to the problem.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub(crate) struct AcquireRefusal {
    /// Always `false`.
    #[schema(schema_with = always_false)]
    pub acquired: bool,
}

/// What a `DELETE`'s 503 adds to the problem: the release keeps trying.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub(crate) struct ReleaseRefusal {
    /// Always `false`.
    #[schema(schema_with = always_false)]
    pub released: bool,
    /// Always `releasing`.
    pub state: LeaseState,
}

/// The answer of `DELETE /v1/leases/{id}`: of a lease, or of one of its re-entry holds
/// (`hold_id` and `holds` present).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct Released {
    /// A hold's release: the hold's id. Absent for a lease's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = String, required = false, pattern = "^[0-9a-f]{32}$")]
    pub hold_id: Option<String>,
    /// A hold's release: the holds still open on its lease. Absent for a lease's.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = usize, required = false)]
    pub holds: Option<usize>,
    /// What ended the lease (`null` for a lease read before its task marked it, and for a
    /// hold's lease still held).
    #[schema(value_type = Option<LeaseEndReason>)]
    pub reason: Option<&'static str>,
    /// A lease's release: `true` for exactly one request, the one that saw a quorum confirm
    /// a release begun by a `DELETE`. A hold's: `true` for exactly one request, the one that
    /// released the hold (never after its lease ended, which closed it).
    pub released: bool,
    /// A lease's release: `released` or `lost`. A hold's: its lease's state, whatever it is.
    pub state: LeaseState,
}

/// The answer of `POST /v1/leases/{id}/reenter`: the hold opened, and the lease renewed with
/// the same fencing token, its `holds` counting this one.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct Reentered {
    /// The hold's id (32 lowercase hex digits): `DELETE /v1/leases/{hold_id}` releases it.
    #[schema(pattern = "^[0-9a-f]{32}$")]
    pub hold_id: String,
    /// The lease.
    #[serde(flatten)]
    pub lease: LeaseView,
}

/// `GET /v1/fleet`: every master in the configured order, the quorum and the fleet.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct FleetAnswer {
    /// The TTL a lease gets when `ttl_ms` is left out (ms).
    pub adaptive_ttl_ms: u64,
    /// The fleet's id, once born (`null` before).
    pub fleet: Option<String>,
    /// One entry per master, in the configured order.
    pub masters: Vec<FleetMaster>,
    /// The restart quarantine (ms).
    pub quarantine_ms: u64,
    /// ⌊N/2⌋+1.
    pub quorum: usize,
}

/// One master of `GET /v1/fleet`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub(crate) struct FleetMaster {
    /// Why a master that answers takes no votes; `null` when it does.
    #[schema(value_type = Option<Exclusion>)]
    pub excluded: Option<&'static str>,
    /// In restart quarantine.
    pub quarantined: bool,
    /// Median round trip of the last 30 s (µs); `null` without samples.
    pub rtt_p50_us: Option<u64>,
    /// 99th percentile round trip of the last 30 s (µs); `null` without samples.
    pub rtt_p99_us: Option<u64>,
    /// Takes lock writes: connected, prepared, not quarantined, breaker closed.
    pub up: bool,
    /// The master's URL, credentials shown as `***`.
    pub url: String,
    /// `excluded` in words; `null` when not excluded.
    pub why: Option<String>,
}

/// Why a master that answers takes no votes.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // Describes the engine's `Exclusion::reason` strings; never built.
pub(crate) enum Exclusion {
    /// The fleet is not born yet.
    FleetUnborn,
    /// In restart quarantine.
    Quarantined,
    /// Rejoining after a quarantine.
    Rejoining,
    /// Its eviction policy may evict lock keys.
    EvictsKeys,
    /// It belongs to another fleet.
    OtherFleet,
    /// Its fleet marker cannot be read.
    UnreadableMarker,
    /// The same server as another configured master.
    SameServerAsAnother,
}

/// `GET /livez`.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub(crate) struct Live {
    /// Always `true`.
    #[schema(schema_with = always_true)]
    pub live: bool,
}

/// `GET /readyz` while a quorum of masters takes lock writes.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub(crate) struct Ready {
    /// Masters that take lock writes.
    pub masters_up: usize,
    /// Always `true`.
    #[schema(schema_with = always_true)]
    pub ready: bool,
}

/// The schema of a boolean that is always `false`.
fn always_false() -> Object {
    always(false)
}

/// The schema of a boolean that is always `true`.
fn always_true() -> Object {
    always(true)
}

fn always(value: bool) -> Object {
    let builder = ObjectBuilder::new().schema_type(Type::Boolean);
    builder.enum_values(Some([value])).build()
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;
    use crate::api::inventory::shapes::{
        AlsoForcedJson, AuditJson, ForceReleaseJson, ForcedMasterJson, HolderJson, LockJson,
        MasterLockJson, PageJson, PageLockJson, RemovedJson,
    };

    /// `value` writes its keys in name order: the bytes of the `serde_json` map it replaced.
    fn in_name_order(value: impl Serialize) {
        let direct = serde_json::to_string(&value).unwrap();
        let as_map = serde_json::to_value(&value).unwrap().to_string();
        assert_eq!(direct, as_map);
    }

    fn holder() -> HolderJson {
        HolderJson {
            fencing_token: Some(7),
            lease_id: "0".repeat(32),
            masters: 2,
            owner: "o".into(),
            validity_ms: 5,
        }
    }

    /// The problem and the lease, fleet and probe answers write the bytes their maps wrote:
    /// their keys in name order.
    #[test]
    fn answers_write_their_keys_in_name_order() {
        let problem = Problem {
            detail: "d".into(),
            reason: "held",
            status: 409,
            title: "Conflict",
            problem_type: "/problems/held".into(),
        };
        // The exact bytes, whatever order a `serde_json` map may keep one day.
        let written = serde_json::to_string(&problem).unwrap();
        let expected = r#"{"detail":"d","reason":"held","status":409,"title":"Conflict","type":"/problems/held"}"#;
        assert_eq!(written, expected);
        in_name_order(problem);
        in_name_order(Released {
            hold_id: Some("0".repeat(32)),
            holds: Some(1),
            reason: Some("released"),
            released: true,
            state: LeaseState::Released,
        });
        let master = FleetMaster {
            excluded: Some("quarantined"),
            quarantined: true,
            rtt_p50_us: Some(1),
            rtt_p99_us: None,
            up: false,
            url: "redis://h".into(),
            why: Some("w".into()),
        };
        in_name_order(FleetAnswer {
            adaptive_ttl_ms: 500,
            fleet: Some("f".into()),
            masters: vec![master],
            quarantine_ms: 1,
            quorum: 2,
        });
        in_name_order(Live { live: true });
        in_name_order(Ready {
            masters_up: 3,
            ready: true,
        });
    }

    /// The inventory's shapes write the bytes their maps wrote: their keys in name order.
    #[test]
    fn inventory_shapes_write_their_keys_in_name_order() {
        let master = MasterLockJson {
            error: Some("e".into()),
            held: Some(true),
            lease_id: Some(None),
            node: 0,
            owner: Some(Some("o".into())),
            pttl_ms: Some(Some(3)),
            quarantined: false,
            up: true,
            url: "redis://h".into(),
            value: Some("v".into()),
        };
        in_name_order(LockJson {
            holder: Some(holder()),
            masters: vec![master],
            masters_holding: 1,
            quorum: 2,
            resource: "r".into(),
            slot: Some(1),
            kind: Some("semaphore"),
        });
        let lock = PageLockJson {
            holder: Some(holder()),
            masters_holding: 1,
            resource: "r".into(),
            slot: Some(1),
            kind: Some("semaphore"),
        };
        in_name_order(PageJson {
            complete: true,
            locks: vec![lock],
            next: None,
        });
        let master = ForcedMasterJson {
            answer: "no_answer",
            error: Some("e".into()),
            url: "u".into(),
        };
        let removed = RemovedJson {
            lease_id: None,
            masters: 1,
            owner: None,
            value: "v".into(),
        };
        let also = AlsoForcedJson {
            audit_id: "b".into(),
            confirmed: true,
            free_at_ms: 5,
            holder_told: Some(false),
            slot: Some(0),
        };
        in_name_order(also.clone());
        in_name_order(ForceReleaseJson {
            also: vec![also],
            audit_id: "a".into(),
            audits_recorded: 1,
            confirmed: true,
            free_at_ms: 2,
            holder_told: None,
            masters: vec![master],
            masters_answered: 1,
            masters_removed: 1,
            removed: vec![removed],
            resource: "r".into(),
            slot: Some(1),
            kind: Some("semaphore"),
            time_ms: 3,
        });
        in_name_order(AuditJson {
            actor: "a".into(),
            audit_id: "i".into(),
            holders: vec!["h".into()],
            masters: 1,
            reason: "r".into(),
            resource: "s".into(),
            slot: Some(1),
            kind: Some("semaphore"),
            time_ms: 4,
        });
    }
}

//! The JSON bodies the lease routes read (acquire, renew, re-enter) and their path parameter, as the
//! handlers take them and the OpenAPI document describes them. The inventory's body and query live in
//! [`super::inventory`].

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::body::Millis;

/// Body of `POST /v1/locks/{resource}/acquire` (unknown fields are refused; `null` is the
/// same as leaving a field out).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AcquireBody {
    /// Who holds the lease: 1–256 bytes, no control or format characters.
    #[schema(value_type = String, min_length = 1)]
    pub(super) owner: Option<String>,
    /// TTL (ms), 10 to `lease.max_ttl_ms`; default: the adaptive TTL.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 10)]
    pub(super) ttl_ms: Millis,
    /// How long to wait for the lock (ms), at most `lease.max_wait_ms`; default 0.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub(super) wait_ms: Millis,
    /// Whether the sidecar renews the lease; default `true`.
    pub(super) auto_renew: Option<bool>,
    /// Release the lease after this long without a sign of life (ms), 1 to
    /// `lease.max_idle_timeout_ms`; default `lease.idle_timeout_ms`.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub(super) idle_timeout_ms: Millis,
    /// Wait in one queue with the fair waiters of every sidecar, first come first served
    /// (with `wait_ms`); default `false`.
    pub(super) fair: Option<bool>,
}

/// Body of `POST /v1/leases/{id}/renew` (may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RenewBody {
    /// The new TTL (ms), 10 to `lease.max_ttl_ms`; default: the lease's current TTL.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 10)]
    pub(super) ttl_ms: Millis,
}

/// Body of `POST /v1/leases/{id}/reenter` (may be empty): the re-entry is a renewal.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReenterBody {
    /// The new TTL (ms), 10 to `lease.max_ttl_ms`; default: the lease's current TTL.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 10)]
    pub(super) ttl_ms: Millis,
}

/// The path parameter of every `/v1/leases/{id}` route but `DELETE`, for the OpenAPI document
/// (the handlers read it as a string and parse it themselves, to answer `unknown_lease`).
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(super) struct LeaseIdParam {
    /// The lease id (32 lowercase hex digits)
    id: String,
}

/// The path parameter of `DELETE /v1/leases/{id}`, which takes a re-entry hold's id too.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub(super) struct LeaseOrHoldIdParam {
    /// The lease id, or the `hold_id` of one of its re-entries (32 lowercase hex digits)
    id: String,
}

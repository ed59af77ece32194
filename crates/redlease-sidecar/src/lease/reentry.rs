//! Re-entry of a lease, keyed on its lease id (never on an owner name): each re-entry proves
//! the lease still ours on a quorum of masters — a renewal through the manual renewal path —
//! and then opens a *hold*, a random id of its own that maps only to that lease. Releasing a
//! hold by its id closes that one hold and never touches the masters; the lease stays held
//! until its own release (or its end), which closes every hold with it.
//!
//! Holds are this sidecar's bookkeeping in the lease's record ([`Holds`]), bounded per lease
//! ([`MAX_HOLDS`]); the masters know nothing of them, and exclusion rests on the lease alone.
//! The table's index maps each hold id to its lease until the lease is forgotten (see
//! `retired`): a retried hold release answers again, and after that 404.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{LeaseManager, LeaseRecord, LeaseView, RenewError, Tracked};
use crate::metrics::{self, METRICS};
use crate::LeaseId;

/// Most holds open on one lease at once; a re-entry beyond is refused (409 `too_many_holds`).
pub(crate) const MAX_HOLDS: usize = 1_000;
/// Released hold ids a lease remembers, the most recent ones: a retried release of one of
/// them answers `released: false` again; an older one, forgotten, answers 404 like an id that
/// never was. Bounds a lease's memory however often it is re-entered.
pub(crate) const RELEASED_HOLDS_KEPT: usize = 1_000;

/// The re-entry holds of one lease.
#[derive(Clone, Debug, Default)]
pub(crate) struct Holds {
    /// Holds open now, at most [`MAX_HOLDS`].
    open: HashSet<LeaseId>,
    /// Holds released, oldest first, at most [`RELEASED_HOLDS_KEPT`].
    released: VecDeque<LeaseId>,
}

/// A re-entry refused: [`MAX_HOLDS`] holds are open on the lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooManyHolds;

/// What releasing a hold did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closing {
    /// The hold was open and is now released; `forgotten`, the oldest released hold the
    /// lease no longer remembers to make room, if one was.
    Closed { forgotten: Option<LeaseId> },
    /// The hold was released before: nothing changed.
    AlreadyClosed,
}

// === impl Holds ===

impl Holds {
    /// Holds open now.
    pub(crate) fn open(&self) -> usize {
        self.open.len()
    }

    /// Whether another hold would be one too many.
    pub(crate) fn is_full(&self) -> bool {
        self.open.len() >= MAX_HOLDS
    }

    /// Opens the hold `id`; the holds open then.
    pub(crate) fn enter(&mut self, id: LeaseId) -> Result<usize, TooManyHolds> {
        if self.is_full() {
            return Err(TooManyHolds);
        }
        self.open.insert(id);
        Ok(self.open.len())
    }

    /// Releases the hold `id` (once; a release of a hold already released changes nothing).
    pub(crate) fn close(&mut self, id: LeaseId) -> Closing {
        if !self.open.remove(&id) {
            return Closing::AlreadyClosed;
        }
        self.released.push_back(id);
        let forgotten = match self.released.len() > RELEASED_HOLDS_KEPT {
            true => self.released.pop_front(),
            false => None,
        };
        Closing::Closed { forgotten }
    }

    /// Every hold id the lease answers for: open and released.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &LeaseId> {
        self.open.iter().chain(self.released.iter())
    }
}

/// A re-entry: the hold it opened and the lease with it.
#[derive(Clone, Debug)]
pub struct Reentry {
    /// The hold's id, for `DELETE /v1/leases/{hold_id}`.
    pub hold_id: LeaseId,
    /// The lease renewed, its `holds` counting this one.
    pub view: LeaseView,
}

/// The answer to a hold's release.
#[derive(Clone, Debug)]
pub struct HoldRelease {
    /// This request released the hold: `false` for a hold released before, or one whose lease
    /// has ended (which closed it).
    pub released: bool,
    /// The lease the hold is of, as it is now (`holds`: those still open).
    pub view: LeaseView,
}

/// The `outcome` label of `lock_reentries_total` for a re-entry's result; `None` for an id
/// this sidecar does not know, or a renewal refused as invalid input.
fn outcome(result: &Result<Reentry, RenewError>) -> Option<&'static str> {
    match result {
        Ok(_) => Some("entered"),
        Err(RenewError::NoQuorum) => Some("no_quorum"),
        Err(RenewError::Gone(_)) => Some("lease_lost"),
        Err(RenewError::TooManyHolds) => Some("too_many_holds"),
        Err(RenewError::Unknown | RenewError::Invalid(_) | RenewError::NotACampaign) => None,
    }
}

// === impl LeaseManager ===

impl LeaseManager {
    /// Re-enters the lease `id`: renews it now (to `ttl` or its current TTL) and, once a
    /// quorum of masters extended it, opens a hold on it. A re-entry refused (no quorum, the
    /// lease ended, too many holds) opens nothing.
    pub async fn reenter(&self, id: LeaseId, ttl: Option<Duration>) -> Result<Reentry, RenewError> {
        let result = self.try_reenter(id, ttl).await;
        if let Some(outcome) = outcome(&result) {
            METRICS
                .reentries
                .add(1, &metrics::label("outcome", outcome));
        }
        result
    }

    async fn try_reenter(&self, id: LeaseId, ttl: Option<Duration>) -> Result<Reentry, RenewError> {
        let tracked = self.find(id).ok_or(RenewError::Unknown)?;
        // Refused before the renewal: a re-entry that cannot open a hold costs no master a call.
        if let Some(refused) = refusal(&tracked.record(), Instant::now()) {
            return Err(refused);
        }
        self.renew_tracked(&tracked, ttl).await?;
        self.open_hold(&tracked)
    }

    /// Opens a hold on the lease just renewed, unless it ended meanwhile (or other re-entries
    /// took the last places).
    fn open_hold(&self, tracked: &Tracked) -> Result<Reentry, RenewError> {
        let mut record = tracked.record();
        let now = Instant::now();
        if let Some(refused) = refusal(&record, now) {
            return Err(refused);
        }
        let hold_id = LeaseId::random();
        record
            .holds
            .enter(hold_id)
            .map_err(|TooManyHolds| RenewError::TooManyHolds)?;
        // Indexed under the record's lock: the lease cannot be forgotten before its hold is
        // indexed (forgetting takes the record's lock before the index's).
        self.hold_index().insert(hold_id, record.lease.id);
        let view = record.view(now);
        Ok(Reentry { hold_id, view })
    }

    /// Releases the hold `hold_id` and nothing else: never a call to a master. `None` when
    /// this sidecar knows no such hold (never, or its lease was forgotten, or it was released
    /// so long ago that its lease no longer remembers it).
    pub fn release_hold(&self, hold_id: LeaseId) -> Option<HoldRelease> {
        let lease_id = *self.hold_index().get(&hold_id)?;
        let tracked = self.find(lease_id)?;
        let mut record = tracked.record();
        let now = Instant::now();
        let closing = match record.state_at(now).is_ended() {
            // Its lease's end closed every hold.
            true => Closing::AlreadyClosed,
            false => record.holds.close(hold_id),
        };
        if let Closing::Closed {
            forgotten: Some(old),
        } = closing
        {
            self.hold_index().remove(&old);
        }
        Some(HoldRelease {
            released: matches!(closing, Closing::Closed { .. }),
            view: record.view(now),
        })
    }

    /// Unindexes every hold of a lease being forgotten: its ids then answer 404.
    pub(super) fn forget_holds(&self, tracked: &Arc<Tracked>) {
        let record = tracked.record();
        let mut index = self.hold_index();
        for hold_id in record.holds.ids() {
            index.remove(hold_id);
        }
    }

    fn hold_index(&self) -> MutexGuard<'_, HashMap<LeaseId, LeaseId>> {
        // Inserts and removes only: a poisoned index is still consistent.
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Why the lease of `record` can take no hold at `now`, if it cannot: it has ended (410, with
/// the lease as it is), or [`MAX_HOLDS`] are open (409).
fn refusal(record: &LeaseRecord, now: Instant) -> Option<RenewError> {
    if record.state_at(now).is_ended() {
        return Some(RenewError::Gone(Box::new(record.view(now))));
    }
    record.holds.is_full().then_some(RenewError::TooManyHolds)
}

#[cfg(test)]
mod tests;

//! Unit tests of the re-entry holds: the cap, closing once, the released ids remembered, and
//! which leases take a hold (paused time).

use super::*;
use crate::lease::LeaseState;
use crate::redlock::Lease;

fn record(now: Instant) -> LeaseRecord {
    LeaseRecord {
        limit: None,
        election: None,
        lease: Lease {
            id: LeaseId::random(),
            resource: "r".into(),
            owner: "o".into(),
            fencing_token: 7,
            ttl: Duration::from_millis(1_000),
            validity: Duration::from_millis(980),
            valid_until: now + Duration::from_millis(980),
        },
        state: LeaseState::Held,
        acquired_at: now,
        reason: None,
        auto_renew: true,
        idle_timeout: Duration::from_millis(3_000),
        last_seen: now,
        renew_at: now + Duration::from_millis(450),
        ended_at: None,
        holds: Holds::default(),
    }
}

/// Holds open up to the cap; the next is refused and changes nothing.
#[test]
fn holds_open_up_to_the_cap_and_no_further() {
    let mut holds = Holds::default();
    for n in 1..=MAX_HOLDS {
        assert_eq!(holds.enter(LeaseId::random()), Ok(n));
    }
    assert!(holds.is_full());
    assert_eq!(holds.enter(LeaseId::random()), Err(TooManyHolds));
    assert_eq!(holds.open(), MAX_HOLDS);
}

/// A hold is released once: again, or a hold the lease never had, changes nothing.
#[test]
fn a_hold_is_released_once() {
    let mut holds = Holds::default();
    let (first, second) = (LeaseId::random(), LeaseId::random());
    holds.enter(first).unwrap();
    holds.enter(second).unwrap();
    assert_eq!(holds.close(first), Closing::Closed { forgotten: None });
    assert_eq!(holds.open(), 1);
    assert_eq!(holds.close(first), Closing::AlreadyClosed);
    assert_eq!(holds.close(LeaseId::random()), Closing::AlreadyClosed);
    assert_eq!(holds.open(), 1, "a repeated release closed another hold");
    let ids: Vec<LeaseId> = holds.ids().copied().collect();
    assert_eq!(ids, [second, first]);
}

/// A lease remembers the most recent released holds only, however often it is re-entered.
#[test]
fn released_holds_are_remembered_up_to_their_cap() {
    let mut holds = Holds::default();
    let first = LeaseId::random();
    holds.enter(first).unwrap();
    assert_eq!(holds.close(first), Closing::Closed { forgotten: None });
    for _ in 1..RELEASED_HOLDS_KEPT {
        let id = LeaseId::random();
        holds.enter(id).unwrap();
        assert_eq!(holds.close(id), Closing::Closed { forgotten: None });
    }
    let one_more = LeaseId::random();
    holds.enter(one_more).unwrap();
    let forgotten = Some(first);
    assert_eq!(holds.close(one_more), Closing::Closed { forgotten });
    assert_eq!(holds.ids().count(), RELEASED_HOLDS_KEPT);
    assert!(holds.ids().all(|id| *id != first));
}

/// A held lease with room takes a hold; one that has ended (or is past its validity) answers
/// its state, one at the cap answers too many holds.
#[tokio::test(start_paused = true)]
async fn only_a_lease_still_held_with_room_takes_a_hold() {
    let now = Instant::now();
    let mut held = record(now);
    assert!(refusal(&held, now).is_none());
    let late = now + Duration::from_millis(980);
    assert!(
        matches!(refusal(&held, late), Some(RenewError::Gone(view)) if view.state == LeaseState::Lost)
    );
    for _ in 0..MAX_HOLDS {
        held.holds.enter(LeaseId::random()).unwrap();
    }
    assert!(matches!(
        refusal(&held, now),
        Some(RenewError::TooManyHolds)
    ));
    let mut released = record(now);
    released.state = LeaseState::Releasing;
    assert!(matches!(refusal(&released, now), Some(RenewError::Gone(_))));
}

/// The view counts the open holds while the lease is held, and none once it has ended.
#[tokio::test(start_paused = true)]
async fn the_view_counts_open_holds_until_the_lease_ends() {
    let now = Instant::now();
    let mut lease = record(now);
    assert_eq!(lease.view(now).holds, 0);
    lease.holds.enter(LeaseId::random()).unwrap();
    lease.holds.enter(LeaseId::random()).unwrap();
    let view = lease.view(now);
    assert_eq!((view.holds, view.fencing_token), (2, 7));
    lease.state = LeaseState::Released;
    assert_eq!(lease.view(now).holds, 0);
}

/// Every outcome a caller can cause has its label; unknown ids are no re-entry.
#[test]
fn each_refusal_is_counted_under_its_outcome() {
    let labels = [
        outcome(&Err(RenewError::NoQuorum)),
        outcome(&Err(RenewError::TooManyHolds)),
        outcome(&Err(RenewError::Unknown)),
    ];
    assert_eq!(labels, [Some("no_quorum"), Some("too_many_holds"), None]);
    for label in labels.into_iter().flatten() {
        assert!(metrics::REENTRY_OUTCOMES.contains(&label));
    }
}

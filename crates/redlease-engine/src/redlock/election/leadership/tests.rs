//! The leader read's rules, on hand-built master views.

use std::time::Duration;

use super::*;
use crate::fleet::CallError;
use crate::lease_id::parse_value;
use crate::redlock::election::election_tail;

const MS: fn(u64) -> Duration = Duration::from_millis;

/// A master holding `stored` (with `pttl` ms left), or nothing.
fn master(node: usize, held: Option<(&str, u64)>) -> MasterView {
    MasterView {
        node,
        url: String::new(),
        up: true,
        quarantined: false,
        answer: Ok(held.map(|(stored, pttl)| Holding {
            lease_id: parse_value(stored).map(|(id, _)| id),
            owner: parse_value(stored).map(|(_, owner)| owner.to_string()),
            value: stored.to_string(),
            pttl: Some(MS(pttl)),
        })),
    }
}

fn silent(node: usize) -> MasterView {
    MasterView {
        answer: Err(CallError::Timeout),
        ..master(node, None)
    }
}

fn stored(id: LeaseId, term: u64, value: &str) -> String {
    id.value_for(&election_tail("svc-a", term, value))
}

/// A value on a quorum is the leader, with its term and value, kept as long as the
/// quorum-th longest TTL of its carriers less the read's time.
#[test]
fn a_value_on_a_quorum_is_the_leader() {
    let id = LeaseId::random();
    let v = stored(id, 9, "10.0.0.7:80");
    let masters = [
        master(0, Some((&v, 900))),
        master(1, Some((&v, 500))),
        master(2, Some((&v, 700))),
        master(3, None),
        silent(4),
    ];
    let Leadership::Leader(leader) = leadership(&masters, 3, MS(20)) else {
        panic!("no leader");
    };
    assert_eq!((leader.lease_id, leader.term), (id, 9));
    assert_eq!(
        (leader.owner.as_str(), leader.value.as_str()),
        ("svc-a", "10.0.0.7:80")
    );
    assert_eq!((leader.validity, leader.masters), (MS(480), 3));
}

/// Half a proclamation: the value a quorum still agrees on leads; with no value on a quorum
/// while the lease is, the masters cannot tell.
#[test]
fn a_proclamation_half_done_shows_the_quorums_value_or_unknown() {
    let id = LeaseId::random();
    let (old, new) = (stored(id, 4, "old"), stored(id, 4, "new"));
    let three_old = [
        master(0, Some((&old, 900))),
        master(1, Some((&old, 900))),
        master(2, Some((&old, 900))),
        master(3, Some((&new, 900))),
        master(4, Some((&new, 900))),
    ];
    let leader = leadership(&three_old, 3, MS(0));
    assert_eq!(leader.leader().map(|l| l.value.as_str()), Some("old"));
    let split = [
        master(0, Some((&old, 900))),
        master(1, Some((&old, 900))),
        master(2, Some((&new, 900))),
        master(3, Some((&new, 900))),
        master(4, None),
    ];
    assert_eq!(leadership(&split, 3, MS(0)), Leadership::Unknown);
}

/// A campaign whose term is not written yet, on a quorum, is nobody's leadership yet and no
/// vacancy either.
#[test]
fn a_lease_without_its_term_on_a_quorum_is_unknown() {
    let id = LeaseId::random();
    let bare = id.value_for("svc-a");
    let masters = [
        master(0, Some((&bare, 900))),
        master(1, Some((&bare, 900))),
        master(2, None),
    ];
    assert_eq!(leadership(&masters, 2, MS(0)), Leadership::Unknown);
}

/// Vacant needs a quorum of answers and no lease that could be on a quorum, counting the
/// masters that did not answer as possibly carrying it.
#[test]
fn vacant_needs_a_quorum_of_answers_and_no_possible_leader() {
    let id = LeaseId::random();
    let v = stored(id, 3, "x");
    let empty: Vec<MasterView> = (0..5).map(|i| master(i, None)).collect();
    assert_eq!(leadership(&empty, 3, MS(0)), Leadership::Vacant);
    let minority = [
        master(0, Some((&v, 900))),
        master(1, Some((&v, 900))),
        master(2, None),
        master(3, None),
        master(4, None),
    ];
    assert_eq!(leadership(&minority, 3, MS(0)), Leadership::Vacant);
    let maybe = [
        master(0, Some((&v, 900))),
        master(1, Some((&v, 900))),
        master(2, None),
        master(3, None),
        silent(4),
    ];
    assert_eq!(leadership(&maybe, 3, MS(0)), Leadership::Unknown);
    let few = [
        master(0, None),
        master(1, None),
        silent(2),
        silent(3),
        silent(4),
    ];
    assert_eq!(leadership(&few, 3, MS(0)), Leadership::Unknown);
}

/// A force release's tombstone is no leader; a leader whose validity ran out during the
/// read is not reported.
#[test]
fn tombstones_and_spent_validity_lead_nothing() {
    let id = LeaseId::random();
    let tombstone = format!("revoked:{id}");
    let masters = [
        master(0, Some((&tombstone, 900))),
        master(1, Some((&tombstone, 900))),
        master(2, None),
    ];
    assert_eq!(leadership(&masters, 2, MS(0)), Leadership::Vacant);
    let v = stored(id, 3, "x");
    let spent = [
        master(0, Some((&v, 10))),
        master(1, Some((&v, 10))),
        master(2, None),
    ];
    assert_eq!(leadership(&spent, 2, MS(15)), Leadership::Unknown);
}

//! Unit tests of the lease state machine, with paused time.

use super::*;
use crate::LeaseId;

fn record(now: Instant, auto_renew: bool) -> LeaseRecord {
    let ttl = Duration::from_millis(1_000);
    LeaseRecord {
        limit: None,
        election: None,
        lease: Lease {
            id: LeaseId::random(),
            resource: "r".into(),
            owner: "o".into(),
            fencing_token: 1,
            ttl,
            validity: Duration::from_millis(980),
            valid_until: now + Duration::from_millis(980),
        },
        state: LeaseState::Held,
        acquired_at: now,
        reason: None,
        auto_renew,
        idle_timeout: Duration::from_millis(3_000),
        last_seen: now,
        renew_at: now + Duration::from_millis(450),
        ended_at: None,
        holds: Default::default(),
    }
}

/// An auto-renewed lease waits for its renewal, then renews.
#[tokio::test(start_paused = true)]
async fn auto_renewal_is_due_at_its_time() {
    let now = Instant::now();
    let r = record(now, true);
    assert_eq!(
        r.next_step(now),
        Step::Wait(now + Duration::from_millis(450))
    );
    assert_eq!(r.next_step(now + Duration::from_millis(450)), Step::Renew);
}

/// Validity comes first: past it the lease is lost, whatever else is due.
#[tokio::test(start_paused = true)]
async fn validity_runs_out_before_anything_else() {
    let now = Instant::now();
    let r = record(now, true);
    let late = now + Duration::from_millis(980);
    assert_eq!(r.next_step(late), Step::Expire);
    assert_eq!(r.state_at(late), LeaseState::Lost);
    assert_eq!(r.view(late).validity_ms, 0);
}

/// Without auto-renewal the lease simply waits for its expiry.
#[tokio::test(start_paused = true)]
async fn a_lease_without_auto_renewal_only_expires() {
    let now = Instant::now();
    let r = record(now, false);
    assert_eq!(
        r.next_step(now),
        Step::Wait(now + Duration::from_millis(980))
    );
}

/// A quiet app loses its lease after the idle timeout; a later sign of life (a keepalive,
/// or its stream proving it read) moves the release on.
#[tokio::test(start_paused = true)]
async fn a_quiet_app_is_released_unless_it_shows_life() {
    let now = Instant::now();
    let mut r = record(now, true);
    r.renew_at = now + Duration::from_secs(10);
    r.lease.valid_until = now + Duration::from_secs(20);
    assert_eq!(r.next_step(now), Step::Wait(now + Duration::from_secs(3)));
    assert_eq!(r.next_step(now + Duration::from_secs(3)), Step::IdleRelease);
    r.last_seen = now + Duration::from_secs(2);
    assert_eq!(
        r.next_step(now + Duration::from_secs(3)),
        Step::Wait(now + Duration::from_secs(5))
    );
}

/// Lost and released leases have nothing left to do.
#[tokio::test(start_paused = true)]
async fn terminal_states_end_the_task() {
    let now = Instant::now();
    let mut r = record(now, true);
    r.state = LeaseState::Released;
    assert_eq!(r.next_step(now), Step::Done);
    assert_eq!(
        r.state_at(now + Duration::from_secs(5)),
        LeaseState::Released
    );
}

/// A lease whose holder is this process (an idle timeout past the end of time) is never
/// released as idle, however long it goes without a sign of life: it only renews.
#[tokio::test(start_paused = true)]
async fn a_lease_that_is_never_idle_only_renews() {
    let now = Instant::now();
    let mut r = record(now, true);
    r.idle_timeout = Duration::MAX;
    r.renew_at = now + Duration::from_secs(10);
    r.lease.valid_until = now + Duration::from_secs(20);
    assert_eq!(r.next_step(now), Step::Wait(now + Duration::from_secs(10)));
    let late = now + Duration::from_secs(10);
    assert_eq!(r.next_step(late), Step::Renew);
}

/// The record's lock publishes a moved `valid_until` when let go, and nothing otherwise; with
/// no follower yet (no channel), it publishes nothing and fails nothing.
#[tokio::test(start_paused = true)]
async fn the_records_lock_publishes_a_moved_validity() {
    let now = Instant::now();
    let record = std::sync::Mutex::new(self::record(now, true));
    let validity = std::sync::OnceLock::new();
    RecordGuard::new(record.lock().unwrap(), &validity)
        .lease
        .valid_until += Duration::from_millis(1);
    let before = record.lock().unwrap().lease.valid_until;
    let mut followed = validity
        .get_or_init(|| watch::channel(before).0)
        .subscribe();
    RecordGuard::new(record.lock().unwrap(), &validity).last_seen = now;
    assert!(!followed.has_changed().unwrap());
    let shorter = now + Duration::from_millis(300);
    RecordGuard::new(record.lock().unwrap(), &validity)
        .lease
        .valid_until = shorter;
    assert!(followed.has_changed().unwrap());
    assert_eq!(*followed.borrow_and_update(), shorter);
}

/// A leader's lease shows its term (the fencing token) and value, and its shadow writes them
/// after the owner, so a master that lost the key gets them back; other leases show neither,
/// and their shadow writes the owner alone.
#[tokio::test(start_paused = true)]
async fn a_leaders_view_and_shadow_carry_its_term_and_value() {
    let now = Instant::now();
    let mut lock = record(now, true);
    assert_eq!(lock.shadow_owner(), "o");
    let view = lock.view(now);
    assert_eq!((view.term, view.value), (None, None));
    lock.lease.resource = crate::keys::lock_name("r", LockKind::Election);
    lock.lease.fencing_token = 42;
    lock.election = Some("10.0.0.7:80".into());
    let view = lock.view(now);
    assert_eq!(view.resource, "r");
    assert_eq!(
        (view.term, view.value.as_deref()),
        (Some(42), Some("10.0.0.7:80"))
    );
    let stored = lock.lease.id.value_for(&lock.shadow_owner());
    let parsed = crate::redlock::election::parse_election_value(&stored).unwrap();
    assert_eq!(
        (parsed.owner, parsed.term, parsed.value),
        ("o", 42, "10.0.0.7:80")
    );
}

/// A view written by hand is the bytes `serde_json` writes: every optional field absent and
/// present, every state and mode, strings that need escaping, the largest numbers.
#[test]
fn a_view_is_written_as_serde_json_writes_it() {
    let lock = LeaseView {
        acquired: true,
        lease_id: LeaseId::random(),
        resource: "job-1".into(),
        slot: None,
        slots: SlotList::default(),
        limit: None,
        mode: None,
        owner: "me".into(),
        fencing_token: 7,
        ttl_ms: 500,
        validity_ms: 492,
        expires_at: 1_795_764_943_598,
        state: LeaseState::Held,
        auto_renew: true,
        holds: 0,
        reason: None,
        term: None,
        value: None,
    };
    let mut views = vec![lock.clone()];
    let states = [
        LeaseState::Degraded,
        LeaseState::Releasing,
        LeaseState::Lost,
        LeaseState::Released,
    ];
    for state in states {
        let reason = Some("released");
        views.push(LeaseView {
            state,
            reason,
            acquired: false,
            ..lock.clone()
        });
    }
    views.push(LeaseView {
        slot: Some(3),
        slots: SlotList(SlotSet::single(3).with(0).with(63)),
        limit: Some(64),
        ..lock.clone()
    });
    for mode in [LeaseMode::Read, LeaseMode::Write] {
        views.push(LeaseView {
            mode: Some(mode),
            ..lock.clone()
        });
    }
    views.push(LeaseView {
        resource: "a\"b\\c\u{1}\u{7f}\u{e9}\u{2028}/\u{1f512}".into(),
        owner: "tab\tnew\nline\r".into(),
        fencing_token: u64::MAX,
        ttl_ms: 0,
        validity_ms: u64::MAX,
        expires_at: 0,
        auto_renew: false,
        holds: usize::MAX,
        term: Some(u64::MAX),
        value: Some("{\"leader\":\"x\"}".into()),
        ..lock.clone()
    });
    for view in views {
        let mut written = Vec::new();
        view.write_json(&mut written);
        let expected = serde_json::to_vec(&view).unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }
}

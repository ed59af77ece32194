//! Elections in the engine, on real masters: the campaign's term on every master, the
//! proclamation script's contract, the leader read, and an observer fed by polls and by the
//! election's channel.

use std::sync::Arc;
use std::time::Duration;

use redlease::redlock::election::{parse_election_value, DEFAULT_OBSERVE_POLL};
use redlease::{AcquireOutcome, Error, Fleet, Leadership, ProclaimOutcome, Redlock, Wakeups};
use redlease_testkit::fleet::{init_test_logs, test_fleet_options};
use redlease_testkit::resp::Resp;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);
const KEY: &str = "redlease:elect:db";

/// An engine with wake-ups (release and proclamation messages), as the sidecar runs it.
async fn engine_with_wakeups(fleet: &TestFleet) -> Arc<Redlock> {
    init_test_logs();
    let connected = Fleet::connect(&fleet.urls(), &test_fleet_options()).await;
    let connected = connected.unwrap();
    let wakeups = Wakeups::connect(&connected).unwrap();
    Arc::new(Redlock::new(connected, Default::default()).with_wakeups(wakeups))
}

/// A campaign elects one leader whose key, on every master, holds its lease, owner, term (the
/// fencing token) and value; a rival is refused; a proclamation changes the value and keeps
/// the term; the leader read follows; after resigning, the election is vacant and the next
/// term is larger.
#[tokio::test]
async fn a_campaign_writes_its_term_and_value_on_every_master() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let won = engine
        .campaign("db", "a", "10.0.0.1:5432", TTL)
        .await
        .unwrap();
    let lease = won.lease().expect("elected").clone();
    assert_eq!(lease.resource, "db\u{1f}e");
    for i in 0..3 {
        let stored = fleet.command(i, &["GET", KEY]).bulk().unwrap();
        let parsed = parse_election_value(&stored).unwrap();
        assert_eq!(parsed.lease_id, lease.id, "master {i}");
        assert_eq!((parsed.owner, parsed.value), ("a", "10.0.0.1:5432"));
        assert_eq!(parsed.term, lease.fencing_token);
        let pttl = fleet.command(i, &["PTTL", KEY]).int();
        assert!((4_000..=5_000).contains(&pttl), "master {i}: {pttl}");
    }
    let rival = engine.campaign("db", "b", "x", TTL).await.unwrap();
    assert!(matches!(rival, AcquireOutcome::Contended(_)), "{rival:?}");
    let Leadership::Leader(leader) = engine.leader("db").await.unwrap() else {
        panic!("no leader read");
    };
    assert_eq!(
        (leader.lease_id, leader.term),
        (lease.id, lease.fencing_token)
    );
    assert_eq!(leader.value, "10.0.0.1:5432");
    assert!(leader.validity > Duration::from_secs(4) && leader.validity <= TTL);

    let proclaimed = engine.proclaim(&lease, "10.0.0.2:5432").await.unwrap();
    assert_eq!(proclaimed, ProclaimOutcome::Proclaimed);
    let leader = engine.leader("db").await.unwrap();
    let leader = leader.leader().unwrap();
    assert_eq!(
        (leader.term, leader.value.as_str()),
        (lease.fencing_token, "10.0.0.2:5432")
    );
    let pttl = fleet.command(0, &["PTTL", KEY]).int();
    assert!(pttl > 3_000, "the TTL was kept: {pttl}");

    assert!(engine
        .release(&lease.resource, lease.id)
        .await
        .unwrap()
        .released());
    assert_eq!(engine.leader("db").await.unwrap(), Leadership::Vacant);
    let next = engine.campaign("db", "b", "y", TTL).await.unwrap();
    assert!(next.lease().unwrap().fencing_token > lease.fencing_token);
    // The resource's lock is another lock.
    assert!(engine
        .acquire("db", "c", TTL)
        .await
        .unwrap()
        .lease()
        .is_some());
}

/// Bad input is refused before anything is written; a lock's lease does not proclaim.
#[tokio::test]
async fn bad_values_and_other_leases_are_refused() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let long = "v".repeat(4097);
    for bad in [long.as_str(), "a\nb", "a\u{1f}b"] {
        let refused = engine.campaign("db", "a", bad, TTL).await;
        assert!(
            matches!(refused, Err(Error::InvalidValue(_))),
            "{refused:?}"
        );
    }
    assert!(fleet.command(0, &["GET", KEY]).bulk().is_none());
    let lock = engine.acquire("db", "a", TTL).await.unwrap();
    let lock = lock.lease().unwrap().clone();
    assert!(matches!(
        engine.proclaim(&lock, "x").await,
        Err(Error::NotACampaign)
    ));
    let won = engine.campaign("db", "a", "", TTL).await.unwrap();
    let lease = won.lease().unwrap().clone();
    assert!(matches!(
        engine.proclaim(&lease, "x\u{7}").await,
        Err(Error::InvalidValue(_))
    ));
    assert_eq!(
        engine.leader("db").await.unwrap().leader().unwrap().value,
        ""
    );
}

/// proclaim.lua writes only over the lease's own key, keeps its TTL, and announces; an
/// absent key and another lease's are left alone; a value that does not start with the lease
/// id is refused.
#[tokio::test]
async fn the_proclamation_script_compares_the_lease_and_keeps_the_ttl() {
    let fleet = TestFleet::start(1);
    let script = include_str!("../../../lua/proclaim.lua");
    let (ours, theirs) = ("a".repeat(32), "b".repeat(32));
    let value = format!("{ours}|o\u{1f}7\u{1f}new");
    let channel = "redlease:released:db\u{1f}e";
    let eval = |args: &[&str]| {
        let mut command = vec!["EVAL", script, "1", KEY];
        command.extend_from_slice(args);
        fleet.command(0, &command)
    };
    assert_eq!(eval(&[&ours, &value, channel]).int(), 0, "absent");
    assert!(fleet.command(0, &["GET", KEY]).bulk().is_none());
    fleet.command(0, &["SET", KEY, &format!("{theirs}|x"), "PX", "9000"]);
    assert_eq!(eval(&[&ours, &value, channel]).int(), -1, "another lease");
    fleet.command(0, &["SET", KEY, &format!("{ours}|o"), "PX", "9000"]);
    assert_eq!(eval(&[&ours, &value, channel]).int(), 1);
    assert_eq!(fleet.command(0, &["GET", KEY]).bulk(), Some(value.clone()));
    assert!(fleet.command(0, &["PTTL", KEY]).int() > 8_000, "TTL kept");
    let forged = format!("{theirs}|o\u{1f}7\u{1f}x");
    let refused = eval(&[&ours, &forged, channel]);
    assert!(
        format!("{refused:?}").contains("must start with its lease id"),
        "{refused:?}"
    );
    assert_eq!(fleet.command(0, &["GET", KEY]).bulk(), Some(value));
}

/// An observer tells the leader at once, a proclamation and a resignation within a moment
/// (the channel, not the 5 s poll, brings them), then the next leader with a larger term.
#[tokio::test]
async fn an_observer_hears_proclamations_and_resignations_at_once() {
    let fleet = TestFleet::start(3);
    let engine = engine_with_wakeups(&fleet).await;
    let won = engine.campaign("db", "a", "one", TTL).await.unwrap();
    let lease = won.lease().unwrap().clone();
    let mut observer = engine.observe("db", Duration::from_secs(5)).unwrap();
    let first = observer.next().await;
    assert_eq!(first.leader().map(|l| l.value.as_str()), Some("one"));
    // Let the observer's subscription settle, then act and time the news.
    tokio::time::sleep(Duration::from_millis(300)).await;
    engine.proclaim(&lease, "two").await.unwrap();
    let started = Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(2), observer.next())
        .await
        .unwrap();
    assert_eq!(second.leader().map(|l| l.value.as_str()), Some("two"));
    assert!(started.elapsed() < Duration::from_secs(2));
    engine.release(&lease.resource, lease.id).await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(2), observer.next())
        .await
        .unwrap();
    assert_eq!(third, Leadership::Vacant);
    let next = engine.campaign("db", "b", "three", TTL).await.unwrap();
    let next = next.lease().unwrap().clone();
    let fourth = tokio::time::timeout(Duration::from_secs(7), observer.next())
        .await
        .unwrap();
    let leader = fourth.leader().unwrap();
    assert_eq!(leader.term, next.fencing_token);
    assert!(leader.term > lease.fencing_token);
}

/// A leader that dies without resigning (its lease never renewed) is seen vacant within its
/// TTL and one poll.
#[tokio::test]
async fn a_dead_leader_is_seen_vacant_within_its_ttl_and_a_poll() {
    let fleet = TestFleet::start(3);
    let engine = engine_with_wakeups(&fleet).await;
    let ttl = Duration::from_millis(600);
    let granted_at = Instant::now();
    let won = engine.campaign("db", "a", "x", ttl).await.unwrap();
    assert!(won.lease().is_some());
    let mut observer = engine.observe("db", DEFAULT_OBSERVE_POLL).unwrap();
    assert!(observer.next().await.leader().is_some());
    let vacant = tokio::time::timeout(Duration::from_secs(3), observer.next())
        .await
        .unwrap();
    assert_eq!(vacant, Leadership::Vacant);
    let seen = granted_at.elapsed();
    let bound = ttl + DEFAULT_OBSERVE_POLL + Duration::from_millis(150);
    eprintln!(
        "vacant seen {} ms after the grant (TTL 600 ms, poll 200 ms)",
        seen.as_millis()
    );
    assert!(seen <= bound, "vacant seen after {seen:?}, bound {bound:?}");
}

/// A campaign whose term a majority of masters could not take is refused and released,
/// though a quorum granted the lock: masters 1 and 2 take the election's `SET` but refuse
/// the script that writes the term (an ACL selector), so no quorum carries the term; the
/// leader read shows no leader, and once the keys left behind expire, a vacancy.
#[tokio::test]
async fn a_campaign_whose_term_no_quorum_took_is_refused() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    for i in [1, 2] {
        // The default user keeps every command on every other key; on the election's keys it
        // may only SET, GET and PTTL, so scripts on them are refused (NOPERM).
        let acl = [
            "ACL",
            "SETUSER",
            "default",
            "resetkeys",
            "~redlease:[^e]*",
            "(+set +get +pttl ~redlease:elect:*)",
        ];
        assert_eq!(fleet.command(i, &acl), Resp::Simple("OK".into()));
    }
    let ttl = Duration::from_millis(800);
    let refused = engine.campaign("db", "a", "x", ttl).await.unwrap();
    let AcquireOutcome::NoQuorum(refusal) = &refused else {
        panic!("a campaign without its term on a quorum answered {refused:?}");
    };
    eprintln!("refused: {:?}", refusal.cause);
    for i in [1, 2] {
        let stored = fleet.command(i, &["GET", KEY]).bulk().unwrap();
        assert!(
            parse_election_value(&stored).is_none(),
            "master {i}: {stored}"
        );
    }
    assert_eq!(engine.leader("db").await.unwrap(), Leadership::Unknown);
    redlease_testkit::assert_eventually!(
        engine.leader("db").await.unwrap() == Leadership::Vacant,
        3,
        "the keys left behind never expired"
    );
}

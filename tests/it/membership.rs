//! Who counts towards a quorum: restarted masters (restart quarantine, whatever this process
//! saw of them before), masters whose data went, and configured masters that are one server.

use std::time::Duration;

use redlease::FleetOptions;
use redlease::{EngineOptions, NodeVote};
use redlease::{Error, Fleet, Redlock};
use redlease::{FleetMark, Membership};
use redlease_testkit::assert_eventually;
use redlease_testkit::fleet::{test_fleet_options, QUARANTINE};
use redlease_testkit::proxy::FaultProxy;
use redlease_testkit::TestFleet;
use tokio::time::Instant;

const SHORT_TTL: Duration = Duration::from_millis(800);

fn short_leases() -> EngineOptions {
    EngineOptions {
        max_ttl: QUARANTINE,
        ..EngineOptions::default()
    }
}

fn quick_start() -> FleetOptions {
    FleetOptions {
        connect_timeout: Duration::from_millis(400),
        ..test_fleet_options()
    }
}

/// Uses a fresh fleet once (so it carries the fleet marker and a history), then lets go.
async fn give_history(fleet: &TestFleet) {
    let engine = fleet.engine_with(short_leases()).await;
    for _ in 0..3 {
        let lease = engine.acquire("job", "a", SHORT_TTL).await.unwrap();
        engine
            .release("job", lease.lease().unwrap().id)
            .await
            .unwrap();
    }
    engine.settle(Duration::from_secs(1)).await;
}

/// A master restarted empty, met by a new process while the other masters do not answer:
/// nobody can tell whether the fleet is fresh, so it takes no votes — not "a fresh fleet"
/// voting at once with counter 1 — and once the others answer it is quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_master_alone_is_not_taken_for_a_fresh_fleet() {
    let mut fleet = TestFleet::start(3);
    give_history(&fleet).await;
    fleet.servers[0].restart();
    fleet.servers[1].pause();
    fleet.servers[2].pause();
    let engine_fleet = Fleet::connect(&fleet.urls(), &quick_start()).await.unwrap();
    let _probe = engine_fleet.spawn_probe(Duration::from_millis(50));
    let node = &engine_fleet.nodes()[0];
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !node.is_up(),
        "a lone restarted master was adopted as a fresh fleet"
    );
    fleet.servers[1].resume();
    fleet.servers[2].resume();
    let others_up = || engine_fleet.nodes()[1..].iter().all(|n| n.is_up());
    assert_eventually!(others_up(), 5, "the other masters never came back");
    assert_eventually!(
        node.is_quarantined(Instant::now()),
        3,
        "not quarantined once the marked fleet answered"
    );
    assert!(!node.is_up());
}

/// A master back from an RDB snapshot (its marker, locks and fence counter from before), met
/// by a process that never saw it: its marker names the process it was made a member under,
/// not this one, so it is quarantined from its restart instead of voting with lost locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_from_a_snapshot_is_quarantined_on_first_contact() {
    let mut fleet = TestFleet::start(3);
    let engine = fleet.engine_with(short_leases()).await;
    engine.all_up().await;
    fleet.command(0, &["SAVE"]);
    // After the snapshot: more tokens, and a lease the snapshot does not have.
    for _ in 0..3 {
        let lease = engine.acquire("other", "a", SHORT_TTL).await.unwrap();
        engine
            .release("other", lease.lease().unwrap().id)
            .await
            .unwrap();
    }
    let held = engine.acquire("job", "a", SHORT_TTL).await.unwrap();
    assert!(held.lease().is_some());
    engine.settle(Duration::from_secs(1)).await;
    drop(engine);
    fleet.servers[0].restart();
    assert_eq!(fleet.command(0, &["EXISTS", "redlease:fleet"]).int(), 1);
    let engine = fleet.engine_with(short_leases()).await;
    let node = &engine.fleet().nodes()[0];
    assert_eventually!(
        node.run_id() == Some(fleet.run_id(0)),
        3,
        "never identified"
    );
    assert!(
        node.is_quarantined(Instant::now()),
        "a master back from a snapshot voted at once"
    );
    let contender = engine.acquire("job", "b", SHORT_TTL).await.unwrap();
    assert!(contender.lease().is_none(), "two holders: {contender:?}");
}

/// A master whose data was flushed long after it started (no restart), met by a new process:
/// the loss is dated from now, not from the server's start, so it is quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_master_is_quarantined_from_now_on_first_contact() {
    let fleet = TestFleet::start(3);
    give_history(&fleet).await;
    // Older than the quarantine (1 s in tests) plus the uptime's 1 s resolution.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    fleet.command(0, &["FLUSHALL"]);
    let engine = fleet.engine_with(short_leases()).await;
    let node = &engine.fleet().nodes()[0];
    assert_eventually!(node.run_id().is_some(), 3, "never identified");
    assert!(
        node.is_quarantined(Instant::now()),
        "a flushed master voted at once"
    );
    assert!(!node.is_up());
}

/// Two configured masters that are one server behind different addresses (here a proxy in
/// front of master 0) are refused at start-up, by their run_id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_behind_two_addresses_is_refused_at_start_up() {
    let fleet = TestFleet::start(2);
    let twin = FaultProxy::start(fleet.servers[0].port()).await;
    let mut urls = fleet.urls();
    urls.push(twin.url());
    let refused = Fleet::connect(&urls, &test_fleet_options()).await;
    let Err(Error::DuplicateMaster { url, other }) = refused else {
        panic!("one server counted twice: {:?}", refused.map(|_| ()));
    };
    assert_eq!((url, other), (twin.url(), fleet.urls()[0].clone()));
}

/// A master that turns out, once it answers, to be the same server as another one takes no
/// votes: with the only other server stopped, one server answering twice is no quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_found_later_to_be_another_takes_no_votes() {
    let mut fleet = TestFleet::start(2);
    let twin = FaultProxy::start(fleet.servers[0].port()).await;
    twin.refuse(true);
    let mut urls = fleet.urls();
    urls.push(twin.url());
    let engine_fleet = Fleet::connect(&urls, &quick_start()).await.unwrap();
    let _probe = engine_fleet.spawn_probe(Duration::from_millis(50));
    twin.refuse(false);
    assert_eventually!(twin.open() >= 2, 3, "never connected through the proxy");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!engine_fleet.nodes()[2].is_up(), "one server counts twice");
    fleet.servers[1].stop();
    let engine = Redlock::new(engine_fleet, short_leases());
    let outcome = engine.acquire("job", "a", SHORT_TTL).await.unwrap();
    let refusal = outcome
        .refusal()
        .expect("granted by one server counted twice");
    assert!(
        matches!(refusal.votes[2], NodeVote::Failed(_)),
        "{refusal:?}"
    );
}

/// A quarantine is the fleet's, not one process's: a process that meets a master another
/// process quarantined serves out the same quarantine instead of starting its own, and a
/// process that comes after it finds the master a member. Short-lived processes (cron jobs
/// on the CLI) would otherwise quarantine such a master again and again, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_begun_by_one_process_is_served_out_by_the_next() {
    let fleet = TestFleet::start(3);
    let options = FleetOptions {
        quarantine: Duration::from_secs(3),
        ..test_fleet_options()
    };
    // A born fleet whose master 2 then lost its data, at a time nobody can tell.
    let parent = Fleet::connect(&fleet.urls(), &options).await.unwrap();
    parent.quit(Duration::from_millis(100)).await;
    drop(parent);
    fleet.command(2, &["FLUSHALL"]);
    let start = Instant::now();
    let first = Fleet::connect(&fleet.urls(), &options).await.unwrap();
    let _probe = first.spawn_probe(Duration::from_millis(50));
    assert_eventually!(
        first.nodes()[2].is_quarantined(Instant::now()),
        2,
        "master 2 is not quarantined"
    );
    assert_eventually!(
        fleet.command(2, &["GET", "redlease:quarantined"]).bulk() == Some(fleet.run_id(2)),
        2,
        "the quarantine is not recorded on master 2"
    );
    let mark = |i| {
        let text = fleet.command(i, &["GET", "redlease:fleet"]).bulk();
        text.and_then(|t| FleetMark::parse(&t))
            .map(|m| m.membership)
    };
    assert_eq!(
        mark(2),
        Some(Membership::Quarantined(fleet.run_id(2))),
        "marked as in quarantine, not yet a member"
    );
    first.quit(Duration::from_millis(100)).await;
    drop(first);

    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    let second = Fleet::connect(&fleet.urls(), &options).await.unwrap();
    let _probe = second.spawn_probe(Duration::from_millis(50));
    assert_eventually!(
        second.nodes()[2].is_quarantined(Instant::now()),
        1,
        "the second process does not see the quarantine"
    );
    // Past the first quarantine's end, before the end of one the second would have begun.
    tokio::time::sleep_until(start + Duration::from_millis(3600)).await;
    assert_eventually!(
        second.nodes()[2].is_up(),
        0.3,
        "master 2 still out: the second process began a quarantine of its own"
    );
    assert_eq!(
        mark(2),
        Some(Membership::Member(fleet.run_id(2))),
        "a member once the quarantine is served and the fence raised"
    );
    let third = Fleet::connect(&fleet.urls(), &options).await.unwrap();
    assert!(
        third.nodes()[2].is_up(),
        "a member for a process that comes after"
    );
}

/// While one process quarantines a master that lost its memory, another that still counts it
/// a member (it has not seen the loss) must learn of it at its next acquisition there: the
/// quarantine leaves the master's fence counter where the loss left it until the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_elsewhere_does_not_hide_the_loss_from_a_member() {
    let fleet = TestFleet::start(3);
    let member = fleet.engine_with(short_leases()).await;
    member.all_up().await;
    for _ in 0..3 {
        let lease = member.acquire("job", "a", SHORT_TTL).await.unwrap();
        member
            .release("job", lease.lease().unwrap().id)
            .await
            .unwrap();
    }
    fleet.command(2, &["FLUSHALL"]);
    // Another process meets master 2 without the marker and quarantines it.
    let options = FleetOptions {
        quarantine: Duration::from_secs(30),
        ..test_fleet_options()
    };
    let other = Fleet::connect(&fleet.urls(), &options).await.unwrap();
    assert_eventually!(
        fleet.command(2, &["EXISTS", "redlease:quarantined"]).int() == 1,
        2,
        "the other process does not record a quarantine of master 2"
    );
    assert!(other.nodes()[2].is_quarantined(Instant::now()));
    // The member still counts master 2; its INCR there must reveal the loss.
    assert!(member.fleet().nodes()[2].is_up());
    let outcome = member.acquire("other", "b", SHORT_TTL).await.unwrap();
    // The acquisition returns at a quorum: master 2's answer may come after it, to the calls
    // left running, which are waited for (as is any fence raise they lead to).
    assert!(
        member.settle(Duration::from_secs(5)).await,
        "the member's calls did not settle"
    );
    let counter: u64 = fleet
        .command(2, &["GET", "redlease:fence"])
        .bulk()
        .map_or(0, |v| v.parse().unwrap());
    assert!(
        counter <= 1,
        "master 2's fence was raised during the quarantine: {counter}"
    );
    assert!(
        !member.fleet().nodes()[2].is_up(),
        "the member still takes master 2's votes after {outcome:?}"
    );
}

//! Counting semaphores on real masters: the bound by construction (slots), the limit in
//! force, the divergent state a counting design gets wrong, and the bound under faults.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::keys::{lock_name, parse_lock_name, LockKind};
use redlease::redlock::Permits;
use redlease::{AcquireOutcome, Error, Fleet, FleetOptions, LeaseId, Redlock};
use redlease_testkit::proxy::{Fault, FaultProxy};
use redlease_testkit::TestFleet;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);

fn slot_of(name: &str) -> u32 {
    match parse_lock_name(name).map(|n| n.kind) {
        Some(LockKind::Slot(slot)) => slot,
        other => panic!("not a slot: {name:?} ({other:?})"),
    }
}

/// A semaphore of limit 2 gives two permits on two slots, refuses a third until one is
/// released, and its slots are keys of their own.
#[tokio::test]
async fn a_limit_of_two_gives_two_permits_on_two_slots() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let a = engine.acquire_permit("pool", "a", TTL, 2).await.unwrap();
    let b = engine.acquire_permit("pool", "b", TTL, 2).await.unwrap();
    let (a, b) = (a.lease().unwrap().clone(), b.lease().unwrap().clone());
    assert_ne!(slot_of(&a.resource), slot_of(&b.resource));
    assert!(b.fencing_token > a.fencing_token);
    let third = engine.acquire_permit("pool", "c", TTL, 2).await.unwrap();
    let AcquireOutcome::Contended(refusal) = third else {
        panic!("a third permit of two: {third:?}");
    };
    assert!(refusal.holder_remaining().is_some());
    engine.settle(Duration::from_secs(2)).await;
    for i in 0..3 {
        let mut keys = fleet.command(i, &["KEYS", "redlease:sem:pool:*"]).strings();
        keys.sort();
        assert_eq!(
            keys,
            ["redlease:sem:pool:0", "redlease:sem:pool:1"],
            "master {i}"
        );
    }
    // The exclusive lock of the same resource is another lock.
    assert!(engine
        .acquire("pool", "x", TTL)
        .await
        .unwrap()
        .lease()
        .is_some());

    assert!(engine.release(&a.resource, a.id).await.unwrap().released());
    let c = engine.acquire_permit("pool", "c", TTL, 2).await.unwrap();
    let c = c.lease().expect("the released slot is free").clone();
    assert_eq!(slot_of(&c.resource), slot_of(&a.resource));
    assert!(c.fencing_token > b.fencing_token, "tokens rise per slot");
    let renewed = engine.extend(&c.resource, c.id, TTL).await.unwrap();
    assert!(
        matches!(renewed, redlease::ExtendOutcome::Extended(_)),
        "a permit renews as any lease"
    );
}

/// A limit other than the one the holders use is refused and writes nothing; once the
/// holders are gone, the new limit is taken.
#[tokio::test]
async fn a_limit_other_than_the_one_in_force_is_refused() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let held = engine.acquire_permit("pool", "a", TTL, 2).await.unwrap();
    let held = held.lease().unwrap().clone();
    for other in [1, 3, 64] {
        match engine.acquire_permit("pool", "b", TTL, other).await {
            Err(Error::SemaphoreLimit { asked, in_force }) => {
                assert_eq!((asked, in_force), (other, 2));
            }
            answer => panic!("limit {other} beside holders of 2: {answer:?}"),
        }
    }
    assert!(matches!(
        engine.acquire_permit("pool", "b", TTL, 0).await,
        Err(Error::InvalidLimit(_))
    ));
    assert!(matches!(
        engine.acquire_permit("pool", "b", TTL, 65).await,
        Err(Error::InvalidLimit(_))
    ));
    engine.settle(Duration::from_secs(2)).await;
    for i in 0..3 {
        let keys = fleet.command(i, &["KEYS", "redlease:sem:pool:*"]).strings();
        assert_eq!(keys.len(), 1, "master {i}: {keys:?}");
    }
    engine.release(&held.resource, held.id).await.unwrap();
    let three = engine.acquire_permit("pool", "b", TTL, 3).await.unwrap();
    assert!(three.lease().is_some());
}

/// The state that makes a majority-counting semaphore of limit 2 grant three holders, built by
/// hand on three masters ({A,B}, {B,C}, {A,C}: each lease on two masters of three), holds at
/// most two permits here: A holds slot 0 and B slot 1 on a quorum, C holds no slot on a
/// quorum, so C cannot renew a permit, and a newcomer finds the semaphore full.
#[tokio::test]
async fn the_divergent_three_master_state_has_no_third_permit_holder() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let (a, b, c) = (LeaseId::random(), LeaseId::random(), LeaseId::random());
    let value = |id: LeaseId, owner: &str| format!("{}\u{1f}2", id.value_for(owner));
    let layout = [
        [(a, "a"), (b, "b")], // master 0: {A, B}
        [(c, "c"), (b, "b")], // master 1: {B, C}
        [(a, "a"), (c, "c")], // master 2: {A, C}
    ];
    for (master, slots) in layout.iter().enumerate() {
        for (slot, (id, owner)) in slots.iter().enumerate() {
            let key = format!("redlease:sem:pool:{slot}");
            let set = fleet.command(master, &["SET", &key, &value(*id, owner), "PX", "10000"]);
            assert!(
                matches!(set, redlease_testkit::resp::Resp::Simple(_)),
                "{set:?}"
            );
        }
    }
    // Counting holders on a majority finds three, over a limit of two.
    let mut majority_holders = 0;
    for id in [a, b, c] {
        let masters = (0..3)
            .filter(|&m| {
                (0..2).any(|slot| {
                    let key = format!("redlease:sem:pool:{slot}");
                    let held = fleet.command(m, &["GET", &key]).bulk();
                    held.is_some_and(|v| v.starts_with(&id.to_string()))
                })
            })
            .count();
        majority_holders += usize::from(masters >= 2);
    }
    assert_eq!(majority_holders, 3, "the state counting gets wrong");

    // Per slot, the inventory finds one quorum holder: A on slot 0, B on slot 1.
    let mut holders = Vec::new();
    for slot in 0..2 {
        let view = engine
            .inspect(&lock_name("pool", LockKind::Slot(slot)))
            .await
            .unwrap();
        holders.extend(view.holder.map(|h| h.lease_id));
    }
    assert_eq!(holders, [a, b]);
    // C renews neither slot on a quorum: it holds no permit.
    for slot in 0..2 {
        let name = lock_name("pool", LockKind::Slot(slot));
        let renewed = engine.extend(&name, c, TTL).await.unwrap();
        assert!(
            !matches!(renewed, redlease::ExtendOutcome::Extended(_)),
            "C renewed slot {slot}"
        );
    }
    // A newcomer finds both slots held.
    let newcomer = engine.acquire_permit("pool", "d", TTL, 2).await.unwrap();
    assert!(newcomer.lease().is_none(), "a third permit: {newcomer:?}");
}

/// One permit's life, as its holder saw it.
#[derive(Clone, Debug)]
struct Grant {
    slot: u32,
    token: u64,
    from: Instant,
    until: Instant,
}

/// Six clients contend for a semaphore of limit 2 on five masters while one master is frozen,
/// another killed and a third restarted empty: at no instant are more than two permits valid,
/// no two permits of one slot overlap, and each slot's tokens rise in grant order.
#[tokio::test]
async fn at_most_limit_permits_are_valid_at_every_instant_under_faults() {
    let mut fleet = TestFleet::start(5);
    let engine = Arc::new(fleet.engine().await);
    let grants = Arc::new(Mutex::new(Vec::<Grant>::new()));
    let stop_at = Instant::now() + Duration::from_secs(6);
    let mut workers = Vec::new();
    for worker in 0..6 {
        let (engine, grants) = (Arc::clone(&engine), Arc::clone(&grants));
        workers.push(tokio::spawn(async move {
            let owner = format!("w{worker}");
            while Instant::now() < stop_at {
                let ttl = Duration::from_millis(400);
                let wait = Duration::from_millis(300);
                let Ok(outcome) = engine
                    .acquire_permit_with_wait("pool", &owner, ttl, Permits::one(2), wait)
                    .await
                else {
                    continue;
                };
                let AcquireOutcome::Acquired(lease) = outcome else {
                    continue;
                };
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(rand_ms(5, 40))).await;
                let until = Instant::now().min(lease.valid_until);
                grants.lock().unwrap().push(Grant {
                    slot: slot_of(&lease.resource),
                    token: lease.fencing_token,
                    from,
                    until,
                });
                let _ = engine.release(&lease.resource, lease.id).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.servers[0].pause();
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.servers[1].stop();
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet.servers[0].resume();
    fleet.servers[1].restart();
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.servers[2].stop();
    fleet.servers[2].restart();
    for worker in workers {
        worker.await.unwrap();
    }
    let mut grants = grants.lock().unwrap().clone();
    assert!(
        grants.len() >= 20,
        "too few grants to judge: {}",
        grants.len()
    );
    // Sweep line: +1 at each start, −1 at each end (ends first at a tie).
    let mut edges: Vec<(Instant, i32)> = grants
        .iter()
        .flat_map(|g| [(g.from, 1), (g.until, -1)])
        .collect();
    edges.sort_by_key(|&(at, delta)| (at, delta));
    let (mut valid, mut most) = (0, 0);
    for (_, delta) in edges {
        valid += delta;
        most = most.max(valid);
    }
    assert!(most <= 2, "{most} permits valid at once");
    grants.sort_by_key(|g| (g.slot, g.from));
    for pair in grants.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        if earlier.slot != later.slot {
            continue;
        }
        assert!(earlier.until <= later.from, "slot {} overlaps", later.slot);
        assert!(
            later.token > earlier.token,
            "slot {} token went back",
            later.slot
        );
    }
}

fn rand_ms(low: u64, high: u64) -> u64 {
    low + rand::random::<u64>() % (high - low)
}

/// Through the sidecar: the listing shows a permit's slot and a read-write lock's writer with
/// their kind, the semaphore's slots show one by one, and a force release of a slot revokes
/// the permit's lease (its holder learns `revoked`) and frees the slot.
#[tokio::test]
async fn the_inventory_shows_and_clears_every_kind() {
    use serde_json::json;
    let fleet = TestFleet::start(3);
    let sidecar = redlease_testkit::sidecar::TestSidecar::start(&fleet, &[]).await;
    let permit = json!({"owner": "p", "limit": 2, "ttl_ms": 5000});
    let (status, lease) = sidecar
        .post_json("/v1/semaphores/pool/acquire", permit)
        .await;
    assert_eq!(status, 200, "{lease}");
    let slot = lease["slot"].as_u64().unwrap();
    let write = json!({"owner": "w", "mode": "write", "ttl_ms": 5000});
    let (status, _) = sidecar.post_json("/v1/rwlocks/pool/acquire", write).await;
    assert_eq!(status, 200);
    let campaign = json!({"owner": "l", "value": "v", "ttl_ms": 5000});
    let (status, _) = sidecar
        .post_json("/v1/elections/pool/campaign", campaign)
        .await;
    assert_eq!(status, 200);
    let (status, page) = sidecar.get("/v1/locks?prefix=pool").await;
    assert_eq!(status, 200, "{page}");
    let kinds: Vec<(String, Option<u64>)> = page["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap_or("lock").to_string(),
                l["slot"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("election".to_string(), None),
            ("semaphore".to_string(), Some(slot)),
            ("write".to_string(), None)
        ],
        "{page}"
    );
    let (_, semaphore) = sidecar.get("/v1/semaphores/pool").await;
    assert_eq!(
        semaphore["slots"][0]["slot"].as_u64(),
        Some(slot),
        "{semaphore}"
    );
    assert_eq!(semaphore["slots"][0]["holder"]["owner"], "p");

    let force = json!({"actor": "ops", "reason": "stuck", "kind": "semaphore", "slot": slot});
    let (status, forced) = sidecar
        .post_json("/v1/locks/pool/force-release", force)
        .await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(
        (forced["kind"].as_str(), forced["slot"].as_u64()),
        (Some("semaphore"), Some(slot))
    );
    let id = lease["lease_id"].as_str().unwrap();
    let (_, after) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(
        (after["state"].as_str(), after["reason"].as_str()),
        (Some("lost"), Some("revoked"))
    );
    let (_, semaphore) = sidecar.get("/v1/semaphores/pool").await;
    assert_eq!(
        semaphore["slots"],
        json!([]),
        "the slot was not freed: {semaphore}"
    );
    let bad = json!({"actor": "ops", "reason": "x", "kind": "read"});
    let (status, refused) = sidecar.post_json("/v1/locks/pool/force-release", bad).await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (400, Some("invalid_slot"))
    );
}

/// A permit's acquisition whose caller goes away before it answered (every master 300 ms
/// away) leaves no claim for nobody: its release follows its writes on every master, and the
/// slot is free long before the 10 s TTL it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_whose_caller_went_away_leaves_no_claim() {
    let fleet = TestFleet::start(3);
    let starts = fleet.servers.iter().map(|s| FaultProxy::start(s.port()));
    let proxies = futures_util::future::join_all(starts).await;
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let options = FleetOptions::default();
    let engine = Redlock::new(
        Fleet::connect(&urls, &options).await.unwrap(),
        Default::default(),
    );
    // The masters prepared (their scripts loaded, a first write done) before they slow down.
    let first = engine.acquire_permit("warm", "first", Duration::from_secs(10), 2);
    assert!(first.await.unwrap().lease().is_some());
    for proxy in &proxies {
        proxy.set_both(Fault::Delay(Duration::from_millis(150)));
    }
    let acquisition = engine.acquire_permit("pool", "gone", Duration::from_secs(10), 2);
    // Gone well before the acquisition gives up on the masters (its node timeout).
    let abandoned = tokio::time::timeout(Duration::from_millis(5), acquisition).await;
    assert!(
        abandoned.is_err(),
        "the acquisition answered: {abandoned:?}"
    );
    let claims = || {
        (0..3)
            .flat_map(|i| fleet.command(i, &["KEYS", "redlease:sem:pool:*"]).strings())
            .collect::<Vec<_>>()
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(claims(), Vec::<String>::new(), "claims kept for nobody");
}

//! Several permits of a counting semaphore held by one lease (`permits: k`), on real masters:
//! all or none, one token for every slot; a master counts for the lease only where it holds
//! every slot; renewal, shadow, release and force release cover each slot; through the engine,
//! a sidecar, the Rust client and `semaphore run`.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use redlease::client::Client;
use redlease::keys::{lock_name, parse_lock_name, LockKind, SlotSet};
use redlease::redlock::Permits;
use redlease::Redlock;
use redlease::{AcquireOutcome, Error, ExtendOutcome, Lease, LeaseId};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::json;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(5);

fn permits(limit: u32, count: u32) -> Permits {
    Permits { limit, count }
}

/// One attempt at `permits` of `pool` for `owner`.
async fn take(engine: &Redlock, owner: &str, permits: Permits) -> AcquireOutcome {
    let outcome = engine.acquire_permits("pool", owner, TTL, permits);
    outcome.await.unwrap()
}

/// The slots a lease holds, from its lock name.
fn slots_of(lease: &Lease) -> SlotSet {
    parse_lock_name(&lease.resource)
        .map(|name| name.kind.slots())
        .unwrap_or_default()
}

/// The slot keys of `pool` on master `i` that hold lease `id`, ascending.
fn slots_held_on(fleet: &TestFleet, i: usize, id: LeaseId) -> Vec<u32> {
    let mut held: Vec<u32> = (0..4)
        .filter(|slot| {
            let key = format!("redlease:sem:pool:{slot}");
            let value = fleet.command(i, &["GET", &key]).bulk();
            value.is_some_and(|v| v.starts_with(&id.to_string()))
        })
        .collect();
    held.sort_unstable();
    held
}

/// Two permits of a semaphore of three are one lease on two slots with one token; a second
/// lease of two is refused while they are held (one slot is free) and a lease of one takes
/// that slot; the pair renews as one, releases both slots, and then two are free again.
#[tokio::test]
async fn two_permits_are_one_lease_on_two_slots() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let pair = take(&engine, "pair", permits(3, 2)).await;
    let pair = pair.lease().expect("two of three free").clone();
    let slots = slots_of(&pair);
    assert_eq!(slots.len(), 2, "{}", pair.resource.escape_debug());
    assert!(matches!(
        parse_lock_name(&pair.resource).map(|n| n.kind),
        Some(LockKind::Slots(_))
    ));
    let held: Vec<u32> = slots.iter().collect();
    for i in 0..3 {
        assert_eq!(slots_held_on(&fleet, i, pair.id), held, "master {i}");
    }
    let second = take(&engine, "second", permits(3, 2)).await;
    assert!(
        matches!(second, AcquireOutcome::Contended(_)),
        "two more of one free: {second:?}"
    );
    let single = engine
        .acquire_permit("pool", "single", TTL, 3)
        .await
        .unwrap();
    let single = single.lease().expect("the third slot").clone();
    let LockKind::Slot(third) = parse_lock_name(&single.resource).unwrap().kind else {
        panic!("one permit is one slot");
    };
    assert!(!slots.contains(third));
    assert!(single.fencing_token > pair.fencing_token);

    let renewed = engine
        .extend(&pair.resource, pair.id, TTL * 2)
        .await
        .unwrap();
    assert!(matches!(renewed, ExtendOutcome::Extended(_)), "{renewed:?}");
    for slot in slots.iter() {
        let pttl = fleet.command(0, &["PTTL", &format!("redlease:sem:pool:{slot}")]);
        assert!(pttl.int() > 6_000, "slot {slot} renewed: {pttl:?}");
    }
    assert!(engine
        .release(&pair.resource, pair.id)
        .await
        .unwrap()
        .released());
    engine.settle(Duration::from_secs(2)).await;
    for i in 0..3 {
        assert!(slots_held_on(&fleet, i, pair.id).is_empty(), "master {i}");
    }
    let again = take(&engine, "again", permits(3, 2)).await;
    assert!(again.lease().is_some(), "both slots freed: {again:?}");
}

/// A lease's set of slots is inspected and forced one slot at a time: naming the set is
/// refused.
#[tokio::test]
async fn a_set_of_slots_is_not_one_lock_to_inspect_or_force() {
    let fleet = TestFleet::start(1);
    let engine = fleet.engine().await;
    let set = lock_name("pool", LockKind::Slots([0, 1].into_iter().collect()));
    let inspected = engine.inspect(&set).await;
    assert!(
        matches!(inspected, Err(Error::InvalidResource(_))),
        "{inspected:?}"
    );
    let forced = engine
        .force_release(&set, "ops", "test", &Default::default())
        .await;
    assert!(
        matches!(forced, Err(Error::InvalidResource(_))),
        "{forced:?}"
    );
    let one = lock_name("pool", LockKind::Slot(1));
    assert!(engine.inspect(&one).await.is_ok());
}

/// Permits outside 1 to the limit are refused before anything is sent.
#[tokio::test]
async fn permits_outside_one_to_the_limit_are_refused() {
    let fleet = TestFleet::start(1);
    let engine = fleet.engine().await;
    for (limit, count) in [(3, 0), (3, 4), (65, 2)] {
        let refused = engine
            .acquire_permits("pool", "o", TTL, permits(limit, count))
            .await;
        assert!(
            matches!(
                refused,
                Err(Error::InvalidPermits(_) | Error::InvalidLimit(_))
            ),
            "{limit}/{count}: {refused:?}"
        );
    }
    let keys = fleet.command(0, &["KEYS", "redlease:sem:*"]).strings();
    assert!(keys.is_empty(), "{keys:?}");
}

/// A master counts for a lease of two permits only where it holds both slots: with one slot
/// gone from two masters of five, three still hold both and the lease renews; with one gone
/// from a third master, only two do, and the renewal fails although every slot alone is
/// still held on a majority.
#[tokio::test]
async fn a_master_counts_only_where_it_holds_every_slot() {
    let fleet = TestFleet::start(5);
    let engine = fleet.engine().await;
    let pair = take(&engine, "pair", permits(2, 2)).await;
    let pair = pair.lease().expect("granted").clone();
    let [a, b]: [u32; 2] = slots_of(&pair)
        .iter()
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    let slot = |n: u32| format!("redlease:sem:pool:{n}");
    fleet.command(0, &["DEL", &slot(a)]);
    fleet.command(1, &["DEL", &slot(b)]);
    let renewed = engine.extend(&pair.resource, pair.id, TTL).await.unwrap();
    assert!(
        matches!(renewed, ExtendOutcome::Extended(_)),
        "three of five hold both: {renewed:?}"
    );
    fleet.command(2, &["DEL", &slot(a)]);
    // Slot a is still held on masters 1, 3, 4 and slot b on 0, 2, 3, 4: a majority each.
    let renewed = engine.extend(&pair.resource, pair.id, TTL).await.unwrap();
    assert!(
        matches!(renewed, ExtendOutcome::NoQuorum(_) | ExtendOutcome::Lost(_)),
        "only two of five hold both: {renewed:?}"
    );
}

/// A lease of two permits whose slots no quorum of masters gave whole is refused, even where
/// each slot alone could be had: here one master has slot 0 held, another slot 1, and the
/// third, which gave both, has its claims taken back.
#[tokio::test]
async fn permits_no_quorum_gave_whole_are_refused_and_taken_back() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let value = |owner: &str| format!("{}\u{1f}2", LeaseId::random().value_for(owner));
    fleet.command(
        0,
        &["SET", "redlease:sem:pool:0", &value("x"), "PX", "10000"],
    );
    fleet.command(
        1,
        &["SET", "redlease:sem:pool:1", &value("y"), "PX", "10000"],
    );
    let outcome = take(&engine, "pair", permits(2, 2)).await;
    assert!(outcome.lease().is_none(), "{outcome:?}");
    engine.settle(Duration::from_secs(2)).await;
    let left = fleet.command(2, &["KEYS", "redlease:sem:pool:*"]).strings();
    assert!(
        left.is_empty(),
        "claims left on the master that gave both: {left:?}"
    );
    // One permit is had: slot 0 is free on masters 1 and 2, slot 1 on 0 and 2, and master 2
    // gives whichever the lease's order offers first, which one of the others gives too.
    let one = engine.acquire_permit("pool", "one", TTL, 2).await.unwrap();
    assert!(one.lease().is_some(), "{one:?}");
}

/// A shadow of a lease of two permits reserves both slots where the lease stands or they are
/// free, and none where another lease holds one of them.
#[tokio::test]
async fn a_shadow_reserves_every_slot_or_none() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let pair = take(&engine, "pair", permits(3, 2)).await;
    let pair = pair.lease().expect("granted").clone();
    let held: Vec<u32> = slots_of(&pair).iter().collect();
    let slot = |n: u32| format!("redlease:sem:pool:{n}");
    // Master 0 lost the lease's keys (restarted empty); so did master 1, where another lease
    // has since taken one of the two slots.
    fleet.command(0, &["DEL", &slot(held[0]), &slot(held[1])]);
    fleet.command(1, &["DEL", &slot(held[0]), &slot(held[1])]);
    let other = format!("{}\u{1f}3", LeaseId::random().value_for("other"));
    fleet.command(1, &["SET", &slot(held[1]), &other, "PX", "10000"]);
    let shadow = engine
        .reserve_shadow(
            &pair.resource,
            pair.id,
            "pair\u{1f}3",
            Duration::from_millis(900),
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    assert!(matches!(shadow, ExtendOutcome::Extended(_)), "{shadow:?}");
    assert_eq!(slots_held_on(&fleet, 0, pair.id), held, "both set again");
    assert!(
        slots_held_on(&fleet, 1, pair.id).is_empty(),
        "nothing written beside another lease's slot"
    );
    assert_eq!(
        slots_held_on(&fleet, 2, pair.id),
        held,
        "kept where it stands"
    );
}

/// Through a sidecar: `permits: 2` answers the lease's `slots` (and its lowest as `slot`);
/// permits outside 1 to the limit are 400 `invalid_permits`; a force release of one slot
/// revokes the whole lease, its other slot too (`also`), whether its holder is there to
/// acknowledge or gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_lease_of_two_permits_is_forced_whole() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    for bad in [json!(0), json!(4), json!(70)] {
        let body = json!({"owner": "o", "limit": 3, "permits": bad});
        let (status, problem) = sidecar.post_json("/v1/semaphores/pool/acquire", body).await;
        assert_eq!(
            (status, problem["reason"].as_str()),
            (400, Some("invalid_permits")),
            "{bad}: {problem}"
        );
    }
    let body = json!({"owner": "pair", "limit": 3, "permits": 2, "ttl_ms": 5000});
    let (status, lease) = sidecar.post_json("/v1/semaphores/pool/acquire", body).await;
    assert_eq!(status, 200, "{lease}");
    let slots: Vec<u64> = lease["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(slots.len(), 2, "{lease}");
    assert!(slots[0] < slots[1], "ascending: {lease}");
    assert_eq!(lease["slot"].as_u64(), Some(slots[0]), "{lease}");
    assert_eq!(lease["limit"], 3);
    let body = json!({"owner": "more", "limit": 3, "permits": 2});
    let (status, refused) = sidecar.post_json("/v1/semaphores/pool/acquire", body).await;
    assert_eq!(
        (status, refused["reason"].as_str()),
        (409, Some("held")),
        "{refused}"
    );
    let id = lease["lease_id"].as_str().unwrap();
    let (status, renewed) = sidecar
        .post_json(&format!("/v1/leases/{id}/renew"), json!({"ttl_ms": 6000}))
        .await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["slots"], lease["slots"]);

    let (_, semaphore) = sidecar.get("/v1/semaphores/pool").await;
    let listed: Vec<u64> = semaphore["slots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["slot"].as_u64().unwrap())
        .collect();
    assert_eq!(listed, slots, "each slot listed: {semaphore}");
    let force = json!({"actor": "ops", "reason": "stuck", "kind": "semaphore", "slot": slots[1]});
    let (status, forced) = sidecar
        .post_json("/v1/locks/pool/force-release", force)
        .await;
    assert_eq!(status, 200, "{forced}");
    // The holder's sidecar, told at once, released the other slot itself (before the force
    // release looked for it, or after: then it is in `also`).
    assert_eq!(forced["holder_told"], true, "{forced}");
    assert_eq!(forced["removed"][0]["owner"], "pair", "{forced}");
    let (_, after) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(
        (after["state"].as_str(), after["reason"].as_str()),
        (Some("lost"), Some("revoked")),
        "{after}"
    );
    redlease_testkit::assert_eventually!(
        {
            let (_, semaphore) = sidecar.get("/v1/semaphores/pool").await;
            semaphore["slots"] == json!([])
        },
        5,
        "the lease's other slot was not freed"
    );
    let body = json!({"owner": "next", "limit": 3, "permits": 3});
    let (status, all) = sidecar.post_json("/v1/semaphores/pool/acquire", body).await;
    assert_eq!(status, 200, "every slot free again: {all}");
    let id = all["lease_id"].as_str().unwrap();
    let (status, _) = sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(status, 200);

    // A library's lease of two: no sidecar holds it, nobody will acknowledge. Forced once
    // (both slots left revoked: tombstones until the holder's keys would have expired), then
    // again with `holder_gone`, as an operator retries: the retry follows the lease through
    // the tombstones and frees both slots.
    let engine = fleet.engine().await;
    let gone = take(&engine, "gone", permits(3, 2)).await;
    let gone = gone.lease().expect("granted").clone();
    let slot = slots_of(&gone).lowest().unwrap();
    let other = slots_of(&gone).iter().find(|&s| s != slot).map(u64::from);
    for holder_gone in [false, true] {
        let force = json!({"actor": "ops", "reason": "host lost", "kind": "semaphore",
            "slot": slot, "holder_gone": holder_gone});
        let (status, forced) = sidecar
            .post_json("/v1/locks/pool/force-release", force)
            .await;
        assert_eq!(status, 200, "{forced}");
        assert_eq!(forced["also"].as_array().map(Vec::len), Some(1), "{forced}");
        assert_eq!(forced["also"][0]["slot"].as_u64(), other, "{forced}");
        assert_eq!(forced["also"][0]["confirmed"], true, "{forced}");
    }
    let (_, semaphore) = sidecar.get("/v1/semaphores/pool").await;
    assert_eq!(
        semaphore["slots"],
        json!([]),
        "both slots freed: {semaphore}"
    );
}

/// The Rust client asks for several permits and reads their slots; `semaphore run --permits`
/// gives its command every slot (`REDLEASE_SLOTS`) and refuses more permits than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_and_semaphore_run_take_several_permits() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let client = Client::new(&sidecar.base).unwrap();
    let guard = client
        .semaphore("pool", 4)
        .permits(3)
        .owner("client")
        .send()
        .await
        .unwrap();
    assert_eq!(guard.slots().len(), 3, "{:?}", guard.slots());
    assert_eq!(guard.slot(), guard.slots().first().copied());
    let mut taken: Vec<u32> = guard.slots().to_vec();

    let masters = fleet.urls().join(",");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_redlease"))
            .args(["semaphore", "run", "pool", "--limit", "4"])
            .args(args)
            .args(["--", "sh", "-c", "echo \"$REDLEASE_SLOT $REDLEASE_SLOTS\""])
            .env("REDLEASE__MASTERS", &masters)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    // What a run that exits 0 printed: `$REDLEASE_SLOT $REDLEASE_SLOTS`.
    let printed = |args: &[&str]| {
        let output = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        String::from_utf8(output.stdout).unwrap()
    };
    let held = run(&["--permits", "2"]);
    assert_eq!(held.status.code(), Some(3), "one slot is free, two asked");
    let out = printed(&[]);
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(fields.len(), 2, "{out}");
    assert_eq!(fields[0], fields[1], "one slot: {out}");
    taken.push(fields[0].parse().unwrap());
    taken.sort_unstable();
    assert_eq!(taken, [0, 1, 2, 3], "four distinct slots");
    guard.release().await.unwrap();
    let out = printed(&["--permits", "2"]);
    let fields: Vec<&str> = out.split_whitespace().collect();
    let listed: Vec<&str> = fields[1].split(',').collect();
    assert_eq!(listed.len(), 2, "{out}");
    assert_eq!(fields[0], listed[0], "the lowest first: {out}");
    let too_many = run(&["--permits", "5"]);
    assert_eq!(too_many.status.code(), Some(64));
}

/// In a process that hears releases (a sidecar's engine), a waiter for two permits does not
/// hold up a waiter for one behind it: with one slot free, the single permit is granted at
/// once, and the pair once the holder's two slots are released.
#[tokio::test]
async fn a_waiter_for_several_permits_does_not_hold_up_one_for_a_single_permit() {
    let fleet = TestFleet::start(3);
    let engine = Arc::new(fleet.engine_hearing_releases(Default::default()).await);
    let holder = take(&engine, "holder", permits(3, 2)).await;
    let holder = holder.lease().expect("two of three").clone();
    let wait = Duration::from_secs(5);
    let pair = {
        let engine = Arc::clone(&engine);
        tokio::spawn(async move {
            let outcome = engine.acquire_permit_with_wait("pool", "pair", TTL, permits(3, 2), wait);
            (outcome.await.unwrap(), Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    let single = engine.acquire_permit_with_wait("pool", "single", TTL, permits(3, 1), wait);
    let single = single.await.unwrap();
    assert!(single.lease().is_some(), "{single:?}");
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the single permit waited {took:?}"
    );
    let released = Instant::now();
    engine.release(&holder.resource, holder.id).await.unwrap();
    let (pair, granted_at) = pair.await.unwrap();
    assert!(pair.lease().is_some(), "{pair:?}");
    assert!(granted_at >= released, "the pair beside the holder");
}

/// A force release of a slot naming a lease that does not hold it revokes nothing, and does
/// not follow that lease to the slots it does hold.
#[tokio::test]
async fn a_force_naming_another_lease_follows_it_nowhere() {
    let fleet = TestFleet::start(3);
    let engine = fleet.engine().await;
    let pair = take(&engine, "pair", permits(3, 2)).await;
    let pair = pair.lease().expect("two of three").clone();
    let single = take(&engine, "single", permits(3, 1)).await;
    let single = single.lease().expect("the third").clone();
    let named = redlease::ForceOptions {
        lease_id: Some(pair.id),
        holder_gone: true,
    };
    let forced = engine
        .force_release(&single.resource, "ops", "wrong lease", &named)
        .await
        .unwrap();
    assert_eq!(forced.verdict, redlease::ForceVerdict::Mismatch);
    assert!(forced.also.is_empty(), "{:?}", forced.also);
    let renewed = engine.extend(&pair.resource, pair.id, TTL).await.unwrap();
    assert!(matches!(renewed, ExtendOutcome::Extended(_)), "{renewed:?}");
}

//! Re-entry of a lease by its id, through real HTTP against real masters: a hold carries the
//! lease's token and keeps nothing held on its own, its release touches no master, a stale
//! retry frees nothing newer, and the owner name is no key to re-enter by.

mod client;
mod faults;
mod retention;

use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};

/// Acquires `resource` for `owner` (a 5 s TTL), insists on a grant, and returns the lease.
async fn held(sidecar: &TestSidecar, resource: &str, owner: &str) -> Value {
    let body = json!({"owner": owner, "ttl_ms": 5000});
    let (status, lease) = sidecar.acquire(resource, body).await;
    assert_eq!(status, 200, "{lease}");
    lease
}

fn text(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap().to_string()
}

/// Re-enters lease `id`, insists on a hold, and returns the answer.
async fn reentered(sidecar: &TestSidecar, id: &str) -> Value {
    let (status, answer) = sidecar.post(&format!("/v1/leases/{id}/reenter")).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The lease `id` as `GET` shows it.
async fn lease(sidecar: &TestSidecar, id: &str) -> Value {
    let (status, view) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(status, 200, "{view}");
    view
}

/// The masters whose lock key of `resource` carries the lease `id`.
fn masters_holding(fleet: &TestFleet, resource: &str, id: &str) -> usize {
    let key = format!("redlease:lock:{resource}");
    let value = format!("{id}|");
    let holds = |i: usize| {
        let stored = fleet.command(i, &["GET", &key]).bulk();
        stored.is_some_and(|stored| stored.starts_with(&value))
    };
    (0..fleet.servers.len()).filter(|&i| holds(i)).count()
}

/// A hold carries the lease's own fencing token and the renewal's validity; the count rises
/// with each re-entry and falls with each hold released; releasing a hold keeps the lock held
/// (another owner still gets 409 `held`, every master still carries the lease); a repeated
/// release of the same hold is a 200 that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_has_the_lease_token_and_its_release_keeps_the_lock() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let outer = held(&sidecar, "job", "a").await;
    let (id, token) = (text(&outer, "lease_id"), outer["fencing_token"].clone());
    assert_eq!(outer["holds"], 0);
    let body = json!({"ttl_ms": 4000});
    let (status, first) = sidecar
        .post_json(&format!("/v1/leases/{id}/reenter"), body)
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (&first["lease_id"], &first["fencing_token"]),
        (&json!(id), &token)
    );
    assert_eq!(
        (&first["holds"], &first["state"]),
        (&json!(1), &json!("held"))
    );
    assert_eq!(first["ttl_ms"], 4000, "the re-entry's renewal set no TTL");
    assert!(first["validity_ms"].as_u64().unwrap() > 3000, "{first}");
    let second = reentered(&sidecar, &id).await;
    assert_eq!(
        (&second["fencing_token"], &second["holds"]),
        (&token, &json!(2))
    );
    let (h1, h2) = (text(&first, "hold_id"), text(&second, "hold_id"));
    assert!(h1 != h2 && h1 != id && h1.len() == 32, "{h1} {h2} {id}");
    assert_eq!(lease(&sidecar, &id).await["holds"], 2);

    let (status, released) = sidecar.delete(&format!("/v1/leases/{h1}")).await;
    assert_eq!(status, 200, "{released}");
    let expected =
        json!({"hold_id": h1, "holds": 1, "reason": null, "released": true, "state": "held"});
    assert_eq!(released, expected);
    let (status, again) = sidecar.delete(&format!("/v1/leases/{h1}")).await;
    assert_eq!(
        (status, &again["released"], &again["holds"]),
        (200, &json!(false), &json!(1))
    );

    let (status, refused) = sidecar.acquire("job", json!({"owner": "b"})).await;
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("held")),
        "{refused}"
    );
    let view = lease(&sidecar, &id).await;
    assert_eq!(
        (&view["state"], &view["holds"]),
        (&json!("held"), &json!(1))
    );
    assert_eq!(masters_holding(&fleet, "job", &id), 3);
    let (status, _) = sidecar.delete(&format!("/v1/leases/{h2}")).await;
    assert_eq!(status, 200);
    assert_eq!(lease(&sidecar, &id).await["holds"], 0);
    assert_eq!(
        masters_holding(&fleet, "job", &id),
        3,
        "a hold release freed the lock"
    );
}

/// `DELETE` of the lease frees the lock with holds still open and closes them all; their
/// release then answers `released: false` with the lease's state, and only `DELETE` takes a
/// hold id (`GET`, renew and re-entry answer 404 to one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_the_lease_frees_the_lock_with_holds_open() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = text(&held(&sidecar, "job", "a").await, "lease_id");
    let hold = text(&reentered(&sidecar, &id).await, "hold_id");
    reentered(&sidecar, &id).await;
    for path in [
        format!("/v1/leases/{hold}"),
        format!("/v1/leases/{hold}/renew"),
    ] {
        let (status, _) = match path.ends_with("renew") {
            true => sidecar.post(&path).await,
            false => sidecar.get(&path).await,
        };
        assert_eq!(status, 404, "{path}");
    }
    let (status, refused) = sidecar.post(&format!("/v1/leases/{hold}/reenter")).await;
    assert_eq!((status, &refused["reason"]), (404, &json!("unknown_lease")));

    let (status, released) = sidecar.delete(&format!("/v1/leases/{id}")).await;
    assert_eq!(
        (status, &released["released"]),
        (200, &json!(true)),
        "{released}"
    );
    assert!(released.get("hold_id").is_none(), "{released}");
    assert_eq!(masters_holding(&fleet, "job", &id), 0);
    let view = lease(&sidecar, &id).await;
    assert_eq!(
        (&view["state"], &view["holds"]),
        (&json!("released"), &json!(0))
    );
    let (status, other) = sidecar.acquire("job", json!({"owner": "b"})).await;
    assert_eq!(status, 200, "{other}");
    let (status, late) = sidecar.delete(&format!("/v1/leases/{hold}")).await;
    assert_eq!(status, 200, "{late}");
    assert_eq!(
        (&late["released"], &late["state"]),
        (&json!(false), &json!("released"))
    );
    assert_eq!(masters_holding(&fleet, "job", &text(&other, "lease_id")), 3);
}

/// A stale retry: lease A and its hold H; A released; lease B of another owner takes the
/// resource. Replaying `DELETE H` and `DELETE A` leaves B held on every master (a quorum
/// and more), read from the masters' keys themselves, and the sidecar still says B is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_retry_never_frees_a_newer_lease() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let a = text(&held(&sidecar, "r", "a").await, "lease_id");
    let hold = text(&reentered(&sidecar, &a).await, "hold_id");
    let (status, released) = sidecar.delete(&format!("/v1/leases/{a}")).await;
    assert_eq!((status, &released["released"]), (200, &json!(true)));
    let b = text(&held(&sidecar, "r", "b").await, "lease_id");
    assert_eq!(masters_holding(&fleet, "r", &b), 3);

    for replay in [&hold, &a, &hold, &a] {
        let (status, answer) = sidecar.delete(&format!("/v1/leases/{replay}")).await;
        assert_eq!(
            (status, &answer["released"]),
            (200, &json!(false)),
            "{answer}"
        );
    }
    assert_eq!(
        masters_holding(&fleet, "r", &b),
        3,
        "a replay freed the newer lease"
    );
    let view = lease(&sidecar, &b).await;
    assert_eq!(
        (&view["state"], &view["owner"]),
        (&json!("held"), &json!("b"))
    );
    let (status, refused) = sidecar.acquire("r", json!({"owner": "c"})).await;
    assert_eq!((status, &refused["reason"]), (409, &json!("held")));
}

/// The owner name is no key to re-enter by: a second acquisition by the same owner is a new
/// lease and gets 409 `held`, and re-entry needs the lease's own id (an unknown one is 404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_owner_acquiring_again_is_no_reentry() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = text(&held(&sidecar, "job", "a").await, "lease_id");
    let (status, refused) = sidecar
        .acquire("job", json!({"owner": "a", "ttl_ms": 5000}))
        .await;
    assert_eq!(
        (status, &refused["reason"]),
        (409, &json!("held")),
        "{refused}"
    );
    assert_eq!(lease(&sidecar, &id).await["holds"], 0);
    let stranger = "0123456789abcdef0123456789abcdef";
    let (status, unknown) = sidecar
        .post(&format!("/v1/leases/{stranger}/reenter"))
        .await;
    assert_eq!((status, &unknown["reason"]), (404, &json!("unknown_lease")));
    assert_eq!(reentered(&sidecar, &id).await["holds"], 1);
}

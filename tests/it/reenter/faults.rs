//! Re-entry when the masters cannot prove the lease: a majority frozen (SIGSTOP), the lease
//! force-released, lost or released. A refused re-entry never opens a hold.

use std::time::Duration;

use redlease_testkit::assert_eventually;
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use serde_json::{json, Value};
use tokio::time::{timeout, Instant};

use super::{held, lease, reentered, text};

/// POSTs a re-entry of `id`, bounded in time: its status and body.
async fn reenter(sidecar: &TestSidecar, id: &str) -> (u16, Value) {
    let path = format!("/v1/leases/{id}/reenter");
    timeout(Duration::from_secs(8), sidecar.post(&path))
        .await
        .unwrap_or_else(|_| panic!("the re-entry of {id} took over 8 s"))
}

/// The value of the sample named exactly `series` in the sidecar's `/metrics`.
async fn sample(sidecar: &TestSidecar, series: &str) -> f64 {
    let url = format!("{}/metrics", sidecar.base);
    let text = sidecar
        .http
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    crate::support::sample(&text, series)
}

/// With 3 of 5 masters frozen a re-entry answers 503 `no_quorum` and opens no hold (the
/// count stays as it was); once they resume, a re-entry opens one with the same token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_without_a_quorum_opens_no_hold() {
    let mut fleet = TestFleet::start(5);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let outer = held(&sidecar, "job", "a").await;
    let (id, token) = (text(&outer, "lease_id"), outer["fencing_token"].clone());
    assert_eq!(reentered(&sidecar, &id).await["holds"], 1);
    let refusals = r#"lock_reentries_total{outcome="no_quorum"}"#;
    let refused_before = sample(&sidecar, refusals).await;
    for i in 0..3 {
        fleet.servers[i].pause();
    }
    let frozen = Instant::now();
    let (status, refused) = reenter(&sidecar, &id).await;
    let view = lease(&sidecar, &id).await;
    let counted = sample(&sidecar, refusals).await;
    for i in 0..3 {
        fleet.servers[i].resume();
    }
    assert_eq!(
        (status, &refused["reason"]),
        (503, &json!("no_quorum")),
        "{refused}"
    );
    assert!(refused.get("hold_id").is_none(), "{refused}");
    assert_eq!(view["holds"], 1, "a refused re-entry opened a hold: {view}");
    assert!(
        counted > refused_before,
        "{refusals} {refused_before} → {counted}"
    );
    assert!(
        frozen.elapsed() < Duration::from_secs(4),
        "frozen {:?}",
        frozen.elapsed()
    );

    let (status, entered) = reenter(&sidecar, &id).await;
    assert_eq!(
        status, 200,
        "no re-entry after the masters resumed: {entered}"
    );
    assert_eq!(
        (&entered["fencing_token"], &entered["holds"]),
        (&token, &json!(2))
    );
    assert_eq!(entered["state"], "held");
}

/// A force-released lease answers 410 `lease_lost` to a re-entry, never a hold, and its open
/// hold is closed with it (a release of it answers `released: false`, state `lost`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_of_a_force_released_lease_answers_its_end() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let id = text(&held(&sidecar, "job", "a").await, "lease_id");
    let hold = text(&reentered(&sidecar, &id).await, "hold_id");
    let body = json!({"actor": "ops", "reason": "test"});
    let (status, forced) = sidecar.post_json("/v1/locks/job/force-release", body).await;
    assert_eq!(status, 200, "{forced}");
    assert_eventually!(
        lease(&sidecar, &id).await["state"] == "lost",
        3,
        "the revocation never reached the lease"
    );
    let (status, refused) = reenter(&sidecar, &id).await;
    assert_eq!(
        (status, &refused["reason"]),
        (410, &json!("lease_lost")),
        "{refused}"
    );
    let view = lease(&sidecar, &id).await;
    assert_eq!(
        (&view["reason"], &view["holds"]),
        (&json!("revoked"), &json!(0))
    );
    let (status, closed) = sidecar.delete(&format!("/v1/leases/{hold}")).await;
    assert_eq!(status, 200, "{closed}");
    assert_eq!(
        (&closed["released"], &closed["state"]),
        (&json!(false), &json!("lost"))
    );
}

/// A lease lost for want of renewal, and one released, answer 410 `lease_lost` to a
/// re-entry and show no hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_of_a_lost_or_released_lease_answers_its_end() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let body = json!({"owner": "a", "ttl_ms": 300, "auto_renew": false});
    let (status, short) = sidecar.acquire("short", body).await;
    assert_eq!(status, 200, "{short}");
    let short = text(&short, "lease_id");
    assert_eventually!(
        lease(&sidecar, &short).await["state"] == "lost",
        3,
        "a 300 ms lease without renewal never ran out"
    );
    let released = text(&held(&sidecar, "done", "a").await, "lease_id");
    let (status, _) = sidecar.delete(&format!("/v1/leases/{released}")).await;
    assert_eq!(status, 200);
    for id in [short, released] {
        let (status, refused) = reenter(&sidecar, &id).await;
        assert_eq!(
            (status, &refused["reason"]),
            (410, &json!("lease_lost")),
            "{refused}"
        );
        assert_eq!(lease(&sidecar, &id).await["holds"], 0);
    }
}

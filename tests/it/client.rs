//! `redlease::client` against a sidecar on real masters: tokens and lease ids, waiting,
//! release by call and on drop, loss reported through the event stream, errors by `reason`.

use std::time::Duration;

use redlease::client::{Client, ClientError, LeaseEnd};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use tokio::time::{timeout, Instant};

/// A sidecar on `fleet` and a client of it.
async fn sidecar(fleet: &TestFleet) -> (TestSidecar, Client) {
    let sidecar = TestSidecar::start(fleet, &[]).await;
    let client = Client::new(&sidecar.base).unwrap();
    (sidecar, client)
}

/// A lock gives a fencing token and a lease id the sidecar knows, for a resource name that
/// needs escaping in a URL; releasing it clears every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_has_a_fencing_token_and_a_lease_id() {
    let fleet = TestFleet::start(3);
    let (sidecar, client) = sidecar(&fleet).await;
    let resource = "billing/q1 2024?#";
    let guard = client
        .lock(resource)
        .owner("worker-1")
        .send()
        .await
        .unwrap();
    assert!(guard.fencing_token() >= 1);
    let id = guard.lease_id().to_string();
    assert_eq!(id.len(), 32);
    assert!(id
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_uppercase()));
    assert_eq!(guard.resource(), resource);
    let (status, view) = sidecar.get(&format!("/v1/leases/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(view["owner"], "worker-1");
    assert_eq!(view["fencing_token"], guard.fencing_token());
    let key = format!("redlease:lock:{resource}");
    assert_eq!(fleet.lock_keys(0), [key]);
    assert_eq!(
        client.lease(&id).await.unwrap().fencing_token,
        guard.fencing_token()
    );
    assert!(guard.release().await.unwrap());
    assert_eq!(fleet.lock_keys_on(&[0, 1, 2]), Vec::<String>::new());
}

/// Every resource name reaches the sidecar as given: names that are dot segments, or that
/// hold characters a URL drops or treats apart (a tab the sidecar refuses, `%`, `[`), are
/// each locked under their own name, or refused, never taken for another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_names_reach_the_sidecar_as_given() {
    let fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    for resource in [
        ".",
        "..",
        "a.",
        "..a",
        "100%",
        "[v]^|{}",
        "é ü",
        "a;b=c:d@e",
    ] {
        let guard = client.lock(resource).send().await.unwrap();
        assert_eq!(guard.resource(), resource);
        let key = format!("redlease:lock:{resource}");
        assert_eq!(fleet.lock_keys(0), [key], "{resource:?}");
        assert!(guard.release().await.unwrap());
    }
    let refused = client.lock("a\tb").send().await.unwrap_err();
    assert_eq!(refused.reason(), Some("invalid_resource"), "{refused:?}");
    assert_eq!(fleet.lock_keys(0), Vec::<String>::new());
}

/// A second lock that waits gets the resource once the first is released, with a larger
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_gets_a_larger_token_after_release() {
    let fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    let first = client.lock("job").send().await.unwrap();
    let waiting = client.clone();
    let second = tokio::spawn(async move {
        let request = waiting.lock("job").wait(Duration::from_secs(5));
        request.send().await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the second lock did not wait");
    let first_token = first.fencing_token();
    assert!(first.release().await.unwrap());
    let second = timeout(Duration::from_secs(5), second).await.unwrap();
    let second = second.unwrap().unwrap();
    assert!(second.fencing_token() > first_token);
}

/// Dropping a guard releases its lease: the next lock gets the resource long before the
/// lease's TTL would have run out. The default owner names the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_releases_the_lock() {
    let fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    let guard = client
        .lock("job")
        .ttl(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let owner = format!("client:{}@", std::process::id());
    assert!(guard.info().owner.starts_with(&owner), "{:?}", guard.info());
    drop(guard);
    let start = Instant::now();
    let again = client.lock("job").wait(Duration::from_secs(5)).send();
    again.await.unwrap();
    let took = start.elapsed();
    assert!(took < Duration::from_secs(2), "waited {took:?}");
}

/// A force-released lease is reported lost (`revoked`) as soon as the sidecar hears the
/// revocation; releasing it then answers `false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_after_a_force_release() {
    let fleet = TestFleet::start(3);
    let (sidecar, client) = sidecar(&fleet).await;
    let guard = client
        .lock("job")
        .ttl(Duration::from_millis(1000))
        .send()
        .await
        .unwrap();
    let lost = guard.lost();
    assert_eq!(guard.ended(), None);
    let body = serde_json::json!({"actor": "ops", "reason": "test"});
    let (status, forced) = sidecar.post_json("/v1/locks/job/force-release", body).await;
    assert_eq!(status, 200, "{forced}");
    let end = timeout(Duration::from_secs(3), lost).await.unwrap();
    let revoked = LeaseEnd::Lost {
        reason: "revoked".into(),
    };
    assert_eq!(end, revoked);
    assert_eq!(guard.ended(), Some(revoked));
    assert!(!guard.release().await.unwrap());
}

/// A `lost()` awaited beside the work hears of the guard's own release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_hears_of_the_guards_own_release() {
    let fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    let guard = client.lock("job").send().await.unwrap();
    let lost = guard.lost();
    assert!(guard.release().await.unwrap());
    let end = timeout(Duration::from_secs(3), lost).await.unwrap();
    let released = LeaseEnd::Released {
        reason: "released".into(),
    };
    assert_eq!(end, released);
}

/// With a majority of masters frozen, nothing renews the lease: it ends once its validity
/// has run out. The sidecar's `lost` event and the guard's own watch of the validity fall due
/// at the same instant, so either may tell first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_a_majority_freezes() {
    let mut fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    let guard = client
        .lock("job")
        .ttl(Duration::from_millis(1000))
        .send()
        .await
        .unwrap();
    fleet.servers[0].pause();
    fleet.servers[1].pause();
    let end = timeout(Duration::from_secs(4), guard.lost()).await;
    fleet.servers[0].resume();
    fleet.servers[1].resume();
    let end = end.unwrap();
    let expired = LeaseEnd::Lost {
        reason: "expired".into(),
    };
    assert!(end == expired || end == LeaseEnd::Expired, "{end:?}");
}

/// A sidecar that shuts down releases the lease and says so on the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_shutting_down_ends_the_lease() {
    let fleet = TestFleet::start(3);
    let (mut sidecar, client) = sidecar(&fleet).await;
    let guard = client.lock("job").send().await.unwrap();
    // The event stream is open once the sidecar counts a watcher (the stream reports the
    // release only to a watcher that is there).
    let lost = guard.lost();
    tokio::time::sleep(Duration::from_millis(200)).await;
    sidecar.shut_down().await;
    let end = timeout(Duration::from_secs(3), lost).await.unwrap();
    let shutdown = LeaseEnd::Released {
        reason: "shutdown".into(),
    };
    assert_eq!(end, shutdown);
}

/// A release that too few masters confirm says the sidecar keeps trying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_short_of_a_quorum_is_reported_as_releasing() {
    let mut fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    let request = client.lock("job").ttl(Duration::from_secs(5));
    let guard = request.auto_renew(false).send().await.unwrap();
    fleet.servers[0].pause();
    fleet.servers[1].pause();
    let released = timeout(Duration::from_secs(10), guard.release()).await;
    fleet.servers[0].resume();
    fleet.servers[1].resume();
    let error = released.unwrap().unwrap_err();
    assert!(matches!(error, ClientError::Releasing { .. }), "{error:?}");
    assert_eq!(error.reason(), Some("no_quorum"));
}

/// Refusals map to their variants and keep the API's `reason`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_the_api_reason() {
    let fleet = TestFleet::start(3);
    let (_sidecar, client) = sidecar(&fleet).await;
    let error = client.lock("bad\u{1}name").send().await.unwrap_err();
    let ClientError::Invalid { status, reason, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!((*status, reason.as_str()), (400, "invalid_resource"));
    let short = client.lock("job").ttl(Duration::from_millis(5)).send();
    let error = short.await.unwrap_err();
    assert_eq!(error.reason(), Some("invalid_ttl"), "{error:?}");

    let _held = client.lock("job").send().await.unwrap();
    let error = client.lock("job").send().await.unwrap_err();
    assert!(matches!(error, ClientError::Held { .. }), "{error:?}");
    assert_eq!((error.reason(), error.status()), (Some("held"), Some(409)));

    let unknown = client.lease("00000000000000000000000000000000").await;
    assert!(matches!(unknown, Err(ClientError::UnknownLease { .. })));
    let nobody = Client::new("http://127.0.0.1:1").unwrap();
    let refused = nobody.lock("job").send().await;
    assert!(matches!(refused, Err(ClientError::Transport(_))));
    for url in ["ftp://127.0.0.1", "not a url", "http:/"] {
        let error = Client::new(url).unwrap_err();
        assert!(
            matches!(error, ClientError::InvalidUrl { .. }),
            "{url}: {error:?}"
        );
    }
}

/// A kept-alive connection the sidecar closed while idle is replaced without the caller
/// seeing it: the next acquisition goes out on a new connection and is granted once (the
/// old one is not used, and nothing is sent twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_sidecar_closed_while_idle_is_replaced() {
    let fleet = TestFleet::start(3);
    let idle = [("REDLEASE__HTTP__IDLE_TIMEOUT_MS", "200")];
    let sidecar = TestSidecar::start(&fleet, &idle).await;
    let client = Client::new(&sidecar.base).unwrap();
    for round in 0..3 {
        let guard = client
            .lock("idle-closed")
            .owner("w")
            .events(false)
            .auto_renew(false)
            .send()
            .await
            .unwrap_or_else(|error| panic!("round {round}: {error}"));
        assert!(guard.release().await.unwrap(), "round {round}");
        // Past the sidecar's idle timeout: it closes the connection the client keeps.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(fleet.data_keys(0), Vec::<String>::new());
}

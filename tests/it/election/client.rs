//! `redlease::client`'s elections against a sidecar on real masters: a campaign's guard
//! carries the term and value, a rival is `Held`, the leader proclaims, anyone reads the
//! leader, and an observation tells every change with terms that never go back.

use std::time::Duration;

use redlease::client::{Client, ClientError, ElectionState};
use redlease_testkit::sidecar::TestSidecar;
use redlease_testkit::TestFleet;
use tokio::time::timeout;

/// A campaign's guard has the term (its fencing token) and value; a rival is refused `Held`;
/// the leader read and an observation agree; a proclamation keeps the term and is observed;
/// a lock's guard does not proclaim; the resignation (release) is observed as a vacancy, and
/// the next leader's term, larger, is observed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_proclaims_and_an_observation_follows() {
    let fleet = TestFleet::start(3);
    let sidecar = TestSidecar::start(&fleet, &[]).await;
    let client = Client::new(&sidecar.base).unwrap();
    let mut observation = client.observe("db primary").await.unwrap();
    let wait = Duration::from_secs(3);
    let first = next_known(&mut observation, wait).await;
    assert_eq!(first.state, ElectionState::Vacant);

    let mut leader = client
        .campaign("db primary", "10.0.0.1:5432")
        .owner("node-1")
        .send()
        .await
        .unwrap();
    let term = leader.term().unwrap();
    assert_eq!(term, leader.fencing_token());
    assert_eq!(leader.value(), Some("10.0.0.1:5432"));
    let rival = client.campaign("db primary", "10.0.0.2:5432").send().await;
    assert!(matches!(rival, Err(ClientError::Held { .. })), "{rival:?}");
    let read = client.leader("db primary").await.unwrap();
    assert_eq!((read.state, read.term), (ElectionState::Leader, Some(term)));
    assert_eq!(read.owner.as_deref(), Some("node-1"));
    let seen = next_known(&mut observation, wait).await;
    assert_eq!(
        (seen.term, seen.value.as_deref()),
        (Some(term), Some("10.0.0.1:5432"))
    );

    let proclaimed = leader.proclaim("10.0.0.3:5432").await.unwrap();
    assert_eq!(proclaimed.term, Some(term));
    assert_eq!(leader.value(), Some("10.0.0.3:5432"));
    let seen = next_known(&mut observation, wait).await;
    assert_eq!(
        (seen.term, seen.value.as_deref()),
        (Some(term), Some("10.0.0.3:5432"))
    );

    let mut lock = client.lock("db primary").send().await.unwrap();
    let refused = lock.proclaim("x").await;
    assert_eq!(refused.unwrap_err().reason(), Some("not_a_campaign"));
    assert_eq!(lock.term(), None);

    assert!(leader.release().await.unwrap());
    let seen = next_known(&mut observation, wait).await;
    assert_eq!(seen.state, ElectionState::Vacant);
    let next = client.campaign("db primary", "b").send().await.unwrap();
    let seen = next_known(&mut observation, wait).await;
    assert_eq!(seen.term, next.term());
    assert!(next.term().unwrap() > term);
}

/// The observation's next event that is not `unknown`: a read between a campaign's grant and
/// the writing of its term, or during a proclamation or a release, can show `unknown` first.
async fn next_known(
    observation: &mut redlease::client::Observation,
    wait: Duration,
) -> redlease::client::Election {
    loop {
        let seen = timeout(wait, observation.next()).await.unwrap().unwrap();
        if seen.state != ElectionState::Unknown {
            return seen;
        }
    }
}

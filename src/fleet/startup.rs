//! Start-up of a fleet: every master connected in parallel, the survey of the fleet's history
//! (marked, fresh or unknown) decided as soon as the answers allow, two entries that are one
//! server refused, a master that refuses TLS or a permission refused ([`permissions`]), and a
//! return as soon as a quorum of masters takes lock writes — a frozen minority (it accepts TCP
//! and never answers) costs the caller nothing.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::ClientLike;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::permissions::{self, Refusal};
use super::quarantine::Identity;
use super::{Fleet, History, Node};
use crate::keys::Keyspace;
use crate::Error;

/// How often the start-up looks at the masters' readiness.
const LOOK_INTERVAL: Duration = Duration::from_millis(2);

/// Refuses two entries that resolve to one server address (`host:port`, the database number
/// aside): one Redis counted twice would make a "quorum" of fewer servers than it claims.
pub(super) async fn check_distinct_addresses(
    targets: &[(String, String, u16)],
) -> Result<(), Error> {
    let mut seen: Vec<(usize, HashSet<SocketAddr>)> = Vec::new();
    for (index, (url, host, port)) in targets.iter().enumerate() {
        // A name that does not resolve now cannot be compared; it is caught by run_id when
        // it answers.
        let Ok(addresses) = tokio::net::lookup_host((host.as_str(), *port)).await else {
            continue;
        };
        let addresses: HashSet<SocketAddr> = addresses.collect();
        if let Some((other, _)) = seen.iter().find(|(_, a)| !a.is_disjoint(&addresses)) {
            return Err(Error::DuplicateMaster {
                url: url.clone(),
                other: targets[*other].0.clone(),
            });
        }
        seen.push((index, addresses));
    }
    Ok(())
}

/// What one master told the start-up survey.
#[derive(Clone, Debug)]
enum Answer {
    /// Still asked.
    Pending,
    /// Did not answer before the start-up's deadline.
    Silent,
    /// Who it is, and the fleet marker it carries (the `run_id` it was made a member under).
    Heard(Identity, Option<String>),
    /// It refused TLS or a permission: the start fails.
    Refused(Refusal),
}

impl Answer {
    fn heard(&self) -> Option<(&Identity, Option<&str>)> {
        match self {
            Self::Heard(identity, marker) => Some((identity, marker.as_deref())),
            _ => None,
        }
    }
}

/// What the start-up survey heard from each master.
struct Survey {
    quorum: usize,
    /// Indexed like the fleet's masters.
    answers: Vec<Answer>,
}

impl Survey {
    fn new(n: usize, quorum: usize) -> Self {
        Self {
            quorum,
            answers: vec![Answer::Pending; n],
        }
    }

    /// Marked as soon as one master carries the marker; fresh once a quorum answered without
    /// it (any majority that ever held the marker meets that quorum); unknown when every
    /// master is done and neither holds.
    fn decision(&self) -> Option<History> {
        let heard = self.answers.iter().filter_map(Answer::heard);
        if heard.clone().any(|(_, marker)| marker.is_some()) {
            return Some(History::Marked);
        }
        if heard.count() >= self.quorum {
            return Some(History::Fresh);
        }
        let pending = |a: &Answer| matches!(a, Answer::Pending);
        (!self.answers.iter().any(pending)).then_some(History::Unknown)
    }

    /// The first master that refused something, and what.
    fn refusal(&self) -> Option<(usize, &Refusal)> {
        self.answers.iter().enumerate().find_map(|(i, a)| match a {
            Answer::Refused(refusal) => Some((i, refusal)),
            _ => None,
        })
    }

    /// The first two masters that answered with the same `run_id`.
    fn duplicate(&self) -> Option<(usize, usize)> {
        let run_ids: Vec<(usize, &str)> = (self.answers.iter().enumerate())
            .filter_map(|(i, a)| Some((i, a.heard()?.0.run_id.as_str())))
            .collect();
        run_ids.iter().enumerate().find_map(|(k, (i, id))| {
            let (j, _) = run_ids[k + 1..].iter().find(|(_, other)| other == id)?;
            Some((*i, *j))
        })
    }
}

/// Surveys the masters as they connect and waits until every master is settled (up,
/// quarantined, or given up on), or — with `FleetOptions::straggler_grace` — a quorum is up,
/// every master that answered is settled and the silent ones had that grace, or
/// `connect_timeout` has passed. Errs when two masters are one server, and when a master
/// refuses TLS or a permission.
pub(super) async fn start(fleet: &Fleet) -> Result<(), Error> {
    let options = fleet.options();
    let deadline = Instant::now() + options.connect_timeout;
    let marker = fleet.keyspace().marker();
    let mut survey = Survey::new(fleet.len(), fleet.quorum());
    let mut asks: FuturesUnordered<_> = (fleet.nodes().iter())
        .map(|node| ask(node, fleet.keyspace(), &marker, deadline))
        .collect();
    let mut decided = false;
    let mut quorum_up_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if !decided {
            if let Some(history) = survey.decision() {
                decided = true;
                adopt_if_fresh(fleet, &survey, history, &marker).await;
                fleet.history.send_replace(Some(history));
            }
        }
        if let Some((i, refusal)) = survey.refusal() {
            return Err(refusal.clone().into_error(fleet.nodes()[i].url()));
        }
        if let Some((i, j)) = survey.duplicate() {
            let url = |k: usize| fleet.nodes()[k].url().to_string();
            return Err(Error::DuplicateMaster {
                url: url(j),
                other: url(i),
            });
        }
        let up = fleet.nodes().iter().filter(|n| n.is_up()).count();
        if up >= fleet.quorum() {
            quorum_up_at.get_or_insert(now);
        }
        let masters = || fleet.nodes().iter().zip(&survey.answers);
        let all_settled = masters().all(|(node, answer)| settled(node, answer, now));
        let answered_settled = masters()
            .filter(|(_, answer)| !matches!(answer, Answer::Pending))
            .all(|(node, answer)| settled(node, answer, now));
        let grace = options.straggler_grace;
        let grace_over = quorum_up_at.zip(grace).is_some_and(|(at, g)| now >= at + g);
        let silent_left_behind = decided && answered_settled && grace_over;
        if (decided && all_settled) || silent_left_behind || now >= deadline {
            break;
        }
        let look = (now + LOOK_INTERVAL).min(deadline);
        tokio::select! {
            Some((index, answer)) = asks.next() => survey.answers[index] = answer,
            _ = tokio::time::sleep_until(look) => {}
        }
    }
    if !decided {
        fleet.history.send_replace(Some(History::Unknown));
    }
    Ok(())
}

/// A master is settled once the survey is done with it and it takes writes, is quarantined,
/// or never answered.
fn settled(node: &Node, answer: &Answer, now: Instant) -> bool {
    match answer {
        Answer::Pending => false,
        Answer::Silent | Answer::Refused(_) => true,
        Answer::Heard(..) => node.is_up() || node.is_quarantined(now),
    }
}

/// Checks that `node` takes TLS and grants every permission, then waits for its connections
/// and asks who it is and whether it carries the marker.
async fn ask(
    node: &Arc<Node>,
    keyspace: &Keyspace,
    marker: &str,
    deadline: Instant,
) -> (usize, Answer) {
    let check = permissions::check(node.wire().target(), keyspace);
    if let Ok(Err(refusal)) = tokio::time::timeout_at(deadline, check).await {
        tracing::error!(
            node = node.index(),
            url = node.url(),
            ?refusal,
            "master refused redlease"
        );
        return (node.index(), Answer::Refused(refusal));
    }
    let question = async {
        node.client().wait_for_connect().await.ok()?;
        node.wire().wait_for_connect().await;
        let left = deadline.saturating_duration_since(Instant::now());
        node.identify(marker, left).await
    };
    let answer = tokio::time::timeout_at(deadline, question).await;
    let Some((identity, marker)) = answer.ok().flatten() else {
        tracing::warn!(
            node = node.index(),
            url = node.url(),
            "master not reachable at start-up; reconnecting in the background"
        );
        return (node.index(), Answer::Silent);
    };
    (node.index(), Answer::Heard(identity, marker))
}

/// A fresh fleet is adopted now: every master that answered gets the marker (its own run_id),
/// so later processes see a marked fleet.
async fn adopt_if_fresh(fleet: &Fleet, survey: &Survey, history: History, marker: &str) {
    if history != History::Fresh {
        return;
    }
    let timeout = fleet.options().connect_timeout;
    let answered = fleet.nodes().iter().zip(&survey.answers);
    let adopt = answered.filter_map(|(node, answer)| {
        let (identity, _) = answer.heard()?;
        Some(node.set_marker(marker, &identity.run_id, timeout))
    });
    let adopted = futures_util::future::join_all(adopt).await;
    tracing::info!(masters = adopted.len(), "fresh fleet adopted");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(run_id: &str, marker: Option<&str>) -> Answer {
        let identity = Identity {
            run_id: run_id.into(),
            uptime: Duration::from_secs(1),
        };
        Answer::Heard(identity, marker.map(String::from))
    }

    /// One marker decides "marked" at once; "fresh" needs a quorum of answers without it;
    /// with too few answers and every master done, nobody can tell.
    #[test]
    fn the_survey_decides_as_soon_as_the_answers_allow() {
        let mut survey = Survey::new(5, 3);
        assert_eq!(survey.decision(), None);
        survey.answers[0] = answer("a", None);
        survey.answers[1] = answer("b", None);
        assert_eq!(survey.decision(), None);
        survey.answers[2] = answer("c", None);
        assert_eq!(survey.decision(), Some(History::Fresh));
        survey.answers[3] = answer("d", Some("d"));
        assert_eq!(survey.decision(), Some(History::Marked));

        let mut silent = Survey::new(5, 3);
        silent.answers = vec![answer("a", None), answer("b", None), Answer::Silent];
        silent.answers.extend([Answer::Silent, Answer::Silent]);
        assert_eq!(silent.decision(), Some(History::Unknown));
    }

    /// Two masters answering with one run_id are one server.
    #[test]
    fn one_run_id_twice_is_a_duplicate() {
        let mut survey = Survey::new(3, 2);
        survey.answers = vec![answer("a", None), answer("b", None), answer("a", None)];
        assert_eq!(survey.duplicate(), Some((0, 2)));
        survey.answers[2] = answer("c", None);
        assert_eq!(survey.duplicate(), None);
    }
}

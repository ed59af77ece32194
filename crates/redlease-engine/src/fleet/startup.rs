//! Start-up of a fleet: every master connected in parallel, the survey of the fleet's birth
//! (born, fresh or unborn) decided as soon as the answers allow, the birth of a fresh fleet
//! (only when every master answered with no history, or by an operator's `fleet init`), two
//! entries that are one server or masters of two fleets refused, a master that refuses TLS or
//! a permission refused ([`permissions`]), and a return as soon as a quorum of masters takes
//! lock writes — a frozen minority (it accepts TCP and never answers) costs the caller nothing.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::ClientLike;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::exclusion::Exclusion;
use super::mark::{agreed, fleet_id, Birth, Conflict, FleetMark};
use super::node::admin::Inspection;
use super::permissions::{self, Refusal};
use super::{BirthRule, Fleet, History, Node};
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
pub(super) enum Answer {
    /// Still asked.
    Pending,
    /// Did not answer before the start-up's deadline.
    Silent,
    /// Who it is, its eviction settings, and the fleet's keys it carries.
    Heard(Box<Inspection>),
    /// It refused TLS or a permission: the start fails.
    Refused(Refusal),
}

impl Answer {
    fn heard(&self) -> Option<&Inspection> {
        match self {
            Self::Heard(read) => Some(read),
            _ => None,
        }
    }
}

impl From<Option<Inspection>> for Answer {
    fn from(read: Option<Inspection>) -> Self {
        read.map_or(Self::Silent, |read| Self::Heard(Box::new(read)))
    }
}

/// What the survey decided about the fleet's birth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    /// Some master carries the marker: the fleet was born, as these markers agree.
    Born(Birth),
    /// Every master the rule asks for answered with no history: the fleet is born now.
    Fresh,
    /// Neither: no master votes until the fleet is born.
    Unborn,
}

/// What the start-up survey heard from each master.
pub(super) struct Survey {
    quorum: usize,
    /// Indexed like the fleet's masters.
    pub(super) answers: Vec<Answer>,
}

impl Survey {
    pub(super) fn new(n: usize, quorum: usize) -> Self {
        Self {
            quorum,
            answers: vec![Answer::Pending; n],
        }
    }

    /// Born as soon as one master carries a marker; fresh once every master answered with no
    /// history (or, for an operator's `fleet init`, once every master answered or went silent,
    /// see [`Survey::init_refusal`]); unborn once every master is done and neither holds.
    pub(super) fn decision(&self, rule: BirthRule) -> Option<Decision> {
        if let Ok(Some(birth)) = self.agreement() {
            return Some(Decision::Born(birth));
        }
        let pending = self.answers.iter().any(|a| matches!(a, Answer::Pending));
        let heard = || self.answers.iter().filter_map(Answer::heard);
        let no_history = heard().all(|read| !read.has_history());
        let all_heard = heard().count() == self.answers.len();
        match rule {
            BirthRule::WhenAllFresh if all_heard && no_history => Some(Decision::Fresh),
            BirthRule::Init { .. } if !pending && self.init_refusal(rule).is_none() => {
                Some(Decision::Fresh)
            }
            _ => (!pending).then_some(Decision::Unborn),
        }
    }

    /// Why an operator's `fleet init` may not birth the fleet: a master shows history, too
    /// few answered, or some did not answer and missing ones are not allowed.
    pub(super) fn init_refusal(&self, rule: BirthRule) -> Option<String> {
        let allow_missing = matches!(
            rule,
            BirthRule::Init {
                allow_missing: true
            }
        );
        let with_history = self
            .answers
            .iter()
            .position(|a| a.heard().is_some_and(Inspection::has_history));
        if let Some(index) = with_history {
            return Some(format!("master {index} already carries fleet history (a marker, a fence counter or a quarantine record)"));
        }
        let heard = self.answers.iter().filter(|a| a.heard().is_some()).count();
        if heard < self.quorum {
            return Some(format!(
                "only {heard} of {} masters answered; a birth needs a quorum ({})",
                self.answers.len(),
                self.quorum
            ));
        }
        let silent: Vec<String> = (self.answers.iter().enumerate())
            .filter(|(_, a)| a.heard().is_none())
            .map(|(i, _)| i.to_string())
            .collect();
        (!silent.is_empty() && !allow_missing).then(|| {
            format!("masters {} did not answer: start them, or allow the birth without them (they are then quarantined when they come)", silent.join(", "))
        })
    }

    /// Every heard marker, parsed (`Err`: its text, unreadable).
    fn marks(&self) -> impl Iterator<Item = (usize, Result<FleetMark, &str>)> {
        let heard = self.answers.iter().enumerate();
        heard.filter_map(|(i, a)| {
            let text = a.heard()?.marker.as_deref()?;
            Some((i, FleetMark::parse(text).ok_or(text)))
        })
    }

    /// The fleet the readable heard markers agree on ([`agreed`]).
    fn agreement(&self) -> Result<Option<Birth>, Conflict> {
        let marks = self.marks().filter_map(|(i, m)| Some((i, m.ok()?)));
        let marks: Vec<(usize, FleetMark)> = marks.collect();
        agreed(marks.iter().map(|(i, m)| (*i, m)))
    }

    /// Two heard masters carrying the markers of two fleets.
    pub(super) fn conflict(&self) -> Option<Conflict> {
        self.agreement().err()
    }

    /// A heard master whose marker nobody can read, and its text.
    pub(super) fn unreadable(&self) -> Option<(usize, String)> {
        self.marks()
            .find_map(|(i, m)| Some((i, m.err()?.to_string())))
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
            .filter_map(|(i, a)| Some((i, a.heard()?.identity.run_id.as_str())))
            .collect();
        run_ids.iter().enumerate().find_map(|(k, (i, id))| {
            let (j, _) = run_ids[k + 1..].iter().find(|(_, other)| other == id)?;
            Some((*i, *j))
        })
    }

    /// The masters that answered, with their `run_id`s.
    pub(super) fn heard_run_ids(&self) -> Vec<(usize, &str)> {
        (self.answers.iter().enumerate())
            .filter_map(|(i, a)| Some((i, a.heard()?.identity.run_id.as_str())))
            .collect()
    }
}

/// Surveys the masters as they connect and waits until every master is settled (up,
/// quarantined, or given up on), or — with `FleetOptions::straggler_grace` — a quorum is up,
/// every master that answered is settled and the silent ones had that grace, or
/// `connect_timeout` has passed. Errs when two masters are one server or belong to two
/// fleets, when a master refuses TLS or a permission or carries a marker nobody can read, when
/// an operator's birth (`BirthRule::Init`) is refused, and when the fleet's quarantine is
/// shorter than the longest TTL this process may write.
pub(super) async fn start(fleet: &Fleet) -> Result<(), Error> {
    let options = fleet.options();
    let deadline = Instant::now() + options.connect_timeout;
    let mut survey = Survey::new(fleet.len(), fleet.quorum());
    let mut asks: FuturesUnordered<_> = (fleet.nodes().iter())
        .map(|node| ask(node, fleet.keyspace(), deadline))
        .collect();
    let mut decided = false;
    let mut quorum_up_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        refuse(fleet, &survey)?;
        if !decided {
            if let Some(decision) = survey.decision(options.birth) {
                decided = true;
                settle_birth(fleet, &survey, decision).await?;
            }
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
        // Whoever has not answered by the deadline is silent.
        for answer in &mut survey.answers {
            if matches!(answer, Answer::Pending) {
                *answer = Answer::Silent;
            }
        }
        let decision = survey.decision(options.birth).unwrap_or(Decision::Unborn);
        settle_birth(fleet, &survey, decision).await?;
    }
    Ok(())
}

/// The start-up's refusals: a master that refused TLS or a permission, two entries that are
/// one server, two fleets, an unreadable marker.
fn refuse(fleet: &Fleet, survey: &Survey) -> Result<(), Error> {
    let url = |k: usize| fleet.nodes()[k].url().to_string();
    if let Some((i, refusal)) = survey.refusal() {
        return Err(refusal.clone().into_error(&url(i)));
    }
    if let Some((i, j)) = survey.duplicate() {
        return Err(Error::DuplicateMaster {
            url: url(j),
            other: url(i),
        });
    }
    if let Some(conflict) = survey.conflict() {
        let ((i, fleet_i), (j, fleet_j)) = (conflict.first, conflict.second);
        return Err(Error::TwoFleets {
            url: url(j),
            fleet: fleet_j,
            other: url(i),
            other_fleet: fleet_i,
        });
    }
    if let Some((i, text)) = survey.unreadable() {
        let reason = Exclusion::UnreadableMarker(text).to_string();
        return Err(Error::InvalidMaster {
            url: url(i),
            reason,
        });
    }
    Ok(())
}

/// Acts on the survey's decision: births a fresh fleet (refusing an operator's birth the
/// survey does not allow), checks the born fleet's quarantine against this process's longest
/// TTL, and publishes the fleet's history.
async fn settle_birth(fleet: &Fleet, survey: &Survey, decision: Decision) -> Result<(), Error> {
    let rule = fleet.options().birth;
    if let (BirthRule::Init { .. }, Some(reason)) = (rule, survey.init_refusal(rule)) {
        return Err(Error::BirthRefused(reason));
    }
    if matches!(rule, BirthRule::Init { .. }) && decision != Decision::Fresh {
        return Err(Error::BirthRefused("the fleet is already born".into()));
    }
    let birth = match decision {
        Decision::Born(birth) => birth,
        Decision::Fresh => give_birth(fleet, survey).await,
        Decision::Unborn => {
            let heard = survey.heard_run_ids().len();
            tracing::warn!(
                masters = fleet.len(),
                answered = heard,
                "the fleet is not born: no master carries its marker and not every master \
                 answered with no history; no master votes until every master answers, or \
                 an operator runs `redlease fleet init`"
            );
            fleet.set_history(History::Unborn);
            return Ok(());
        }
    };
    fleet.check_quarantine(&birth)?;
    fleet.set_history(History::Born(birth));
    Ok(())
}

/// Births the fleet on every master that answered: its id from their `run_id`s, its
/// quarantine this process's; each master gets its counter (1) and marker at one instant,
/// unless it has history by then (another process born it first).
pub(super) async fn give_birth(fleet: &Fleet, survey: &Survey) -> Birth {
    let heard = survey.heard_run_ids();
    let run_ids: Vec<&str> = heard.iter().map(|(_, run_id)| *run_id).collect();
    let birth = Birth {
        fleet: fleet_id(&run_ids),
        quarantine: fleet.options().quarantine,
    };
    let timeout = fleet.options().connect_timeout;
    let births = heard.iter().map(|(i, run_id)| {
        let marker = FleetMark::member(&birth, run_id).to_string();
        let node = &fleet.nodes()[*i];
        async move { node.birth(fleet.keyspace(), &marker, timeout).await }
    });
    let born = futures_util::future::join_all(births).await;
    let marked = born.iter().filter(|b| **b == Some(true)).count();
    tracing::info!(
        fleet = birth.fleet,
        quarantine_ms = birth.quarantine.as_millis() as u64,
        marked,
        answered = heard.len(),
        masters = fleet.len(),
        "fleet born"
    );
    birth
}

/// A master is settled once the survey is done with it and it takes writes, is quarantined,
/// is refused, or never answered.
fn settled(node: &Node, answer: &Answer, now: Instant) -> bool {
    match answer {
        Answer::Pending => false,
        Answer::Silent | Answer::Refused(_) => true,
        Answer::Heard(..) => {
            node.is_up()
                || node.is_quarantined(now)
                || node
                    .exclusion()
                    .is_some_and(|e| e.needs_operator() || e == Exclusion::Unborn)
        }
    }
}

/// Checks that `node` takes TLS and grants every permission, then waits for its connections
/// and reads what the survey needs.
async fn ask(node: &Arc<Node>, keyspace: &Keyspace, deadline: Instant) -> (usize, Answer) {
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
        node.inspect(keyspace, left).await
    };
    let answer = tokio::time::timeout_at(deadline, question).await;
    let Some(read) = answer.ok().flatten() else {
        tracing::warn!(
            node = node.index(),
            url = node.url(),
            "master not reachable at start-up; reconnecting in the background"
        );
        return (node.index(), Answer::Silent);
    };
    (node.index(), Answer::Heard(Box::new(read)))
}

#[cfg(test)]
mod tests;

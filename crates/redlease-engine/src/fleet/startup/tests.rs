//! Unit tests of the start-up survey: when a fleet counts as born, fresh or unborn.

use std::time::Duration;

use super::*;
use crate::fleet::quarantine::Identity;

fn read(run_id: &str, marker: Option<&str>, fence: u64) -> Answer {
    Answer::Heard(Box::new(Inspection {
        identity: Identity {
            run_id: run_id.into(),
            uptime: Duration::from_secs(1),
        },
        evicting: Ok(None),
        marker: marker.map(String::from),
        fence,
        record: None,
    }))
}

fn marker(fleet: &str, run_id: &str) -> String {
    let birth = Birth {
        fleet: fleet.into(),
        quarantine: Duration::from_secs(300),
    };
    FleetMark::member(&birth, run_id).to_string()
}

/// One marker decides "born" at once; "fresh" needs every master answering with no history
/// — a quorum of blank answers is not enough; with some silent, it stays unborn.
#[test]
fn a_fleet_is_fresh_only_when_every_master_answers_blank() {
    let rule = BirthRule::WhenAllFresh;
    let mut survey = Survey::new(5, 3);
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        survey.answers[i] = read(id, None, 0);
    }
    assert_eq!(survey.decision(rule), None, "four of five is not enough");
    survey.answers[4] = Answer::Silent;
    assert_eq!(survey.decision(rule), Some(Decision::Unborn));
    survey.answers[4] = read("e", None, 0);
    assert_eq!(survey.decision(rule), Some(Decision::Fresh));
    survey.answers[4] = read("e", None, 7);
    assert_eq!(
        survey.decision(rule),
        Some(Decision::Unborn),
        "a counter is history"
    );
    let text = marker("f1", "e");
    survey.answers[4] = read("e", Some(&text), 7);
    let Some(Decision::Born(birth)) = survey.decision(rule) else {
        panic!("a marker means born");
    };
    assert_eq!(birth.fleet, "f1");
}

/// An operator's birth takes the masters that answered, refuses history, too few answers,
/// and silent masters unless they are allowed.
#[test]
fn an_operators_birth_is_refused_on_history_or_missing_masters() {
    let strict = BirthRule::Init {
        allow_missing: false,
    };
    let lenient = BirthRule::Init {
        allow_missing: true,
    };
    let mut survey = Survey::new(5, 3);
    survey.answers = vec![read("a", None, 0), read("b", None, 0), read("c", None, 0)];
    survey.answers.extend([Answer::Silent, Answer::Silent]);
    assert!(survey.init_refusal(strict).unwrap().contains("3, 4"));
    assert_eq!(survey.init_refusal(lenient), None);
    assert_eq!(survey.decision(lenient), Some(Decision::Fresh));
    survey.answers[2] = Answer::Silent;
    assert!(survey.init_refusal(lenient).unwrap().contains("quorum"));
    survey.answers[2] = read("c", None, 3);
    assert!(survey.init_refusal(lenient).unwrap().contains("history"));
}

/// Markers of two fleets conflict; a marker nobody can read is found.
#[test]
fn two_fleets_and_unreadable_markers_are_found() {
    let mut survey = Survey::new(3, 2);
    let (one, two) = (marker("f1", "a"), marker("f2", "b"));
    survey.answers = vec![read("a", Some(&one), 1), read("b", Some(&two), 1)];
    survey.answers.push(read("c", Some("c"), 1));
    let conflict = survey.conflict().unwrap();
    assert_eq!(conflict.first, (0, "f1".to_string()));
    assert_eq!(conflict.second, (1, "f2".to_string()));
    assert_eq!(survey.unreadable(), Some((2, "c".to_string())));
}

/// Two masters answering with one run_id are one server.
#[test]
fn one_run_id_twice_is_a_duplicate() {
    let mut survey = Survey::new(3, 2);
    survey.answers = vec![read("a", None, 0), read("b", None, 0), read("a", None, 0)];
    assert_eq!(survey.duplicate(), Some((0, 2)));
    survey.answers[2] = read("c", None, 0);
    assert_eq!(survey.duplicate(), None);
}

//! Unit tests of the restart quarantine policy: each piece of evidence alone quarantines.

use super::*;
use crate::fleet::mark::Birth;

const PERIOD: Duration = Duration::from_secs(60);

fn identity(run_id: &str, uptime_secs: u64) -> Identity {
    Identity {
        run_id: run_id.to_string(),
        uptime: Duration::from_secs(uptime_secs),
    }
}

fn birth() -> Birth {
    Birth {
        fleet: "f".into(),
        quarantine: PERIOD,
    }
}

/// A master that shows no evidence: same run id, its own marker, a counter at its floor.
fn clean<'a>(identity: &'a Identity, marker: &'a FleetMark) -> Evidence<'a> {
    Evidence {
        previous_run_id: Some(&identity.run_id),
        identity,
        marker: Some(marker),
        fence: 7,
        floor: 7,
        counter_went_back: false,
        record: None,
        decided: None,
    }
}

fn later() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A plain reconnect to the same server keeps it a member; so does a first contact.
#[tokio::test(start_paused = true)]
async fn same_server_stays_a_member() {
    let (id, mark) = (identity("a", 5), FleetMark::member(&birth(), "a"));
    assert_eq!(
        assess(&clean(&id, &mark), PERIOD, later()),
        Standing::Member
    );
    let first = Evidence {
        previous_run_id: None,
        floor: 0,
        ..clean(&id, &mark)
    };
    assert_eq!(assess(&first, PERIOD, later()), Standing::Member);
}

/// A changed run id means a restart: quarantined until a period after the restart, dated
/// from the uptime less its 1 s resolution.
#[tokio::test(start_paused = true)]
async fn a_new_run_id_is_quarantined_from_its_restart() {
    let now = later();
    let mark = FleetMark::member(&birth(), "b");
    let (recent, old, fresh) = (identity("b", 10), identity("b", 62), identity("b", 1));
    let restarted = |id| Evidence {
        previous_run_id: Some("a"),
        ..clean(id, &mark)
    };
    let until = now - Duration::from_secs(9) + PERIOD;
    let why = Loss::Restarted;
    assert_eq!(
        assess(&restarted(&recent), PERIOD, now),
        Standing::Quarantined { until, why }
    );
    assert_eq!(
        assess(&restarted(&old), PERIOD, now),
        Standing::Rejoining { why }
    );
    let until = now + PERIOD;
    assert_eq!(
        assess(&restarted(&fresh), PERIOD, now),
        Standing::Quarantined { until, why },
        "1 s may be 10 ms"
    );
}

/// A marker naming another process means a restart `uptime` ago.
#[tokio::test(start_paused = true)]
async fn a_marker_of_another_process_means_a_restart() {
    let now = later();
    let (id, mark) = (identity("x", 20), FleetMark::member(&birth(), "old"));
    let evidence = Evidence {
        previous_run_id: None,
        ..clean(&id, &mark)
    };
    let until = now - Duration::from_secs(19) + PERIOD;
    let why = Loss::MarkerOfAnotherProcess;
    assert_eq!(
        assess(&evidence, PERIOD, now),
        Standing::Quarantined { until, why }
    );
}

/// Evidence nobody can date quarantines from now: no marker, no fence counter, a counter
/// below the floor, or one an acquisition saw go back — whatever the marker says.
#[tokio::test(start_paused = true)]
async fn undated_evidence_quarantines_from_now_whatever_the_marker_says() {
    let now = later();
    let (id, mark) = (identity("a", 5000), FleetMark::member(&birth(), "a"));
    let cases = [
        (
            Evidence {
                marker: None,
                ..clean(&id, &mark)
            },
            Loss::NoMarker,
        ),
        (
            Evidence {
                fence: 0,
                ..clean(&id, &mark)
            },
            Loss::NoFenceCounter,
        ),
        (
            Evidence {
                fence: 3,
                ..clean(&id, &mark)
            },
            Loss::CounterWentBack,
        ),
        (
            Evidence {
                counter_went_back: true,
                ..clean(&id, &mark)
            },
            Loss::CounterWentBack,
        ),
    ];
    for (evidence, why) in cases {
        let until = now + PERIOD;
        let standing = assess(&evidence, PERIOD, now);
        assert_eq!(standing, Standing::Quarantined { until, why }, "{why:?}");
    }
}

/// A recorded quarantine of this server process is served out to its end, and one of
/// another process means a restart since; the latest end of all the evidence wins.
#[tokio::test(start_paused = true)]
async fn a_recorded_quarantine_is_served_out() {
    let now = later();
    let id = identity("a", 5000);
    let mark = FleetMark::quarantined(&birth(), "a");
    let left = Duration::from_secs(40);
    let recorded = Evidence {
        record: Some(("a", left)),
        ..clean(&id, &mark)
    };
    let why = Loss::Recorded;
    let until = now + left;
    assert_eq!(
        assess(&recorded, PERIOD, now),
        Standing::Quarantined { until, why }
    );
    let and_no_fence = Evidence {
        fence: 0,
        ..recorded.clone()
    };
    let why = Loss::Recorded;
    assert_eq!(
        assess(&and_no_fence, PERIOD, now),
        Standing::Quarantined { until, why },
        "the counter its loss left is that loss, already served"
    );
    let went_back = Evidence {
        counter_went_back: true,
        ..recorded.clone()
    };
    let (until, why) = (now + PERIOD, Loss::CounterWentBack);
    assert_eq!(
        assess(&went_back, PERIOD, now),
        Standing::Quarantined { until, why }
    );
    let served = Evidence {
        record: None,
        ..recorded
    };
    let why = Loss::Served;
    assert_eq!(assess(&served, PERIOD, now), Standing::Rejoining { why });
}

/// A quarantine this process decided keeps the master out while it runs; once served, a
/// member marker (another process raised the fence) lets it vote, a quarantine marker sends it
/// rejoining.
#[tokio::test(start_paused = true)]
async fn a_decided_quarantine_counts_while_it_runs() {
    let now = later();
    let id = identity("a", 5000);
    let member = FleetMark::member(&birth(), "a");
    let running = Evidence {
        decided: Some(now + Duration::from_secs(5)),
        ..clean(&id, &member)
    };
    let (until, why) = (now + Duration::from_secs(5), Loss::Recorded);
    assert_eq!(
        assess(&running, PERIOD, now),
        Standing::Quarantined { until, why }
    );
    let served = Evidence {
        decided: Some(now - Duration::from_secs(1)),
        ..clean(&id, &member)
    };
    assert_eq!(assess(&served, PERIOD, now), Standing::Member);
    let serving_marker = FleetMark::quarantined(&birth(), "a");
    let not_raised = Evidence {
        decided: Some(now - Duration::from_secs(1)),
        ..clean(&id, &serving_marker)
    };
    let why = Loss::Served;
    assert_eq!(
        assess(&not_raised, PERIOD, now),
        Standing::Rejoining { why }
    );
}

/// `parse_info` reads the two fields wherever they are.
#[test]
fn info_fields_are_read() {
    let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n";
    assert_eq!(parse_info(info), Some(identity("abc", 42)));
    assert_eq!(parse_info("# Server\r\nrun_id:abc\r\n"), None);
}

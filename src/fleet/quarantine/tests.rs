//! Unit tests of the restart quarantine policy.

use super::*;

const PERIOD: Duration = Duration::from_secs(60);

fn identity(run_id: &str, uptime_secs: u64) -> Identity {
    Identity {
        run_id: run_id.to_string(),
        uptime: Duration::from_secs(uptime_secs),
    }
}

/// A plain reconnect to the same server keeps it a member.
#[tokio::test(start_paused = true)]
async fn same_server_stays_a_member() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(Some("a"), &identity("a", 5), Some("a"), true, PERIOD, now);
    assert_eq!(standing, Standing::Member);
}

/// A fresh fleet is adopted at once.
#[tokio::test(start_paused = true)]
async fn a_fresh_fleet_is_adopted_at_once() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(None, &identity("a", 1), None, false, PERIOD, now);
    assert_eq!(standing, Standing::Member);
}

/// A changed run id means a restart: quarantined until a period after the restart, dated
/// from the uptime less its 1 s resolution.
#[tokio::test(start_paused = true)]
async fn a_new_run_id_is_quarantined_from_its_restart() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(Some("a"), &identity("b", 10), Some("a"), true, PERIOD, now);
    let until = now - Duration::from_secs(9) + PERIOD;
    assert_eq!(standing, Standing::Quarantined { until });
    let long_ago = assess(Some("a"), &identity("b", 62), Some("a"), true, PERIOD, now);
    assert_eq!(long_ago, Standing::Rejoining);
    let just_now = assess(Some("a"), &identity("b", 1), Some("a"), true, PERIOD, now);
    assert_eq!(
        just_now,
        Standing::Quarantined {
            until: now + PERIOD
        },
        "1 s may be 10 ms"
    );
}

/// On first contact, a master whose marker names another process restarted since it was made
/// a member — with some of its data (an RDB snapshot, an AOF behind) — `uptime` ago; one
/// whose marker names itself is a member.
#[tokio::test(start_paused = true)]
async fn a_marker_of_another_process_means_a_restart() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(None, &identity("x", 20), Some("old"), true, PERIOD, now);
    let until = now - Duration::from_secs(19) + PERIOD;
    assert_eq!(standing, Standing::Quarantined { until });
    let member = assess(None, &identity("x", 20), Some("x"), true, PERIOD, now);
    assert_eq!(member, Standing::Member);
    let legacy = assess(None, &identity("x", 20), Some("1"), true, PERIOD, now);
    assert_eq!(legacy, Standing::Quarantined { until });
}

/// A master without the marker in a marked fleet lost its data at an unknown time: on first
/// contact, and for the same server that lost its data (FLUSHALL), quarantined from now.
#[tokio::test(start_paused = true)]
async fn a_master_without_the_marker_is_quarantined_from_now() {
    let now = Instant::now() + Duration::from_secs(3600);
    let from_now = Standing::Quarantined {
        until: now + PERIOD,
    };
    let first = assess(None, &identity("x", 9_999), None, true, PERIOD, now);
    assert_eq!(first, from_now);
    let flushed = assess(Some("a"), &identity("a", 9_999), None, true, PERIOD, now);
    assert_eq!(flushed, from_now);
}

/// A quarantine another process began on the same server is served out, not begun again;
/// once it has expired the master rejoins (fence raised, then votes); other markers are left to
/// `assess`.
#[tokio::test(start_paused = true)]
async fn a_quarantine_begun_elsewhere_is_served_out() {
    let now = Instant::now() + Duration::from_secs(3600);
    let begun = quarantine_marker("x");
    let left = Some(Duration::from_secs(200));
    let until = now + Duration::from_secs(200);
    let assessed = assess(None, &identity("x", 20), Some(&begun), true, PERIOD, now);
    let over = |left| carry_over(assessed, Some(&begun), "x", left, now);
    assert_eq!(over(left), Standing::Quarantined { until });
    assert_eq!(over(None), Standing::Rejoining);
    assert_eq!(over(Some(Duration::ZERO)), Standing::Rejoining);
    // A record of another server process (restarted since) says nothing.
    let other = quarantine_marker("old");
    let restarted = assess(None, &identity("x", 20), Some(&other), true, PERIOD, now);
    assert_eq!(
        carry_over(restarted, Some(&other), "x", left, now),
        restarted
    );
    assert_eq!(
        carry_over(Standing::Member, Some("x"), "x", left, now),
        Standing::Member
    );
}

/// run_id and uptime are read from a real INFO server layout.
#[test]
fn info_server_is_parsed() {
    let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:0123abcd\r\ntcp_port:6379\r\nuptime_in_seconds:42\r\n";
    assert_eq!(parse_info(info), Some(identity("0123abcd", 42)));
    assert_eq!(parse_info("# Server\r\n"), None);
}

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
    let standing = assess(Some("a"), &identity("a", 5), true, true, PERIOD, now);
    assert_eq!(standing, Standing::Member);
}

/// A fresh fleet is adopted at once, marker or not.
#[tokio::test(start_paused = true)]
async fn a_fresh_fleet_is_adopted_at_once() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(None, &identity("a", 1), false, false, PERIOD, now);
    assert_eq!(standing, Standing::Member);
}

/// A changed run id means a restart: quarantined until a period after the restart, dated
/// from the uptime less its 1 s resolution.
#[tokio::test(start_paused = true)]
async fn a_new_run_id_is_quarantined_from_its_restart() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(Some("a"), &identity("b", 10), true, true, PERIOD, now);
    let until = now - Duration::from_secs(9) + PERIOD;
    assert_eq!(standing, Standing::Quarantined { until });
    let long_ago = assess(Some("a"), &identity("b", 62), true, true, PERIOD, now);
    assert_eq!(long_ago, Standing::Rejoining);
    let just_now = assess(Some("a"), &identity("b", 1), true, true, PERIOD, now);
    assert_eq!(
        just_now,
        Standing::Quarantined {
            until: now + PERIOD
        },
        "1 s may be 10 ms"
    );
}

/// On first contact, a master without the marker in a marked fleet restarted `uptime` ago.
#[tokio::test(start_paused = true)]
async fn a_master_missing_the_marker_is_quarantined_on_first_contact() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(None, &identity("x", 20), false, true, PERIOD, now);
    let until = now - Duration::from_secs(19) + PERIOD;
    assert_eq!(standing, Standing::Quarantined { until });
    let member = assess(None, &identity("x", 20), true, true, PERIOD, now);
    assert_eq!(member, Standing::Member);
}

/// The same server that lost its data (FLUSHALL) is quarantined from now.
#[tokio::test(start_paused = true)]
async fn a_flushed_master_is_quarantined_from_now() {
    let now = Instant::now() + Duration::from_secs(3600);
    let standing = assess(Some("a"), &identity("a", 9_999), false, true, PERIOD, now);
    assert_eq!(
        standing,
        Standing::Quarantined {
            until: now + PERIOD
        }
    );
}

/// run_id and uptime are read from a real INFO server layout.
#[test]
fn info_server_is_parsed() {
    let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:0123abcd\r\ntcp_port:6379\r\nuptime_in_seconds:42\r\n";
    assert_eq!(parse_info(info), Some(identity("0123abcd", 42)));
    assert_eq!(parse_info("# Server\r\n"), None);
}

//! Unit tests of the quorum tally, validity and per-node timeout arithmetic.

use super::*;

/// A tally decides as soon as the outcome can no longer change, and not before.
#[test]
fn tally_decides_as_soon_as_the_outcome_is_fixed() {
    let mut tally = Tally::new(5);
    tally.yes = 2;
    tally.no = 1;
    assert_eq!(tally.verdict(), Verdict::Pending);
    tally.yes = 3;
    assert_eq!(tally.verdict(), Verdict::Yes);

    let mut tally = Tally::new(5);
    tally.no = 3;
    assert_eq!(tally.verdict(), Verdict::No);

    let mut tally = Tally::new(5);
    tally.failed = 3;
    assert_eq!(tally.verdict(), Verdict::Split);

    let mut tally = Tally::new(5);
    tally.yes = 2;
    tally.no = 2;
    assert_eq!(tally.verdict(), Verdict::Pending);
    tally.failed = 1;
    assert_eq!(tally.verdict(), Verdict::Split);
    assert_eq!(tally.answered(), 4);
}

/// Validity subtracts elapsed time and drift, and is never positive once it has elapsed.
#[tokio::test(start_paused = true)]
async fn validity_subtracts_elapsed_time_and_drift() {
    let drift = DriftPolicy::default();
    let start = Instant::now();
    let ttl = Duration::from_millis(1_000);
    assert_eq!(drift.drift(ttl), Duration::from_millis(12));
    let min = DEFAULT_MIN_VALIDITY;
    let at_100 = start + Duration::from_millis(100);
    assert_eq!(
        validity(&drift, start, at_100, ttl, min),
        Some(Duration::from_millis(888))
    );
    let at_988 = start + Duration::from_millis(988);
    assert_eq!(validity(&drift, start, at_988, ttl, min), None);
    let later = start + Duration::from_secs(5);
    assert_eq!(validity(&drift, start, later, ttl, min), None);
    let tiny = Duration::from_millis(2);
    assert_eq!(validity(&drift, start, start, tiny, min), None);
}

/// The per-node timeout follows the RTT between its floor and its share of the TTL.
#[test]
fn node_timeout_follows_rtt_within_bounds() {
    let policy = NodeTimeoutPolicy::default();
    let ttl = Duration::from_secs(10);
    assert_eq!(policy.timeout(ttl, None), Duration::from_millis(50));
    let slow = Some(Duration::from_millis(20));
    assert_eq!(policy.timeout(ttl, slow), Duration::from_millis(200));
    let very_slow = Some(Duration::from_secs(1));
    assert_eq!(policy.timeout(ttl, very_slow), Duration::from_secs(1));
    let short_ttl = Duration::from_millis(100);
    assert_eq!(policy.timeout(short_ttl, None), Duration::from_millis(10));
    let tiny_ttl = Duration::from_millis(5);
    assert_eq!(policy.timeout(tiny_ttl, None), Duration::from_millis(1));
    let fixed = NodeTimeoutPolicy {
        fixed: Some(Duration::from_secs(3)),
        ..policy
    };
    assert_eq!(fixed.timeout(ttl, slow), Duration::from_secs(3));
}

//! Wall-clock instants as an operator reads them: RFC 3339 in UTC with milliseconds
//! (`2026-11-25T21:03:04.123Z`), and the wall-clock time of a monotonic instant.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// `at` as RFC 3339 in UTC with milliseconds; instants before 1970 print as the epoch.
pub fn rfc3339_utc(at: SystemTime) -> String {
    let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    rfc3339_utc_from_unix_ms(since_epoch.as_millis() as u64)
}

/// Unix milliseconds as RFC 3339 in UTC with milliseconds.
pub fn rfc3339_utc_from_unix_ms(unix_ms: u64) -> String {
    let (days, ms_of_day) = (unix_ms / 86_400_000, unix_ms % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    let seconds = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        ms_of_day % 1000
    )
}

/// The wall-clock time of the monotonic instant `at`, read against `now`.
pub fn wall_time_of(at: Instant, now: Instant) -> SystemTime {
    let wall_now = SystemTime::now();
    if at >= now {
        wall_now + (at - now)
    } else {
        wall_now - (now - at)
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known instants print as RFC 3339 UTC with milliseconds, leap days included.
    #[test]
    fn unix_milliseconds_print_as_rfc3339_utc() {
        assert_eq!(rfc3339_utc_from_unix_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_utc_from_unix_ms(1_795_640_584_123),
            "2026-11-25T21:03:04.123Z"
        );
        assert_eq!(
            rfc3339_utc_from_unix_ms(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_utc_from_unix_ms(4_107_542_399_999),
            "2100-02-28T23:59:59.999Z"
        );
    }
}

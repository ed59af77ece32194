//! This process's CPU time and resident memory, read from `/proc/self` (Linux) at scrape time
//! for `process_cpu_seconds_total` and `process_resident_memory_bytes`.

use std::time::Duration;

/// Linux's `USER_HZ`: the unit of the CPU times in `/proc/<pid>/stat` on every architecture
/// Linux supports today.
const TICKS_PER_SECOND: u64 = 100;

/// User + system CPU time of this process, `None` where `/proc` is not there.
pub fn cpu_time() -> Option<Duration> {
    parse_cpu_time(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// Resident set size in bytes, `None` where `/proc` is not there.
pub fn resident_bytes() -> Option<u64> {
    parse_resident_bytes(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// `utime` + `stime` (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field
/// 2) may contain spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_cpu_time(stat: &str) -> Option<Duration> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    let ticks = user + system;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND))
}

/// The `VmRSS:` line of `/proc/<pid>/status` (in kB there).
pub fn parse_resident_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields are counted after the command name, whatever it contains.
    #[test]
    fn cpu_time_is_utime_plus_stime() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_cpu_time(stat), Some(Duration::from_secs(3)));
        assert_eq!(parse_cpu_time("garbage"), None);
    }

    #[test]
    fn resident_memory_comes_from_vmrss() {
        let status = "Name:\tredlease\nVmPeak:\t  9000 kB\nVmRSS:\t  2048 kB\nThreads:\t3\n";
        assert_eq!(parse_resident_bytes(status), Some(2048 * 1024));
        assert_eq!(parse_resident_bytes("Name:\tx\n"), None);
    }

    /// On Linux the live readings exist and grow as they should.
    #[test]
    fn this_process_can_be_read() {
        assert!(resident_bytes().is_some_and(|rss| rss > 0));
        assert!(cpu_time().is_some());
    }
}

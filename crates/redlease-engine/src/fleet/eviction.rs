//! Whether a master may evict keys (pure, from its `INFO memory`): a master with `maxmemory`
//! set and any `maxmemory-policy` but `noeviction` drops keys under memory pressure — lock
//! keys first under every `volatile-*` policy, since they carry a TTL — and with them the
//! fence counter, the marker and the quarantine record. Such a master takes no votes.

use super::quarantine::info_field;

/// A master's eviction settings that let it drop keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evicting {
    /// `maxmemory` in bytes.
    pub maxmemory: u64,
    /// `maxmemory-policy`.
    pub policy: String,
}

/// `Some` when the master's `INFO memory` reply says it can evict keys; `None` when it
/// cannot (no `maxmemory`, or `noeviction`) or the reply lacks the fields (taken as "cannot
/// tell": `Err`).
pub fn evicting(info_memory: &str) -> Result<Option<Evicting>, &'static str> {
    let maxmemory = info_field(info_memory, "maxmemory").ok_or("no maxmemory in INFO memory")?;
    let maxmemory: u64 = maxmemory.parse().map_err(|_| "maxmemory is not a number")?;
    let policy = info_field(info_memory, "maxmemory_policy").ok_or("no maxmemory_policy")?;
    if maxmemory == 0 || policy == "noeviction" {
        return Ok(None);
    }
    let policy = policy.to_string();
    Ok(Some(Evicting { maxmemory, policy }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(maxmemory: u64, policy: &str) -> String {
        format!("# Memory\r\nused_memory:1000\r\nmaxmemory:{maxmemory}\r\nmaxmemory_human:0B\r\nmaxmemory_policy:{policy}\r\n")
    }

    /// Only a memory limit with a policy other than `noeviction` evicts.
    #[test]
    fn a_limit_with_an_evicting_policy_evicts() {
        assert_eq!(evicting(&info(0, "allkeys-lru")), Ok(None));
        assert_eq!(evicting(&info(1 << 20, "noeviction")), Ok(None));
        let volatile = evicting(&info(1 << 20, "volatile-ttl")).unwrap().unwrap();
        assert_eq!(volatile.policy, "volatile-ttl");
        assert!(evicting("# Memory\r\n").is_err());
    }
}

//! What the engine sends each master and the typed replies: the Lua scripts of `lua/` (the
//! only `include_str!` of them), a script call and the plain commands of an acquisition, each
//! encoded in RESP once per fan-out and copied onto every master's connection.
//!
//! Every master is an independent server, so scripts are called per node with EVALSHA
//! (a restarted master has an empty script cache: see `fleet::node` for what NOSCRIPT does).

use std::sync::LazyLock;
use std::time::Duration;

use fred::types::scripts::Script;

use crate::resp::Commands;

/// One script per operation; each file opens with its KEYS/ARGV/Returns contract.
pub struct Scripts {
    /// `raise_fence.lua`: raise a master's fence counter to at least a value.
    pub raise_fence: Script,
    /// `release.lua`: compare-and-delete of a lease, announced.
    pub release: Script,
    /// `extend.lua`: compare-and-PEXPIRE of any number of leases.
    pub extend: Script,
    /// `shadow.lua`: a degraded lease's shadow reservation.
    pub shadow: Script,
    /// `force_release.lua`: an operator's revocation of whatever lease holds a lock.
    pub force_release: Script,
    /// `acknowledge.lua`: the holder's acknowledgement of a revocation.
    pub acknowledge: Script,
    /// `inspect.lua`: a master's marker, fence counter and quarantine record at one instant.
    pub inspect: Script,
    /// `birth.lua`: a fleet's birth on one master.
    pub birth: Script,
    /// `mark.lua`: a preparation's compare-and-set of the marker and counter.
    pub mark: Script,
    /// `quarantine.lua`: a quarantine's record and marker together.
    pub quarantine: Script,
    /// `semaphore_acquire.lua`: one free slot of a counting semaphore.
    pub semaphore_acquire: Script,
    /// `semaphore_release.lua`: a semaphore's stray claims of one lease.
    pub semaphore_release: Script,
    /// `rw_acquire.lua`: a read-write lock's writer or one of its reader slots.
    pub rw_acquire: Script,
    /// `rw_release.lua`: a read-write lock's stray claims of one lease, and a writer's intent.
    pub rw_release: Script,
    /// `fair_head.lua` then `semaphore_acquire.lua`: a free slot for the head of the
    /// semaphore's queue of fair waiters.
    pub semaphore_acquire_fair: Script,
    /// `fair_head.lua` then `rw_acquire.lua`: the writer or a reader slot for the head of the
    /// read-write lock's queue of fair waiters.
    pub rw_acquire_fair: Script,
    /// `ticket.lua`: a fair waiter's ticket from a master's fence counter.
    pub ticket: Script,
    /// `fair_enqueue.lua`: a fair waiter queued, or its heartbeat.
    pub fair_enqueue: Script,
    /// `fair_head.lua` then `lock_acquire.lua`: an exclusive lock (or an election's key) for
    /// the head of its queue of fair waiters.
    pub lock_acquire_fair: Script,
    /// `fair_leave.lua`: a fair waiter out of its queue.
    pub fair_leave: Script,
    /// `proclaim.lua`: compare-the-lease, then an election leader's value written and announced.
    pub proclaim: Script,
}

/// The scripts, hashed once per process.
pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    raise_fence: Script::from_lua(include_str!("../../../lua/raise_fence.lua")),
    release: Script::from_lua(include_str!("../../../lua/release.lua")),
    extend: Script::from_lua(include_str!("../../../lua/extend.lua")),
    shadow: Script::from_lua(include_str!("../../../lua/shadow.lua")),
    force_release: Script::from_lua(include_str!("../../../lua/force_release.lua")),
    acknowledge: Script::from_lua(include_str!("../../../lua/acknowledge.lua")),
    inspect: Script::from_lua(include_str!("../../../lua/inspect.lua")),
    birth: Script::from_lua(include_str!("../../../lua/birth.lua")),
    mark: Script::from_lua(include_str!("../../../lua/mark.lua")),
    quarantine: Script::from_lua(include_str!("../../../lua/quarantine.lua")),
    semaphore_acquire: Script::from_lua(include_str!("../../../lua/semaphore_acquire.lua")),
    semaphore_release: Script::from_lua(include_str!("../../../lua/semaphore_release.lua")),
    rw_acquire: Script::from_lua(include_str!("../../../lua/rw_acquire.lua")),
    rw_release: Script::from_lua(include_str!("../../../lua/rw_release.lua")),
    semaphore_acquire_fair: Script::from_lua(concat!(
        include_str!("../../../lua/fair_head.lua"),
        include_str!("../../../lua/semaphore_acquire.lua")
    )),
    rw_acquire_fair: Script::from_lua(concat!(
        include_str!("../../../lua/fair_head.lua"),
        include_str!("../../../lua/rw_acquire.lua")
    )),
    ticket: Script::from_lua(include_str!("../../../lua/ticket.lua")),
    fair_enqueue: Script::from_lua(include_str!("../../../lua/fair_enqueue.lua")),
    lock_acquire_fair: Script::from_lua(concat!(
        include_str!("../../../lua/fair_head.lua"),
        include_str!("../../../lua/lock_acquire.lua")
    )),
    fair_leave: Script::from_lua(include_str!("../../../lua/fair_leave.lua")),
    proclaim: Script::from_lua(include_str!("../../../lua/proclaim.lua")),
});

// === impl Scripts ===

impl Scripts {
    /// Every script, to load on a master.
    pub fn all(&self) -> [&Script; 21] {
        [
            &self.raise_fence,
            &self.release,
            &self.extend,
            &self.shadow,
            &self.force_release,
            &self.acknowledge,
            &self.inspect,
            &self.birth,
            &self.mark,
            &self.quarantine,
            &self.semaphore_acquire,
            &self.semaphore_release,
            &self.rw_acquire,
            &self.rw_release,
            &self.semaphore_acquire_fair,
            &self.rw_acquire_fair,
            &self.ticket,
            &self.fair_enqueue,
            &self.lock_acquire_fair,
            &self.fair_leave,
            &self.proclaim,
        ]
    }
}

/// One script call built once and shared by every master's call: the script (loaded again
/// after NOSCRIPT) and its `EVALSHA` already in RESP, copied as it is onto each master's
/// connection.
#[derive(Debug)]
pub struct ScriptCall {
    script: &'static Script,
    commands: Commands,
}

impl ScriptCall {
    /// `EVALSHA` of `script` with `keys` then `args`.
    pub fn new(script: &'static Script, keys: &[&[u8]], args: &[&[u8]]) -> Self {
        let payload: usize = keys.iter().chain(args).map(|part| part.len()).sum();
        // 16 bytes of framing per part at most (`$`, a length, two CRLFs), sha and header.
        let parts = 3 + keys.len() + args.len();
        let mut commands = Commands::with_capacity(64 + 16 * parts + payload);
        commands.push_evalsha(script.sha1(), keys, args);
        Self { script, commands }
    }

    /// The script this call runs.
    pub fn script(&self) -> &'static Script {
        self.script
    }

    /// The `EVALSHA`, one command in RESP.
    pub fn commands(&self) -> &Commands {
        &self.commands
    }
}

/// An acquisition's write to one master: two plain commands sent back to back on its
/// connection, `SET <lock> <value> NX PX <ttl>` then `INCR <fence>`. The INCR runs whether
/// the SET wrote or not: counters only ever grow, which is all fencing needs, and the pair
/// costs the master less than a script doing the same (`bench/README.md`, The protocol). Built once per
/// attempt, already in RESP, and shared by every master's call.
#[derive(Clone, Debug)]
pub struct AcquireCommands {
    /// `<prefix>lock:<resource>` (the refusal's `PTTL` reads it).
    lock: String,
    /// Both commands as RESP arrays, copied as they are onto each master's connection.
    commands: Commands,
}

impl AcquireCommands {
    /// `lock` is `<prefix>lock:<resource>`, `value` is `<lease id>|<owner>`, `fence` is
    /// `<prefix>fence`.
    pub fn new(lock: String, value: &str, ttl_ms: u64, fence: &str) -> Self {
        let mut ttl = itoa::Buffer::new();
        let ttl = ttl.format(ttl_ms).as_bytes();
        // The RESP framing of both commands is under 100 bytes.
        let mut commands = Commands::with_capacity(100 + lock.len() + value.len() + fence.len());
        let set = [b"SET", lock.as_bytes(), value.as_bytes(), b"NX", b"PX", ttl];
        commands.push(&set).push(&[b"INCR", fence.as_bytes()]);
        Self { lock, commands }
    }

    /// The lock key the acquisition writes.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    /// `SET … NX PX …` and `INCR …`, in RESP.
    pub fn commands(&self) -> &Commands {
        &self.commands
    }
}

/// What an acquisition's commands answered on one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// The lock is ours here; the master's fence counter after its INCR.
    Granted {
        /// The fence counter after the `INCR`.
        counter: u64,
    },
    /// Another lease holds the lock (or its shadow, which is the lock key itself); its
    /// remaining time when it has one.
    Refused {
        /// The holder key's remaining time (`PTTL`), when it has one.
        holder_remaining: Option<Duration>,
    },
}

impl AcquireReply {
    /// From whether `SET NX` wrote, the counter after `INCR`, and, for a refusal, the lock's
    /// `PTTL` when it came back (`-1`: no expiry; `-2`: gone since, so retrying at once is
    /// worth it).
    pub fn from_commands(written: bool, counter: u64, holder_pttl: Option<i64>) -> Self {
        if written {
            return Self::Granted { counter };
        }
        let holder_remaining = match holder_pttl {
            Some(-2) => Some(Duration::ZERO),
            Some(ms) if ms >= 0 => Some(Duration::from_millis(ms as u64)),
            _ => None,
        };
        Self::Refused { holder_remaining }
    }
}

/// Whether the counter an acquisition's `INCR` returned shows the master lost its memory.
/// `floor` is the largest counter this process had seen from the master when the INCR was
/// sent (a counter only grows, so a healthy master answers more); every master holds at least
/// 1 once prepared (`fleet::membership`), so an INCR answering 1 found the key gone.
pub fn fence_was_lost(counter: i64, floor: u64) -> bool {
    counter <= floor.max(1) as i64
}

/// What `extend.lua` answered on one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtendReply {
    /// The lock held our lease and was extended.
    Extended,
    /// Nothing of ours is here (it expired or was force-released).
    Absent,
    /// Another lease holds the lock.
    HeldByOther,
    /// A force release revoked the lease: its tombstone holds the lock.
    Revoked,
}

impl ExtendReply {
    /// The code `extend.lua` answered for one lease.
    pub fn from_script(reply: i64) -> Self {
        match reply {
            1 => Self::Extended,
            0 => Self::Absent,
            -2 => Self::Revoked,
            _ => Self::HeldByOther,
        }
    }

    /// Whether our lease stands on this master after the call.
    pub fn is_ours(self) -> bool {
        self == Self::Extended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A written SET grants with the INCR's counter, whatever PTTL would say.
    #[test]
    fn a_written_set_grants_with_the_counter() {
        let reply = AcquireReply::from_commands(true, 7, None);
        assert_eq!(reply, AcquireReply::Granted { counter: 7 });
    }

    /// A refusal carries the holder's remaining time: none without expiry (or without a
    /// PTTL answer), zero when the lock went away since the SET.
    #[test]
    fn a_refusal_reads_the_holders_pttl() {
        let refused = |pttl| match AcquireReply::from_commands(false, 9, pttl) {
            AcquireReply::Refused { holder_remaining } => holder_remaining,
            granted => panic!("{granted:?}"),
        };
        assert_eq!(refused(Some(1500)), Some(Duration::from_millis(1500)));
        assert_eq!(refused(Some(-2)), Some(Duration::ZERO));
        assert_eq!(refused(Some(-1)), None);
        assert_eq!(refused(None), None);
    }

    /// Prepared masters hold a counter of at least 1, so an INCR answering 1 found none; an
    /// INCR answering no more than a counter seen before it was sent went backwards.
    #[test]
    fn a_counter_that_did_not_grow_means_the_fence_was_lost() {
        assert!(fence_was_lost(1, 0));
        assert!(fence_was_lost(0, 0));
        assert!(!fence_was_lost(2, 0));
        assert!(fence_was_lost(2, 5000), "flushed, then a second INCR");
        assert!(fence_was_lost(5000, 5000));
        assert!(!fence_was_lost(5001, 5000));
    }
}

//! The Lua scripts of `lua/` (the only `include_str!` of them) and their typed replies.
//!
//! Every master is an independent server, so scripts are called per node with EVALSHA that
//! loads the script on NOSCRIPT (a restarted master has an empty script cache).

use std::sync::LazyLock;
use std::time::Duration;

use fred::types::scripts::Script;

/// One script per operation; each file opens with its KEYS/ARGV/Returns contract.
pub struct Scripts {
    pub acquire: Script,
    pub raise_fence: Script,
    pub release: Script,
    pub extend: Script,
    pub shadow: Script,
}

/// The scripts, hashed once per process.
pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::from_lua(include_str!("../lua/acquire.lua")),
    raise_fence: Script::from_lua(include_str!("../lua/raise_fence.lua")),
    release: Script::from_lua(include_str!("../lua/release.lua")),
    extend: Script::from_lua(include_str!("../lua/extend.lua")),
    shadow: Script::from_lua(include_str!("../lua/shadow.lua")),
});

// === impl Scripts ===

impl Scripts {
    pub fn all(&self) -> [&Script; 5] {
        [
            &self.acquire,
            &self.raise_fence,
            &self.release,
            &self.extend,
            &self.shadow,
        ]
    }
}

/// What `acquire.lua` answered on one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireReply {
    /// The lock is ours here; the master's fence counter after its INCR.
    Granted { counter: u64 },
    /// Another lease holds the lock or its shadow; its remaining time when it has one.
    Refused { holder_remaining: Option<Duration> },
}

impl AcquireReply {
    pub fn from_script(reply: i64) -> Self {
        match reply {
            1.. => Self::Granted {
                counter: reply as u64,
            },
            0 => Self::Refused {
                holder_remaining: None,
            },
            _ => Self::Refused {
                holder_remaining: Some(Duration::from_millis(reply.unsigned_abs())),
            },
        }
    }
}

/// What `extend.lua` answered on one master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtendReply {
    /// The lock held our lease and was extended.
    Extended,
    /// The lock had expired here but our shadow stood: the lock was re-set from it.
    Restored,
    /// Nothing of ours is here (it expired or was force-released).
    Absent,
    /// Another lease holds the lock or the shadow.
    HeldByOther,
}

impl ExtendReply {
    pub fn from_script(reply: i64) -> Self {
        match reply {
            1 => Self::Extended,
            2 => Self::Restored,
            0 => Self::Absent,
            _ => Self::HeldByOther,
        }
    }

    /// Whether our lease stands on this master after the call.
    pub fn is_ours(self) -> bool {
        matches!(self, Self::Extended | Self::Restored)
    }
}

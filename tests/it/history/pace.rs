//! What every client of the run shares: the resources, when to stop, a small deterministic
//! random generator, the write loop and the safety model's cap on a lease whose extension was sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redlease::DriftPolicy;
use redlease_testkit::history::WindowId;
use tokio::time::Instant;

use super::record::{History, Wrote};

/// Few resources, so clients contend for them.
pub const RESOURCES: [&str; 3] = ["r0", "r1", "r2"];
/// A holder writes to the register this often while it holds.
pub const WRITE_EVERY: Duration = Duration::from_millis(40);
/// Bounds on every client loop (time bounds them first; these only make sure).
pub const MAX_ROUNDS: usize = 2_000;
pub const MAX_STEPS: usize = 200;

/// When the clients stop: once told to, and in any case at a hard deadline.
pub struct Stop {
    told: AtomicBool,
    hard: Instant,
}

impl Stop {
    pub fn new(hard: Duration) -> Self {
        Self {
            told: AtomicBool::new(false),
            hard: Instant::now() + hard,
        }
    }

    pub fn now(&self) {
        self.told.store(true, Ordering::SeqCst);
    }

    pub fn stopped(&self) -> bool {
        self.told.load(Ordering::SeqCst) || Instant::now() >= self.hard
    }
}

/// xorshift64*: one per client, seeded by its number, so each client's choices repeat.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    /// A duration between `lo` and `hi` ms, both included.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }

    pub fn resource(&mut self) -> &'static str {
        RESOURCES[self.below(RESOURCES.len() as u64) as usize]
    }
}

/// Writes every `WRITE_EVERY` for `span` while window `id` holds; `false` once it is over.
pub async fn write_for(history: &History, id: WindowId, span: Duration) -> bool {
    let until = Instant::now() + span;
    for _ in 0..MAX_STEPS {
        if history.write(id, false) == Wrote::NotHeld {
            return false;
        }
        if Instant::now() >= until {
            return true;
        }
        tokio::time::sleep(WRITE_EVERY).await;
    }
    true
}

/// Once an extension to `ttl` is sent at `sent`, whatever its outcome, the lease is valid no
/// longer than `sent + ttl − drift` (the safety model's rule: a master that ran it may have
/// shortened the key). A client applies it as it sends.
pub fn extension_cap(sent: Instant, ttl: Duration) -> Instant {
    DriftPolicy::default()
        .valid_until(sent, ttl)
        .unwrap_or(sent)
}

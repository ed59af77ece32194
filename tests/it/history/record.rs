//! The history the checker judges: every holding window a client was told about, every write
//! clients made to the fenced register, the faults injected, and the run's figures. One mutex
//! guards it all, so opening, moving and cutting a window and the writes made in it are
//! ordered exactly as they happened.
//!
//! A window is what its client believed: it starts when the grant arrives, and its end moves
//! only at the instants the client learns something (an answer, an event, its own decision to
//! stop). Once the end has passed, the window is over for good.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use redlease_testkit::history::{FaultSpan, Register, Window, WindowId, Write};
use tokio::time::Instant;

/// What a write came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrote {
    Accepted,
    Rejected,
    /// Not attempted: the window is over.
    NotHeld,
}

#[derive(Default)]
struct State {
    windows: Vec<Window>,
    writes: Vec<Write>,
    register: Register,
    /// Per sidecar: bumped when it is retired (about to restart).
    generations: [u64; 2],
    counts: BTreeMap<&'static str, u64>,
    faults: Vec<FaultSpan>,
}

/// Everything recorded during one run.
pub struct History {
    /// The run's time zero, for printing.
    pub origin: Instant,
    state: Mutex<State>,
}

// === impl History ===

impl History {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            state: Mutex::default(),
        }
    }

    /// Records a grant. `None` when it came from a sidecar generation already retired (its
    /// client had been told the sidecar is going away before the grant arrived).
    pub fn open(&self, window: Window) -> Option<WindowId> {
        let mut state = self.state();
        if let Some((index, generation)) = window.sidecar {
            if state.generations[index] != generation {
                return None;
            }
        }
        state.windows.push(window);
        Some(state.windows.len() - 1)
    }

    /// At `at` the client is told its validity ends at `end`. Returns whether it still holds.
    pub fn update(&self, id: WindowId, at: Instant, end: Instant) -> bool {
        let mut state = self.state();
        let window = &mut state.windows[id];
        if window.end <= at {
            return false;
        }
        window.end = end.max(at);
        window.end > at
    }

    /// At `at` the client learns its validity ends no later than `bound`.
    pub fn cap(&self, id: WindowId, at: Instant, bound: Instant) -> bool {
        let mut state = self.state();
        let window = &mut state.windows[id];
        if window.end > at {
            window.end = window.end.min(bound.max(at));
        }
        window.end > at
    }

    /// At `at` the client stops believing (it learned of an end, or decided to stop).
    pub fn cut(&self, id: WindowId, at: Instant) {
        self.cap(id, at, at);
    }

    pub fn end_of(&self, id: WindowId) -> Instant {
        self.state().windows[id].end
    }

    /// A write of window `id`'s token to its resource's register, now. Unless `force`d, it is
    /// made only while the window holds (the check and the write are one step).
    pub fn write(&self, id: WindowId, force: bool) -> Wrote {
        let mut state = self.state();
        let now = Instant::now();
        let window = &state.windows[id];
        let in_window = window.holds(now);
        if !in_window && !force {
            return Wrote::NotHeld;
        }
        let (resource, token) = (window.resource.clone(), window.token);
        let accepted = state.register.write(&resource, token);
        state.writes.push(Write {
            window: id,
            at: now,
            in_window,
            accepted,
        });
        if accepted {
            Wrote::Accepted
        } else {
            Wrote::Rejected
        }
    }

    pub fn register_max(&self, resource: &str) -> u64 {
        self.state().register.max(resource)
    }

    pub fn generation(&self, sidecar: usize) -> u64 {
        self.state().generations[sidecar]
    }

    /// Sidecar `index` is about to go away: its clients are told now, so every window it
    /// granted ends here, and grants still in flight from it will not be believed.
    pub fn retire(&self, index: usize) -> usize {
        let mut state = self.state();
        let now = Instant::now();
        state.generations[index] += 1;
        let granted_by = |w: &Window| w.sidecar.is_some_and(|(i, _)| i == index);
        let mut cut = 0;
        for window in state
            .windows
            .iter_mut()
            .filter(|w| granted_by(w) && w.end > now)
        {
            window.end = now.max(window.start);
            cut += 1;
        }
        cut
    }

    pub fn count(&self, name: &'static str) {
        *self.state().counts.entry(name).or_default() += 1;
    }

    pub fn fault(&self, kind: &'static str, detail: String, start: Instant, end: Instant) {
        let span = FaultSpan {
            kind,
            detail,
            start,
            end,
        };
        self.state().faults.push(span);
    }

    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.state().counts.clone()
    }

    pub fn snapshot(&self) -> (Vec<Window>, Vec<Write>, Vec<FaultSpan>) {
        let state = self.state();
        let (windows, writes) = (state.windows.clone(), state.writes.clone());
        (windows, writes, state.faults.clone())
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }
}

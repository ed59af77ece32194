//! What the clients of the kinds' history were told, as windows (one per grant, named by
//! the slot it holds), counts of what happened, the faults in order, and the sweep line that
//! counts the windows holding at once.

use std::collections::BTreeMap;
use std::sync::Mutex;

use redlease_testkit::history::Window;
use tokio::time::Instant;

/// The recording of one run.
pub struct Record {
    origin: Instant,
    windows: Mutex<Vec<Window>>,
    counts: Mutex<BTreeMap<&'static str, u64>>,
    faults: Mutex<Vec<(u128, &'static str)>>,
}

impl Record {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            windows: Mutex::default(),
            counts: Mutex::default(),
            faults: Mutex::default(),
        }
    }

    /// Records a window; returns its index, to move its end.
    pub fn open(&self, window: Window) -> usize {
        let mut windows = self.windows.lock().unwrap();
        windows.push(window);
        windows.len() - 1
    }

    /// Moves the end of window `id` to `end` (a renewal's new validity, or an earlier end).
    pub fn set_end(&self, id: usize, end: Instant) {
        self.windows.lock().unwrap()[id].end = end;
    }

    /// The end window `id` has now.
    pub fn end(&self, id: usize) -> Instant {
        self.windows.lock().unwrap()[id].end
    }

    pub fn count(&self, what: &'static str) {
        *self.counts.lock().unwrap().entry(what).or_default() += 1;
    }

    pub fn fault(&self, what: &'static str) {
        let at = self.origin.elapsed().as_millis();
        self.faults.lock().unwrap().push((at, what));
    }

    pub fn windows(&self) -> Vec<Window> {
        self.windows.lock().unwrap().clone()
    }

    pub fn counts(&self) -> BTreeMap<&'static str, u64> {
        self.counts.lock().unwrap().clone()
    }

    pub fn faults(&self) -> Vec<(u128, &'static str)> {
        self.faults.lock().unwrap().clone()
    }
}

/// The windows of a semaphore's leases one per slot: a lease of several permits
/// (`pool#1,4`) holds each of its slots (`pool#1`, `pool#4`) with its one token, for its one
/// window.
pub fn per_slot(windows: &[Window]) -> Vec<Window> {
    let mut each = Vec::new();
    for window in windows {
        let Some((semaphore, slots)) = window.resource.split_once('#') else {
            each.push(window.clone());
            continue;
        };
        for slot in slots.split(',') {
            each.push(Window {
                resource: format!("{semaphore}#{slot}"),
                ..window.clone()
            });
        }
    }
    each
}

/// The most windows holding at one instant (an end and a start at one instant do not meet).
pub fn most_at_once(windows: &[Window]) -> usize {
    let mut edges: Vec<(Instant, i32)> = windows
        .iter()
        .filter(|w| !w.is_empty())
        .flat_map(|w| [(w.start, 1), (w.end, -1)])
        .collect();
    edges.sort();
    let (mut holding, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        holding += delta;
        most = most.max(holding);
    }
    most as usize
}

/// Pairs of windows of the read-write lock that overlap while one of them is a writer's
/// (readers may overlap readers), earlier start first.
pub fn writer_conflicts(windows: &[Window]) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..windows.len())
        .filter(|&i| !windows[i].is_empty())
        .collect();
    order.sort_by_key(|&i| windows[i].start);
    let writes = |i: usize| windows[i].resource.ends_with("/write");
    let mut found = Vec::new();
    for (k, &later) in order.iter().enumerate() {
        for &earlier in &order[..k] {
            let overlap = windows[earlier].end > windows[later].start;
            if overlap && (writes(earlier) || writes(later)) {
                found.push((earlier, later));
            }
        }
    }
    found
}

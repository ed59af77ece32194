//! The checker's pure part, over what was recorded: windows of one resource that overlap,
//! tokens that do not grow in grant order, writes made within a window that the register
//! refused; and how to show them with the faults in force around them.

use tokio::time::Instant;

use super::{FaultSpan, Window, WindowId, Write};

/// Pairs of windows of one resource whose holding times intersect, earlier start first.
/// Empty windows hold nothing and overlap nothing.
pub fn overlaps(windows: &[Window]) -> Vec<(WindowId, WindowId)> {
    let order = in_grant_order(windows);
    let mut found = Vec::new();
    for (k, &later) in order.iter().enumerate() {
        for &earlier in order[..k].iter().rev() {
            if windows[earlier].resource != windows[later].resource {
                break;
            }
            if windows[earlier].end > windows[later].start {
                found.push((earlier, later));
            }
        }
    }
    found
}

/// Consecutive windows of one resource (in grant order) whose token did not grow.
pub fn regressions(windows: &[Window]) -> Vec<(WindowId, WindowId)> {
    let order = in_grant_order(windows);
    let pairs = order.windows(2).map(|pair| (pair[0], pair[1]));
    let regress = |&(a, b): &(WindowId, WindowId)| {
        let (a, b) = (&windows[a], &windows[b]);
        a.resource == b.resource && b.token <= a.token
    };
    pairs.filter(regress).collect()
}

/// Writes made while their window held that the register refused: a holder acting within
/// its validity with a token some other holder had already gone past.
pub fn stale_writes(writes: &[Write]) -> Vec<&Write> {
    writes
        .iter()
        .filter(|w| w.in_window && !w.accepted)
        .collect()
}

/// Non-empty windows by resource, then start (then token, for equal starts).
fn in_grant_order(windows: &[Window]) -> Vec<WindowId> {
    let mut order: Vec<WindowId> = (0..windows.len())
        .filter(|&i| !windows[i].is_empty())
        .collect();
    order.sort_by(|&a, &b| {
        let key = |w: &Window| (w.resource.clone(), w.start, w.token);
        key(&windows[a]).cmp(&key(&windows[b]))
    });
    order
}

// === evidence ===

/// Milliseconds from the run's start.
pub fn ms(at: Instant, origin: Instant) -> f64 {
    if at >= origin {
        (at - origin).as_secs_f64() * 1e3
    } else {
        -(origin - at).as_secs_f64() * 1e3
    }
}

/// One window on one line: who, what, token, and when (ms from the run's start).
pub fn describe(window: &Window, origin: Instant) -> String {
    let sidecar = match window.sidecar {
        Some((index, generation)) => format!(" (sidecar {index} gen {generation})"),
        None => String::new(),
    };
    format!(
        "{} on {}{sidecar}: token {}, [{:.1} ms, {:.1} ms)",
        window.client,
        window.resource,
        window.token,
        ms(window.start, origin),
        ms(window.end, origin)
    )
}

/// The faults in force at some point of `[from − 2 s, to]` (a fault's effects outlive it a
/// little: late answers, quarantines).
pub fn faults_around(spans: &[FaultSpan], from: Instant, to: Instant, origin: Instant) -> String {
    let from = from
        .checked_sub(std::time::Duration::from_secs(2))
        .unwrap_or(from);
    let near = spans.iter().filter(|s| s.start <= to && s.end >= from);
    let lines: Vec<String> = near
        .map(|s| {
            let (start, end) = (ms(s.start, origin), ms(s.end, origin));
            format!("    {} {} [{start:.0} ms, {end:.0} ms]", s.kind, s.detail)
        })
        .collect();
    if lines.is_empty() {
        "    (no fault)".to_string()
    } else {
        lines.join("\n")
    }
}

/// A pair of windows with the faults around them.
pub fn describe_pair(
    (a, b): (WindowId, WindowId),
    windows: &[Window],
    spans: &[FaultSpan],
    origin: Instant,
) -> String {
    let (first, second) = (&windows[a], &windows[b]);
    format!(
        "  {}\n  {}\n  faults around:\n{}",
        describe(first, origin),
        describe(second, origin),
        faults_around(spans, first.start, second.end.max(first.end), origin)
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn window(resource: &str, token: u64, start_ms: u64, end_ms: u64, base: Instant) -> Window {
        Window {
            client: format!("c{token}"),
            resource: resource.to_string(),
            token,
            start: base + Duration::from_millis(start_ms),
            end: base + Duration::from_millis(end_ms),
            sidecar: None,
        }
    }

    /// Windows of one resource that intersect are reported; touching ones are not.
    #[test]
    fn overlapping_windows_of_one_resource_are_reported() {
        let t = Instant::now();
        let windows = [
            window("r", 1, 0, 100, t),
            window("r", 2, 100, 200, t),
            window("r", 3, 150, 300, t),
            window("r", 4, 400, 500, t),
        ];
        assert_eq!(overlaps(&windows), vec![(1, 2)]);
    }

    /// A long window overlapping several later ones is reported with each of them.
    #[test]
    fn a_long_window_overlaps_every_window_it_spans() {
        let t = Instant::now();
        let windows = [
            window("r", 1, 0, 1000, t),
            window("r", 2, 100, 200, t),
            window("r", 3, 300, 400, t),
        ];
        assert_eq!(overlaps(&windows), vec![(0, 1), (0, 2)]);
    }

    /// Different resources may be held at once; empty windows hold nothing.
    #[test]
    fn other_resources_and_empty_windows_never_overlap() {
        let t = Instant::now();
        let windows = [
            window("a", 1, 0, 100, t),
            window("b", 2, 50, 150, t),
            window("a", 3, 60, 60, t),
            window("a", 4, 70, 20, t),
        ];
        assert!(overlaps(&windows).is_empty());
    }

    /// A token that does not grow from one grant of a resource to the next is a regression;
    /// an equal token is one too.
    #[test]
    fn a_token_that_does_not_grow_is_a_regression() {
        let t = Instant::now();
        let windows = [
            window("r", 5, 0, 10, t),
            window("r", 9, 20, 30, t),
            window("s", 1, 25, 35, t),
            window("r", 7, 40, 50, t),
            window("r", 7, 60, 70, t),
        ];
        assert_eq!(regressions(&windows), vec![(1, 3), (3, 4)]);
    }

    /// Tokens are ordered by the grants' arrival, whatever order they were recorded in, and
    /// an empty window (granted after its validity) is left out.
    #[test]
    fn tokens_are_ordered_by_arrival_and_empty_windows_skipped() {
        let t = Instant::now();
        let windows = [
            window("r", 3, 40, 50, t),
            window("r", 1, 0, 10, t),
            window("r", 2, 20, 5, t),
        ];
        assert!(regressions(&windows).is_empty());
    }

    /// Only a refusal within the writer's window is stale; one after it is the fence working.
    #[test]
    fn only_refusals_within_a_window_are_stale() {
        let at = Instant::now();
        let write = |in_window, accepted| Write {
            window: 0,
            at,
            in_window,
            accepted,
        };
        let writes = [write(true, true), write(false, false), write(true, false)];
        let stale = stale_writes(&writes);
        assert_eq!(stale.len(), 1);
        assert!(stale[0].in_window && !stale[0].accepted);
    }
}

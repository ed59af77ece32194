//! The latency distribution as a self-contained SVG, drawn here rather than by a plotting
//! dependency. Like HdrHistogram's plotter: x is the percentile on a log scale of 1/(1-p)
//! (0%, 90%, 99%, …), y is latency in milliseconds; one polyline through the same quantile
//! steps as the `.hgrm` text ([`super::hdr::quantile_rows`]).

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::hdr::{quantile_rows, QuantileRow, MICROS_PER_MILLI};

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 500.0;
/// The plot area inside the canvas: left, top, right and bottom edges.
const LEFT: f64 = 80.0;
const TOP: f64 = 70.0;
const RIGHT: f64 = 750.0;
const BOTTOM: f64 = 430.0;
/// The x axis always shows 0% to 99.999%, and more nines when the data reaches them.
const MIN_DECADES: u32 = 5;
/// More nines than this would mean > 10^9 samples; beyond it the line is pinned to the edge.
const MAX_DECADES: u32 = 9;
/// At most this many steps between labelled latency ticks (so 4 to 6 in practice).
const MAX_LATENCY_STEPS: f64 = 6.0;

/// The SVG document for `histogram` (µs) under `title`.
pub fn latency_svg(histogram: &Histogram<u64>, title: &str) -> String {
    let rows = quantile_rows(histogram);
    let scale = Scale::fit(&rows);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    svg += &headings(title, histogram);
    svg += &percentile_axis(&scale);
    svg += &latency_axis(&scale);
    svg += &polyline(&rows, &scale);
    if rows.is_empty() {
        svg += &text(
            (LEFT + RIGHT) / 2.0,
            (TOP + BOTTOM) / 2.0,
            "middle",
            "no samples",
        );
    }
    svg + "</svg>\n"
}

/// Maps quantiles and latencies to canvas coordinates.
struct Scale {
    /// Decades of 1/(1-p) across the x axis.
    decades: u32,
    /// Latency at the top of the y axis (ms), a whole number of ticks.
    top_ms: f64,
    /// Latency between two y ticks (ms).
    tick_ms: f64,
}

// === impl Scale ===

impl Scale {
    fn fit(rows: &[QuantileRow]) -> Self {
        let deepest = rows
            .iter()
            .filter(|row| row.quantile < 1.0)
            .map(|row| nines(row.quantile).ceil() as u32)
            .max()
            .unwrap_or(0);
        let max_ms = rows.last().map_or(0.0, |row| to_ms(row.value));
        let tick_ms = nice_step(max_ms / MAX_LATENCY_STEPS);
        Self {
            decades: deepest.clamp(MIN_DECADES, MAX_DECADES),
            top_ms: ((max_ms / tick_ms).ceil() * tick_ms).max(tick_ms),
            tick_ms,
        }
    }

    /// p = 1 (the max) sits at the right edge, where 1/(1-p) is infinite.
    fn x(&self, quantile: f64) -> f64 {
        let decades = f64::from(self.decades);
        let position = if quantile < 1.0 {
            nines(quantile).min(decades)
        } else {
            decades
        };
        LEFT + (RIGHT - LEFT) * position / decades
    }

    fn y(&self, ms: f64) -> f64 {
        BOTTOM - (BOTTOM - TOP) * ms / self.top_ms
    }
}

/// log10(1/(1-p)): 0 at 0%, 1 at 90%, 2 at 99%, …
fn nines(quantile: f64) -> f64 {
    (1.0 / (1.0 - quantile)).log10()
}

fn to_ms(micros: u64) -> f64 {
    micros as f64 / MICROS_PER_MILLI
}

/// The 1, 2, 2.5 or 5 × 10^k at or above `raw` (1 µs at least).
fn nice_step(raw: f64) -> f64 {
    let raw = raw.max(0.001);
    let power = 10_f64.powf(raw.log10().floor());
    let mantissa = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|m| m * power >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0);
    mantissa * power
}

fn headings(title: &str, histogram: &Histogram<u64>) -> String {
    let at = |q: f64| to_ms(histogram.value_at_quantile(q));
    let summary = format!(
        "p50 {:.3} ms · p99 {:.3} ms · p99.9 {:.3} ms · max {:.3} ms · {} samples",
        at(0.5),
        at(0.99),
        at(0.999),
        to_ms(histogram.max()),
        histogram.len()
    );
    let title_line = format!(
        "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
        WIDTH / 2.0,
        escape(title)
    );
    title_line + &text(WIDTH / 2.0, 50.0, "middle", &summary)
}

fn percentile_axis(scale: &Scale) -> String {
    let mut svg = String::new();
    for decade in 0..=scale.decades {
        let x = scale.x(1.0 - 10_f64.powi(-(decade as i32)));
        svg += &grid_line(x, TOP, x, BOTTOM);
        svg += &text(x, BOTTOM + 18.0, "middle", &percentile_label(decade));
    }
    svg += &axis_line(LEFT, BOTTOM, RIGHT, BOTTOM);
    svg + &text((LEFT + RIGHT) / 2.0, BOTTOM + 45.0, "middle", "Percentile")
}

/// 0%, 90%, 99%, 99.9%, … for 0, 1, 2, 3, … nines.
fn percentile_label(decade: u32) -> String {
    let percent = 100.0 - 100.0 / 10_f64.powi(decade as i32);
    let decimals = decade.saturating_sub(2) as usize;
    format!("{percent:.decimals$}%")
}

fn latency_axis(scale: &Scale) -> String {
    let mut svg = String::new();
    let ticks = (scale.top_ms / scale.tick_ms).round() as u32;
    let decimals = decimals_of(scale.tick_ms);
    for tick in 0..=ticks {
        let ms = f64::from(tick) * scale.tick_ms;
        let y = scale.y(ms);
        svg += &grid_line(LEFT, y, RIGHT, y);
        svg += &text(LEFT - 8.0, y + 4.0, "end", &format!("{ms:.decimals$}"));
    }
    svg += &axis_line(LEFT, TOP, LEFT, BOTTOM);
    let middle = (TOP + BOTTOM) / 2.0;
    svg + &format!(
        "<text x=\"22\" y=\"{middle}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 22 {middle})\">Latency (ms)</text>\n"
    )
}

/// The fewest decimals (up to 6) that print `step` exactly: 2.5 → 1, 0.02 → 2, 50 → 0.
fn decimals_of(step: f64) -> usize {
    (0..6)
        .find(|&d| {
            let shifted = step * 10_f64.powi(d as i32);
            (shifted - shifted.round()).abs() < 1e-6
        })
        .unwrap_or(6)
}

fn polyline(rows: &[QuantileRow], scale: &Scale) -> String {
    let mut points = String::new();
    for row in rows {
        let (x, y) = (scale.x(row.quantile), scale.y(to_ms(row.value)));
        // Writing into a String cannot fail.
        let _ = write!(
            points,
            "{}{x:.1},{y:.1}",
            if points.is_empty() { "" } else { " " }
        );
    }
    format!(
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" \
         stroke-linejoin=\"round\" points=\"{points}\"/>\n"
    )
}

fn grid_line(x1: f64, y1: f64, x2: f64, y2: f64) -> String {
    format!(
        "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"#e0e0e0\"/>\n"
    )
}

fn axis_line(x1: f64, y1: f64, x2: f64, y2: f64) -> String {
    format!("<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"#333\"/>\n")
}

fn text(x: f64, y: f64, anchor: &str, content: &str) -> String {
    format!(
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{}</text>\n",
        escape(content)
    )
}

/// Text content safe inside an element or an attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram_of(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut histogram = super::super::report::histogram();
        for micros in values {
            histogram.record(micros).unwrap();
        }
        histogram
    }

    /// The points of the (only) polyline.
    fn points(svg: &str) -> Vec<(f64, f64)> {
        let start = svg.find("points=\"").unwrap() + "points=\"".len();
        let end = start + svg[start..].find('"').unwrap();
        let pair = |p: &str| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        };
        svg[start..end].split_whitespace().map(pair).collect()
    }

    /// The document is one `<svg>` element with one polyline of a point per quantile row,
    /// rising left to right (y grows downwards in SVG) and ending at the top right corner.
    #[test]
    fn the_svg_has_one_rising_point_per_quantile_row() {
        let histogram = histogram_of(1_000..=100_000);
        let svg = latency_svg(&histogram, "parallel · masters");
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 1);
        let points = points(&svg);
        assert_eq!(points.len(), quantile_rows(&histogram).len());
        assert!(points
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 >= w[1].1));
        assert!(points.windows(2).any(|w| w[0].0 < w[1].0));
        let (first, last) = (points[0], *points.last().unwrap());
        assert_eq!(first.0, LEFT);
        assert!(first.1 < BOTTOM, "1 ms is above the 0 line: {first:?}");
        assert_eq!(last.0, RIGHT);
        assert!(last.1 >= TOP, "the max stays inside the plot: {last:?}");
    }

    /// The axes carry the percentile labels, ~5 latency ticks and their titles; the title is
    /// escaped.
    #[test]
    fn the_axes_are_labelled() {
        let svg = latency_svg(&histogram_of(1_000..=100_000), "a <b> & c");
        for label in [">0%<", ">90%<", ">99%<", ">99.9%<", ">99.99%<", ">99.999%<"] {
            assert!(svg.contains(label), "{label} missing");
        }
        for tick in [">0<", ">20<", ">40<", ">60<", ">80<", ">100<"] {
            assert!(svg.contains(tick), "{tick} missing");
        }
        assert!(svg.contains(">Percentile<") && svg.contains(">Latency (ms)<"));
        assert!(svg.contains(">a &lt;b&gt; &amp; c<"));
    }

    /// Sub-millisecond latencies get decimal tick labels.
    #[test]
    fn small_latencies_get_decimal_ticks() {
        let svg = latency_svg(&histogram_of(100..=400), "fast");
        for tick in [">0.0<", ">0.1<", ">0.2<", ">0.3<", ">0.4<"] {
            assert!(svg.contains(tick), "{tick} missing");
        }
    }

    /// An empty run still gives a valid document, with no points and a note.
    #[test]
    fn an_empty_histogram_draws_axes_and_a_note() {
        let svg = latency_svg(&super::super::report::histogram(), "empty");
        assert!(points(&svg).is_empty());
        assert!(svg.contains(">no samples<") && svg.trim_end().ends_with("</svg>"));
    }

    /// Steps are 1, 2, 2.5 or 5 × 10^k, and their labels print them without noise.
    #[test]
    fn steps_are_nice_numbers() {
        let cases = [
            (0.3, 0.5),
            (1.0, 1.0),
            (1.1, 2.0),
            (2.1, 2.5),
            (4.0, 5.0),
            (20.0, 20.0),
        ];
        for (raw, step) in cases.into_iter().chain([(0.0, 0.001)]) {
            assert!(
                (nice_step(raw) - step).abs() < 1e-12,
                "{raw} → {}",
                nice_step(raw)
            );
        }
        assert_eq!([50.0, 2.5, 0.2, 0.025].map(decimals_of), [0, 1, 1, 3]);
    }
}

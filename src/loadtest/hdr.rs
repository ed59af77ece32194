//! The percentile-distribution text of a latency histogram: the format HdrHistogram's
//! `outputPercentileDistribution` prints and its plotter (`plotFiles.html`) reads. The
//! hdrhistogram crate only serializes to its binary V2 forms, so the text is written here.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// Percentile steps per halving of the distance to 100% (the reference implementation's default).
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Our histograms count µs; divided by this, the text shows milliseconds.
pub const MICROS_PER_MILLI: f64 = 1000.0;

/// One step of the quantile iteration the text and the plot are drawn from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantileRow {
    /// The highest value equivalent to the step's bucket, in the histogram's unit (µs).
    pub value: u64,
    /// The quantile iterated to; the last row is exactly 1.0.
    pub quantile: f64,
    /// Recorded values up to and including this step.
    pub total_count: u64,
}

/// The quantile steps of `histogram` (none when it is empty).
pub fn quantile_rows(histogram: &Histogram<u64>) -> Vec<QuantileRow> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let mut total_count = 0;
    histogram
        .iter_quantiles(TICKS_PER_HALF_DISTANCE)
        .map(|step| {
            total_count += step.count_since_last_iteration();
            QuantileRow {
                value: step.value_iterated_to(),
                quantile: step.quantile_iterated_to(),
                total_count,
            }
        })
        .collect()
}

/// The whole text: header, one row per quantile step, and the mean/max/buckets footer. Values
/// are divided by `value_scale` and shown with as many decimals as the histogram has
/// significant digits.
pub fn percentile_distribution(histogram: &Histogram<u64>, value_scale: f64) -> String {
    let decimals = usize::from(histogram.sigfig());
    let mut text = format!(
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    for row in quantile_rows(histogram) {
        let value = row.value as f64 / value_scale;
        // Writing into a String cannot fail (here and below).
        let _ = write!(
            text,
            "{value:12.decimals$} {:2.12} {:10}",
            row.quantile, row.total_count
        );
        if row.quantile < 1.0 {
            let _ = write!(text, " {:14.2}", 1.0 / (1.0 - row.quantile));
        }
        text.push('\n');
    }
    text + &footer(histogram, value_scale, decimals)
}

fn footer(histogram: &Histogram<u64>, value_scale: f64, decimals: usize) -> String {
    let (mean, deviation) = (histogram.mean(), histogram.stdev());
    let max = histogram.max() as f64;
    format!(
        "#[Mean    = {:12.decimals$}, StdDeviation   = {:12.decimals$}]\n\
         #[Max     = {:12.decimals$}, Total count    = {:12}]\n\
         #[Buckets = {:12}, SubBuckets     = {:12}]\n",
        mean / value_scale,
        deviation / value_scale,
        max / value_scale,
        histogram.len(),
        histogram.buckets(),
        sub_bucket_count(histogram.sigfig()),
    )
}

/// The crate keeps this private; it is the power of two at or above 2 × 10^sigfig (the
/// largest value a histogram resolves to a single unit).
fn sub_bucket_count(sigfig: u8) -> u32 {
    let single_unit_range = 2 * 10_u32.pow(u32::from(sigfig));
    single_unit_range.next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_to_hundred_ms() -> Histogram<u64> {
        let mut histogram = super::super::report::histogram();
        for micros in 1_000..=100_000 {
            histogram.record(micros).unwrap();
        }
        histogram
    }

    /// Rows of the body: (value, percentile, total count), without the 1/(1-p) column.
    fn body_rows(text: &str) -> Vec<(f64, f64, u64)> {
        let body = text
            .lines()
            .skip(2)
            .take_while(|line| !line.starts_with('#'));
        body.map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let number = |i: usize| fields[i].parse::<f64>().unwrap();
            (number(0), number(1), fields[2].parse().unwrap())
        })
        .collect()
    }

    /// The text opens with the reference header and a blank line, its percentiles rise to
    /// exactly 1.0 at the max value (in ms), and the total count never falls.
    #[test]
    fn the_text_has_the_header_and_rising_percentiles_ending_at_the_max() {
        let histogram = one_to_hundred_ms();
        let text = percentile_distribution(&histogram, MICROS_PER_MILLI);
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("       Value     Percentile TotalCount 1/(1-Percentile)")
        );
        assert_eq!(lines.next(), Some(""));
        let rows = body_rows(&text);
        assert!(rows.len() > 50, "{text}");
        assert!(rows
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1 && w[0].2 <= w[1].2));
        let (max_ms, last_percentile, last_count) = *rows.last().unwrap();
        assert_eq!((last_percentile, last_count), (1.0, 99_001));
        assert_eq!(max_ms, histogram.max() as f64 / 1000.0);
        assert!((100.0..100.1).contains(&max_ms), "{max_ms}");
        assert_eq!(rows[0].0, 1.0, "the first row is the smallest value, 1 ms");
    }

    /// Every row but the last carries 1/(1-p); the last (p = 1) has none, as in the reference.
    #[test]
    fn only_the_last_row_lacks_the_inverse_column() {
        let text = percentile_distribution(&one_to_hundred_ms(), MICROS_PER_MILLI);
        let body: Vec<&str> = text
            .lines()
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .collect();
        let (last, others) = body.split_last().unwrap();
        assert_eq!(last.split_whitespace().count(), 3, "{last}");
        assert!(others.iter().all(|row| row.split_whitespace().count() == 4));
        assert!(others[0].ends_with("           1.00"), "{}", others[0]);
    }

    /// The footer gives mean, deviation, max, the total count and the histogram's layout.
    #[test]
    fn the_footer_has_the_total_count_and_layout() {
        let histogram = one_to_hundred_ms();
        let text = percentile_distribution(&histogram, MICROS_PER_MILLI);
        let footer: Vec<&str> = text.lines().filter(|l| l.starts_with("#[")).collect();
        assert_eq!(footer.len(), 3, "{text}");
        assert!(
            footer[0].starts_with("#[Mean    =       50.5"),
            "{}",
            footer[0]
        );
        assert!(
            footer[1].ends_with("Total count    =        99001]"),
            "{}",
            footer[1]
        );
        let layout = format!(
            "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
            histogram.buckets(),
            2048
        );
        assert_eq!(footer[2], layout);
    }

    /// An empty histogram still gives a well-formed text: header, no rows, zero count.
    #[test]
    fn an_empty_histogram_has_no_rows() {
        let text = percentile_distribution(&super::super::report::histogram(), MICROS_PER_MILLI);
        assert!(body_rows(&text).is_empty(), "{text}");
        assert!(text.contains("Total count    =            0]"), "{text}");
    }
}

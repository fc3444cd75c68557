//! Number formatting for humans: durations with units, rates with SI suffixes.
use msgbench_model::histogram::Percentiles;
use msgbench_model::percentile::SloMetric;
use msgbench_model::verdict::three_digits;
use msgbench_model::RunResult;

/// `812 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`: three significant digits, unit always shown.
pub fn duration_ns(ns: u64) -> String {
    let v = ns as f64;
    let (value, unit) = if v < 1e3 {
        return format!("{ns} ns");
    } else if v < 1e6 {
        (v / 1e3, "µs")
    } else if v < 1e9 {
        (v / 1e6, "ms")
    } else {
        (v / 1e9, "s")
    };
    format!("{} {unit}", three_digits(value))
}

/// The lower bound of percentile `q` with the requests that got no answer counted at their
/// wait (`bounds`, from [`RunResult::latency_at_least`]), where those requests reach into it
/// (they are more than `1 − q` of all).
/// Below that share the answered figure stands (the top `1 − q` are answered requests).
fn raised_by_unanswered(r: &RunResult, bounds: Option<&Percentiles>, q: SloMetric) -> Option<u64> {
    let unanswered = r.unanswered.count as f64;
    let share = unanswered / (unanswered + r.latency.count as f64).max(1.0);
    let quantile = q.quantile();
    // Past that share the percentile over all requests is not known, only bounded below: even
    // when the waits are shorter than the answered latencies (a backlog given up at the span's
    // end waited less than those sent before it), the answered figure alone would read as the
    // run's while most of its requests are not in it.
    bounds.map(|b| q.of(b)).filter(|_| share > 1.0 - quantile)
}

/// A latency percentile of a run as a reader must take it: `≥ X` when the requests that got
/// no answer reach into it (their latency is at least their wait), `–` when nothing was
/// measured.
pub fn latency(r: &RunResult, bounds: Option<&Percentiles>, q: SloMetric) -> String {
    match raised_by_unanswered(r, bounds, q) {
        Some(at_least) => format!("≥ {}", duration_ns(at_least)),
        None if r.latency.count == 0 => "–".to_string(),
        None => duration_ns(q.of(&r.latency)),
    }
}

/// The value of latency percentile `q` a table spreads: as [`latency`] shows it.
pub fn latency_value(r: &RunResult, q: SloMetric) -> u64 {
    let bounds = r.latency_at_least();
    raised_by_unanswered(r, bounds.as_ref(), q).unwrap_or(q.of(&r.latency))
}

/// Percentile `q` of a run is a lower bound set by the requests that got no answer.
pub fn latency_raised(r: &RunResult, q: SloMetric) -> bool {
    raised_by_unanswered(r, r.latency_at_least().as_ref(), q).is_some()
}

/// `950`, `12.3k`, `4.56M`: three significant digits with an SI suffix.
pub fn count(v: f64) -> String {
    msgbench_model::verdict::count(v)
}

/// A ratio 0..1 as a percentage with sensible precision: `0 %`, `0.03 %`, `35.2 %`, `100 %`.
pub fn percent(ratio: f64) -> String {
    let p = ratio * 100.0;
    if !p.is_finite() {
        // Counters that break the accounting have no meaningful share (the run is invalid).
        "–".to_string()
    } else if p == 0.0 || p == 100.0 {
        format!("{p:.0} %")
    } else if p < 1.0 {
        format!("{p:.2} %")
    } else {
        format!("{p:.1} %")
    }
}

/// A section of report.md: `## title`, what its figures mean, and a table of `rows`.
pub fn markdown_section<R: AsRef<[String]>>(
    title: &str,
    explained: &str,
    header: &[&str],
    rows: &[R],
) -> String {
    let mut out = format!(
        "\n## {title}\n\n{explained}\n\n| {} |\n|{}\n",
        header.join(" | "),
        "---|".repeat(header.len())
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.as_ref().join(" | ")));
    }
    out
}

/// The same section in report.html; a row `flagged` says is marked invalid.
pub fn html_section<R: AsRef<[String]>>(
    (title, explained): (&str, &str),
    header: &[&str],
    rows: &[R],
    escape: fn(&str) -> String,
    flagged: impl Fn(&[String]) -> bool,
) -> String {
    let th: String = header.iter().map(|h| format!("<th>{h}</th>")).collect();
    let mut out = format!(
        "<h2>{title}</h2>\n<p>{}</p>\n<table><tr>{th}</tr>\n",
        escape(explained)
    );
    for row in rows {
        let row = row.as_ref();
        let tds: String = row
            .iter()
            .map(|c| format!("<td class=\"l\">{}</td>", escape(c)))
            .collect();
        let class = if flagged(row) {
            " class=\"invalid\""
        } else {
            ""
        };
        out.push_str(&format!("<tr{class}>{tds}</tr>\n"));
    }
    out.push_str("</table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_carry_units() {
        assert_eq!(duration_ns(812), "812 ns");
        assert_eq!(duration_ns(12_345), "12.3 µs");
        assert_eq!(duration_ns(4_560_000), "4.56 ms");
        assert_eq!(duration_ns(1_230_000_000), "1.23 s");
    }

    #[test]
    fn counts_and_percents() {
        assert_eq!(count(950.0), "950");
        assert_eq!(count(12_345.0), "12.3k");
        assert_eq!(count(4_560_000.0), "4.56M");
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(0.0003), "0.03 %");
        assert_eq!(percent(0.352), "35.2 %");
    }
}

//! Latency service-level objectives: `p99 < 10ms`, `p99.9 <= 2ms`, `max < 1s`. Used by advice
//! (which sweep setting to ship) and by `msgbench search` (the highest rate that meets it).
use crate::histogram::Percentiles;
use std::time::Duration;

/// A parsed SLO: a latency percentile below a bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    /// Which percentile.
    pub metric: SloMetric,
    /// Whether the bound itself passes (`<=`).
    pub inclusive: bool,
    /// The bound, ns.
    pub bound_ns: u64,
}

/// The percentiles an SLO may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SloMetric {
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// 99.99th percentile.
    P9999,
    /// Maximum.
    Max,
}

impl SloMetric {
    const ALL: [(&'static str, SloMetric); 7] = [
        ("p50", SloMetric::P50),
        ("p90", SloMetric::P90),
        ("p95", SloMetric::P95),
        ("p99", SloMetric::P99),
        ("p99.9", SloMetric::P999),
        ("p99.99", SloMetric::P9999),
        ("max", SloMetric::Max),
    ];

    /// Its name as written in an SLO.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// Reads it from percentiles.
    pub fn of(self, p: &Percentiles) -> u64 {
        match self {
            SloMetric::P50 => p.p50_ns,
            SloMetric::P90 => p.p90_ns,
            SloMetric::P95 => p.p95_ns,
            SloMetric::P99 => p.p99_ns,
            SloMetric::P999 => p.p999_ns,
            SloMetric::P9999 => p.p9999_ns,
            SloMetric::Max => p.max_ns,
        }
    }
}

impl Slo {
    /// Parses `p99 < 10ms` (spaces optional; `<` or `<=`; any msgbench duration).
    pub fn parse(text: &str) -> Result<Slo, String> {
        let help = "write it like `p99 < 10ms` (percentiles: p50, p90, p95, p99, p99.9 or p999, p99.99 or p9999, max; `<` or `<=`)";
        let (metric_text, rest, inclusive) = if let Some((m, r)) = text.split_once("<=") {
            (m, r, true)
        } else if let Some((m, r)) = text.split_once('<') {
            (m, r, false)
        } else {
            return Err(format!("cannot parse the SLO `{text}`: no `<`; {help}"));
        };
        let metric_text = metric_text.trim().to_ascii_lowercase();
        // `p999` and `p9999` are how many tools (HdrHistogram, wrk2, k6) spell p99.9 and p99.99.
        let canonical = match metric_text.as_str() {
            "p999" => "p99.9",
            "p9999" => "p99.99",
            "p100" => "max",
            other => other,
        };
        let metric = SloMetric::ALL
            .iter()
            .find(|(n, _)| *n == canonical)
            .map(|(_, m)| *m)
            .ok_or_else(|| {
                format!("cannot parse the SLO `{text}`: unknown percentile `{metric_text}`; {help}")
            })?;
        let bound = crate::duration::parse(rest.trim())
            .map_err(|e| format!("cannot parse the SLO `{text}`: {e}; {help}"))?;
        if bound.is_zero() || bound > Duration::from_secs(3600) {
            return Err(format!(
                "cannot parse the SLO `{text}`: the bound must be between 1ns and 1h"
            ));
        }
        Ok(Slo {
            metric,
            inclusive,
            bound_ns: bound.as_nanos() as u64,
        })
    }

    /// True when `value_ns` meets it.
    pub fn met_by(&self, value_ns: u64) -> bool {
        if self.inclusive {
            value_ns <= self.bound_ns
        } else {
            value_ns < self.bound_ns
        }
    }
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.metric.name(),
            if self.inclusive { "<=" } else { "<" },
            crate::duration::format(Duration::from_nanos(self.bound_ns))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slos_parse_and_bad_ones_say_how_to_write_them() {
        let s = Slo::parse("p99 < 10ms").unwrap();
        assert_eq!(
            (s.metric, s.inclusive, s.bound_ns),
            (SloMetric::P99, false, 10_000_000)
        );
        assert_eq!(Slo::parse("p99.9<=2ms").unwrap().metric, SloMetric::P999);
        assert_eq!(Slo::parse("p999 < 2ms").unwrap().to_string(), "p99.9 < 2ms");
        assert_eq!(Slo::parse("p9999 < 2ms").unwrap().metric, SloMetric::P9999);
        assert_eq!(Slo::parse("P99 < 10ms").unwrap().to_string(), "p99 < 10ms");
        assert!(s.met_by(9_999_999) && !s.met_by(10_000_000));
        for bad in ["p99 10ms", "p98 < 1ms", "p99 < fast", "p99 < 0"] {
            let e = Slo::parse(bad).unwrap_err();
            assert!(
                e.contains("p99 < 10ms") || e.contains("between"),
                "{bad}: {e}"
            );
        }
    }
}

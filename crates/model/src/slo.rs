//! Latency service-level objectives: `p99 < 10ms`, `p99.9 <= 2ms`, `max < 1s`. Used by advice
//! (which sweep setting to ship) and by `msgbench search` (the highest rate that meets it).
pub use crate::percentile::SloMetric;
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

impl Slo {
    /// Parses `p99 < 10ms` (spaces optional; `<` or `<=`; any msgbench duration): a
    /// threshold ([`crate::threshold`], the one grammar) on a whole-run latency percentile.
    pub fn parse(text: &str) -> Result<Slo, String> {
        let t = crate::threshold::Threshold::parse(text)
            .map_err(|e| e.replacen("the threshold", "the SLO", 1))?;
        let (metric, inclusive, bound_ns) = t.as_slo().ok_or_else(|| {
            format!(
                "cannot use `{text}` as an SLO: an SLO is a latency percentile of the whole run \
                 below a bound, like `p99 < 10ms` or `p99.9 <= 2ms` (counts and rates are \
                 thresholds: --threshold)"
            )
        })?;
        Ok(Slo {
            metric,
            inclusive,
            bound_ns,
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

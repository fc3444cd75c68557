//! The latency percentiles an SLO or a threshold may name (`p50` … `p99.99`, `max`): one
//! list, read by both grammars.
use crate::histogram::Percentiles;

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

    /// The percentile a name stands for (`p99.9`), as printed by [`Self::name`].
    pub fn named(name: &str) -> Option<SloMetric> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
    }

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

impl SloMetric {
    /// Its quantile (the maximum: 1).
    pub fn quantile(self) -> f64 {
        match self {
            SloMetric::P50 => 0.5,
            SloMetric::P90 => 0.9,
            SloMetric::P95 => 0.95,
            SloMetric::P99 => 0.99,
            SloMetric::P999 => 0.999,
            SloMetric::P9999 => 0.9999,
            SloMetric::Max => 1.0,
        }
    }

    /// Its part of a `metrics.csv` column name (`latency_<it>_ns`): the name without its dot
    /// (`p999`, `max`).
    pub fn column(self) -> String {
        self.name().replace('.', "")
    }
}

/// The latency columns each view of a result shows, chosen here and nowhere else: a reader
/// who compares two views finds the same names for the same figures, and a view that shows
/// fewer shows a subset, in the same order.
pub mod latency_columns {
    use super::SloMetric::{self, Max, P50, P90, P95, P99, P999, P9999};

    /// Every percentile a result keeps: `report.md`'s run table and `metrics.csv`'s run
    /// columns.
    pub const ALL: &[SloMetric] = &[P50, P90, P95, P99, P999, P9999, Max];
    /// The terminal summary's run table: the body, the tail and the worst, within 100
    /// characters.
    pub const SUMMARY: &[SloMetric] = &[P50, P95, P99, P9999, Max];
    /// The HTML report's run table.
    pub const HTML: &[SloMetric] = &[P50, P99, P999, Max];
    /// Per operation class: `report.md`'s class table and `metrics.csv`'s class columns.
    pub const CLASS: &[SloMetric] = &[P50, P99, P999, Max];
    /// Per operation class in the terminal summary.
    pub const SUMMARY_CLASS: &[SloMetric] = &[P50, P99, P9999, Max];
    /// `msgbench compare`'s rows.
    pub const COMPARE: &[SloMetric] = &[P50, P99, P999, P9999, Max];

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn every_view_shows_a_subset_of_all_in_its_order() {
            for view in [SUMMARY, HTML, CLASS, SUMMARY_CLASS, COMPARE] {
                let at: Vec<usize> = (view.iter())
                    .map(|m| ALL.iter().position(|a| a == m).unwrap())
                    .collect();
                assert!(at.windows(2).all(|w| w[0] < w[1]), "{view:?}");
            }
            assert_eq!(P999.column(), "p999");
            assert_eq!(Max.quantile(), 1.0);
        }
    }
}

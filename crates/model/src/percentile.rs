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

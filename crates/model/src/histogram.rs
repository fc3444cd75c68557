//! Histogram conventions shared by engine and reports: bounds, percentile summaries, and the
//! text encoding (base64 of HdrHistogram's compressed V2 format, the same "HISTFAAA…" strings an
//! `.hlog` holds, so HdrHistogram's own tools can read them).
use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Largest value a histogram tracks: one hour in ns. Larger values saturate (and max says so).
pub const HIGHEST_TRACKABLE_NS: u64 = 3_600_000_000_000;
/// Significant decimal digits: 3 (values are exact to 0.1 %).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A new latency histogram with msgbench's bounds (1 ns .. 1 h, 3 digits).
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_TRACKABLE_NS, SIGNIFICANT_DIGITS)
        .expect("constant bounds are valid")
}

/// Encodes a histogram as base64 compressed V2 (HdrHistogram's interchange format).
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("serializing into memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes what [`encode`] wrote.
pub fn decode(text: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("histogram does not decode: {e:?}"))
}

/// Percentile summary of a latency-like histogram, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    /// Number of recorded values.
    pub count: u64,
    /// Smallest value.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 95th percentile.
    pub p95_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// 99.99th percentile.
    pub p9999_ns: u64,
    /// Largest value.
    pub max_ns: u64,
    /// Arithmetic mean.
    pub mean_ns: f64,
    /// Standard deviation.
    pub stdev_ns: f64,
}

impl Percentiles {
    /// Summarizes a histogram (all zero when it is empty).
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p95_ns: h.value_at_quantile(0.95),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            p9999_ns: h.value_at_quantile(0.9999),
            max_ns: h.max(),
            mean_ns: h.mean(),
            stdev_ns: h.stdev(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn encode_decode_round_trips(values in proptest::collection::vec(1u64..HIGHEST_TRACKABLE_NS, 0..200)) {
            let mut h = new_latency_histogram();
            for v in &values { h.record(*v).unwrap(); }
            let back = decode(&encode(&h)).unwrap();
            prop_assert_eq!(back.len(), h.len());
            prop_assert_eq!(Percentiles::of(&back), Percentiles::of(&h));
        }
    }

    #[test]
    fn percentiles_are_within_precision() {
        let mut h = new_latency_histogram();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = Percentiles::of(&h);
        assert_eq!(p.count, 10_000);
        assert!((p.p50_ns as f64 - 5_000_000.0).abs() / 5_000_000.0 < 0.001);
        assert!((p.p99_ns as f64 - 9_900_000.0).abs() / 9_900_000.0 < 0.001);
        assert!(p.max_ns >= 10_000_000 && p.max_ns <= 10_010_000);
    }
}

//! What one connection of a request/response run got: its deliveries, failures and a coarse
//! latency histogram, for the fairness figures ([`msgbench_model::fairness`]).
//!
//! The run's own histograms have 3 significant digits (~270 KB each); one per connection would
//! be 2.7 GB at 10k connections. A fairness figure compares connections whose p99s differ by
//! 2× or 100×, so 16 sub-buckets per power of two (values to within 3 % at the bucket's middle,
//! 2.5 KB a connection) are enough. Recording is one index computation and one increment.
use msgbench_model::fairness::ConnectionResult;

/// Sub-buckets per power of two (log2).
const SUB_BITS: u32 = 4;
const SUB: u64 = 1 << SUB_BITS;
/// Values below this are their own bucket.
const LINEAR: u64 = 2 * SUB;
/// Largest value kept (~73 min in ns); larger ones count here.
const HIGHEST: u64 = (1 << 42) - 1;
const BUCKETS: usize = index_of(HIGHEST) + 1;

/// Index of `v`'s bucket.
#[inline(always)]
const fn index_of(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let octave = 63 - v.leading_zeros(); // ≥ SUB_BITS + 1
    let sub = (v >> (octave - SUB_BITS)) & (SUB - 1);
    (LINEAR + (octave - SUB_BITS - 1) as u64 * SUB + sub) as usize
}

/// The middle of bucket `i`: what a percentile that falls in it reads.
fn middle_of(i: usize) -> u64 {
    let i = i as u64;
    if i < LINEAR {
        return i;
    }
    let octave = (i - LINEAR) / SUB + SUB_BITS as u64 + 1;
    let sub = (i - LINEAR) % SUB;
    let width = 1u64 << (octave - SUB_BITS as u64);
    ((SUB + sub) << (octave - SUB_BITS as u64)) + width / 2
}

/// One connection's tally.
#[derive(Debug, Clone)]
pub struct ConnectionTally {
    delivered: u64,
    failed: u64,
    latency: Box<[u32; BUCKETS]>,
}

impl Default for ConnectionTally {
    fn default() -> Self {
        ConnectionTally {
            delivered: 0,
            failed: 0,
            latency: Box::new([0; BUCKETS]),
        }
    }
}

impl ConnectionTally {
    /// Counts one delivered request that took `latency_ns`.
    #[inline(always)]
    pub fn delivered(&mut self, latency_ns: u64) {
        self.delivered += 1;
        let b = &mut self.latency[index_of(latency_ns.min(HIGHEST))];
        *b = b.saturating_add(1);
    }

    /// Counts one failed request.
    #[inline(always)]
    pub fn failed(&mut self) {
        self.failed += 1;
    }

    /// The result of connection `index`.
    pub fn result(&self, index: u32) -> ConnectionResult {
        ConnectionResult {
            index,
            delivered: self.delivered,
            failed: self.failed,
            latency_p50_ns: self.percentile(0.50),
            latency_p99_ns: self.percentile(0.99),
            latency_max_ns: self.percentile(1.0),
        }
    }

    /// The value below which `q` of the recorded latencies fall (0 when none).
    fn percentile(&self, q: f64) -> u64 {
        let total: u64 = self.latency.iter().map(|&c| u64::from(c)).sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in self.latency.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return middle_of(i);
            }
        }
        middle_of(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        let mut last = 0;
        for v in [0u64, 1, 31, 32, 33, 63, 64, 1000, 1_000_000, HIGHEST] {
            let i = index_of(v);
            assert!(i >= last && i < BUCKETS, "{v}");
            last = i;
        }
        assert_eq!(index_of(32), 32);
        assert_eq!(index_of(31), 31);
    }

    proptest! {
        #[test]
        fn a_value_reads_back_within_three_percent(v in 0u64..HIGHEST) {
            let m = middle_of(index_of(v));
            prop_assert!((m as f64 - v as f64).abs() <= 0.032 * v as f64 + 1.0, "{} read {}", v, m);
        }
    }

    #[test]
    fn percentiles_of_a_known_spread() {
        let mut t = ConnectionTally::default();
        for v in 1..=1000u64 {
            t.delivered(v * 1000);
        }
        t.failed();
        let r = t.result(3);
        assert_eq!((r.index, r.delivered, r.failed), (3, 1000, 1));
        let near = |got: u64, want: f64| (got as f64 - want).abs() <= 0.032 * want;
        assert!(near(r.latency_p50_ns, 500_000.0), "{}", r.latency_p50_ns);
        assert!(near(r.latency_p99_ns, 990_000.0), "{}", r.latency_p99_ns);
        assert!(near(r.latency_max_ns, 1_000_000.0), "{}", r.latency_max_ns);
    }
}

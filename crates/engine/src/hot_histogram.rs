//! The histogram the hot path records into: HdrHistogram's exact bucket layout (3 significant
//! digits, 1 ns .. 1 h), but recording is one index computation and one increment.
//!
//! Written by hand because recording must be cheaper than the `hdrhistogram` crate's `record`,
//! which also maintains min/max/total and checks for resizing on every value (~10 ns here; the
//! issue's budget for a whole message is 15 ns). Min, max, count and mean are all derivable from
//! the buckets, so the collector thread converts a `HotHistogram` into an
//! `hdrhistogram::Histogram` bucket by bucket ([`HotHistogram::add_to`]) and nothing is lost:
//! a property test checks that percentiles, min, max, mean and count are identical to recording
//! into `hdrhistogram` directly.
use hdrhistogram::Histogram;
use msgbench_model::histogram::HIGHEST_TRACKABLE_NS;

/// log2 of half the sub-bucket count: 2048 sub-buckets give 3 significant decimal digits.
const SUB_BUCKET_HALF_COUNT_MAGNITUDE: u32 = 10;
const SUB_BUCKET_HALF_COUNT: u64 = 1 << SUB_BUCKET_HALF_COUNT_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (SUB_BUCKET_HALF_COUNT << 1) - 1;

/// Counts per HdrHistogram bucket.
#[derive(Debug, Clone)]
pub struct HotHistogram {
    /// As many as the `hdrhistogram` crate's own histogram has: its last bucket reaches past
    /// [`HIGHEST_TRACKABLE_NS`], and a value there is recorded as itself, not clamped.
    counts: Box<[u64]>,
    /// Where a value past the last bucket goes: HdrHistogram records the highest trackable
    /// value instead.
    saturated: usize,
}

impl Default for HotHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl HotHistogram {
    /// An empty histogram covering 0 .. [`HIGHEST_TRACKABLE_NS`] (larger values saturate).
    pub fn new() -> HotHistogram {
        // HdrHistogram's layout for msgbench's bounds, read once (making one costs 270 KB).
        static BUCKETS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let buckets = *BUCKETS
            .get_or_init(|| msgbench_model::histogram::new_latency_histogram().distinct_values());
        HotHistogram {
            counts: vec![0; buckets].into_boxed_slice(),
            saturated: index_of(HIGHEST_TRACKABLE_NS),
        }
    }

    /// The bucket `value` counts in, exactly as `saturating_record` would place it. (Clamping
    /// the value to [`HIGHEST_TRACKABLE_NS`] first, as this once did, put a value just above it
    /// — still inside HdrHistogram's last bucket — one bucket too low: a property test found it.)
    #[inline(always)]
    fn slot(&self, value: u64) -> usize {
        let i = index_of(value);
        // A select, not a branch: as cheap as the clamp it replaced.
        if i < self.counts.len() {
            i
        } else {
            self.saturated
        }
    }

    /// Counts one value.
    #[inline(always)]
    pub fn record(&mut self, value: u64) {
        let i = self.slot(value);
        // `slot` keeps `i` in bounds; the check stays (it is predictable and cheap).
        self.counts[i] += 1;
    }

    /// Counts `n` occurrences of one value.
    pub fn record_n(&mut self, value: u64, n: u64) {
        let i = self.slot(value);
        self.counts[i] += n;
    }

    /// Adds every bucket into an HdrHistogram with msgbench's bounds.
    pub fn add_to(&self, h: &mut Histogram<u64>) {
        for (i, &c) in self.counts.iter().enumerate() {
            if c != 0 {
                h.saturating_record_n(value_of(i), c);
            }
        }
    }

    /// Adds every bucket of `other`.
    pub fn add(&mut self, other: &HotHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }

    /// Total count.
    pub fn len(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties the histogram.
    pub fn reset(&mut self) {
        self.counts.fill(0);
    }
}

/// Bucket index of `value`, as HdrHistogram computes it (unit magnitude 0).
#[inline(always)]
fn index_of(value: u64) -> usize {
    let bucket = 63 - (value | SUB_BUCKET_MASK).leading_zeros() - SUB_BUCKET_HALF_COUNT_MAGNITUDE;
    let sub_bucket = value >> bucket;
    (((bucket as u64 + 1) << SUB_BUCKET_HALF_COUNT_MAGNITUDE) + sub_bucket - SUB_BUCKET_HALF_COUNT)
        as usize
}

/// Lowest value that falls into bucket `index`.
fn value_of(index: usize) -> u64 {
    let mut bucket = (index >> SUB_BUCKET_HALF_COUNT_MAGNITUDE) as i64 - 1;
    let mut sub_bucket = (index as u64 & (SUB_BUCKET_HALF_COUNT - 1)) + SUB_BUCKET_HALF_COUNT;
    if bucket < 0 {
        sub_bucket -= SUB_BUCKET_HALF_COUNT;
        bucket = 0;
    }
    sub_bucket << bucket
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_model::histogram::{new_latency_histogram, Percentiles};
    use proptest::prelude::*;

    #[test]
    fn index_and_value_agree_at_bucket_edges() {
        for v in [
            0u64,
            1,
            2047,
            2048,
            2049,
            4095,
            4096,
            1_000_000,
            HIGHEST_TRACKABLE_NS,
        ] {
            let i = index_of(v);
            assert!(value_of(i) <= v && index_of(value_of(i)) == i, "{v}");
        }
    }

    #[test]
    fn values_past_the_highest_trackable_land_where_hdrhistogram_puts_them() {
        // Inside HdrHistogram's last bucket, which ends at 2^42 − 1 (recorded as themselves),
        // and past it (recorded as the highest trackable value).
        for v in [
            HIGHEST_TRACKABLE_NS + 1,
            3_601_330_077_696,
            (1 << 42) - 1,
            1 << 42,
            1 << 63,
            u64::MAX,
        ] {
            let mut hot = HotHistogram::new();
            let mut direct = new_latency_histogram();
            hot.record(v);
            direct.saturating_record(v);
            let mut converted = new_latency_histogram();
            hot.add_to(&mut converted);
            assert_eq!(Percentiles::of(&converted), Percentiles::of(&direct), "{v}");
        }
    }

    proptest! {
        #[test]
        fn converts_to_exactly_what_hdrhistogram_records(values in proptest::collection::vec(prop_oneof![0u64..5_000, 0u64..10_000_000, 0u64..u64::MAX], 1..300)) {
            let mut hot = HotHistogram::new();
            let mut direct = new_latency_histogram();
            for v in &values {
                hot.record(*v);
                direct.saturating_record(*v);
            }
            let mut converted = new_latency_histogram();
            hot.add_to(&mut converted);
            prop_assert_eq!(Percentiles::of(&converted), Percentiles::of(&direct));
        }
    }
}

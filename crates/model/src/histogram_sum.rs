//! Sums of encoded histograms without building them: `merge` adds one second's histogram of
//! every shard, 86 400 times for a day of seconds.
//!
//! Why by hand: an `hdrhistogram::Histogram` with msgbench's bounds (1 ns .. 1 h, 3 digits) is a
//! 270 KB array of counts, zeroed on every decode, and its serializer opens a new deflate
//! stream for every encode. Two one-day shards took 12.7 s to merge, a third of it zeroing
//! arrays and another third setting up compressors (`perf`, `bench/merge-day.sh`). A [`Summer`]
//! reads HdrHistogram's compressed V2 encoding straight into the few buckets a second fills (a
//! sorted list of bucket and count), adds lists by merging them, keeps one inflater and one
//! deflater for all sums, and writes the sum in the same encoding — the bytes HdrHistogram's
//! own tools read. The sums are stored, not compressed (zlib's level 0): a merged `.hlog` is
//! about twice the size the default level makes, and its seconds are written 7x faster. Its quantiles are HdrHistogram's (`value_at_quantile`, `max`) to the bucket:
//! tests compare them with the crate's on random histograms.
//!
//! Only msgbench's own histograms are taken (lowest discernible value 1, 3 significant digits):
//! those are the only ones a shard writes, and they fix how a bucket's index maps to values.
use base64::Engine as _;
use flate2::{Decompress, FlushDecompress, Status};
use zlib_rs::{Deflate, DeflateConfig, DeflateFlush};

/// `V2_COMPRESSED_COOKIE` of HdrHistogram's encoding (`0x1c849304 | 0x10`).
const COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// `V2_COOKIE` (`0x1c849303 | 0x10`): the inflated payload's first word.
const COOKIE: u32 = 0x1c84_9313;
/// Cookie, payload length, normalizing offset, digits, lowest, highest, int-to-double ratio.
const HEADER: usize = 40;
/// Bound on an inflated histogram: every bucket of a u64 range with 3 digits (54 272 buckets)
/// at the longest varint (9 bytes), with the header, fits well inside it.
pub const MAX_INFLATED: usize = 1 << 20;
/// log2 of half the buckets of a power of two at 3 digits (1024).
const HALF_MAGNITUDE: u32 = 10;
/// Values below this share bucket 0 (2048 sub-buckets, 1 ns each).
const SUB_BUCKET_MASK: u64 = 2047;
/// `64 - log2(2048)`: `bucket_for`'s base.
const LEADING_ZERO_BASE: u32 = 53;

/// What one second's sum is, for the merged `.hlog` and its interval sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sum {
    /// HdrHistogram's compressed V2 encoding, base64 (as [`crate::histogram::encode`] writes).
    pub encoded: String,
    /// How many values.
    pub count: u64,
    /// Median, ns (0 when empty).
    pub p50: u64,
    /// 99th percentile, ns (0 when empty).
    pub p99: u64,
    /// Largest value, ns (0 when empty).
    pub max: u64,
}

/// Adds encoded histograms ([`Summer::add`]) and hands out their sum ([`Summer::finish`]), over
/// and over, with one set of buffers.
pub struct Summer {
    inflate: Decompress,
    deflate: Deflate,
    bytes: Vec<u8>,
    inflated: Vec<u8>,
    /// The sum so far: (bucket index, count), ascending, no zero counts.
    sum: Vec<(u32, u64)>,
    /// The histogram being added, in the same form.
    one: Vec<(u32, u64)>,
    /// Where `sum` and `one` are merged.
    merged: Vec<(u32, u64)>,
    /// Highest trackable value of what was added (the sum's header says the largest).
    highest: u64,
    total: u64,
}

impl Default for Summer {
    fn default() -> Self {
        Summer::new()
    }
}

impl Summer {
    /// A summer with nothing added.
    pub fn new() -> Summer {
        Summer {
            inflate: Decompress::new(true),
            // HdrHistogram's serializer compresses at the default level: same size of file.
            deflate: stored_blocks(),
            bytes: Vec::new(),
            inflated: Vec::new(),
            sum: Vec::new(),
            one: Vec::new(),
            merged: Vec::new(),
            highest: 0,
            total: 0,
        }
    }

    /// Adds the histogram `text` encodes (base64 of compressed V2) to the sum; an error says
    /// what is wrong with it, and leaves the sum as it was before the call only in part (the
    /// caller refuses the file).
    pub fn add(&mut self, text: &str) -> Result<(), String> {
        self.bytes.clear();
        base64::engine::general_purpose::STANDARD
            .decode_vec(text.trim(), &mut self.bytes)
            .map_err(|e| format!("histogram is not base64: {e}"))?;
        self.inflate_payload()?;
        let (highest, payload_len) = header(&self.inflated)?;
        let payload = self
            .inflated
            .get(HEADER..HEADER + payload_len)
            .ok_or("histogram's counts are shorter than its header says")?;
        self.one.clear();
        let added = read_counts(payload, counts_len(highest), &mut self.one)?;
        self.total = self
            .total
            .checked_add(added)
            .ok_or("histogram's total overflows")?;
        self.highest = self.highest.max(highest);
        if self.sum.is_empty() {
            std::mem::swap(&mut self.sum, &mut self.one);
            return Ok(());
        }
        merge_counts(&self.sum, &self.one, &mut self.merged)?;
        std::mem::swap(&mut self.sum, &mut self.merged);
        Ok(())
    }

    /// Inflates the compressed V2 in `bytes` into `inflated`, at most [`MAX_INFLATED`] bytes.
    fn inflate_payload(&mut self) -> Result<(), String> {
        let b = &self.bytes;
        if b.len() < 8 || u32::from_be_bytes([b[0], b[1], b[2], b[3]]) != COMPRESSED_COOKIE {
            return Err("histogram does not start with HdrHistogram's compressed V2 cookie".into());
        }
        let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as usize;
        let stream = b
            .get(8..8usize.saturating_add(len))
            .ok_or("histogram is shorter than its compressed length")?;
        self.inflated.clear();
        self.inflated.reserve(4 * stream.len() + HEADER);
        self.inflate.reset(true);
        loop {
            let read = self.inflate.total_in() as usize;
            let status = self
                .inflate
                .decompress_vec(&stream[read..], &mut self.inflated, FlushDecompress::Finish)
                .map_err(|e| format!("histogram does not inflate: {e}"))?;
            if status == Status::StreamEnd {
                return Ok(());
            }
            if self.inflated.len() >= MAX_INFLATED {
                return Err(format!("histogram inflates past {MAX_INFLATED} bytes"));
            }
            // With room left and no end, the input ran out.
            if self.inflated.len() < self.inflated.capacity() {
                return Err("histogram's compressed stream is cut short".into());
            }
            let more = self.inflated.capacity().max(64);
            self.inflated.reserve(more.min(MAX_INFLATED));
        }
    }

    /// The sum of everything added since the last `finish`, which starts a new one.
    pub fn finish(&mut self) -> Result<Sum, String> {
        let (p50, p99, max) = self.quantiles();
        let encoded = self.encode()?;
        let count = self.total;
        self.sum.clear();
        self.total = 0;
        self.highest = 0;
        Ok(Sum {
            encoded,
            count,
            p50,
            p99,
            max,
        })
    }

    /// p50, p99 and max as HdrHistogram's `value_at_quantile` and `max` give them.
    fn quantiles(&self) -> (u64, u64, u64) {
        let Some(&(last, _)) = self.sum.last() else {
            return (0, 0, 0);
        };
        let target = |q: f64| ((q * self.total as f64).ceil() as u64).max(1);
        let (t50, t99) = (target(0.5), target(0.99));
        let (mut p50, mut p99) = (None, None);
        let mut running = 0u64;
        for &(i, count) in &self.sum {
            running += count;
            if p50.is_none() && running >= t50 {
                p50 = Some(highest_equivalent(value_for(i)));
            }
            if running >= t99 {
                p99 = Some(highest_equivalent(value_for(i)));
                break;
            }
        }
        let max = highest_equivalent(value_for(last));
        (p50.unwrap_or(max), p99.unwrap_or(max), max)
    }

    /// The sum as HdrHistogram's serializer writes it: the V2 header, the counts up to the
    /// last non-empty bucket (a run of empty ones as its negated length, a single one as 0),
    /// deflated, base64.
    fn encode(&mut self) -> Result<String, String> {
        let mut raw = Vec::with_capacity(HEADER + 3 * self.sum.len() + 8);
        raw.extend_from_slice(&COOKIE.to_be_bytes());
        raw.extend_from_slice(&0u32.to_be_bytes()); // payload length, set below
        raw.extend_from_slice(&0u32.to_be_bytes()); // normalizing offset
        raw.extend_from_slice(&3u32.to_be_bytes());
        raw.extend_from_slice(&1u64.to_be_bytes());
        let highest = if self.highest == 0 {
            crate::histogram::HIGHEST_TRACKABLE_NS
        } else {
            self.highest
        };
        raw.extend_from_slice(&highest.to_be_bytes());
        raw.extend_from_slice(&1.0f64.to_be_bytes());
        let mut next = 0u32;
        for &(i, count) in &self.sum {
            match i - next {
                0 => {}
                1 => write_varint(0, &mut raw),
                gap => write_varint(zig_zag(-i64::from(gap)), &mut raw),
            }
            let count = i64::try_from(count)
                .map_err(|_| "a bucket's count is past 2^63 and cannot be encoded")?;
            write_varint(zig_zag(count), &mut raw);
            next = i + 1;
        }
        if self.sum.is_empty() {
            write_varint(0, &mut raw); // as HdrHistogram writes an empty histogram
        }
        let payload_len = (raw.len() - HEADER) as u32;
        raw[4..8].copy_from_slice(&payload_len.to_be_bytes());
        let mut out = Vec::with_capacity(raw.len() + 64);
        out.extend_from_slice(&COMPRESSED_COOKIE.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        self.deflate.reset();
        let header = out.len();
        out.resize(header + zlib_rs::compress_bound(raw.len()), 0);
        let status = self
            .deflate
            .compress(&raw, &mut out[header..], DeflateFlush::Finish)
            .map_err(|e| format!("histogram does not deflate: {}", e.as_str()))?;
        if status != zlib_rs::Status::StreamEnd {
            return Err("histogram does not deflate into its bound".into());
        }
        out.truncate(header + self.deflate.total_out() as usize);
        let compressed = (out.len() - 8) as u32;
        out[4..8].copy_from_slice(&compressed.to_be_bytes());
        Ok(base64::engine::general_purpose::STANDARD.encode(out))
    }
}

/// A zlib stream of stored blocks (level 0): the V2 counts are a few hundred varints, which
/// the default level shrinks to about half at 7x the time of storing them — the time of a
/// merge of one-day shards (see the module's opening). The window and hash are the smallest
/// zlib has: a reset clears the hash, and the default one is 128 KB.
fn stored_blocks() -> Deflate {
    Deflate::new_with_config(DeflateConfig {
        level: 0,
        window_bits: 9,
        mem_level: 1,
        ..DeflateConfig::default()
    })
}

/// The highest trackable value and the counts' length, from an inflated V2 header: only
/// msgbench's own histograms (lowest 1, 3 digits, no offset, ratio 1).
fn header(inflated: &[u8]) -> Result<(u64, usize), String> {
    if inflated.len() < HEADER {
        return Err("histogram's header is cut short".into());
    }
    let word = |at: usize| u32::from_be_bytes(inflated[at..at + 4].try_into().expect("4 bytes"));
    let long = |at: usize| u64::from_be_bytes(inflated[at..at + 8].try_into().expect("8 bytes"));
    if word(0) != COOKIE {
        return Err("histogram's inflated header has no V2 cookie".into());
    }
    let (offset, digits, lowest, highest, ratio) = (
        word(8),
        word(12),
        long(16),
        long(24),
        f64::from_bits(long(32)),
    );
    if offset != 0 || digits != 3 || lowest != 1 || ratio != 1.0 {
        return Err(format!(
            "histogram is not one msgbench writes (lowest {lowest}, {digits} digits, offset \
             {offset}, ratio {ratio}; msgbench's are 1, 3, 0, 1)"
        ));
    }
    if !(2048..=1 << 62).contains(&highest) {
        return Err(format!(
            "histogram's highest trackable value {highest} is out of range"
        ));
    }
    Ok((highest, word(4) as usize))
}

/// Reads the varint counts of a V2 payload into `out` as (bucket index, count), ascending (an
/// index only grows as the payload is read); `limit` is the header's bucket count. Returns how
/// many values they count.
fn read_counts(mut payload: &[u8], limit: usize, out: &mut Vec<(u32, u64)>) -> Result<u64, String> {
    let mut index = 0usize;
    let mut total = 0u64;
    while !payload.is_empty() {
        let (zz, used) = read_varint(payload).ok_or("histogram's counts end inside a number")?;
        payload = &payload[used..];
        let n = un_zig_zag(zz);
        if n < 0 {
            index = index.saturating_add(n.unsigned_abs() as usize);
            continue;
        }
        if n > 0 {
            if index >= limit {
                return Err("histogram has counts past its highest trackable value".into());
            }
            out.push((index as u32, n as u64));
            total = total
                .checked_add(n as u64)
                .ok_or("histogram's total overflows")?;
        }
        index += 1;
    }
    Ok(total)
}

/// `a` and `b` added into `out`, each ascending by bucket.
fn merge_counts(
    a: &[(u32, u64)],
    b: &[(u32, u64)],
    out: &mut Vec<(u32, u64)>,
) -> Result<(), String> {
    out.clear();
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        if x.0 < y.0 {
            out.push(x);
            i += 1;
        } else if y.0 < x.0 {
            out.push(y);
            j += 1;
        } else {
            let count = x.1.checked_add(y.1).ok_or("a bucket's count overflows")?;
            out.push((x.0, count));
            i += 1;
            j += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    Ok(())
}

/// HdrHistogram's varint: LEB128 of up to 8 bytes, a 9th taken whole.
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (k, &byte) in b.iter().enumerate().take(9) {
        if k == 8 {
            return Some((value | u64::from(byte) << 56, 9));
        }
        value |= u64::from(byte & 0x7f) << (7 * k);
        if byte & 0x80 == 0 {
            return Some((value, k + 1));
        }
    }
    None
}

/// What [`read_varint`] reads.
fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    if v < 0x80 {
        out.push(v as u8); // most counts and runs of empty buckets: one byte
        return;
    }
    let mut bytes = [0u8; 9];
    let mut n = 0;
    while n < 8 && v >= 0x80 {
        bytes[n] = 0x80 | (v & 0x7f) as u8;
        v >>= 7;
        n += 1;
    }
    bytes[n] = v as u8;
    out.extend_from_slice(&bytes[..=n]);
}

fn zig_zag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn un_zig_zag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// HdrHistogram's `bucket_for` at 3 digits from 1.
fn bucket_for(value: u64) -> u32 {
    LEADING_ZERO_BASE - (value | SUB_BUCKET_MASK).leading_zeros()
}

/// HdrHistogram's `counts.len()` for a highest trackable value: whole buckets of 1024 (the
/// last one covers values somewhat past the highest).
fn counts_len(highest: u64) -> usize {
    let mut untrackable = SUB_BUCKET_MASK + 1;
    let mut buckets = 1usize;
    while untrackable <= highest {
        if untrackable > u64::MAX / 2 {
            buckets += 1;
            break;
        }
        untrackable <<= 1;
        buckets += 1;
    }
    (buckets + 1) << HALF_MAGNITUDE
}

/// HdrHistogram's `index_for`: the bucket index a value is counted in.
#[cfg(test)]
fn index_for(value: u64) -> usize {
    let bucket = bucket_for(value);
    let sub = value >> bucket;
    (((bucket + 1) << HALF_MAGNITUDE) as usize) + sub as usize - (1 << HALF_MAGNITUDE)
}

/// HdrHistogram's `value_for`: the lowest value of a bucket index.
fn value_for(index: u32) -> u64 {
    let mut bucket = (index >> HALF_MAGNITUDE) as i64 - 1;
    let half = 1u32 << HALF_MAGNITUDE;
    let mut sub = (index & (half - 1)) + half;
    if bucket < 0 {
        sub -= half;
        bucket = 0;
    }
    u64::from(sub) << bucket
}

/// HdrHistogram's `highest_equivalent`: the highest value counted with `value`.
fn highest_equivalent(value: u64) -> u64 {
    let bucket = bucket_for(value);
    let lowest = (value >> bucket) << bucket;
    lowest.saturating_add(1 << bucket) - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::{decode, encode, new_latency_histogram, HIGHEST_TRACKABLE_NS};
    use proptest::prelude::*;

    fn histogram(values: &[u64]) -> hdrhistogram::Histogram<u64> {
        let mut h = new_latency_histogram();
        for v in values {
            h.saturating_record(*v);
        }
        h
    }

    proptest! {
        #[test]
        fn a_sum_is_what_hdrhistogram_adds(
            parts in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![1u64..5_000, 1u64..50_000_000, 1u64..4_000_000_000_000], 0..300),
                1..4),
        ) {
            let mut expected = new_latency_histogram();
            let mut summer = Summer::new();
            for values in &parts {
                let h = histogram(values);
                expected.add(&h).unwrap();
                summer.add(&encode(&h)).unwrap();
            }
            let sum = summer.finish().unwrap();
            let back = decode(&sum.encoded).unwrap();
            prop_assert_eq!(back.len(), expected.len());
            prop_assert_eq!(sum.count, expected.len());
            let buckets = |h: &hdrhistogram::Histogram<u64>| -> Vec<(u64, u64)> {
                h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect()
            };
            prop_assert_eq!(buckets(&back), buckets(&expected));
            if !expected.is_empty() {
                prop_assert_eq!(sum.p50, expected.value_at_quantile(0.5));
                prop_assert_eq!(sum.p99, expected.value_at_quantile(0.99));
                prop_assert_eq!(sum.max, expected.max());
            }
            // The summer starts again from nothing.
            summer.add(&encode(&histogram(&[7]))).unwrap();
            let again = summer.finish().unwrap();
            prop_assert_eq!((again.count, again.p50, again.max), (1, 7, 7));
        }

        #[test]
        fn any_bytes_are_an_error_or_a_sum_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut summer = Summer::new();
            let text = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let _ = summer.add(&text);
            let _ = summer.finish();
        }

        #[test]
        fn any_counts_under_a_good_header_are_an_error_or_a_sum(
            counts in proptest::collection::vec(any::<u8>(), 0..400),
            highest in prop_oneof![Just(HIGHEST_TRACKABLE_NS), 0u64..u64::MAX],
        ) {
            let mut raw = Vec::new();
            raw.extend_from_slice(&COOKIE.to_be_bytes());
            raw.extend_from_slice(&(counts.len() as u32).to_be_bytes());
            raw.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 3]);
            raw.extend_from_slice(&1u64.to_be_bytes());
            raw.extend_from_slice(&highest.to_be_bytes());
            raw.extend_from_slice(&1.0f64.to_be_bytes());
            raw.extend_from_slice(&counts);
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            std::io::Write::write_all(&mut z, &raw).unwrap();
            let z = z.finish().unwrap();
            let mut bytes = COMPRESSED_COOKIE.to_be_bytes().to_vec();
            bytes.extend_from_slice(&(z.len() as u32).to_be_bytes());
            bytes.extend_from_slice(&z);
            let mut summer = Summer::new();
            if summer.add(&base64::engine::general_purpose::STANDARD.encode(&bytes)).is_ok() {
                let sum = summer.finish().unwrap_or_default();
                prop_assert!(sum.p50 <= sum.p99 && sum.p99 <= sum.max);
            }
        }
    }

    #[test]
    fn a_histogram_that_is_not_msgbench_s_or_is_cut_is_refused() {
        let mut summer = Summer::new();
        let other = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1_000_000, 2).unwrap();
        let e = summer.add(&encode(&other)).unwrap_err();
        assert!(e.contains("not one msgbench writes"), "{e}");
        let whole = encode(&histogram(&[5, 50, 500_000]));
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&whole)
            .unwrap();
        let cut = base64::engine::general_purpose::STANDARD.encode(&raw[..raw.len() - 6]);
        assert!(Summer::new().add(&cut).is_err());
        assert!(Summer::new().add("not base64!").is_err());
    }

    #[test]
    fn an_empty_sum_decodes_to_an_empty_histogram() {
        let sum = Summer::new().finish().unwrap();
        assert_eq!((sum.count, sum.p50, sum.p99, sum.max), (0, 0, 0, 0));
        assert!(decode(&sum.encoded).unwrap().is_empty());
    }

    #[test]
    fn index_and_value_map_as_hdrhistogram_does() {
        let h = new_latency_histogram();
        for v in [
            1u64,
            2047,
            2048,
            2049,
            4095,
            4096,
            1 << 30,
            3_600_000_000_000,
        ] {
            let i = index_for(v);
            assert_eq!(value_for(i as u32), h.lowest_equivalent(v), "{v}");
            assert_eq!(highest_equivalent(v), h.highest_equivalent(v), "{v}");
        }
        assert_eq!(counts_len(HIGHEST_TRACKABLE_NS), h.distinct_values());
    }
}

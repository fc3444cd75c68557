//! Streamed responses (`[http.requests.NAME] stream = "sse"`): what one stream showed
//! ([`StreamFigures`], made by the protocol that read it), each worker's tally of its measured
//! streams ([`StreamedTally`], beside the recorder's latencies), and the run's
//! ([`StreamedTotals`]) as the result says it (`streamed`).
//!
//! Kept for the whole run, not per second: a stream's figures are a few values per message,
//! recorded where it completes; the run's report and `merge` need only the totals.
use crate::hot_histogram::HotHistogram;
use hdrhistogram::Histogram;
use msgbench_model::histogram::{encode, new_latency_histogram, Percentiles};
use msgbench_model::result::StreamedResponses;

/// What one streamed response showed, as it arrived.
#[derive(Debug, Default, Clone)]
pub struct StreamFigures {
    /// When its first message arrived (clock ns; 0: none yet).
    pub first_ns: u64,
    /// When its last message so far arrived.
    pub last_ns: u64,
    /// Messages so far.
    pub messages: u64,
    /// Bytes of their data.
    pub bytes: u64,
    /// Every gap between two consecutive messages, ns (reused from stream to stream), the
    /// first [`MAX_GAPS`] of a stream.
    pub gaps_ns: Vec<u64>,
    /// The stream's end marker (`stream_done`) came: what follows it is not counted.
    pub ended: bool,
}

/// Gaps kept per stream (8 bytes each: 512 KiB): a longer stream's later gaps are not in the
/// gap histogram (its messages and time per message still count them).
pub const MAX_GAPS: usize = 1 << 16;

impl StreamFigures {
    /// A message arrived at `now` with `bytes` of data.
    #[inline]
    pub fn message(&mut self, now: u64, bytes: usize) {
        if self.messages == 0 {
            self.first_ns = now;
        } else if self.gaps_ns.len() < MAX_GAPS {
            self.gaps_ns.push(now.saturating_sub(self.last_ns));
        }
        self.last_ns = now;
        self.messages += 1;
        self.bytes += bytes as u64;
    }

    /// An event with `data` arrived at `now`: a message, unless it is the end marker `done`
    /// (empty: none) or follows it.
    #[inline]
    pub fn event(&mut self, now: u64, data: &[u8], done: &[u8]) {
        if !done.is_empty() && data == done {
            self.ended = true;
        } else if !self.ended {
            self.message(now, data.len());
        }
    }

    /// Ready for the next stream (the gaps' room kept).
    pub fn clear(&mut self) {
        self.first_ns = 0;
        self.last_ns = 0;
        self.messages = 0;
        self.bytes = 0;
        self.gaps_ns.clear();
        self.ended = false;
    }
}

/// One worker's measured streams.
#[derive(Debug, Default)]
pub struct StreamedTally {
    first_message: HotHistogram,
    gap: HotHistogram,
    per_message: HotHistogram,
    streams: u64,
    messages: u64,
    bytes: u64,
    empty: u64,
    cut: u64,
    cut_messages: u64,
}

impl StreamedTally {
    /// A completed stream whose request was meant to go at `intended_ns`.
    pub fn completed(&mut self, intended_ns: u64, s: &StreamFigures) {
        self.streams += 1;
        self.messages += s.messages;
        self.bytes += s.bytes;
        if s.messages == 0 {
            self.empty += 1;
            return;
        }
        self.first_message
            .record(s.first_ns.saturating_sub(intended_ns));
        for &g in &s.gaps_ns {
            self.gap.record(g);
        }
        if s.messages > 1 {
            self.per_message
                .record((s.last_ns - s.first_ns) / (s.messages - 1));
        }
    }

    /// A stream cut short after `messages` messages.
    pub fn cut(&mut self, messages: u64) {
        self.cut += 1;
        self.cut_messages += messages;
    }
}

/// The run's streams, over every worker.
#[derive(Debug)]
pub struct StreamedTotals {
    first_message: Histogram<u64>,
    gap: Histogram<u64>,
    per_message: Histogram<u64>,
    counts: [u64; 6],
}

impl Default for StreamedTotals {
    fn default() -> Self {
        StreamedTotals {
            first_message: new_latency_histogram(),
            gap: new_latency_histogram(),
            per_message: new_latency_histogram(),
            counts: [0; 6],
        }
    }
}

impl StreamedTotals {
    /// Adds a worker's tally.
    pub fn add(&mut self, t: &StreamedTally) {
        t.first_message.add_to(&mut self.first_message);
        t.gap.add_to(&mut self.gap);
        t.per_message.add_to(&mut self.per_message);
        let counts = [
            t.streams,
            t.messages,
            t.bytes,
            t.empty,
            t.cut,
            t.cut_messages,
        ];
        for (total, n) in self.counts.iter_mut().zip(counts) {
            *total += n;
        }
    }

    /// As the result says it.
    pub fn to_result(&self) -> StreamedResponses {
        let [streams, messages, bytes, empty, cut, cut_messages] = self.counts;
        StreamedResponses {
            streams,
            messages,
            bytes,
            empty,
            cut,
            cut_messages,
            first_message: Percentiles::of(&self.first_message),
            gap: Percentiles::of(&self.gap),
            per_message: Percentiles::of(&self.per_message),
            first_message_histogram: encode(&self.first_message),
            gap_histogram: encode(&self.gap),
            per_message_histogram: encode(&self.per_message),
        }
    }
}

/// Several runs' streams as one (`merge`): counts summed, histograms added exactly; `None`
/// when none streamed. An encoded histogram that does not decode is named.
pub fn sum<'a>(
    parts: impl Iterator<Item = &'a StreamedResponses>,
) -> Result<Option<StreamedResponses>, String> {
    let mut totals = StreamedTotals::default();
    let mut any = false;
    for p in parts {
        any = true;
        for (total, encoded, name) in [
            (
                &mut totals.first_message,
                &p.first_message_histogram,
                "first_message",
            ),
            (&mut totals.gap, &p.gap_histogram, "gap"),
            (
                &mut totals.per_message,
                &p.per_message_histogram,
                "per_message",
            ),
        ] {
            if encoded.is_empty() {
                continue;
            }
            let h = msgbench_model::histogram::decode(encoded)
                .map_err(|e| format!("streamed.{name}_histogram does not decode ({e})"))?;
            total
                .add(h)
                .map_err(|e| format!("streamed.{name}_histogram cannot be added ({e:?})"))?;
        }
        let counts = [
            p.streams,
            p.messages,
            p.bytes,
            p.empty,
            p.cut,
            p.cut_messages,
        ];
        for (total, n) in totals.counts.iter_mut().zip(counts) {
            *total += n;
        }
    }
    Ok(any.then(|| totals.to_result()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_gives_its_first_message_its_gaps_and_its_time_per_message() {
        let mut s = StreamFigures::default();
        for (at, bytes) in [(150, 10), (160, 5), (180, 5)] {
            s.message(at, bytes);
        }
        let mut tally = StreamedTally::default();
        tally.completed(100, &s);
        tally.completed(100, &StreamFigures::default());
        tally.cut(3);
        let mut totals = StreamedTotals::default();
        totals.add(&tally);
        let r = totals.to_result();
        assert_eq!((r.streams, r.messages, r.bytes, r.empty), (2, 3, 20, 1));
        assert_eq!((r.cut, r.cut_messages), (1, 3));
        assert_eq!(r.first_message.count, 1);
        assert_eq!(r.first_message.max_ns, 50);
        assert_eq!((r.gap.count, r.gap.min_ns, r.gap.max_ns), (2, 10, 20));
        assert_eq!(r.per_message.max_ns, 15);
        // Two runs merged: counts and histograms added.
        let both = sum([&r, &r].into_iter()).unwrap().unwrap();
        assert_eq!((both.streams, both.gap.count, both.cut), (4, 4, 2));
        assert!(sum(std::iter::empty()).unwrap().is_none());
    }
}

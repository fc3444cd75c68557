//! What one stream client measured, and how it joins what the server counted for it into the
//! result's [`StreamClient`]: the client knows what it processed and when, the server what it
//! generated, dropped and wrote; the run's accounting needs both ends.
//!
//! Per client, latency goes into a 2-significant-digit histogram (36 KB; a 3-digit one is 350 KB,
//! too much for hundreds of clients). The run's and each group's figures keep 3 digits: every
//! tick is also recorded into the thread's [`Recorder`].
use crate::net::tick::{PageReport, Schedule, Tick};
use crate::recorder::{Recorder, SequenceChecker};
use crate::server::ticks::ConnReport;
use hdrhistogram::Histogram;
use msgbench_model::histogram::{encode, Percentiles, HIGHEST_TRACKABLE_NS};
use msgbench_model::result::{
    Counters, Faults, IntervalSample, PageClock, SequenceErrors, StreamClient, StreamInterval,
    StreamServerCounts,
};
use msgbench_model::ticks::GapPolicy;

/// One second of one client, as the client saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientSecond {
    /// Measured ticks processed in it.
    pub delivered: u64,
    /// Their median latency.
    pub p50_ns: u64,
    /// Their p99 latency.
    pub p99_ns: u64,
    /// Their largest latency.
    pub max_ns: u64,
    /// Gaps their sequence numbers opened (ticks of the window never received).
    pub gaps: u64,
}

fn client_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_TRACKABLE_NS, 2).expect("constant bounds are valid")
}

/// What one client connection (and its reconnections) measured.
#[derive(Debug)]
pub struct StreamStats {
    /// Connection name (`fast-0`).
    pub name: String,
    /// Group index (the operation class).
    pub group: usize,
    /// `native` (a WebSocket client), `browser`, `grpc`, `sse` or `udp`.
    pub kind: &'static str,
    /// The sender its messages came from (a UDP feed's: each sender is a sequence of its own).
    pub source: Option<std::net::SocketAddr>,
    sequence: Option<SequenceChecker>,
    /// Sequence errors of earlier connections (reconnections start a new sequence).
    earlier: SequenceErrors,
    /// Gaps closed by a measured tick (ticks missing from the measured window).
    pub gaps_measured: u64,
    /// Measured ticks processed.
    pub delivered: u64,
    /// Ticks processed since the connection opened (warm-up included): what acks carry.
    pub processed: u64,
    second: usize,
    interval: Histogram<u64>,
    /// Latency of every measured tick.
    pub total: Histogram<u64>,
    /// One entry per second of the measured window (and of the drain after it).
    pub per_second: Vec<ClientSecond>,
    /// Faults of this connection.
    pub faults: Faults,
    /// Why and when (clock ns) the connection ended before the stream did.
    pub closed: Option<(String, u64)>,
    /// The server said the stream is over.
    pub end_seen: bool,
    /// Reconnections made.
    pub reconnects: u32,
    /// What the first message that did not decode lacked, with the message (a count of
    /// protocol errors alone does not say a feed's sequence path is wrong).
    pub first_protocol_error: Option<String>,
    /// A browser page's clock.
    pub page_clock: Option<PageClock>,
    /// When the last message was processed (clock ns; 0: none yet).
    last_ns: u64,
    /// The current connection's first and last sequence numbers stamped in the window.
    window_seq: Option<(u64, u64)>,
    /// Sequence numbers earlier connections spanned in the window.
    span_earlier: u64,
    /// Per second of the window by stamp, the highest sequence number stamped in it that the
    /// current connection read (0: none).
    top_by_second: Vec<u64>,
    /// The newest stamp among the ticks processed by the window's end (clock ns; 0: none).
    pub newest_by_end_ns: u64,
    /// Gaps opened in the current second.
    interval_gaps: u64,
}

/// A jump ahead in a stream's sequence numbers past this many messages, plus
/// [`JUMP_PER_SECOND`] for each second since the previous message, cannot be messages the
/// server sent and the client missed: no stream here runs that fast. Such a message is a
/// protocol fault of its own (a sequence field that is not one, a corrupted number), never
/// billions of "lost" messages in the run's counts.
pub const JUMP_LEAST: u64 = 1 << 20;
/// See [`JUMP_LEAST`]: 100 M messages a second.
pub const JUMP_PER_SECOND: u64 = 100_000_000;

impl StreamStats {
    /// Empty statistics of client `name` in group `group`.
    pub fn new(name: String, group: usize, kind: &'static str) -> StreamStats {
        StreamStats {
            name,
            group,
            kind,
            source: None,
            sequence: None,
            earlier: SequenceErrors::default(),
            gaps_measured: 0,
            delivered: 0,
            processed: 0,
            second: 0,
            interval: client_histogram(),
            total: client_histogram(),
            per_second: Vec::new(),
            faults: Faults::default(),
            closed: None,
            end_seen: false,
            reconnects: 0,
            first_protocol_error: None,
            page_clock: None,
            last_ns: 0,
            window_seq: None,
            span_earlier: 0,
            top_by_second: Vec::new(),
            newest_by_end_ns: 0,
            interval_gaps: 0,
        }
    }

    /// Sequence numbers its connections spanned among the ticks stamped in the window, from
    /// the first read to the last (what was read, plus the gaps between).
    pub fn window_span(&self) -> u64 {
        let now = (self.window_seq).map_or(0, |(first, last)| (last - first).saturating_add(1));
        self.span_earlier.saturating_add(now)
    }

    /// Sequence errors over all its connections.
    pub fn sequence(&self) -> SequenceErrors {
        let now = self.sequence.as_ref().map(|s| s.errors).unwrap_or_default();
        SequenceErrors {
            gaps: self.earlier.gaps + now.gaps,
            duplicates: self.earlier.duplicates + now.duplicates,
            reordered: self.earlier.reordered + now.reordered,
        }
    }

    /// A new connection: its sequence numbers start wherever the server is.
    pub fn reconnected(&mut self) {
        if let Some(s) = self.sequence.take() {
            let e = s.errors;
            self.earlier.gaps += e.gaps;
            self.earlier.duplicates += e.duplicates;
            self.earlier.reordered += e.reordered;
        }
        self.span_earlier = self.window_span();
        self.window_seq = None;
        self.top_by_second.clear();
        self.reconnects += 1;
    }

    /// A new connection that resumes the stream where the last one left it (an event stream's
    /// `Last-Event-ID`): its sequence goes on, and what the server did not replay is a gap.
    pub fn resumed(&mut self) {
        self.reconnects += 1;
    }

    /// Counts one tick processed at `completed_ns` and records its latency when it belongs to
    /// the measured window.
    #[inline]
    pub fn on_tick(
        &mut self,
        tick: &Tick,
        completed_ns: u64,
        window: Option<&Schedule>,
        rec: &mut Recorder,
    ) {
        let checker = self
            .sequence
            .get_or_insert_with(|| SequenceChecker::starting_at(tick.seq));
        // The bound is worked out only for a jump (the per-tick path compares two numbers).
        let ahead = tick.seq.saturating_sub(checker.expected());
        if ahead > JUMP_LEAST && ahead > jump_bound(completed_ns.saturating_sub(self.last_ns)) {
            self.faults.protocol_errors += 1;
            return;
        }
        self.last_ns = completed_ns;
        let (gaps_before, seen_before) = (checker.errors.gaps, checker.errors.duplicates);
        checker.check(tick.seq);
        let gaps_after = checker.errors.gaps;
        // A number seen before (a duplicate, or a feed whose numbers went backwards) moves
        // nothing of where the connection is in the feed.
        let in_order = checker.errors.duplicates == seen_before;
        self.processed += 1;
        let Some(window) = window.filter(|w| w.measures(tick.intended_ns)) else {
            return;
        };
        self.in_window(tick, completed_ns, window, in_order);
        let second = window.second(completed_ns);
        if second != self.second {
            self.roll(second);
        }
        // A late number fills a gap it had opened (the checker counts it reordered instead).
        if gaps_after >= gaps_before {
            self.gaps_measured += gaps_after - gaps_before;
            self.interval_gaps += gaps_after - gaps_before;
        } else {
            self.gaps_measured = self.gaps_measured.saturating_sub(gaps_before - gaps_after);
            self.interval_gaps = self.interval_gaps.saturating_sub(gaps_before - gaps_after);
        }
        self.delivered += 1;
        let latency = completed_ns.saturating_sub(tick.intended_ns);
        self.interval.saturating_record(latency);
        let sent = if tick.sent_ns == 0 {
            tick.intended_ns
        } else {
            tick.sent_ns
        };
        rec.delivered(self.group, tick.intended_ns, sent, completed_ns);
    }

    /// Where a tick stamped in the window puts the connection in the feed: the span of
    /// sequence numbers it has read, the top one per second of stamps, and, by the window's
    /// end, the newest stamp (how far behind the feed a client is, without the feed's help).
    #[inline]
    fn in_window(&mut self, tick: &Tick, completed_ns: u64, window: &Schedule, in_order: bool) {
        if completed_ns <= window.end_ns {
            self.newest_by_end_ns = self.newest_by_end_ns.max(tick.intended_ns);
        }
        if !in_order {
            return;
        }
        let (_, last) = self.window_seq.get_or_insert((tick.seq, tick.seq));
        *last = (*last).max(tick.seq);
        let k = window.second(tick.intended_ns);
        if k >= self.top_by_second.len() {
            self.top_by_second.resize(k + 1, 0);
        }
        self.top_by_second[k] = self.top_by_second[k].max(tick.seq);
    }

    /// Counts one message whose sequence number the caller checked (`gaps_added`: gaps it
    /// opened), processed at `completed_ns`; records its latency when `window` measures it.
    #[inline]
    pub fn on_checked(
        &mut self,
        intended_ns: u64,
        completed_ns: u64,
        gaps_added: u64,
        window: &Schedule,
        rec: &mut Recorder,
    ) {
        self.processed += 1;
        if !window.measures(intended_ns) {
            return;
        }
        self.gaps_measured += gaps_added;
        let second = window.second(completed_ns);
        if second != self.second {
            self.roll(second);
        }
        self.delivered += 1;
        self.interval
            .saturating_record(completed_ns.saturating_sub(intended_ns));
        rec.delivered(self.group, intended_ns, intended_ns, completed_ns);
    }

    /// Adds one second a browser page measured (and its cumulative counts).
    pub fn on_page_report(&mut self, report: &PageReport) {
        let second = report.k as usize;
        if second != self.second {
            self.roll(second);
        }
        self.delivered += report.delivered;
        self.processed = self.processed.max(report.processed);
        for pair in report.latency.chunks_exact(2) {
            self.interval.saturating_record_n(pair[0], pair[1]);
        }
        let [gaps, duplicates, reordered] = report.sequence;
        self.sequence = Some(SequenceChecker::default());
        self.earlier = SequenceErrors {
            gaps,
            duplicates,
            reordered,
        };
        if report.last {
            self.end_seen = true;
        }
    }

    /// Closes the current second and any empty ones before `second`.
    fn roll(&mut self, second: usize) {
        while self.per_second.len() < self.second {
            self.per_second.push(ClientSecond::default());
        }
        if self.per_second.len() == self.second {
            let h = &self.interval;
            self.per_second.push(ClientSecond {
                delivered: h.len(),
                p50_ns: h.value_at_quantile(0.5),
                p99_ns: h.value_at_quantile(0.99),
                max_ns: h.max(),
                gaps: self.interval_gaps,
            });
        }
        self.total.add(&self.interval).expect("same bounds");
        self.interval.reset();
        self.interval_gaps = 0;
        self.second = second;
    }

    /// Closes the last second.
    pub fn finish(&mut self) {
        if !self.interval.is_empty() || self.interval_gaps > 0 {
            let next = self.second + 1;
            self.roll(next);
        }
    }
}

/// How a client's figures join the server's.
pub struct Join<'a> {
    /// What the built-in server counted for this client (all its connections), if it is ours.
    pub server: Option<&'a ServerSide>,
    /// Someone else's feed, as all the run's clients saw it (`None` with `server`).
    pub feed: Option<&'a FeedSide>,
    /// What gaps mean.
    pub gaps: GapPolicy,
    /// The window, to turn clock times into seconds.
    pub schedule: Schedule,
}

/// The built-in server's reports of one client's connections, combined.
#[derive(Debug, Clone, Default)]
pub struct ServerSide {
    /// Counts over the measured window.
    pub counts: StreamServerCounts,
    /// Ticks it dropped for the client over the whole connection (warm-up included).
    pub dropped_all: u64,
    /// Per second: generated, dropped, written.
    pub per_second: Vec<[u64; 3]>,
}

impl ServerSide {
    /// Combines the reports of one client's connections (`fast-0`, `fast-0.1`, …).
    pub fn of(reports: &[&ConnReport]) -> ServerSide {
        let mut side = ServerSide::default();
        for r in reports {
            let c = &mut side.counts;
            c.generated += r.counts.generated;
            c.queued += r.counts.queued;
            c.dropped += r.counts.dropped;
            c.written += r.counts.written;
            c.acked += r.counts.acked;
            c.queue_peak = c.queue_peak.max(r.counts.queue_peak);
            side.dropped_all += r.dropped_all;
            if side.per_second.len() < r.per_second.len() {
                side.per_second.resize(r.per_second.len(), [0; 3]);
            }
            for (a, b) in side.per_second.iter_mut().zip(&r.per_second) {
                for i in 0..3 {
                    a[i] += b[i];
                }
            }
        }
        side
    }
}

/// Someone else's feed as the run's clients saw it together: the server tells nothing, but
/// every client reads the same feed, so the one that read the most of the window shows what
/// the feed sent in it (a slow client's own sequence numbers stop where it stopped reading).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeedSide {
    /// Ticks the feed stamped in the window: the longest span of sequence numbers any client
    /// read there (a feed numbering each connection on its own counts as one feed, the same
    /// span per connection).
    pub generated: u64,
    /// Of them, per second of the window by stamp.
    pub per_second: Vec<u64>,
    /// The newest stamp any client had read by the window's end (clock ns).
    pub newest_by_end_ns: u64,
}

impl FeedSide {
    /// The feed as `clients` (every client of the run) saw it.
    pub fn of(clients: &[StreamStats]) -> FeedSide {
        FeedSide::of_some(clients.iter())
    }

    /// Each sender's feed as the clients that heard it saw it (one entry, `None`'s, for a feed
    /// whose senders are not told apart: every one but UDP).
    pub fn by_source(clients: &[StreamStats]) -> Vec<(Option<std::net::SocketAddr>, FeedSide)> {
        let mut sources: Vec<Option<std::net::SocketAddr>> = Vec::new();
        for c in clients {
            if !sources.contains(&c.source) {
                sources.push(c.source);
            }
        }
        (sources.into_iter())
            .map(|s| {
                let heard = clients.iter().filter(|c| c.source == s);
                (s, FeedSide::of_some(heard))
            })
            .collect()
    }

    fn of_some<'a>(clients: impl Iterator<Item = &'a StreamStats> + Clone) -> FeedSide {
        let newest_by_end_ns = (clients.clone())
            .map(|c| c.newest_by_end_ns)
            .max()
            .unwrap_or(0);
        // The client that read most; one without reconnections, whose seconds are whole.
        let Some(reference) = clients.max_by_key(|c| (c.window_span(), c.reconnects == 0)) else {
            return FeedSide::default();
        };
        let generated = reference.window_span();
        let mut per_second = Vec::with_capacity(reference.top_by_second.len());
        let mut before = reference
            .window_seq
            .map_or(0, |(first, _)| first.saturating_sub(1));
        for &top in &reference.top_by_second {
            let made = top.saturating_sub(before);
            before = before.max(top);
            per_second.push(made);
        }
        // A reference that reconnected has seconds of its last connection only: the rest of
        // its span goes into the first second, so the seconds add up to the span.
        let counted: u64 = per_second.iter().sum();
        if let Some(first) = per_second.first_mut() {
            *first += generated.saturating_sub(counted);
        }
        FeedSide {
            generated,
            per_second,
            newest_by_end_ns,
        }
    }

    /// How far behind the feed `client` was by the window's end: the stamps between the newest
    /// it had read and the newest any client had. One that had read nothing of the window by
    /// then was at least the whole of it behind (`None`: no client read anything).
    pub fn behind_ns(&self, client: &StreamStats, window: &Schedule) -> Option<u64> {
        let newest = match client.newest_by_end_ns {
            0 => window.measure_start_ns,
            n => n,
        };
        (self.newest_by_end_ns > 0).then(|| self.newest_by_end_ns.saturating_sub(newest))
    }
}

impl StreamStats {
    /// This client's accounting: sequence errors not explained by the server's drops, and
    /// `attempted = sent = delivered + dropped + failed + in_flight_end` over the measured window.
    pub fn accounting(&self, join: &Join) -> (Counters, SequenceErrors) {
        let seen = self.sequence();
        let mut unexplained = seen;
        let mut c = Counters {
            delivered: self.delivered,
            ..Default::default()
        };
        match join.server {
            Some(server) => {
                if join.gaps == GapPolicy::Drops {
                    unexplained.gaps = 0;
                } else {
                    unexplained.gaps = seen.gaps.saturating_sub(server.dropped_all);
                }
                c.attempted = server.counts.generated;
                c.sent = server.counts.generated;
                c.dropped = server.counts.dropped;
                let rest = c.sent.saturating_sub(c.dropped + c.delivered);
                if self.closed.is_some() {
                    c.failed = rest;
                } else {
                    c.in_flight_end = rest;
                }
            }
            None => {
                // Someone else's server: what was generated shows in the sequence numbers of
                // the client that read most; what this client did not read of it is undelivered.
                match join.gaps {
                    GapPolicy::Drops => {
                        unexplained.gaps = 0;
                        c.dropped = self.gaps_measured;
                    }
                    GapPolicy::Error => c.failed = self.gaps_measured,
                }
                // What it never reached of the feed's span; what it read (duplicates too: the
                // feed sent them) counts as sent.
                let rest = join
                    .feed
                    .map_or(0, |f| f.generated.saturating_sub(self.window_span()));
                c.sent = c.delivered + c.dropped + c.failed + rest;
                c.attempted = c.sent;
                // Lost with a connection that ended, or still unread when the drain ended.
                if self.closed.is_some() || self.reconnects > 0 {
                    c.failed += rest;
                } else {
                    c.in_flight_end = rest;
                }
            }
        }
        (c, unexplained)
    }

    /// The result record of this client.
    pub fn to_result(&self, group: &str, join: &Join) -> StreamClient {
        let (counters, sequence) = self.accounting(join);
        StreamClient {
            name: self.name.clone(),
            group: group.to_string(),
            kind: self.kind.to_string(),
            source: self.source.map(|s| s.to_string()),
            server: join.server.map(|s| s.counts),
            counters,
            sequence,
            gaps_seen: self.sequence().gaps,
            duplicates_seen: self.sequence().duplicates,
            reordered_seen: self.sequence().reordered,
            latency: Percentiles::of(&self.total),
            latency_histogram: encode(&self.total),
            faults: self.faults.clone(),
            closed: self
                .closed
                .as_ref()
                .map(|(why, at)| closed_when(why, *at, &join.schedule)),
            reconnects: u64::from(self.reconnects),
            page_clock: self.page_clock,
            behind_ns: None,
            intervals: self.intervals(join),
        }
    }

    fn intervals(&self, join: &Join) -> Vec<StreamInterval> {
        let server = join.server.map(|s| s.per_second.as_slice()).unwrap_or(&[]);
        let feed = join.feed.map(|f| f.per_second.as_slice()).unwrap_or(&[]);
        let seconds = self.per_second.len().max(server.len()).max(feed.len());
        let mut backlog = 0i64;
        (0..seconds)
            .map(|k| {
                let client = self.per_second.get(k).copied().unwrap_or_default();
                let [generated, dropped, written] = match join.feed {
                    // A feed's gaps are this client's own (under `error` they fail the run).
                    Some(_) => [feed.get(k).copied().unwrap_or(0), client.gaps, 0],
                    None => server.get(k).copied().unwrap_or_default(),
                };
                if join.server.is_some() || join.feed.is_some() {
                    backlog += generated as i64 - client.delivered as i64 - dropped as i64;
                }
                StreamInterval {
                    start_s: k as f64,
                    length_s: 1.0,
                    generated,
                    written,
                    delivered: client.delivered,
                    dropped,
                    backlog,
                    latency_p50_ns: client.p50_ns,
                    latency_p99_ns: client.p99_ns,
                    latency_max_ns: client.max_ns,
                }
            })
            .collect()
    }
}

/// `why (1.25 s into the measured window)`, `why (during the warm-up)`, or, without a
/// warm-up, `why (before the measured window opened)`.
pub fn closed_when(why: &str, at_ns: u64, schedule: &Schedule) -> String {
    if at_ns < schedule.measure_start_ns && schedule.t0_ns < schedule.measure_start_ns {
        format!("{why} (during the warm-up)")
    } else if at_ns < schedule.measure_start_ns {
        format!("{why} (before the measured window opened)")
    } else {
        format!(
            "{why} ({:.2} s into the measured window)",
            (at_ns - schedule.measure_start_ns) as f64 / 1e9
        )
    }
}

/// A run of stream clients (ticks' subscribers, pub/sub's subscriptions): its counters and
/// sequence errors are its clients' sums, and their faults are added to `faults`.
pub fn run_sums(streams: &[StreamClient], faults: &mut Faults) -> (Counters, SequenceErrors) {
    let mut counters = Counters::default();
    let mut sequence = SequenceErrors::default();
    for s in streams {
        counters += s.counters;
        sequence += s.sequence;
        *faults += s.faults.clone();
    }
    (counters, sequence)
}

/// A run's seconds get the sending side of its streams, summed over its clients: sent =
/// generated, dropped, and the backlog (generated − delivered − dropped, cumulative). Without a
/// sending side it knows (`generated_known` false: a feed msgbench did not generate), sent is
/// what was delivered and there is no backlog.
pub fn patch_run_intervals(
    intervals: &mut [IntervalSample],
    streams: &[StreamClient],
    generated_known: bool,
) {
    let mut backlog = 0i64;
    for (k, sample) in intervals.iter_mut().enumerate() {
        if !generated_known {
            sample.sent = sample.delivered;
            sample.backlog = 0;
            continue;
        }
        let (generated, dropped) = streams
            .iter()
            .filter_map(|s| s.intervals.get(k))
            .fold((0, 0), |(g, d), i| (g + i.generated, d + i.dropped));
        sample.sent = generated;
        sample.dropped = dropped;
        backlog += generated as i64 - sample.delivered as i64 - dropped as i64;
        sample.backlog = backlog;
    }
}

/// The largest jump ahead in a stream's sequence a message may make `since_ns` after the
/// previous one ([`JUMP_LEAST`]).
fn jump_bound(since_ns: u64) -> u64 {
    let per_second = (since_ns as u128 * JUMP_PER_SECOND as u128 / 1_000_000_000) as u64;
    JUMP_LEAST.saturating_add(per_second)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::Collector;

    const SECOND: u64 = 1_000_000_000;

    fn schedule() -> Schedule {
        Schedule {
            t0_ns: 0,
            measure_start_ns: SECOND,
            end_ns: 3 * SECOND,
        }
    }

    fn tick(seq: u64, intended_ns: u64) -> Tick {
        Tick::at(seq, intended_ns, 10)
    }

    #[test]
    fn a_sequence_jump_no_stream_could_make_is_a_fault_of_that_message_not_lost_messages() {
        let mut collector = Collector::new(1, SECOND, 0);
        let mut rec = collector.recorder(false);
        let w = schedule();
        let mut s = StreamStats::new("feed-0".into(), 0, "native");
        for (seq, at) in [
            (0, SECOND),
            (1, SECOND + 10),
            (u64::MAX, SECOND + 20),
            (2, SECOND + 30),
        ] {
            s.on_tick(&tick(seq, at), at + 1_000, Some(&w), &mut rec);
        }
        // 2^64 − 1 right after 1: one protocol fault, no gap; the stream goes on at 2.
        assert_eq!(s.faults.protocol_errors, 1);
        assert_eq!((s.sequence().gaps, s.delivered), (0, 3));
        // A second later, 50 M missing messages are a plausible gap (a slow client's drops).
        let later = 2 * SECOND + 40;
        s.on_tick(&tick(50_000_003, later), later + 1_000, Some(&w), &mut rec);
        assert_eq!(
            (s.sequence().gaps, s.faults.protocol_errors),
            (50_000_000, 1)
        );
        s.finish();
        let handle = collector.start(None);
        rec.finish(3 * SECOND);
        handle.join().unwrap();
    }

    #[test]
    fn measured_ticks_are_recorded_per_second_and_gaps_counted() {
        let mut collector = Collector::new(1, SECOND, 0);
        let mut rec = collector.recorder(false);
        let w = schedule();
        let mut s = StreamStats::new("fast-0".into(), 0, "native");
        // Warm-up ticks: processed, not measured.
        s.on_tick(&tick(5, SECOND / 2), SECOND / 2 + 10, Some(&w), &mut rec);
        for (seq, at) in [(6, SECOND), (7, SECOND + 1), (9, 2 * SECOND + 5)] {
            s.on_tick(&tick(seq, at), at + 1_000, Some(&w), &mut rec);
        }
        s.finish();
        let handle = collector.start(None);
        rec.finish(3 * SECOND);
        handle.join().unwrap();
        assert_eq!((s.processed, s.delivered), (4, 3));
        assert_eq!(s.sequence().gaps, 1);
        assert_eq!(s.gaps_measured, 1);
        assert_eq!(
            s.per_second.iter().map(|p| p.delivered).collect::<Vec<_>>(),
            [2, 1]
        );
        assert_eq!(s.total.len(), 3);
        assert!((990..=1_010).contains(&s.per_second[0].p99_ns));
    }

    #[test]
    fn a_feed_is_what_the_client_that_read_most_saw_and_a_slow_one_is_behind_it() {
        let mut collector = Collector::new(2, SECOND, 0);
        let mut rec = collector.recorder(false);
        let w = schedule();
        // A feed numbering each connection on its own (fast from 1000, slow from 1003): 10
        // ticks stamped per second of the window, 20 in all; the slow client read 12 of them,
        // one of its sequence numbers missing (a gap), and was still at ticks stamped 0.7 s
        // before the window's end when it ended.
        let (mut fast, mut slow) = (
            StreamStats::new("fast-0".into(), 0, "native"),
            StreamStats::new("slow-0".into(), 1, "native"),
        );
        for i in 0..20u64 {
            let at = SECOND + i * SECOND / 10;
            fast.on_tick(&tick(1000 + i, at), at + 1_000, Some(&w), &mut rec);
            if i < 13 && i != 4 {
                let late = at + SECOND / 2;
                slow.on_tick(&tick(1003 + i, at), late, Some(&w), &mut rec);
            }
        }
        fast.finish();
        slow.finish();
        let clients = [fast, slow];
        let feed = FeedSide::of(&clients);
        assert_eq!(
            (feed.generated, feed.per_second.clone()),
            (20, vec![10, 10])
        );
        let join = Join {
            server: None,
            feed: Some(&feed),
            gaps: GapPolicy::Drops,
            schedule: w,
        };
        let (c, _) = clients[1].accounting(&join);
        c.check().unwrap();
        assert_eq!(
            (c.sent, c.delivered, c.dropped, c.in_flight_end),
            (20, 12, 1, 7)
        );
        let slow = clients[1].to_result("slow", &join);
        assert_eq!(slow.intervals.last().unwrap().backlog, 7);
        assert_eq!(feed.behind_ns(&clients[0], &w), Some(0));
        // The fast client's newest by the end: stamped 2.9 s; the slow one's: 2.2 s (read at
        // 2.7 s, before the end at 3 s).
        assert_eq!(feed.behind_ns(&clients[1], &w), Some(7 * SECOND / 10));
        let handle = collector.start(None);
        rec.finish(4 * SECOND);
        handle.join().unwrap();
    }

    #[test]
    fn a_feed_s_reordered_and_backward_numbers_move_neither_its_span_nor_its_gaps() {
        let mut collector = Collector::new(1, SECOND, 0);
        let mut rec = collector.recorder(false);
        let w = schedule();
        let mut s = StreamStats::new("feed-0".into(), 0, "native");
        // 1, 3, 2 (fills its gap), 4, then a number from long ago (a feed that went back).
        for (i, seq) in [1u64, 3, 2, 4, 1].into_iter().enumerate() {
            let at = SECOND + i as u64 * 1_000;
            s.on_tick(&tick(seq, at), at + 1_000, Some(&w), &mut rec);
        }
        s.finish();
        assert_eq!((s.window_span(), s.gaps_measured), (4, 0));
        let clients = [s];
        let feed = FeedSide::of(&clients);
        let join = Join {
            server: None,
            feed: Some(&feed),
            gaps: GapPolicy::Drops,
            schedule: w,
        };
        let (c, _) = clients[0].accounting(&join);
        c.check().unwrap();
        // Five read (the repeat too: the feed sent it), nothing left unread.
        assert_eq!((c.sent, c.delivered, c.in_flight_end), (5, 5, 0));
        let handle = collector.start(None);
        rec.finish(2 * SECOND);
        handle.join().unwrap();
    }

    #[test]
    fn accounting_joins_the_server_counts() {
        let mut s = StreamStats::new("slow-0".into(), 0, "native");
        s.delivered = 70;
        let server = ServerSide {
            counts: StreamServerCounts {
                generated: 100,
                queued: 90,
                dropped: 10,
                written: 85,
                acked: 70,
                queue_peak: 5,
            },
            dropped_all: 12,
            per_second: vec![[100, 10, 85]],
        };
        let join = Join {
            server: Some(&server),
            feed: None,
            gaps: GapPolicy::Error,
            schedule: schedule(),
        };
        let (c, seq) = s.accounting(&join);
        c.check().unwrap();
        assert_eq!(
            (c.attempted, c.dropped, c.in_flight_end, c.failed),
            (100, 10, 20, 0)
        );
        assert_eq!(seq.total(), 0);
        s.closed = Some(("the server disconnected it".into(), 2 * SECOND));
        let (c, _) = s.accounting(&join);
        c.check().unwrap();
        assert_eq!((c.failed, c.in_flight_end), (20, 0));
        let r = s.to_result("slow", &join);
        assert_eq!(r.intervals[0].backlog, 100 - 10);
        assert!(r.closed.unwrap().contains("1.00 s into"));
    }

    #[test]
    fn gaps_the_server_did_not_drop_are_sequence_errors() {
        let mut collector = Collector::new(1, SECOND, 0);
        let mut rec = collector.recorder(false);
        let w = schedule();
        let mut s = StreamStats::new("c-0".into(), 0, "native");
        for seq in [0, 1, 4, 5] {
            s.on_tick(
                &tick(seq, SECOND + seq),
                SECOND + seq + 1,
                Some(&w),
                &mut rec,
            );
        }
        let server = ServerSide {
            dropped_all: 1,
            ..Default::default()
        };
        let join = |gaps| Join {
            server: Some(&server),
            feed: None,
            gaps,
            schedule: schedule(),
        };
        assert_eq!(s.accounting(&join(GapPolicy::Error)).1.gaps, 1);
        assert_eq!(s.accounting(&join(GapPolicy::Drops)).1.gaps, 0);
        let external = Join {
            server: None,
            feed: None,
            gaps: GapPolicy::Drops,
            schedule: schedule(),
        };
        let (c, seq) = s.accounting(&external);
        c.check().unwrap();
        assert_eq!((c.attempted, c.dropped, seq.gaps), (6, 2, 0));
        drop(collector);
    }
}

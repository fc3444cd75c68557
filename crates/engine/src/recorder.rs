//! The recorder: what each worker thread measures, and the collector that merges it.
//!
//! Each worker owns a [`Recorder`]: counters, and for the current one-second interval a
//! [`HistogramSet`] (latency and service time per operation class, send lag). Recording a message
//! is a few integer increments and [`HotHistogram`] increments: no allocation, no lock, no
//! syscall. When a message falls past the interval boundary, the worker swaps in a spare
//! histogram set (pre-allocated, O(1)) and ships the full one to the [`Collector`] thread over a
//! channel; merging, percentiles and encoding happen there, off the hot path.
use crate::connection_tally::ConnectionTally;
use crate::hot_histogram::HotHistogram;
use crate::streamed::{StreamFigures, StreamedTally, StreamedTotals};
use hdrhistogram::Histogram;
use msgbench_model::fairness::ConnectionResult;
use msgbench_model::histogram::{new_latency_histogram, Percentiles};
use msgbench_model::result::SkipCause;
use msgbench_model::result::{Counters, Early, IntervalSample, SequenceErrors};
use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Length of one interval sample.
pub const INTERVAL_NS: u64 = 1_000_000_000;

/// Histograms of one interval of one worker.
#[derive(Debug, Clone)]
pub struct HistogramSet {
    /// Latency per class (completion − intended send).
    pub latency: Vec<HotHistogram>,
    /// Service time per class (completion − actual send).
    pub service: Vec<HotHistogram>,
    /// Send lag (actual − scheduled send).
    pub send_lag: HotHistogram,
}

impl HistogramSet {
    fn new(classes: usize) -> Self {
        HistogramSet {
            latency: (0..classes).map(|_| HotHistogram::new()).collect(),
            service: (0..classes).map(|_| HotHistogram::new()).collect(),
            send_lag: HotHistogram::new(),
        }
    }

    fn reset(&mut self) {
        self.latency
            .iter_mut()
            .chain(self.service.iter_mut())
            .for_each(|h| h.reset());
        self.send_lag.reset();
    }
}

/// What a worker ships to the collector.
enum Report {
    /// One interval's counters and histograms (`None` for an interval the worker slept through).
    Interval {
        worker: usize,
        index: u64,
        end_ns: u64,
        counters: Counters,
        histograms: Option<HistogramSet>,
    },
    /// The worker is done: its totals.
    Final {
        counters: Counters,
        sequence: SequenceErrors,
        early: Early,
        raw_latencies: Vec<u64>,
        unanswered: HotHistogram,
        held_lag: HotHistogram,
        connections: Vec<ConnectionResult>,
        streamed: Option<Box<StreamedTally>>,
    },
}

/// Most separate runs of missing numbers a [`SequenceChecker`] remembers; older ones are taken
/// as lost for good (a late number from them then counts as a duplicate).
const MAX_OPEN_GAPS: usize = 256;

/// Checks sequence numbers of one stream: gaps, duplicates and reordering.
///
/// The in-order case is one comparison. Out of order, the checker remembers which numbers are
/// missing (as ranges): a late number that fills a missing one is *reordered* (and no longer a
/// gap), any other number at or below the last one seen is a *duplicate*.
#[derive(Debug, Default, Clone)]
pub struct SequenceChecker {
    expected: u64,
    /// Missing numbers, as `start..end` ranges in increasing order.
    missing: std::collections::VecDeque<(u64, u64)>,
    /// Errors seen so far.
    pub errors: SequenceErrors,
}

impl SequenceChecker {
    /// The number it expects next.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// A checker whose stream starts at `first` (a client that joins a running stream).
    pub fn starting_at(first: u64) -> SequenceChecker {
        SequenceChecker {
            expected: first,
            ..Default::default()
        }
    }

    /// Checks `seq` against the next expected number.
    #[inline]
    pub fn check(&mut self, seq: u64) {
        if seq == self.expected {
            // Wrapping: a hostile stream's 2^64 − 1 must not panic (it is then a duplicate).
            self.expected = self.expected.wrapping_add(1);
        } else {
            self.check_slow(seq);
        }
    }

    #[cold]
    fn check_slow(&mut self, seq: u64) {
        if seq > self.expected {
            self.errors.gaps += seq - self.expected;
            if self.missing.len() == MAX_OPEN_GAPS {
                self.missing.pop_front();
            }
            self.missing.push_back((self.expected, seq));
            self.expected = seq.wrapping_add(1);
            return;
        }
        let found = self
            .missing
            .iter()
            .position(|&(start, end)| start <= seq && seq < end);
        let Some(i) = found else {
            self.errors.duplicates += 1;
            return;
        };
        self.errors.gaps -= 1;
        self.errors.reordered += 1;
        let (start, end) = self.missing[i];
        match (seq == start, seq + 1 == end) {
            (true, true) => {
                self.missing.remove(i);
            }
            (true, false) => self.missing[i].0 = seq + 1,
            (false, true) => self.missing[i].1 = seq,
            (false, false) => {
                self.missing[i].1 = seq;
                self.missing.insert(i + 1, (seq + 1, end));
            }
        }
    }
}

/// One worker's recorder. Create with [`Collector::recorder`]; end with [`Recorder::finish`].
pub struct Recorder {
    worker: usize,
    measure_start_ns: u64,
    next_boundary_ns: u64,
    index: u64,
    counters: Counters,
    interval: Counters,
    current: HistogramSet,
    classes: usize,
    spares: Receiver<HistogramSet>,
    to_collector: Sender<Report>,
    /// Sequence checking of what this worker receives.
    pub sequence: SequenceChecker,
    /// Deliveries that completed before their intended send time (recorded as latency 0).
    early: Early,
    raw_latencies: Vec<u64>,
    zero_lags: u64,
    /// Waits of the requests that got no answer (rare: kept for the whole run, not per second).
    unanswered: HotHistogram,
    /// Send lag of the sends that first waited for a full window (the whole run's).
    held_lag: HotHistogram,
    /// The send lag of the last send (see [`Recorder::held_by_window`]).
    last_lag: u64,
    /// Per connection of a request/response worker, its connections in order (empty for other
    /// workers).
    connections: Vec<ConnectionTally>,
    /// The run-wide index of `connections[0]`.
    first_connection: usize,
    /// Streamed responses of the measured window (made at the first one).
    streamed: Option<Box<StreamedTally>>,
}

impl Recorder {
    /// Counts a message the schedule called for.
    #[inline]
    pub fn attempted(&mut self) {
        self.counters.attempted += 1;
        self.interval.attempted += 1;
    }

    /// Counts a message handed to the system at `actual_ns`, `scheduled_ns` being its slot.
    #[inline]
    pub fn sent(&mut self, scheduled_ns: u64, actual_ns: u64) {
        self.roll_if_due(actual_ns);
        self.counters.sent += 1;
        self.interval.sent += 1;
        // Unpaced senders are never late: count zero lags and record them once per interval.
        self.last_lag = actual_ns.saturating_sub(scheduled_ns);
        match self.last_lag {
            0 => self.zero_lags += 1,
            lag => self.current.send_lag.record(lag),
        }
    }

    /// Counts the message just [`sent`](Recorder::sent) as one that first waited for room in a
    /// full window or queue (see [`Counters::held_by_window`]): its send lag is the system's
    /// pushing back, kept apart from the pacer's own lateness.
    #[inline]
    pub fn held_by_window(&mut self) {
        self.counters.held_by_window += 1;
        self.held_lag.record(self.last_lag);
    }

    /// Counts a message the driver did not send, and why.
    #[inline]
    pub fn skipped(&mut self, why: SkipCause) {
        self.counters.skipped += 1;
        self.counters.skipped_by.count(why);
        self.interval.skipped += 1;
    }

    /// Counts a message the system rejected.
    #[inline]
    pub fn dropped(&mut self) {
        self.counters.dropped += 1;
        self.interval.dropped += 1;
    }

    /// Counts a failed message.
    #[inline]
    pub fn failed(&mut self) {
        self.counters.failed += 1;
        self.interval.failed += 1;
    }

    /// Records how long a measured request that got no answer (timed out, its connection
    /// failed, or still in flight at the end) had waited by `now_ns`, from its intended send: a
    /// lower bound on its latency. Counting it (failed or in flight) is the caller's.
    #[inline]
    pub fn unanswered(&mut self, intended_ns: u64, now_ns: u64) {
        self.unanswered.record(now_ns.saturating_sub(intended_ns));
    }

    /// Records a measured streamed response that completed (its request meant to go at
    /// `intended_ns`): time to its first message, its gaps, its time per message.
    pub fn streamed(&mut self, intended_ns: u64, stream: &StreamFigures) {
        self.streamed
            .get_or_insert_with(Default::default)
            .completed(intended_ns, stream);
    }

    /// Counts a measured streamed response cut short after `messages` messages.
    pub fn stream_cut(&mut self, messages: u64) {
        self.streamed
            .get_or_insert_with(Default::default)
            .cut(messages);
    }

    /// Counts messages found in flight when the run ended.
    pub fn in_flight_at_end(&mut self, n: u64) {
        self.counters.in_flight_end += n;
    }

    /// Records a completed message of `class`.
    #[inline]
    pub fn delivered(&mut self, class: usize, intended_ns: u64, sent_ns: u64, completed_ns: u64) {
        self.roll_if_due(completed_ns);
        self.counters.delivered += 1;
        self.interval.delivered += 1;
        let latency = match completed_ns.checked_sub(intended_ns) {
            Some(latency) => latency,
            None => {
                self.early.add(intended_ns - completed_ns);
                0
            }
        };
        self.current.latency[class].record(latency);
        self.current.service[class].record(completed_ns.saturating_sub(sent_ns));
        if self.raw_latencies.len() < self.raw_latencies.capacity() {
            self.raw_latencies.push(latency);
        }
    }

    /// Records a completed request of `class` on the worker's connection `conn` (its index
    /// among this worker's connections).
    #[inline]
    pub fn delivered_on(
        &mut self,
        conn: usize,
        class: usize,
        intended_ns: u64,
        sent_ns: u64,
        completed_ns: u64,
    ) {
        self.delivered(class, intended_ns, sent_ns, completed_ns);
        debug_assert!(self.connections.is_empty() || conn < self.connections.len());
        if let Some(t) = self.connections.get_mut(conn) {
            t.delivered(completed_ns.saturating_sub(intended_ns));
        }
    }

    /// Counts a failed request on the worker's connection `conn`.
    #[inline]
    pub fn failed_on(&mut self, conn: usize) {
        self.failed();
        debug_assert!(self.connections.is_empty() || conn < self.connections.len());
        if let Some(t) = self.connections.get_mut(conn) {
            t.failed();
        }
    }

    /// Records `delivered` messages of `class` completed by `completed_ns` whose latencies and
    /// service times another program measured and sent as `[value_ns, count, …]` pairs (a
    /// browser page's report of one second).
    pub fn delivered_pairs(
        &mut self,
        class: usize,
        completed_ns: u64,
        delivered: u64,
        latency: &[u64],
        service: &[u64],
    ) {
        self.roll_if_due(completed_ns);
        self.counters.delivered += delivered;
        self.interval.delivered += delivered;
        for pair in latency.chunks_exact(2) {
            self.current.latency[class].record_n(pair[0], pair[1]);
        }
        for pair in service.chunks_exact(2) {
            self.current.service[class].record_n(pair[0], pair[1]);
        }
    }

    /// Ends the interval if `now_ns` passed its boundary. Idle loops call it too, so a quiet
    /// worker still reports its seconds.
    #[inline]
    pub fn roll_if_due(&mut self, now_ns: u64) {
        if now_ns >= self.next_boundary_ns {
            self.roll(now_ns);
        }
    }

    #[cold]
    #[inline(never)]
    fn roll(&mut self, now_ns: u64) {
        let fresh = self
            .spares
            .try_recv()
            .unwrap_or_else(|_| HistogramSet::new(self.classes));
        let full = std::mem::replace(&mut self.current, fresh);
        self.ship(self.next_boundary_ns, Some(full));
        let passed = (now_ns - self.measure_start_ns) / INTERVAL_NS;
        while self.index + 1 < passed {
            self.index += 1;
            self.ship(self.measure_start_ns + (self.index + 1) * INTERVAL_NS, None);
        }
        self.index = passed;
        self.next_boundary_ns = self.measure_start_ns + (passed + 1) * INTERVAL_NS;
    }

    fn ship(&mut self, end_ns: u64, mut histograms: Option<HistogramSet>) {
        if let Some(h) = histograms.as_mut() {
            h.send_lag.record_n(0, std::mem::take(&mut self.zero_lags));
        }
        let counters = std::mem::take(&mut self.interval);
        // A send error means the collector is gone (it panicked); the run then fails at join.
        let _ = self.to_collector.send(Report::Interval {
            worker: self.worker,
            index: self.index,
            end_ns,
            counters,
            histograms,
        });
    }

    /// Ships the last, partial interval and the worker's totals.
    pub fn finish(mut self, now_ns: u64) {
        // Close the seconds that passed since the last message, so the last one is not stretched.
        if now_ns > self.next_boundary_ns {
            self.roll(now_ns);
        }
        let last = std::mem::replace(&mut self.current, HistogramSet::new(0));
        self.ship(now_ns.max(self.measure_start_ns), Some(last));
        let raw_latencies = std::mem::take(&mut self.raw_latencies);
        let first = self.first_connection;
        let connections = (self.connections.iter().enumerate())
            .map(|(i, t)| t.result((first + i) as u32))
            .collect();
        let _ = self.to_collector.send(Report::Final {
            counters: self.counters,
            sequence: self.sequence.errors,
            early: self.early,
            raw_latencies,
            unanswered: self.unanswered,
            held_lag: self.held_lag,
            connections,
            streamed: self.streamed.take(),
        });
    }
}

/// One line of the HdrHistogram interval log.
#[derive(Debug, Clone)]
pub struct IntervalLatency {
    /// Start, seconds since the measured window began.
    pub start_s: f64,
    /// Length in seconds.
    pub length_s: f64,
    /// Latency of all classes in that interval, encoded ([`msgbench_model::histogram::encode`]):
    /// a few hundred bytes instead of the ~270 KB a live histogram holds, so long runs stay small.
    pub encoded: String,
    /// Its largest latency, ns (as HdrHistogram's `max()`; 0 when empty): the `.hlog` line's
    /// third field, written without decoding the histogram again.
    pub max_ns: u64,
}

/// Everything measured in one run, merged over workers.
#[derive(Debug)]
pub struct Recording {
    /// Summed counters.
    pub counters: Counters,
    /// Summed sequence errors.
    pub sequence: SequenceErrors,
    /// Deliveries that completed before their intended send time.
    pub early: Early,
    /// Latency per class.
    pub latency: Vec<Histogram<u64>>,
    /// Service time per class.
    pub service: Vec<Histogram<u64>>,
    /// Send lag.
    pub send_lag: Histogram<u64>,
    /// Send lag of the sends that first waited for room in a full window or queue (a part of
    /// `send_lag`).
    pub send_lag_held: Histogram<u64>,
    /// Waits of the requests that got no answer.
    pub unanswered: Histogram<u64>,
    /// One sample per second.
    pub intervals: Vec<IntervalSample>,
    /// Latency histogram per interval, for the `.hlog`.
    pub interval_latency: Vec<IntervalLatency>,
    /// Raw latencies, when asked for.
    pub raw_latencies: Vec<u64>,
    /// Per connection of a request/response run, by index (empty for other systems).
    pub connections: Vec<ConnectionResult>,
    /// Streamed responses, when a request's response was a stream.
    pub streamed: Option<StreamedTotals>,
}

impl Recording {
    /// Latency of all classes together.
    pub fn latency_all(&self) -> Histogram<u64> {
        merged(&self.latency)
    }
    /// Service time of all classes together.
    pub fn service_all(&self) -> Histogram<u64> {
        merged(&self.service)
    }
}

fn merged(hs: &[Histogram<u64>]) -> Histogram<u64> {
    let mut all = new_latency_histogram();
    for h in hs {
        all.add(h).expect("same bounds");
    }
    all
}

/// Live figures of one operation class (for `ticks`, one client group).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassLive {
    /// Delivered so far in the measured window.
    pub delivered: u64,
    /// p99 latency of the last interval.
    pub p99_ns: u64,
}

/// Live figures of the running run, about once a second.
#[derive(Debug, Clone, Default)]
pub struct LiveStatus {
    /// Seconds into the measured window.
    pub elapsed_s: f64,
    /// Sent so far.
    pub sent: u64,
    /// Delivered so far.
    pub delivered: u64,
    /// Dropped or skipped so far.
    pub dropped: u64,
    /// Delivered per second in the last interval.
    pub delivered_per_sec: f64,
    /// p99 latency of the last interval.
    pub p99_ns: u64,
    /// Median latency of the last interval.
    pub p50_ns: u64,
    /// Longest latency of the last interval.
    pub max_ns: u64,
    /// Send lag p99 of the last interval: how late the schedule's sends went out.
    pub send_lag_p99_ns: u64,
    /// Every counter so far (attempted, sent, delivered, dropped, skipped, failed).
    pub counters: Counters,
    /// Each class, in the order of the result's classes.
    pub classes: Vec<ClassLive>,
}

/// Called with live figures about once per interval (for a progress line).
pub type LiveCallback = Arc<dyn Fn(LiveStatus) + Send + Sync>;

/// Builds recorders for the workers of one run, then merges what they report in its own thread.
pub struct Collector {
    classes: usize,
    measure_start_ns: u64,
    raw_latency_cap: usize,
    reports_tx: Sender<Report>,
    reports_rx: Receiver<Report>,
    spare_txs: Vec<Sender<HistogramSet>>,
    /// CPUs the merging thread stays off (an in-process server's).
    keep_off: Vec<usize>,
}

impl Collector {
    /// A collector for `classes` operation classes whose window starts at `measure_start_ns`.
    /// Each receiving worker keeps up to `raw_latency_cap` raw latencies.
    pub fn new(classes: usize, measure_start_ns: u64, raw_latency_cap: usize) -> Collector {
        let (reports_tx, reports_rx) = channel();
        Collector {
            classes,
            measure_start_ns,
            raw_latency_cap,
            reports_tx,
            reports_rx,
            spare_txs: Vec::new(),
            keep_off: Vec::new(),
        }
    }

    /// Keeps the merging thread off `cpus` (while another CPU is allowed): an in-process
    /// server pinned there would otherwise lose the CPU to it for a few ms each second — at
    /// 1000 tick clients the server's schedule fell 3.5 ms behind while the merge ran.
    pub fn keep_off(&mut self, cpus: &[usize]) {
        self.keep_off = cpus.to_vec();
    }

    /// A recorder for one more request/response worker whose connections are
    /// `first..first + count` of the run's: it also keeps what each connection got.
    pub fn connections_recorder(&mut self, first: usize, count: usize) -> Recorder {
        let mut rec = self.recorder(true);
        rec.connections = vec![ConnectionTally::default(); count];
        rec.first_connection = first;
        rec
    }

    /// A recorder for one more worker. All allocation happens here, before the run.
    pub fn recorder(&mut self, keeps_raw_latencies: bool) -> Recorder {
        let (spare_tx, spares) = channel();
        spare_tx
            .send(HistogramSet::new(self.classes))
            .expect("receiver is alive");
        self.spare_txs.push(spare_tx);
        Recorder {
            worker: self.spare_txs.len() - 1,
            measure_start_ns: self.measure_start_ns,
            next_boundary_ns: self.measure_start_ns + INTERVAL_NS,
            index: 0,
            counters: Counters::default(),
            interval: Counters::default(),
            current: HistogramSet::new(self.classes),
            classes: self.classes,
            spares,
            to_collector: self.reports_tx.clone(),
            sequence: SequenceChecker::default(),
            early: Early::default(),
            raw_latencies: Vec::with_capacity(if keeps_raw_latencies {
                self.raw_latency_cap
            } else {
                0
            }),
            zero_lags: 0,
            unanswered: HotHistogram::new(),
            held_lag: HotHistogram::new(),
            last_lag: 0,
            connections: Vec::new(),
            first_connection: 0,
            streamed: None,
        }
    }

    /// Starts merging in a thread; join it after every recorder has finished.
    pub fn start(self, live: Option<LiveCallback>) -> std::thread::JoinHandle<Recording> {
        std::thread::Builder::new()
            .name("msgbench-collector".into())
            .spawn(move || {
                lowest_priority();
                let elsewhere: Vec<usize> = crate::affinity::allowed_cpus()
                    .into_iter()
                    .filter(|c| !self.keep_off.contains(c))
                    .collect();
                if !self.keep_off.is_empty() && !elsewhere.is_empty() {
                    // Failure leaves it where it was: the merge is right wherever it runs.
                    let _ = crate::affinity::pin_current_thread_to(&elsewhere);
                }
                self.collect(live)
            })
            .expect("spawning a thread")
    }

    fn collect(self, live: Option<LiveCallback>) -> Recording {
        let Collector {
            classes,
            measure_start_ns,
            reports_tx,
            reports_rx,
            spare_txs,
            ..
        } = self;
        drop(reports_tx);
        let workers = spare_txs.len();
        let mut merge = Merge::new(classes, measure_start_ns, workers);
        let mut finished = 0;
        while finished < workers {
            let Ok(report) = reports_rx.recv() else { break };
            match report {
                Report::Interval {
                    worker,
                    index,
                    end_ns,
                    counters,
                    histograms,
                } => {
                    if let Some(mut set) = histograms {
                        merge.add_interval(index, end_ns, &counters, &set);
                        set.reset();
                        let _ = spare_txs[worker].send(set);
                    } else {
                        merge.add_counters(index, end_ns, &counters);
                    }
                    if let (Some(cb), Some(status)) = (&live, merge.live_status()) {
                        cb(status);
                    }
                }
                Report::Final {
                    counters,
                    sequence,
                    early,
                    raw_latencies,
                    unanswered,
                    held_lag,
                    connections,
                    streamed,
                } => {
                    if let Some(t) = streamed {
                        merge.streamed.get_or_insert_with(Default::default).add(&t);
                    }
                    unanswered.add_to(&mut merge.totals.unanswered);
                    held_lag.add_to(&mut merge.totals.held_lag);
                    merge.early += early;
                    merge.connections.extend(connections);
                    merge.add_final(&counters, &sequence, raw_latencies);
                    finished += 1;
                }
            }
        }
        merge.into_recording()
    }
}

/// Whole-run histograms, in `hdrhistogram` form (built off the hot path).
struct TotalHistograms {
    latency: Vec<Histogram<u64>>,
    service: Vec<Histogram<u64>>,
    send_lag: Histogram<u64>,
    unanswered: Histogram<u64>,
    held_lag: Histogram<u64>,
}

/// Gives the calling thread the lowest normal priority (nice 19): the once-a-second merge (a few
/// ms of work) yields to a paced producer's wake-up, yet still gets its ~1 % share of a CPU when
/// both CPUs are busy-spinning. (SCHED_IDLE was tried first: with both CPUs pegged the collector
/// never ran, spares never came back, and the progress line stayed blank.)
fn lowest_priority() {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id only lowers its
    // priority, and failure just leaves it unchanged.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

/// Accumulation state of the collector thread.
struct Merge {
    measure_start_ns: u64,
    workers: usize,
    totals: TotalHistograms,
    counters: Counters,
    sequence: SequenceErrors,
    early: Early,
    raw_latencies: Vec<u64>,
    connections: Vec<ConnectionResult>,
    open: BTreeMap<u64, OpenInterval>,
    closed: Vec<(IntervalSample, IntervalLatency)>,
    running: Counters,
    /// Send lag p99 of the last closed interval (for the live view only).
    last_send_lag_p99_ns: u64,
    /// Each class's figures as of the last closed interval (for the live view only).
    live_classes: Vec<ClassLive>,
    /// Streamed responses, when there were any.
    streamed: Option<StreamedTotals>,
}

struct OpenInterval {
    reports: usize,
    end_ns: u64,
    counters: Counters,
    latency: Histogram<u64>,
    send_lag: Histogram<u64>,
    class_latency: Vec<Histogram<u64>>,
}

impl Merge {
    fn new(classes: usize, measure_start_ns: u64, workers: usize) -> Merge {
        Merge {
            measure_start_ns,
            workers,
            totals: TotalHistograms {
                latency: (0..classes).map(|_| new_latency_histogram()).collect(),
                service: (0..classes).map(|_| new_latency_histogram()).collect(),
                send_lag: new_latency_histogram(),
                unanswered: new_latency_histogram(),
                held_lag: new_latency_histogram(),
            },
            counters: Counters::default(),
            sequence: SequenceErrors::default(),
            early: Early::default(),
            raw_latencies: Vec::new(),
            connections: Vec::new(),
            open: BTreeMap::new(),
            closed: Vec::new(),
            running: Counters::default(),
            last_send_lag_p99_ns: 0,
            live_classes: vec![ClassLive::default(); classes],
            streamed: None,
        }
    }

    fn add_interval(&mut self, index: u64, end_ns: u64, counters: &Counters, set: &HistogramSet) {
        for (total, h) in self.totals.latency.iter_mut().zip(&set.latency) {
            h.add_to(total);
        }
        for (total, h) in self.totals.service.iter_mut().zip(&set.service) {
            h.add_to(total);
        }
        set.send_lag.add_to(&mut self.totals.send_lag);
        let open = self.open_interval(index);
        for (h, class) in set.latency.iter().zip(open.class_latency.iter_mut()) {
            h.add_to(&mut open.latency);
            h.add_to(class);
        }
        set.send_lag.add_to(&mut open.send_lag);
        self.add_counters(index, end_ns, counters);
    }

    fn add_counters(&mut self, index: u64, end_ns: u64, counters: &Counters) {
        let open = self.open_interval(index);
        open.reports += 1;
        open.end_ns = open.end_ns.max(end_ns);
        add_counters(&mut open.counters, counters);
        if open.reports == self.workers {
            let done = self.open.remove(&index).expect("just used");
            self.close(index, done);
        }
    }

    fn open_interval(&mut self, index: u64) -> &mut OpenInterval {
        let classes = self.live_classes.len();
        self.open.entry(index).or_insert_with(|| OpenInterval {
            reports: 0,
            end_ns: 0,
            counters: Counters::default(),
            latency: new_latency_histogram(),
            send_lag: new_latency_histogram(),
            class_latency: (0..classes).map(|_| new_latency_histogram()).collect(),
        })
    }

    fn close(&mut self, index: u64, done: OpenInterval) {
        let start_ns = self.measure_start_ns + index * INTERVAL_NS;
        let length_s = done.end_ns.saturating_sub(start_ns) as f64 / 1e9;
        add_counters(&mut self.running, &done.counters);
        let r = &self.running;
        let p = Percentiles::of(&done.latency);
        self.last_send_lag_p99_ns = Percentiles::of(&done.send_lag).p99_ns;
        for (live, h) in self.live_classes.iter_mut().zip(&done.class_latency) {
            live.delivered += h.len();
            live.p99_ns = Percentiles::of(h).p99_ns;
        }
        let sample = IntervalSample {
            start_s: (index * INTERVAL_NS) as f64 / 1e9,
            length_s,
            sent: done.counters.sent,
            delivered: done.counters.delivered,
            dropped: done.counters.dropped,
            skipped: done.counters.skipped,
            latency_p50_ns: p.p50_ns,
            latency_p99_ns: p.p99_ns,
            latency_max_ns: p.max_ns,
            backlog: r.sent as i64 - (r.delivered + r.dropped + r.failed) as i64,
        };
        let log = IntervalLatency {
            start_s: sample.start_s,
            length_s,
            encoded: msgbench_model::histogram::encode(&done.latency),
            max_ns: p.max_ns,
        };
        self.closed.push((sample, log));
    }

    fn add_final(&mut self, counters: &Counters, sequence: &SequenceErrors, raw: Vec<u64>) {
        add_counters(&mut self.counters, counters);
        self.counters.in_flight_end += counters.in_flight_end;
        self.sequence.gaps += sequence.gaps;
        self.sequence.duplicates += sequence.duplicates;
        self.sequence.reordered += sequence.reordered;
        if self.raw_latencies.is_empty() {
            self.raw_latencies = raw; // a move: no second copy of up to 800 MB
        } else {
            self.raw_latencies.extend(raw);
        }
    }

    fn live_status(&self) -> Option<LiveStatus> {
        let (sample, _) = self.closed.last()?;
        // The run's last interval may be a sliver (1 ms): its rate and p99 say nothing, and the
        // run's own figures follow at once.
        if sample.length_s < 0.5 {
            return None;
        }
        Some(LiveStatus {
            elapsed_s: sample.start_s + sample.length_s,
            sent: self.running.sent,
            delivered: self.running.delivered,
            dropped: self.running.dropped + self.running.skipped,
            delivered_per_sec: sample.delivered as f64 / sample.length_s.max(1e-9),
            p99_ns: sample.latency_p99_ns,
            p50_ns: sample.latency_p50_ns,
            max_ns: sample.latency_max_ns,
            send_lag_p99_ns: self.last_send_lag_p99_ns,
            counters: self.running,
            classes: self.live_classes.clone(),
        })
    }

    fn into_recording(mut self) -> Recording {
        // Intervals some worker never closed (the run ended): close them as they are.
        for (index, open) in std::mem::take(&mut self.open) {
            self.close(index, open);
        }
        self.closed
            .sort_by(|a, b| a.0.start_s.total_cmp(&b.0.start_s));
        let (intervals, interval_latency) = self.closed.into_iter().unzip();
        self.connections.sort_by_key(|c| c.index);
        Recording {
            counters: self.counters,
            sequence: self.sequence,
            early: self.early,
            latency: self.totals.latency,
            service: self.totals.service,
            send_lag: self.totals.send_lag,
            unanswered: self.totals.unanswered,
            send_lag_held: self.totals.held_lag,
            intervals,
            interval_latency,
            raw_latencies: self.raw_latencies,
            connections: self.connections,
            streamed: self.streamed,
        }
    }
}

/// Adds the flow counters (everything but `in_flight_end`, which is only known at the end).
fn add_counters(total: &mut Counters, c: &Counters) {
    *total += Counters {
        in_flight_end: 0,
        ..*c
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_checker_classifies_errors() {
        let mut s = SequenceChecker::default();
        for seq in [0, 1, 3, 2, 4, 4, 7] {
            s.check(seq);
        }
        assert_eq!(
            s.errors,
            SequenceErrors {
                gaps: 2,
                duplicates: 1,
                reordered: 1
            }
        );
    }

    #[test]
    fn a_duplicate_is_not_taken_for_a_late_number_while_gaps_are_open() {
        let mut s = SequenceChecker::starting_at(10);
        // 11 and 14..16 go missing; 12 comes twice; 15 comes late, 14 never.
        for seq in [10, 12, 12, 13, 17, 15, 13, 18] {
            s.check(seq);
        }
        assert_eq!(
            s.errors,
            SequenceErrors {
                gaps: 3,       // 11, 14, 16
                duplicates: 2, // the second 12, the second 13
                reordered: 1   // 15
            }
        );
    }

    #[test]
    fn two_workers_merge_into_one_recording_with_intervals() {
        let start = 10 * INTERVAL_NS;
        let mut collector = Collector::new(1, start, 4);
        let mut producer = collector.recorder(false);
        let mut consumer = collector.recorder(true);
        let handle = collector.start(None);
        for i in 0..30u64 {
            let t = start + i * INTERVAL_NS / 10; // 3 seconds, 10 messages per second
            producer.attempted();
            producer.sent(t, t + 5);
            consumer.delivered(0, t, t + 5, t + 1_000);
            consumer.sequence.check(i);
        }
        producer.finish(start + 3 * INTERVAL_NS);
        consumer.finish(start + 3 * INTERVAL_NS);
        let r = handle.join().unwrap();
        assert_eq!(
            (r.counters.attempted, r.counters.sent, r.counters.delivered),
            (30, 30, 30)
        );
        assert_eq!(r.latency_all().len(), 30);
        assert_eq!(r.latency_all().max(), 1_000);
        assert_eq!(r.service_all().value_at_quantile(0.5), 995);
        assert_eq!(r.send_lag.max(), 5);
        assert_eq!(r.raw_latencies, vec![1_000; 4]);
        assert_eq!(r.sequence.total(), 0);
        let per_second: Vec<u64> = r.intervals.iter().map(|i| i.delivered).collect();
        assert_eq!(per_second[..3], [10, 10, 10]);
        assert!(r.intervals.iter().all(|i| i.backlog == 0));
    }

    #[test]
    fn deliveries_before_their_send_time_are_counted_early_and_recorded_as_zero() {
        let start = 10 * INTERVAL_NS;
        let mut collector = Collector::new(1, start, 0);
        let mut a = collector.recorder(false);
        let mut b = collector.recorder(false);
        let handle = collector.start(None);
        // A feed whose clock runs 300 µs ahead: a 100 µs trip arrives 200 µs "before" it left.
        a.delivered(0, start + 300_000, start + 300_000, start + 100_000);
        a.delivered(0, start, start, start + 50_000);
        b.delivered(0, start + 1_000, start + 1_000, start + 500);
        for w in [a, b] {
            w.finish(start + INTERVAL_NS);
        }
        let r = handle.join().unwrap();
        assert_eq!(r.counters.delivered, 3);
        assert_eq!((r.early.count, r.early.most_ns), (2, 200_000));
        assert_eq!(r.latency_all().min(), 0);
        assert_eq!(r.latency_all().len(), 3);
    }

    #[test]
    fn an_idle_worker_still_reports_its_seconds() {
        let start = INTERVAL_NS;
        let mut collector = Collector::new(1, start, 0);
        let mut w = collector.recorder(false);
        let handle = collector.start(None);
        w.delivered(0, start, start, start + 10);
        w.delivered(0, start, start, start + 3 * INTERVAL_NS + 10); // slept through seconds 1 and 2
        w.finish(start + 4 * INTERVAL_NS);
        let r = handle.join().unwrap();
        let delivered: Vec<u64> = r.intervals.iter().map(|i| i.delivered).collect();
        assert_eq!(delivered, [1, 0, 0, 1]);
    }
}

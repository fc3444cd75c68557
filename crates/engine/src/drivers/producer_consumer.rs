//! In-process producer/consumer around a bounded SPSC ring (any [`RingProducer`] /
//! [`RingConsumer`]): a producer thread paced by the [`Pacer`] pushes stamped items; a consumer
//! thread pops them, does the configured work, checks the sequence and records latency
//! (completion − intended send) and service time (completion − actual push).
//!
//! On the run's [timeline](crate::harness): items scheduled before the measured span are warm-up
//! (sent and consumed, never counted, marked by the top bit of their sequence number); the span
//! ends at its scheduled end or after `operations` measured attempts. The consumer then drains
//! for at most `drain_timeout`; what is still in the ring is `in_flight_end`.
use crate::clock::{Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::error::EngineError;
use crate::harness::measured::unix_ms_of;
use crate::harness::threads::run_threads;
use crate::harness::{worker, Measured, RunContext, Timeline, STOP_CHECK_NS};
use crate::pacer::Pacer;
use crate::recorder::Recorder;
use crate::ring::{RingConsumer, RingProducer};
use crate::wait::{Sleeper, Waiter};
use msgbench_model::result::SkipCause;
use msgbench_model::result::ThreadCpu;
use msgbench_model::{pacing::Pacing, queue::QueueConfig, scenario::Scenario, when_full::WhenFull};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

/// One message in the ring: 16 bytes, copied, never allocated — four to a cache line. When the
/// consumer runs on the producer's heels every slot line moves between the CPUs, so the item's
/// size sets how often: the 24-byte item it replaces moved a line every 2.7 items (the C
/// floor's 8-byte item, every 8).
/// `repr(C)`: a queue from a library (`ring_library`) copies it as bytes, and the layout is
/// documented there (docs/own-queue.md): `u64` intended time, `u32` sequence, `u32` push time.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub struct Item {
    /// Time latency is measured from.
    intended_ns: u64,
    /// The low 31 bits of the sequence number; the top bit marks an item of the measured window.
    seq: u32,
    /// Time of the push that succeeded, after `intended_ns`: ns below 2^31 (2.1 s), else µs
    /// with the top bit set (a push blocked that long; far under the histograms'
    /// 0.1 %: under 1 µs of at least 2.1 s), up to 35 min.
    sent_after: u32,
}

// SAFETY: an `Item` is integers only; any bytes a foreign queue writes are some `Item` (a wrong
// one is caught by the consumer's sequence check).
unsafe impl crate::ring_library::AnyBits for Item {}

const MEASURED: u32 = 1 << 31;
const LOW_31: u32 = MEASURED - 1;

impl Item {
    fn new(seq: u64, measured: bool, intended_ns: u64, sent_ns: u64) -> Item {
        let mut item = Item {
            intended_ns,
            seq: (seq as u32 & LOW_31) | if measured { MEASURED } else { 0 },
            sent_after: 0,
        };
        item.set_sent(sent_ns);
        item
    }

    #[inline]
    fn set_sent(&mut self, sent_ns: u64) {
        let after = sent_ns.saturating_sub(self.intended_ns);
        self.sent_after = if after < u64::from(MEASURED) {
            after as u32
        } else {
            MEASURED | (after / 1000).min(u64::from(LOW_31)) as u32
        };
    }

    #[inline]
    fn sent_ns(&self) -> u64 {
        let after = if self.sent_after & MEASURED == 0 {
            u64::from(self.sent_after)
        } else {
            u64::from(self.sent_after & LOW_31) * 1000
        };
        self.intended_ns + after
    }

    #[inline]
    fn measured(&self) -> bool {
        self.seq & MEASURED != 0
    }

    /// The whole sequence number, given the one the consumer expects next: the nearest number
    /// with these low 31 bits (gaps and reordering within ±2^30 items are seen as such).
    #[inline]
    fn seq_near(&self, expected: u64) -> u64 {
        let diff = (self.seq & LOW_31).wrapping_sub(expected as u32) & LOW_31;
        let signed = if diff >= 1 << 30 {
            i64::from(diff) - (1 << 31)
        } else {
            i64::from(diff)
        };
        (expected as i64 + signed).max(0) as u64
    }
}
/// How far ahead of its pushes an untrusted queue's producer announces sequence numbers
/// (`Shared::given`): a number the queue makes up within this of the truth is still a gap or
/// a duplicate to the sequence check, so precision is not lost, only a store per push.
const ANNOUNCE_AHEAD: u64 = 1024;

/// Unpaced, the producer reads the stop flags once per this many items (~30 µs of sending).
const STOP_CHECK_ITEMS: u64 = 1024;

/// What producer and consumer share besides the ring.
struct Shared {
    timeline: Timeline,
    operations: Option<u64>,
    /// Time the producer stopped (0 while it runs).
    producer_done_ns: AtomicU64,
    stop: Arc<AtomicBool>,
    interrupted: AtomicBool,
    /// Raised when the other thread failed (pinning refused, panic): stop at once.
    abort: AtomicBool,
    /// Of an untrusted queue only ([`RingProducer::TRUSTED`]): a sequence number the producer
    /// has not pushed yet, raised [`ANNOUNCE_AHEAD`] at a time before the pushes it covers, so
    /// that an item popped with a number at or past it was never given to the queue. On a line
    /// of its own, and written once per [`ANNOUNCE_AHEAD`] pushes: written per push beside the
    /// flags the consumer reads, it cost the library ring a third of its rate.
    given: crossbeam_utils::CachePadded<AtomicU64>,
    /// Items pushed in the measured window (their sequence numbers' span), stored once when the
    /// producer is done: an untrusted queue's consumer counts what it never returned as failed.
    pushed_in_window: AtomicU64,
    /// Of an untrusted queue: the first sequence number of the measured window (`u64::MAX`
    /// until the producer reaches it), stored before that push. Such a queue's items are
    /// measured by their number, not by the flag bit in their bytes, which it may corrupt.
    window_first_seq: AtomicU64,
    barrier: Barrier,
}

impl Shared {
    fn new(timeline: Timeline, scenario: &Scenario, ctx: &RunContext) -> Shared {
        Shared {
            timeline,
            operations: scenario.run.operations,
            producer_done_ns: AtomicU64::new(0),
            stop: ctx.stop.clone(),
            interrupted: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            given: crossbeam_utils::CachePadded::new(AtomicU64::new(0)),
            pushed_in_window: AtomicU64::new(0),
            window_first_seq: AtomicU64::new(u64::MAX),
            barrier: Barrier::new(2),
        }
    }
}

/// Raises `abort` (and, for the producer, `producer_done_ns`) if its thread leaves early: on a
/// start-up error or a panic, the other thread must not wait forever for it.
struct AbortGuard<'a> {
    shared: &'a Shared,
    producer: bool,
    armed: bool,
}

impl Drop for AbortGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.abort.store(true, Ordering::SeqCst);
            if self.producer {
                let _ = self.shared.producer_done_ns.compare_exchange(
                    0,
                    self.shared.timeline.measure_start_ns.max(1),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
        }
    }
}

/// Runs the producer and the consumer around `producer`/`consumer`, the two ends of one ring.
pub fn drive<P: RingProducer<Item>, C: RingConsumer<Item>>(
    scenario: &Scenario,
    q: &QueueConfig,
    ctx: &RunContext,
    producer: P,
    consumer: C,
) -> Result<Measured, EngineError> {
    const {
        assert!(
            P::TRUSTED == C::TRUSTED,
            "both ends of a queue are trusted, or neither"
        )
    };
    let process_before = CpuSnapshot::process();
    let timeline = Timeline::from_now(&scenario.run);
    let shared = Shared::new(timeline, scenario, ctx);
    let mut collector = timeline.collector(&scenario.run, 1, 1);
    let producer_rec = collector.recorder(false);
    let consumer_rec = collector.recorder(true);
    let collecting = collector.start(ctx.live.clone());
    let (to_producer, from_consumer) = std::sync::mpsc::channel::<Arc<Sleeper>>();
    let (to_consumer, from_producer) = std::sync::mpsc::channel::<Arc<Sleeper>>();
    let shared = &shared;
    let producing = move |_done| {
        let ends = Ends {
            tell_other: to_consumer,
            from_other: from_consumer,
        };
        producer_thread(scenario, q, shared, producer, producer_rec, ends)
    };
    let consuming = move || {
        let ends = Ends {
            tell_other: to_producer,
            from_other: from_producer,
        };
        consumer_thread(q, shared, consumer, consumer_rec, ends)
    };
    // No system under test beside the ring: its CPU is the threads'. The span ends where the
    // producer says (`producer_done_ns`), not at its `done`.
    let no_sut = || None;
    let ran = run_threads(
        &timeline,
        &no_sut,
        vec![("producer".to_string(), producing)],
        vec![("consumer".to_string(), consuming)],
    );
    let (producer_out, consumer_out) = (first(ran.senders), first(ran.receivers));
    let producer_cpu = producer_out.map_err(|_| EngineError::WorkerPanicked("producer"))??;
    let consumer_cpu = consumer_out.map_err(|_| EngineError::WorkerPanicked("consumer"))??;
    let recording = collecting
        .join()
        .map_err(|_| EngineError::WorkerPanicked("collector"))?;
    let done = shared.producer_done_ns.load(Ordering::Acquire);
    Ok(Measured {
        recording,
        classes: vec!["item".into()],
        span_ns: done.saturating_sub(timeline.measure_start_ns),
        span_start_unix_ms: unix_ms_of(timeline.measure_start_ns),
        process_cpu: CpuSnapshot::process().since(&process_before),
        threads: vec![producer_cpu, consumer_cpu],
        interrupted: shared.interrupted.load(Ordering::Relaxed),
        config: q.describe(),
        faults: Default::default(),
        sut_cpu_s: None,
        stopped_by: None,
        notes: Vec::new(),
        streams: Vec::new(),
        info: Vec::new(),
        publish_latency: None,
        pubsub_shard: None,
    })
}

/// How the two threads swap the sleepers they wake each other with.
struct Ends {
    tell_other: std::sync::mpsc::Sender<Arc<Sleeper>>,
    from_other: std::sync::mpsc::Receiver<Arc<Sleeper>>,
}

/// The one thread of a role, as joined.
fn first<T>(mut joined: Vec<std::thread::Result<T>>) -> std::thread::Result<T> {
    joined.remove(0)
}

/// The producer thread: prepared (exact sleeps unless `relative` pacing, which reproduces a
/// plain `usleep` loop, default slack included), then paced to the schedule's end.
fn producer_thread<P: RingProducer<Item>>(
    scenario: &Scenario,
    q: &QueueConfig,
    shared: &Shared,
    ring: P,
    rec: Recorder,
    ends: Ends,
) -> Result<ThreadCpu, EngineError> {
    let waiter = Waiter::new(q.producer_wait);
    let _ = ends.tell_other.send(waiter.sleeper());
    let mut guard = AbortGuard {
        shared,
        producer: true,
        armed: true,
    };
    let exact_sleeps = !matches!(scenario.pacing, Pacing::Relative { .. });
    let prepared = worker::prepare("producer", q.pin_producer, exact_sleeps);
    shared.barrier.wait();
    let consumer_sleeper = ends.from_other.recv().expect("consumer started");
    prepared?;
    let t0 = shared.timeline.t0_ns;
    let p = ProducerLoop {
        q,
        shared,
        ring,
        rec,
        pacer: Pacer::new(scenario.pacing, t0, scenario.run.seed),
        clock: MonotonicClock::new(q.spin_ns),
        waiter,
        consumer_sleeper,
        next_seq: 0,
        pacing: scenario.pacing,
        held_until_ns: 0,
        announced: 0,
    };
    let cpu = p.run(("producer", q.pin_producer), t0);
    guard.armed = false;
    Ok(cpu)
}

/// The consumer thread: prepared, then popping until the producer is done and the ring drained
/// (or the drain timed out).
fn consumer_thread<C: RingConsumer<Item>>(
    q: &QueueConfig,
    shared: &Shared,
    ring: C,
    rec: Recorder,
    ends: Ends,
) -> Result<ThreadCpu, EngineError> {
    let waiter = Waiter::new(q.consumer_wait);
    let _ = ends.tell_other.send(waiter.sleeper());
    let mut guard = AbortGuard {
        shared,
        producer: false,
        armed: true,
    };
    let prepared = worker::prepare("consumer", q.pin_consumer, true);
    shared.barrier.wait();
    let producer_sleeper = ends.from_other.recv().expect("producer started");
    prepared?;
    let c = ConsumerLoop {
        q,
        shared,
        ring,
        rec,
        waiter,
        producer_sleeper,
        work: vec![0u8; q.work_bytes],
        next_seq: 0,
        delivered_in_window: 0,
    };
    let cpu = c.run(("consumer", q.pin_consumer));
    guard.armed = false;
    Ok(cpu)
}

struct ProducerLoop<'a, P> {
    q: &'a QueueConfig,
    shared: &'a Shared,
    ring: P,
    rec: Recorder,
    pacer: Pacer,
    clock: MonotonicClock,
    waiter: Waiter,
    consumer_sleeper: Arc<Sleeper>,
    next_seq: u64,
    pacing: Pacing,
    /// When the last push that waited for room got it: a message due by then waited for the
    /// consumer (a full queue), not for the pacer.
    held_until_ns: u64,
    /// The last number announced in `Shared::given` (untrusted queues only).
    announced: u64,
}

impl<P: RingProducer<Item>> ProducerLoop<'_, P> {
    /// Of an untrusted queue: the item about to be pushed may be popped from now on (stored
    /// before the push, so the pop that takes it sees it). Compiled out for msgbench's rings.
    #[inline]
    fn announce(&mut self) {
        if !P::TRUSTED && self.next_seq >= self.announced {
            self.announced = self.next_seq + ANNOUNCE_AHEAD;
            (self.shared.given).store(self.announced, Ordering::Release);
        }
    }

    fn run(mut self, (role, cpu): (&'static str, Option<usize>), t0: u64) -> ThreadCpu {
        self.clock.sleep_until(t0);
        self.send_until(self.shared.timeline.measure_start_ns, false);
        let before = CpuSnapshot::thread();
        let first_seq = self.next_seq;
        if !P::TRUSTED {
            (self.shared.window_first_seq).store(first_seq, Ordering::Release);
        }
        let ended = self.send_until(self.shared.timeline.end_ns, true);
        let cpu_used = CpuSnapshot::thread().since(&before);
        let now = self.clock.now_ns();
        let timeline = &self.shared.timeline;
        let span_end = timeline.send_end(now, ended == PhaseEnd::Schedule);
        // Before `producer_done_ns`, which the consumer reads (Acquire) before this.
        (self.shared.pushed_in_window).store(self.next_seq - first_seq, Ordering::Relaxed);
        self.shared
            .producer_done_ns
            .store(span_end.max(timeline.measure_start_ns), Ordering::Release);
        self.rec.finish(now);
        self.consumer_sleeper.wake();
        ThreadCpu {
            role: role.into(),
            pinned_cpu: cpu,
            cpu: cpu_used,
        }
    }

    /// Sends every message scheduled before `phase_end_ns`; counts them when `measured`.
    fn send_until(&mut self, phase_end_ns: u64, measured: bool) -> PhaseEnd {
        if self.pacing == Pacing::Immediate {
            return self.send_immediately(phase_end_ns, measured);
        }
        let wake_consumer = Waiter::may_park(self.q.consumer_wait);
        let mut last_actual = self.clock.now_ns();
        let mut attempts = 0u64;
        let budget = if measured {
            self.shared.operations.unwrap_or(u64::MAX)
        } else {
            u64::MAX
        };
        loop {
            if self.shared.stop.load(Ordering::Relaxed) || self.shared.abort.load(Ordering::Relaxed)
            {
                self.shared.interrupted.store(true, Ordering::Relaxed);
                return PhaseEnd::Stopped;
            }
            let next = self.pacer.upcoming_ns().unwrap_or(last_actual);
            if next >= phase_end_ns {
                return PhaseEnd::Schedule;
            }
            if attempts >= budget {
                return PhaseEnd::Budget;
            }
            // Relative sleeping must stay one plain sleep per batch (it reproduces `usleep`).
            if !matches!(self.pacing, Pacing::Relative { .. }) && !self.wait_interruptibly(next) {
                continue;
            }
            let slot = self.pacer.next(&self.clock);
            last_actual = slot.actual_ns;
            attempts += 1;
            let item = Item::new(self.next_seq, measured, slot.intended_ns, slot.actual_ns);
            if measured {
                self.rec.attempted();
            }
            self.announce();
            let pushed = match self.ring.push(item) {
                Ok(()) => Some(slot.actual_ns),
                Err(item) if self.q.when_full == WhenFull::Block => self.push_blocking(item),
                Err(_) => {
                    if measured {
                        self.rec.sent(slot.scheduled_ns, slot.actual_ns);
                        self.rec.dropped();
                    }
                    continue;
                }
            };
            match pushed {
                Some(sent_ns) => {
                    self.next_seq += 1;
                    if measured {
                        self.rec.sent(slot.scheduled_ns, sent_ns);
                        if slot.scheduled_ns <= self.held_until_ns {
                            self.rec.held_by_window();
                        }
                    }
                    if wake_consumer {
                        self.consumer_sleeper.wake();
                    }
                }
                None if measured => self.rec.skipped(SkipCause::RunEnded),
                None => {}
            }
        }
    }

    /// [`Self::send_until`] for `immediate` pacing: one clock read per item (it is the item's
    /// intended, scheduled and actual time alike), no pacer and no wait, the stop flags read once
    /// every [`STOP_CHECK_ITEMS`] items. The general loop read the clock twice per item and
    /// asked the pacer for a slot it already knew: a `perf record` of the unpaced queue lab put
    /// 18 % of the producer on `rdtsc` and 12.5 % on `Pacer::next`.
    fn send_immediately(&mut self, phase_end_ns: u64, measured: bool) -> PhaseEnd {
        let wake_consumer = Waiter::may_park(self.q.consumer_wait);
        let budget = match (measured, self.shared.operations) {
            (true, Some(ops)) => ops,
            _ => u64::MAX,
        };
        let mut attempts = 0u64;
        loop {
            if attempts.is_multiple_of(STOP_CHECK_ITEMS)
                && (self.shared.stop.load(Ordering::Relaxed)
                    || self.shared.abort.load(Ordering::Relaxed))
            {
                self.shared.interrupted.store(true, Ordering::Relaxed);
                return PhaseEnd::Stopped;
            }
            let now = self.clock.now_ns();
            if now >= phase_end_ns {
                return PhaseEnd::Schedule;
            }
            if attempts >= budget {
                return PhaseEnd::Budget;
            }
            attempts += 1;
            if measured {
                self.rec.attempted();
            }
            let item = Item::new(self.next_seq, measured, now, now);
            self.announce();
            let sent_ns = match self.ring.push(item) {
                Ok(()) => now,
                Err(item) if self.q.when_full == WhenFull::Block => {
                    match self.push_blocking(item) {
                        Some(sent_ns) => sent_ns,
                        None => {
                            // Stopped (Ctrl-C) while waiting for room, or the run's deadline
                            // passed with the queue still full.
                            if measured {
                                self.rec.skipped(SkipCause::RunEnded);
                            }
                            if !self.shared.stop.load(Ordering::Relaxed)
                                && !self.shared.abort.load(Ordering::Relaxed)
                            {
                                return PhaseEnd::Schedule;
                            }
                            self.shared.interrupted.store(true, Ordering::Relaxed);
                            return PhaseEnd::Stopped;
                        }
                    }
                }
                Err(_) => {
                    if measured {
                        self.rec.sent(now, now);
                        self.rec.dropped();
                    }
                    continue;
                }
            };
            self.next_seq += 1;
            if measured {
                self.rec.sent(now, sent_ns);
                if now <= self.held_until_ns {
                    self.rec.held_by_window();
                }
            }
            if wake_consumer {
                self.consumer_sleeper.wake();
            }
        }
    }

    /// Sleeps in slices of at most `STOP_CHECK_NS` until shortly before `next_ns`, so Ctrl-C is
    /// heard during long gaps between sends; the pacer then sleeps the precise rest. Returns false
    /// when a stop or abort arrived meanwhile.
    fn wait_interruptibly(&self, next_ns: u64) -> bool {
        loop {
            let now = self.clock.now_ns();
            if next_ns <= now.saturating_add(2 * STOP_CHECK_NS) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_nanos(STOP_CHECK_NS));
            if self.shared.stop.load(Ordering::Relaxed) || self.shared.abort.load(Ordering::Relaxed)
            {
                return false;
            }
        }
    }

    /// Waits for space; the item's send time is the moment it got in. `None` when stopped.
    #[cold]
    fn push_blocking(&mut self, mut item: Item) -> Option<u64> {
        self.waiter.progressed();
        // The run's deadline: a queue that never makes room (a consumer stuck in its work, a
        // foreign queue that always says full) must not hold the run past its drain.
        let timeline = &self.shared.timeline;
        let deadline = timeline.end_ns.saturating_add(timeline.drain_ns);
        loop {
            if self.shared.stop.load(Ordering::Relaxed)
                || self.shared.abort.load(Ordering::Relaxed)
                || self.clock.now_ns() > deadline
            {
                return None;
            }
            let (ring, shared) = (&self.ring, self.shared);
            self.waiter.idle(|| {
                !ring.is_full()
                    || shared.stop.load(Ordering::Relaxed)
                    || shared.abort.load(Ordering::Relaxed)
            });
            let sent_ns = self.clock.now_ns();
            item.set_sent(sent_ns);
            match self.ring.push(item) {
                Ok(()) => {
                    self.held_until_ns = sent_ns;
                    return Some(sent_ns);
                }
                Err(back) => item = back,
            }
        }
    }
}

/// Why a sending phase ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PhaseEnd {
    /// The schedule reached the end of the phase.
    Schedule,
    /// The operation budget was used up.
    Budget,
    /// Ctrl-C.
    Stopped,
}

struct ConsumerLoop<'a, C> {
    q: &'a QueueConfig,
    shared: &'a Shared,
    ring: C,
    rec: Recorder,
    waiter: Waiter,
    producer_sleeper: Arc<Sleeper>,
    work: Vec<u8>,
    /// The sequence number expected next (items carry only its low 31 bits).
    next_seq: u64,
    /// Of an untrusted queue: measured items delivered (see `Shared::pushed_in_window`).
    delivered_in_window: u64,
}

impl<C: RingConsumer<Item>> ConsumerLoop<'_, C> {
    fn run(mut self, (role, cpu): (&'static str, Option<usize>)) -> ThreadCpu {
        let wake_producer =
            self.q.when_full == WhenFull::Block && Waiter::may_park(self.q.producer_wait);
        let mut before: Option<CpuSnapshot> = None;
        loop {
            match self.ring.pop() {
                Some(item) => {
                    self.waiter.progressed();
                    if wake_producer {
                        self.producer_sleeper.wake();
                    }
                    self.work();
                    let now = crate::clock::now_ns();
                    let seq = item.seq_near(self.next_seq);
                    let fresh = self.check_sequence(seq);
                    if fresh && self.measured(&item, seq) {
                        if !C::TRUSTED {
                            self.delivered_in_window += 1;
                        }
                        if before.is_none() {
                            before = Some(CpuSnapshot::thread());
                        }
                        self.rec.delivered(0, item.intended_ns, item.sent_ns(), now);
                    }
                    if self.drain_expired(now) {
                        break;
                    }
                }
                None => {
                    if self.drained_or_timed_out() {
                        break;
                    }
                    let ring = &self.ring;
                    let shared = self.shared;
                    self.waiter.idle(|| {
                        ring.waiting() > 0
                            || shared.producer_done_ns.load(Ordering::Relaxed) != 0
                            || shared.abort.load(Ordering::Relaxed)
                    });
                }
            }
        }
        // No measured delivery (Ctrl-C during warm-up): nothing of the window was used.
        let cpu_used = before
            .map(|b| CpuSnapshot::thread().since(&b))
            .unwrap_or_default();
        let left = self.left_in_queue();
        self.rec.in_flight_at_end(left);
        self.rec.finish(crate::clock::now_ns());
        ThreadCpu {
            role: role.into(),
            pinned_cpu: cpu,
            cpu: cpu_used,
        }
    }

    /// Whether `item` (sequence number `seq`) is of the measured window: its flag bit, or for an
    /// untrusted queue its number (the bit is in bytes such a queue may corrupt).
    #[inline]
    fn measured(&self, item: &Item, seq: u64) -> bool {
        if C::TRUSTED {
            item.measured()
        } else {
            seq >= self.shared.window_first_seq.load(Ordering::Acquire)
        }
    }

    /// The measured items still in the queue when the run ends, popped (at most a ring's worth,
    /// and for an untrusted queue, which may claim items for ever or make a larger ring than
    /// asked, at most what it was given). For an untrusted queue, checked as during the run;
    /// what it was given and never returned (lost, or returned corrupted and not believed)
    /// is counted failed, and what it returned beyond what it was given, a duplicate.
    fn left_in_queue(&mut self) -> u64 {
        let pushed = if C::TRUSTED || self.shared.producer_done_ns.load(Ordering::Acquire) == 0 {
            0
        } else {
            self.shared.pushed_in_window.load(Ordering::Relaxed)
        };
        let mut left = 0;
        for _ in 0..=self.q.capacity as u64 + pushed {
            let Some(item) = self.ring.pop() else { break };
            let seq = item.seq_near(self.next_seq);
            left += u64::from(self.check_sequence(seq) && self.measured(&item, seq));
        }
        if !C::TRUSTED {
            let returned = self.delivered_in_window + left;
            for _ in 0..pushed.saturating_sub(returned) {
                self.rec.failed();
            }
            // More than it was given: made-up numbers the bound let through (see `given`).
            self.rec.sequence.errors.duplicates += returned.saturating_sub(pushed);
        }
        left
    }

    /// Checks an item's sequence number; false when it is not to be delivered: a number an
    /// untrusted queue was never given, or one it gave before (each counted as a duplicate in
    /// the sequence errors, so the run says the queue returned what it should not have).
    #[inline]
    fn check_sequence(&mut self, seq: u64) -> bool {
        if C::TRUSTED {
            self.next_seq = self.next_seq.max(seq + 1);
            self.rec.sequence.check(seq);
            return true;
        }
        if seq >= self.shared.given.load(Ordering::Acquire) {
            self.rec.sequence.errors.duplicates += 1;
            return false;
        }
        let duplicates = self.rec.sequence.errors.duplicates;
        self.next_seq = self.next_seq.max(seq + 1);
        self.rec.sequence.check(seq);
        self.rec.sequence.errors.duplicates == duplicates
    }

    /// The simulated work per item: touch `work_bytes`, then spin `work_ns`.
    #[inline]
    fn work(&mut self) {
        if !self.work.is_empty() {
            for b in self.work.iter_mut() {
                *b = b.wrapping_add(1);
            }
            std::hint::black_box(&mut self.work);
        }
        if self.q.work_ns > 0 {
            let until = crate::clock::now_ns() + self.q.work_ns;
            while crate::clock::now_ns() < until {
                std::hint::spin_loop();
            }
        }
    }

    /// True once the producer is done and the ring is empty, or the drain timeout passed.
    fn drained_or_timed_out(&mut self) -> bool {
        let now = crate::clock::now_ns();
        self.rec.roll_if_due(now);
        if self.shared.abort.load(Ordering::Relaxed) {
            return true;
        }
        match self.shared.producer_done_ns.load(Ordering::Acquire) {
            0 => false,
            done => self.ring.waiting() == 0 || now > self.drain_deadline(done),
        }
    }

    /// True when the producer is done and the drain timeout has passed at `now`.
    #[inline]
    fn drain_expired(&self, now: u64) -> bool {
        let done = self.shared.producer_done_ns.load(Ordering::Relaxed);
        done != 0 && now > self.drain_deadline(done)
    }

    /// The end of the drain after the producer finished at `done` (shortened by Ctrl-C).
    #[inline]
    fn drain_deadline(&self, done: u64) -> u64 {
        let ctrl_c = self.shared.stop.load(Ordering::Relaxed);
        self.shared.timeline.drain_deadline(done, ctrl_c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_carries_its_times_exactly_below_two_seconds_and_to_a_microsecond_above() {
        for after in [0u64, 1, 999, (1 << 31) - 1] {
            let item = Item::new(7, true, 5_000, 5_000 + after);
            assert_eq!(item.sent_ns(), 5_000 + after);
        }
        for after in [1u64 << 31, 10_000_000_123, 1_800_000_000_000] {
            let item = Item::new(7, false, 5_000, 5_000 + after);
            assert_eq!(item.sent_ns(), 5_000 + after / 1000 * 1000);
            assert!(!item.measured());
        }
        // A send time before the intended one (a relative schedule's rounding) reads as it.
        assert_eq!(Item::new(0, true, 5_000, 4_000).sent_ns(), 5_000);
        assert_eq!(std::mem::size_of::<Item>(), 16);
    }

    #[test]
    fn sequence_numbers_are_rebuilt_across_the_31_bit_wrap_with_gaps_and_repeats() {
        let near = |seq: u64, expected: u64| Item::new(seq, true, 0, 0).seq_near(expected);
        for base in [0u64, 5, (1 << 31) - 3, 3 << 31, 1 << 40] {
            assert_eq!(near(base, base), base);
            assert_eq!(near(base + 1000, base), base + 1000, "a gap");
            if base >= 10 {
                assert_eq!(near(base - 10, base), base - 10, "a repeat or a late one");
            }
        }
        assert_eq!(
            near((1 << 31) + 2, (1 << 31) - 3),
            (1 << 31) + 2,
            "across the wrap"
        );
    }
}

//! The `queue` system under test: a producer thread paced by the [`Pacer`] pushes stamped items
//! into a bounded SPSC ring; a consumer thread pops them, does the configured work, checks the
//! sequence and records latency (completion − intended send) and service time (completion −
//! actual push).
//!
//! Timeline: the schedule starts at `t0`; items scheduled before `t0 + warmup` are warm-up (sent
//! and consumed, never counted, marked by the top bit of their sequence number); the measured
//! window ends at `t0 + warmup + duration` or after `operations` measured attempts. The consumer
//! then drains for at most `drain_timeout`; what is still in the ring is `in_flight_end`.
use super::{EngineError, Measured, RunContext};
use crate::affinity::pin_current_thread;
use crate::clock::{lower_timer_slack, Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::pacer::Pacer;
use crate::recorder::{Collector, Recorder};
use crate::ring::{self, RingConsumer, RingProducer};
use crate::wait::{Sleeper, Waiter};
use msgbench_model::result::ThreadCpu;
use msgbench_model::scenario::{Pacing, QueueConfig, RingKind, Scenario, WhenFull};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

/// One message in the ring: 24 bytes, copied, never allocated.
#[derive(Debug, Clone, Copy)]
pub struct Item {
    /// Sequence number; the top bit marks an item of the measured window.
    pub seq: u64,
    /// Time latency is measured from.
    pub intended_ns: u64,
    /// Time of the push that succeeded.
    pub sent_ns: u64,
}

const MEASURED: u64 = 1 << 63;
/// Longest sleep between checks of the stop flag while the producer waits for a far-off send.
const STOP_CHECK_NS: u64 = 20_000_000;
/// Lead time for both threads to be pinned and waiting before the schedule starts.
const START_LEAD_NS: u64 = 5_000_000;

/// What producer and consumer share besides the ring.
struct Shared {
    measure_start_ns: u64,
    end_ns: u64,
    operations: Option<u64>,
    drain_timeout_ns: u64,
    /// Time the producer stopped (0 while it runs).
    producer_done_ns: AtomicU64,
    stop: Arc<AtomicBool>,
    interrupted: AtomicBool,
    /// Raised when the other thread failed (pinning refused, panic): stop at once.
    abort: AtomicBool,
    barrier: Barrier,
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
                    self.shared.measure_start_ns.max(1),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
        }
    }
}

/// Runs the queue lab once.
pub fn run(
    scenario: &Scenario,
    q: &QueueConfig,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    match q.ring {
        RingKind::Msgbench => {
            let (p, c) = ring::channel::<Item>(q.capacity);
            run_with(scenario, q, ctx, p, c)
        }
        RingKind::Rtrb => {
            let (p, c) = rtrb::RingBuffer::<Item>::new(q.capacity);
            run_with(scenario, q, ctx, p, c)
        }
    }
}

fn run_with<P: RingProducer<Item>, C: RingConsumer<Item>>(
    scenario: &Scenario,
    q: &QueueConfig,
    ctx: &RunContext,
    producer: P,
    consumer: C,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let t0 = crate::clock::now_ns() + START_LEAD_NS;
    let measure_start_ns = t0 + scenario.run.warmup.as_nanos() as u64;
    let exact_sleeps = !matches!(scenario.pacing, Pacing::Relative { .. });
    let shared = Shared {
        measure_start_ns,
        // No duration but an operation budget: the budget alone ends the window.
        end_ns: match (scenario.run.duration.is_zero(), scenario.run.operations) {
            (true, Some(_)) => u64::MAX,
            _ => measure_start_ns.saturating_add(scenario.run.duration.as_nanos() as u64),
        },
        operations: scenario.run.operations,
        drain_timeout_ns: scenario.run.drain_timeout.as_nanos() as u64,
        producer_done_ns: AtomicU64::new(0),
        stop: ctx.stop.clone(),
        interrupted: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        barrier: Barrier::new(2),
    };
    let raw_cap = scenario.run.emit_latencies.unwrap_or(0).min(100_000_000) as usize;
    let mut collector = Collector::new(1, measure_start_ns, raw_cap);
    let producer_rec = collector.recorder(false);
    let consumer_rec = collector.recorder(true);
    let collecting = collector.start(ctx.live.clone());
    let (sleeper_tx, sleeper_rx) = std::sync::mpsc::channel::<Arc<Sleeper>>();
    let (producer_sleeper_tx, producer_sleeper_rx) = std::sync::mpsc::channel::<Arc<Sleeper>>();

    let (producer_out, consumer_out) = std::thread::scope(|s| {
        let shared = &shared;
        let p = std::thread::Builder::new()
            .name("msgbench-producer".into())
            .spawn_scoped(s, move || {
                let waiter = Waiter::new(q.producer_wait);
                let _ = producer_sleeper_tx.send(waiter.sleeper());
                let mut guard = AbortGuard {
                    shared,
                    producer: true,
                    armed: true,
                };
                let prepared = prepare_thread("producer", q.pin_producer, exact_sleeps);
                shared.barrier.wait();
                let consumer_sleeper = sleeper_rx.recv().expect("consumer started");
                let prepared = prepared?;
                let pacer = Pacer::new(scenario.pacing, t0, scenario.run.seed);
                let p = ProducerLoop {
                    q,
                    shared,
                    ring: producer,
                    rec: producer_rec,
                    pacer,
                    clock: MonotonicClock::new(q.spin_ns),
                    waiter,
                    consumer_sleeper,
                    next_seq: 0,
                    pacing: scenario.pacing,
                };
                let cpu = p.run(prepared, t0);
                guard.armed = false;
                Ok::<_, EngineError>(cpu)
            })
            .expect("spawning a thread");
        let c = std::thread::Builder::new()
            .name("msgbench-consumer".into())
            .spawn_scoped(s, move || {
                let waiter = Waiter::new(q.consumer_wait);
                let _ = sleeper_tx.send(waiter.sleeper());
                let mut guard = AbortGuard {
                    shared,
                    producer: false,
                    armed: true,
                };
                let prepared = prepare_thread("consumer", q.pin_consumer, true);
                shared.barrier.wait();
                let producer_sleeper = producer_sleeper_rx.recv().expect("producer started");
                let prepared = prepared?;
                let c = ConsumerLoop {
                    q,
                    shared,
                    ring: consumer,
                    rec: consumer_rec,
                    waiter,
                    producer_sleeper,
                    work: vec![0u8; q.work_bytes],
                };
                let cpu = c.run(prepared);
                guard.armed = false;
                Ok::<_, EngineError>(cpu)
            })
            .expect("spawning a thread");
        (p.join(), c.join())
    });
    let producer_cpu = producer_out.map_err(|_| EngineError::WorkerPanicked("producer"))??;
    let consumer_cpu = consumer_out.map_err(|_| EngineError::WorkerPanicked("consumer"))??;
    let recording = collecting
        .join()
        .map_err(|_| EngineError::WorkerPanicked("collector"))?;
    let done = shared.producer_done_ns.load(Ordering::Acquire);
    // Wall-clock start of the window, from how long ago it began (now, if it never began).
    let now_ns = crate::clock::now_ns();
    let window_start_unix_ms =
        crate::environment::unix_ms() - now_ns.saturating_sub(measure_start_ns) / 1_000_000;
    Ok(Measured {
        recording,
        classes: vec!["item".into()],
        window_ns: done.saturating_sub(measure_start_ns),
        window_start_unix_ms,
        process_cpu: CpuSnapshot::process().since(&process_before),
        threads: vec![producer_cpu, consumer_cpu],
        interrupted: shared.interrupted.load(Ordering::Relaxed),
        config: q.describe(),
        faults: Default::default(),
        sut_cpu_s: None,
        notes: Vec::new(),
        streams: Vec::new(),
    })
}

/// Pins and lowers timer slack (except for `relative` pacing, which reproduces a plain `usleep`
/// loop, default slack included); returns the role and CPU for the thread's CPU record.
fn prepare_thread(
    role: &'static str,
    cpu: Option<usize>,
    exact_sleeps: bool,
) -> Result<(&'static str, Option<usize>), EngineError> {
    if exact_sleeps {
        lower_timer_slack();
    }
    if let Some(cpu) = cpu {
        pin_current_thread(cpu).map_err(|source| EngineError::Pin { role, cpu, source })?;
    }
    Ok((role, cpu))
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
}

impl<P: RingProducer<Item>> ProducerLoop<'_, P> {
    fn run(mut self, (role, cpu): (&'static str, Option<usize>), t0: u64) -> ThreadCpu {
        self.clock.sleep_until(t0);
        self.send_until(self.shared.measure_start_ns, false);
        let before = CpuSnapshot::thread();
        let ended = self.send_until(self.shared.end_ns, true);
        let cpu_used = CpuSnapshot::thread().since(&before);
        let now = self.clock.now_ns();
        // A window that ran its course lasts its full duration, even if the last paced send was
        // earlier; a late producer stretches it to its last send. Budget or Ctrl-C: until now.
        let window_end = if ended == PhaseEnd::Schedule {
            now.max(self.shared.end_ns)
        } else {
            now
        };
        self.shared.producer_done_ns.store(
            window_end.max(self.shared.measure_start_ns),
            Ordering::Release,
        );
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
            let flag = if measured { MEASURED } else { 0 };
            let item = Item {
                seq: self.next_seq | flag,
                intended_ns: slot.intended_ns,
                sent_ns: slot.actual_ns,
            };
            if measured {
                self.rec.attempted();
            }
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
                    }
                    if wake_consumer {
                        self.consumer_sleeper.wake();
                    }
                }
                None if measured => self.rec.skipped(),
                None => {}
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
        loop {
            if self.shared.stop.load(Ordering::Relaxed) || self.shared.abort.load(Ordering::Relaxed)
            {
                return None;
            }
            let (ring, shared) = (&self.ring, self.shared);
            self.waiter.idle(|| {
                !ring.is_full()
                    || shared.stop.load(Ordering::Relaxed)
                    || shared.abort.load(Ordering::Relaxed)
            });
            item.sent_ns = self.clock.now_ns();
            match self.ring.push(item) {
                Ok(()) => return Some(item.sent_ns),
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
                    self.rec.sequence.check(item.seq & !MEASURED);
                    if item.seq & MEASURED != 0 {
                        if before.is_none() {
                            before = Some(CpuSnapshot::thread());
                        }
                        self.rec.delivered(0, item.intended_ns, item.sent_ns, now);
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
        let mut left = 0;
        while let Some(item) = self.ring.pop() {
            left += (item.seq & MEASURED != 0) as u64;
        }
        self.rec.in_flight_at_end(left);
        self.rec.finish(crate::clock::now_ns());
        ThreadCpu {
            role: role.into(),
            pinned_cpu: cpu,
            cpu: cpu_used,
        }
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
            done => {
                self.ring.waiting() == 0 || now > done.saturating_add(self.shared.drain_timeout_ns)
            }
        }
    }

    /// True when the producer is done and the drain timeout has passed at `now`.
    #[inline]
    fn drain_expired(&self, now: u64) -> bool {
        let done = self.shared.producer_done_ns.load(Ordering::Relaxed);
        done != 0 && now > done.saturating_add(self.shared.drain_timeout_ns)
    }
}

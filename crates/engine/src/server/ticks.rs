//! The built-in tick server (`msgbench serve ticks`, or in-process for a `ticks` scenario
//! without an address): broadcasts market ticks on a schedule to every subscribed client.
//!
//! Each server thread runs its own generator on the same absolute schedule (same seed, same
//! ticks: a tick follows from its sequence number), so a client gets the same stream whichever
//! thread serves it, and no tick crosses threads. Every generated tick goes into each client's
//! bounded send queue; when a queue is full the slow-client policy applies: `drop-oldest`
//! evicts, `drop-newest` refuses, `disconnect` closes the connection, `unbounded` lets it grow
//! (to 64 Mi ticks). A client's task writes its queue in batches (feed many frames, flush once)
//! and stamps each batch with the time it began writing.
//!
//! Per client it counts, for ticks of the measured window: generated, queued, dropped, written
//! (a completed flush) and acknowledged (the client's cumulative acknowledgements), each also
//! per second, and publishes them when the connection or the server ends.
use super::ws::{
    put_server_frame, ConnectionCounts, Counts, LocalFuture, Pool, ServerWs, Service, Settings,
    Upgrade, OPCODE_BINARY, OPCODE_TEXT,
};
use crate::clock::{Clock, MonotonicClock};
use crate::harness::timer::AsyncTimer;
use crate::hot_histogram::HotHistogram;
use crate::net::tick::{
    ClientMessage, PageReport, Schedule, ServerMessage, Tick, BINARY_TICK_BYTES,
};
use crate::pacer::Pacer;
use bytes::BytesMut;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use msgbench_model::pacing::Pacing;
use msgbench_model::result::{PageClock, StreamServerCounts};
use msgbench_model::ticks::{SlowClientPolicy, TickFormat, TickServerConfig};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::AsyncWrite;
use tokio_websockets::Message;

/// Ticks one generator round makes before letting the writers run.
const MAX_TICKS_PER_ROUND: usize = 4096;
/// Write batches one connection sends before yielding to the others on its thread.
const MAX_BATCHES_PER_POLL: usize = 8;
/// How often a generator with no subscribed client wakes.
const IDLE_WAKE_NS: u64 = 1_000_000;
/// How late a due tick may be before a connection's task makes it rather than wait for the
/// generator's task. That task waits its turn behind every connection woken before it: at
/// 1000 clients a turn of writes took milliseconds, and the generator fell tens of ms behind
/// its schedule (send lag p99 36–70 ms) with the thread half idle. A little slack keeps
/// rounds of a few ticks (each round looks at every client once).
const CATCH_UP_NS: u64 = 50_000;
/// Longest the server waits for a slow client to read through what was written and answer its
/// close frame (a client at 10k ticks/s needs ~0.4 s to drain 128 KiB of socket buffers).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Reports of ended connections kept one by one; beyond, a report is folded into the kept one
/// of the same client name (or one for all others), so a standalone server with connection
/// churn keeps bounded memory.
pub const MAX_KEPT_REPORTS: usize = 4096;
/// Messages read from one client before its answers (pongs) are flushed: a client that sends
/// pings and reads nothing must not grow the server's write queue.
const READS_PER_FLUSH: usize = 256;
/// Ticks queued on the whole server (16 B each: 256 MiB) beyond which a client with ticks
/// already queued is treated as full, whatever its own queue size (policy `unbounded`
/// included).
pub const SERVER_TICK_BUDGET: usize = 16 << 20;
/// The browser client: a page and its script, served on `GET /` and `GET /ticks.js`.
const PAGE_HTML: &str = include_str!("page/index.html");
const PAGE_JS: &str = include_str!("page/ticks.js");

/// What the tick server streams.
#[derive(Debug, Clone)]
pub struct TickServerOptions {
    /// Threads, queue, policy, batching, buffers, limits.
    pub config: TickServerConfig,
    /// Format for clients that do not ask for one (`?format=json`).
    pub format: TickFormat,
    /// Symbols cycled through.
    pub symbols: u32,
    /// The generator's schedule.
    pub pacing: Pacing,
    /// Spin margin of the generator's precise waits, ns.
    pub spin_ns: u64,
    /// Seed of Poisson arrivals.
    pub seed: u64,
    /// Keep each connection's counts per second of the schedule (a run's report charts them).
    /// Off for a standalone server: a connection joining after hours would otherwise hold a
    /// slot for every second since the server started.
    pub per_second: bool,
}

/// What the server counted for one connection, published when it ended (or the server did).
#[derive(Debug, Clone, Default)]
pub struct ConnReport {
    /// The name the client gave (`?client=`), or `anonymous-<n>`.
    pub name: String,
    /// Its format.
    pub format: Option<TickFormat>,
    /// Counts over the measured window.
    pub counts: StreamServerCounts,
    /// Per second of the measured window: `[generated, dropped, written]`.
    pub per_second: Vec<[u64; 3]>,
    /// Ticks generated for it in all (warm-up included).
    pub generated_all: u64,
    /// Ticks dropped for it in all (warm-up included): the gaps its sequence numbers show.
    pub dropped_all: u64,
    /// Warm-up ticks written to it (they precede every measured tick in its stream), to turn
    /// its cumulative acknowledgements into measured ones.
    pub written_warmup: u64,
    /// Why it ended before the server did, and when (ns), if it did.
    pub closed: Option<(String, u64)>,
    /// The page's clock (browser clients).
    pub page_clock: Option<PageClock>,
}

impl ConnReport {
    /// Adds a later connection's counts to this one (it takes the later one's end).
    fn absorb(&mut self, later: ConnReport) {
        let (c, l) = (&mut self.counts, &later.counts);
        c.generated += l.generated;
        c.queued += l.queued;
        c.dropped += l.dropped;
        c.written += l.written;
        c.acked += l.acked;
        c.queue_peak = c.queue_peak.max(l.queue_peak);
        if self.per_second.len() < later.per_second.len() {
            self.per_second.resize(later.per_second.len(), [0; 3]);
        }
        for (mine, theirs) in self.per_second.iter_mut().zip(&later.per_second) {
            for k in 0..3 {
                mine[k] += theirs[k];
            }
        }
        self.generated_all += later.generated_all;
        self.dropped_all += later.dropped_all;
        self.written_warmup += later.written_warmup;
        self.closed = later.closed;
        self.page_clock = later.page_clock.or(self.page_clock);
    }
}

/// Everything the server measured, returned by [`TickServer::stop`].
#[derive(Debug)]
pub struct ServerReport {
    /// One entry per connection, in the order they ended.
    pub connections: Vec<ConnReport>,
    /// How late the generators were (actual − scheduled), measured ticks.
    pub send_lag: HotHistogram,
    /// When the last generator finished its schedule (ns), if all did.
    pub generators_done_ns: Option<u64>,
    /// Ticks generated (warm-up included), summed over threads.
    pub generated: u64,
    /// Connection-level counts.
    pub counts: ConnectionCounts,
}

/// A running tick server; stops when dropped.
pub struct TickServer {
    pool: Pool,
    service: Arc<TickService>,
    /// Connection-level counts (accepted, refused, handshake failures, …).
    pub counts: Arc<Counts>,
}

impl TickServer {
    /// Binds `listen` and starts serving; the generators wait for [`TickServer::begin`].
    pub fn start(options: TickServerOptions, listen: SocketAddr) -> std::io::Result<TickServer> {
        let settings = Settings {
            threads: options.config.threads,
            pin: options.config.pin.clone(),
            max_frame: options.config.max_frame,
            send_buffer: options.config.send_buffer,
            max_connections: options.config.max_connections,
            name: "ticks-server",
            stop: Arc::new(super::ws::Shutdown::default()),
        };
        let counts = Arc::new(Counts::default());
        let service = Arc::new(TickService {
            counts: counts.clone(),
            options,
            settings,
            schedule: tokio::sync::watch::channel(None).0,
            end_ns: AtomicU64::new(u64::MAX),
            generators_done: Mutex::new((0, 0)),
            ready: Mutex::new(BTreeMap::new()),
            ready_changed: Condvar::new(),
            reports: Mutex::new(None),
            finished: Mutex::new(Vec::new()),
            send_lag: Mutex::new(HotHistogram::new()),
            generated: AtomicU64::new(0),
            anonymous: AtomicU64::new(0),
        });
        let pool = Pool::start(service.clone(), counts.clone(), listen)?;
        Ok(TickServer {
            pool,
            service,
            counts,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.pool.local_addr()
    }

    /// CPU used by the server threads so far, ns.
    pub fn cpu_ns(&self) -> u64 {
        self.pool.cpu_ns()
    }

    /// Starts every generator on `schedule`.
    pub fn begin(&self, schedule: Schedule) {
        self.service.end_ns.store(schedule.end_ns, Ordering::SeqCst);
        self.service.schedule.send_replace(Some(schedule));
    }

    /// Ends the schedule early (Ctrl-C): no tick due from `ns` on is generated.
    pub fn end_at(&self, ns: u64) {
        self.service.end_ns.fetch_min(ns, Ordering::SeqCst);
    }

    /// When every generator finished its schedule, if all have.
    pub fn generators_done_ns(&self) -> Option<u64> {
        let (done, at) = *self.service.generators_done.lock().expect("not poisoned");
        (done >= self.service.settings.threads).then_some(at)
    }

    /// Where browser pages' reports go (`(client name, report)`).
    pub fn report_to(&self, sink: std::sync::mpsc::Sender<(String, PageReport)>) {
        *self.service.reports.lock().expect("not poisoned") = Some(sink);
    }

    /// Waits until every client in `names` has subscribed (browsers: after their clock sync),
    /// at most `timeout`, watching `stop`. Returns the names still missing.
    pub fn wait_ready(
        &self,
        names: &[String],
        timeout: Duration,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Vec<String> {
        let deadline = std::time::Instant::now() + timeout;
        let mut ready = self.service.ready.lock().expect("not poisoned");
        loop {
            let missing: Vec<String> = names
                .iter()
                .filter(|n| !ready.contains_key(*n))
                .cloned()
                .collect();
            let now = std::time::Instant::now();
            if missing.is_empty() || now >= deadline || stop.load(Ordering::Relaxed) {
                return missing;
            }
            let wait = (deadline - now).min(Duration::from_millis(20));
            ready = self
                .service
                .ready_changed
                .wait_timeout(ready, wait)
                .expect("not poisoned")
                .0;
        }
    }

    /// Ticks generated so far (all threads, warm-up included).
    pub fn generated(&self) -> u64 {
        self.service.generated.load(Ordering::Relaxed)
    }

    /// Reports of the connections that ended so far.
    pub fn ended_connections(&self) -> Vec<ConnReport> {
        self.service.finished.lock().expect("not poisoned").clone()
    }

    /// Stops every thread and returns what was measured.
    pub fn stop(mut self) -> ServerReport {
        self.pool.stop();
        let service = &self.service;
        ServerReport {
            connections: std::mem::take(&mut *service.finished.lock().expect("not poisoned")),
            send_lag: std::mem::take(&mut *service.send_lag.lock().expect("not poisoned")),
            generators_done_ns: {
                let (done, at) = *service.generators_done.lock().expect("not poisoned");
                (done >= service.settings.threads).then_some(at)
            },
            generated: service.generated.load(Ordering::Relaxed),
            counts: self.counts.snapshot(),
        }
    }
}

struct TickService {
    counts: Arc<Counts>,
    options: TickServerOptions,
    settings: Settings,
    schedule: tokio::sync::watch::Sender<Option<Schedule>>,
    /// The schedule's end; moved earlier by [`TickServer::end_at`].
    end_ns: AtomicU64,
    /// `(generators done, latest end)`.
    generators_done: Mutex<(usize, u64)>,
    ready: Mutex<BTreeMap<String, ()>>,
    ready_changed: Condvar,
    reports: Mutex<Option<std::sync::mpsc::Sender<(String, PageReport)>>>,
    finished: Mutex<Vec<ConnReport>>,
    send_lag: Mutex<HotHistogram>,
    generated: AtomicU64,
    anonymous: AtomicU64,
}

impl TickService {
    fn mark_ready(&self, name: &str) {
        self.ready
            .lock()
            .expect("not poisoned")
            .insert(name.to_string(), ());
        self.ready_changed.notify_all();
    }

    fn publish(&self, report: ConnReport) {
        keep(&mut self.finished.lock().expect("not poisoned"), report);
    }
}

/// Adds an ended connection's report to `finished`, which never holds more than
/// [`MAX_KEPT_REPORTS`]: beyond, the report is folded into the kept one of the same client
/// name, or into one for all others.
fn keep(finished: &mut Vec<ConnReport>, report: ConnReport) {
    if finished.len() < MAX_KEPT_REPORTS {
        finished.push(report);
        return;
    }
    const OTHERS: &str = "(earlier connections)";
    let kept = match finished.iter().position(|r| r.name == report.name) {
        Some(i) => i,
        None => match finished.iter().position(|r| r.name == OTHERS) {
            Some(i) => i,
            None => {
                // Room for the catch-all: fold the oldest report into it.
                let mut others = finished.remove(0);
                others.name = OTHERS.into();
                finished.push(others);
                finished.len() - 1
            }
        },
    };
    finished[kept].absorb(report);
}

/// One server thread's state.
struct Local {
    conns: RefCell<Vec<Rc<Conn>>>,
    schedule: Cell<Option<Schedule>>,
    /// The generator finished its schedule.
    done: Cell<bool>,
    /// A queue made room (immediate pacing waits for it) or a client subscribed.
    room: tokio::sync::Notify,
    send_lag: RefCell<HotHistogram>,
    /// Ticks queued on this thread's connections.
    queued: Cell<usize>,
    /// This thread's share of [`SERVER_TICK_BUDGET`].
    budget: usize,
    /// The ticks of the current round, `(seq, intended_ns, made_ns)` (reused).
    made: RefCell<Vec<(u64, u64, u64)>>,
    /// When the schedule called for each measured tick of the round (reused).
    scheduled: RefCell<Vec<u64>>,
    /// The paced generator, once the schedule is known (its task and, when a tick is late,
    /// the connections' tasks make ticks with it).
    generator: RefCell<Option<Generator>>,
    /// When the generator's next tick is due (`u64::MAX`: none, or immediate pacing).
    next_due_ns: Cell<u64>,
    /// The latest ticks' binary frames, encoded once for all clients.
    frames: RefCell<FrameRing>,
}

/// A binary tick as one WebSocket frame: a two-byte header and the 36-byte tick.
const BINARY_FRAME_BYTES: usize = 2 + BINARY_TICK_BYTES;
/// Where the send stamp sits in a binary frame (after the header, `seq` and `intended_ns`).
const SENT_AT: usize = 2 + 16;
/// Ticks whose frames [`FrameRing`] keeps (3 MiB a server thread).
const FRAME_RING: usize = 1 << 16;

/// The binary frames of a thread's latest ticks, encoded once as they are made: a client's
/// writer copies a tick's frame and stamps its batch's send time in it. At 1000 clients ×
/// 10k ticks/s, making each tick again for each client (its symbol and price) and encoding it
/// was a fifth of the server's CPU. A tick older than the ring (a client far behind) and a JSON
/// client's are encoded for that client.
struct FrameRing {
    /// Each slot's sequence number (`u64::MAX`: empty) and frame.
    slots: Vec<(u64, [u8; BINARY_FRAME_BYTES])>,
    /// Where a frame is encoded (reused).
    scratch: BytesMut,
}

impl FrameRing {
    fn new() -> FrameRing {
        FrameRing {
            slots: vec![(u64::MAX, [0; BINARY_FRAME_BYTES]); FRAME_RING],
            scratch: BytesMut::with_capacity(BINARY_FRAME_BYTES),
        }
    }

    fn put(&mut self, tick: &Tick) {
        self.scratch.clear();
        put_tick_frame(&mut self.scratch, OPCODE_BINARY, tick, TickFormat::Binary);
        let slot = &mut self.slots[tick.seq as usize % FRAME_RING];
        slot.0 = tick.seq;
        slot.1.copy_from_slice(&self.scratch);
    }

    #[inline]
    fn get(&self, seq: u64) -> Option<&[u8; BINARY_FRAME_BYTES]> {
        let slot = &self.slots[seq as usize % FRAME_RING];
        (slot.0 == seq).then_some(&slot.1)
    }
}

/// Where a thread's paced generator stands in its schedule.
struct Generator {
    pacer: Pacer,
    clock: MonotonicClock,
    seq: u64,
}

/// One client connection, shared by its task and the generator.
struct Conn {
    name: String,
    format: TickFormat,
    st: RefCell<ConnState>,
}

#[derive(Default)]
struct ConnState {
    /// Counts per second are kept ([`TickServerOptions::per_second`]).
    per_second: bool,
    subscribed: bool,
    /// When the client last sent a message (or connected), ns.
    heard_ns: u64,
    /// `(seq, intended_ns)` of ticks waiting to be written.
    queue: VecDeque<(u64, u64)>,
    /// The generator wants the connection closed (policy `disconnect`, overflow).
    closing: Option<String>,
    waker: Option<Waker>,
    report: ConnReport,
}

/// What one generated tick did for one client.
enum Offer {
    Queued,
    Dropped,
    Close(String),
}

impl ConnState {
    /// Queues a whole round (`measured` of them in the window), counted as [`ConnState::offer`]
    /// counts each tick it queues.
    fn queue_round(&mut self, made: &[(u64, u64, u64)], measured: u64, schedule: &Schedule) {
        self.queue
            .extend(made.iter().map(|&(seq, intended_ns, _)| (seq, intended_ns)));
        let r = &mut self.report;
        r.generated_all += made.len() as u64;
        r.counts.generated += measured;
        r.counts.queued += measured;
        r.counts.queue_peak = r.counts.queue_peak.max(self.queue.len() as u64);
        if self.per_second {
            for &(_, intended_ns, _) in made.iter().filter(|t| schedule.measures(t.1)) {
                bump(&mut r.per_second, schedule.second(intended_ns), 0);
            }
        }
    }

    /// Offers a generated tick under the slow-client policy.
    #[inline]
    fn offer(
        &mut self,
        seq: u64,
        intended_ns: u64,
        schedule: &Schedule,
        now_ns: u64,
        config: &TickServerConfig,
        over_budget: bool,
    ) -> Offer {
        let r = &mut self.report;
        r.generated_all += 1;
        let measured = schedule.measures(intended_ns);
        if measured {
            r.counts.generated += 1;
            if self.per_second {
                bump(&mut r.per_second, schedule.second(intended_ns), 0);
            }
        }
        let full = self.queue.len() >= config.queue || (over_budget && !self.queue.is_empty());
        let outcome = if !full {
            Offer::Queued
        } else {
            match config.policy {
                SlowClientPolicy::DropOldest => {
                    let (_, evicted) = self.queue.pop_front().expect("full queue");
                    r.dropped_all += 1;
                    if schedule.measures(evicted) {
                        r.counts.dropped += 1;
                        if self.per_second {
                            bump(&mut r.per_second, schedule.second(now_ns), 1);
                        }
                    }
                    Offer::Queued
                }
                SlowClientPolicy::DropNewest => Offer::Dropped,
                SlowClientPolicy::Disconnect => Offer::Close(format!(
                    "the server disconnected it (policy `disconnect`): its send queue held {} ticks",
                    config.queue
                )),
                SlowClientPolicy::Unbounded => Offer::Close(format!(
                    "the server disconnected it: its `unbounded` queue reached {} ticks (at most {} ticks, 16 B each, wait on the whole server)",
                    self.queue.len(),
                    SERVER_TICK_BUDGET
                )),
            }
        };
        match outcome {
            Offer::Queued => {
                self.queue.push_back((seq, intended_ns));
                if measured {
                    r.counts.queued += 1;
                }
                r.counts.queue_peak = r.counts.queue_peak.max(self.queue.len() as u64);
            }
            Offer::Dropped => {
                r.dropped_all += 1;
                if measured {
                    r.counts.dropped += 1;
                    if self.per_second {
                        bump(&mut r.per_second, schedule.second(now_ns), 1);
                    }
                }
            }
            Offer::Close(_) => {}
        }
        outcome
    }
}

#[inline]
fn bump(per_second: &mut Vec<[u64; 3]>, second: usize, what: usize) {
    add(per_second, second, what, 1);
}

#[inline]
fn add(per_second: &mut Vec<[u64; 3]>, second: usize, what: usize, n: u64) {
    if per_second.len() <= second {
        // Once a second at most: the only allocation on this path.
        per_second.resize(second + 1, [0; 3]);
    }
    per_second[second][what] += n;
}

impl Service for TickService {
    type Local = Local;

    fn local(self: &Arc<Self>, _index: usize) -> Rc<Local> {
        Rc::new(Local {
            conns: RefCell::new(Vec::new()),
            schedule: Cell::new(None),
            done: Cell::new(false),
            room: tokio::sync::Notify::new(),
            send_lag: RefCell::new(HotHistogram::new()),
            queued: Cell::new(0),
            budget: SERVER_TICK_BUDGET / self.settings.threads.max(1),
            made: RefCell::new(Vec::with_capacity(MAX_TICKS_PER_ROUND)),
            scheduled: RefCell::new(Vec::with_capacity(MAX_TICKS_PER_ROUND)),
            generator: RefCell::new(None),
            next_due_ns: Cell::new(u64::MAX),
            frames: RefCell::new(FrameRing::new()),
        })
    }

    fn background(self: &Arc<Self>, local: Rc<Local>) -> LocalFuture {
        Box::pin(generate(self.clone(), local))
    }

    fn connection(
        self: &Arc<Self>,
        local: Rc<Local>,
        upgrade: Upgrade,
        ws: ServerWs,
    ) -> LocalFuture {
        Box::pin(serve(self.clone(), local, upgrade, ws))
    }

    fn page(&self, path: &str) -> Option<(&'static str, &'static str)> {
        match path {
            "/" | "/index.html" => Some(("text/html; charset=utf-8", PAGE_HTML)),
            "/ticks.js" => Some(("text/javascript; charset=utf-8", PAGE_JS)),
            _ => None,
        }
    }

    fn finish(self: &Arc<Self>, local: Rc<Local>) {
        for conn in local.conns.borrow().iter() {
            self.publish(conn.st.borrow().report.clone());
        }
        let lag = local.send_lag.borrow();
        let mut total = self.send_lag.lock().expect("not poisoned");
        total.add(&lag);
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }
}

/// The generator of one thread: waits for the schedule, then makes every tick due and offers
/// it to each subscribed client of this thread.
async fn generate(service: Arc<TickService>, local: Rc<Local>) {
    let mut watch = service.schedule.subscribe();
    let schedule = match watch.wait_for(|s| s.is_some()).await {
        Ok(s) => s.expect("waited for it"),
        Err(_) => return,
    };
    local.schedule.set(Some(schedule));
    wake_all(&local);
    let options = &service.options;
    let timer = match AsyncTimer::new() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("msgbench: tick generator cannot create its timer: {e}");
            return finish_generator(&service, &local);
        }
    };
    let clock = MonotonicClock::new(options.spin_ns);
    let mut pacer = Pacer::new(options.pacing, schedule.t0_ns, options.seed);
    let paced = pacer.upcoming_ns().is_some();
    *local.generator.borrow_mut() = Some(Generator {
        pacer,
        clock,
        seq: 0,
    });
    loop {
        let end_ns = service.end_ns.load(Ordering::Relaxed);
        let now = clock.now_ns();
        // Connections' tasks make late ticks too: the generator is borrowed only in between.
        let upcoming = local
            .generator
            .borrow_mut()
            .as_mut()
            .and_then(|g| g.pacer.upcoming_ns());
        local.next_due_ns.set(match upcoming {
            Some(due) if due < end_ns => due,
            _ => u64::MAX,
        });
        let made = match upcoming {
            Some(due) if due >= end_ns => break,
            Some(due) if due > now => {
                if !has_subscribers(&local) {
                    // Nobody listens (a standalone server between clients): no spinning, wake
                    // once a millisecond and let the schedule run on.
                    timer.sleep_until(due.max(now + IDLE_WAKE_NS)).await;
                } else if local.queued.get() > 0 {
                    // Writers have work: spinning would hold them up (a tick every 100 µs
                    // with 80 µs spun left them a fifth of the thread); the timer's tens of
                    // µs late, and the writers' tasks make a tick later than `CATCH_UP_NS`.
                    timer.sleep_until(due).await;
                } else if due - now > options.spin_ns {
                    timer.sleep_until(due - options.spin_ns).await;
                } else {
                    // The last µs are spun: a timer wakes tens of µs late.
                    while clock.now_ns() < due {
                        std::hint::spin_loop();
                    }
                }
                continue;
            }
            Some(_) => make_due(&service, &local, &schedule, end_ns),
            None if paced => break,
            None if now >= end_ns => break,
            None => {
                // Immediate: as fast as the slowest client takes them.
                // Batches of at most half a queue: a queue that has room for one never
                // overflows (and stays short: latency, not a backlog).
                let batch = options
                    .config
                    .write_batch
                    .min(options.config.queue / 2)
                    .max(1);
                if !has_room(&local, batch) {
                    let room = local.room.notified();
                    let _ = tokio::time::timeout(Duration::from_millis(1), room).await;
                    continue;
                }
                let round = (&*service, &*local, &schedule);
                let mut generator = local.generator.borrow_mut();
                let g = generator.as_mut().expect("set above");
                make(round, g, batch, |_| true)
            }
        };
        if made > 0 {
            wake_all(&local);
        }
        tokio::task::yield_now().await;
    }
    local.next_due_ns.set(u64::MAX);
    finish_generator(&service, &local);
}

/// Makes the ticks due by now when the first of them is more than [`CATCH_UP_NS`] late: called
/// by each connection's task before it writes, so the schedule holds however many writes stand
/// between the generator's task and its turn. Cheap when nothing is late: a clock read.
fn catch_up(service: &TickService, local: &Local) {
    let due = local.next_due_ns.get();
    if due == u64::MAX || crate::clock::now_ns() < due.saturating_add(CATCH_UP_NS) {
        return;
    }
    let Some(schedule) = local.schedule.get() else {
        return;
    };
    let end_ns = service.end_ns.load(Ordering::Relaxed);
    if make_due(service, local, &schedule, end_ns) > 0 {
        wake_all(local);
    }
}

fn finish_generator(service: &TickService, local: &Local) {
    local.done.set(true);
    wake_all(local);
    let mut done = service.generators_done.lock().expect("not poisoned");
    done.0 += 1;
    done.1 = done.1.max(crate::clock::now_ns());
}

/// True when some client of this thread is subscribed.
fn has_subscribers(local: &Local) -> bool {
    local
        .conns
        .borrow()
        .iter()
        .any(|c| c.st.borrow().subscribed)
}

/// True when every subscribed client has room for a write batch (and there is one).
fn has_room(local: &Local, batch: usize) -> bool {
    let conns = local.conns.borrow();
    let mut any = false;
    for c in conns.iter() {
        let st = c.st.borrow();
        if st.subscribed && st.closing.is_none() {
            any = true;
            if st.queue.len() >= batch {
                return false;
            }
        }
    }
    any
}

/// Makes every tick due by now (at most a round's worth); returns how many, and sets when the
/// next one is due.
fn make_due(service: &TickService, local: &Local, schedule: &Schedule, end_ns: u64) -> usize {
    let Ok(mut generator) = local.generator.try_borrow_mut() else {
        return 0;
    };
    let Some(g) = generator.as_mut() else {
        return 0;
    };
    let now = g.clock.now_ns();
    let due = |pacer: &mut Pacer| {
        pacer
            .upcoming_ns()
            .is_some_and(|due| due <= now && due < end_ns)
    };
    let round = (service, local, schedule);
    let made = make(round, g, MAX_TICKS_PER_ROUND, due);
    local.next_due_ns.set(match g.pacer.upcoming_ns() {
        Some(due) if due < end_ns => due,
        _ => u64::MAX,
    });
    made
}

/// Makes up to `count` ticks from the pacer, while `more` says so, and offers them to every
/// subscribed client; returns how many.
fn make(
    (service, local, schedule): (&TickService, &Local, &Schedule),
    Generator { pacer, clock, seq }: &mut Generator,
    count: usize,
    mut more: impl FnMut(&mut Pacer) -> bool,
) -> usize {
    let mut made = local.made.borrow_mut();
    let mut scheduled = local.scheduled.borrow_mut();
    let mut frames = local.frames.borrow_mut();
    let symbols = service.options.symbols;
    made.clear();
    scheduled.clear();
    while made.len() < count && more(pacer) {
        let slot = pacer.next(&*clock);
        if schedule.measures(slot.intended_ns) {
            scheduled.push(slot.scheduled_ns);
        }
        made.push((*seq, slot.intended_ns, slot.actual_ns));
        frames.put(&Tick::at(*seq, slot.intended_ns, symbols));
        *seq += 1;
    }
    drop(frames);
    offer_all(service, local, schedule, &made);
    // A tick is sent, as far as the generator goes, once every client has it queued: its lag
    // runs to the end of the round's offers (every tick of the round waits for all of them).
    let offered_ns = clock.now_ns();
    let mut lag = local.send_lag.borrow_mut();
    for &s in scheduled.iter() {
        lag.record(offered_ns.saturating_sub(s));
    }
    service
        .generated
        .fetch_add(made.len() as u64, Ordering::Relaxed);
    made.len()
}

/// Offers a round's ticks to every subscribed client, client by client: one look at each
/// client's state per round rather than per tick (at 1000 clients that per-tick look was a
/// quarter of the server's CPU). A client with room for the whole round takes it at once.
fn offer_all(service: &TickService, local: &Local, schedule: &Schedule, made: &[(u64, u64, u64)]) {
    let config = &service.options.config;
    let measured = made.iter().filter(|t| schedule.measures(t.1)).count() as u64;
    for c in local.conns.borrow().iter() {
        let mut st = c.st.borrow_mut();
        if !st.subscribed || st.closing.is_some() {
            continue;
        }
        // Room for every tick of the round, under the server's budget all along: no tick of
        // it meets the slow-client policy (`offer` would queue each).
        if st.queue.len() + made.len() <= config.queue
            && local.queued.get() + made.len() <= local.budget
        {
            st.queue_round(made, measured, schedule);
            local.queued.set(local.queued.get() + made.len());
            continue;
        }
        for &(seq, intended_ns, made_ns) in made {
            let over_budget = local.queued.get() >= local.budget;
            let before = st.queue.len();
            let offer = st.offer(seq, intended_ns, schedule, made_ns, config, over_budget);
            local
                .queued
                .set((local.queued.get() + st.queue.len()).saturating_sub(before));
            if let Offer::Close(why) = offer {
                st.closing = Some(why);
                break;
            }
        }
    }
}

fn wake_all(local: &Local) {
    for c in local.conns.borrow().iter() {
        if let Some(w) = c.st.borrow_mut().waker.take() {
            w.wake();
        }
    }
}

/// Appends `tick` as one WebSocket frame, encoded in place behind a two-byte header (a tick is
/// shorter than 126 bytes; a longer one is moved behind the longer header it needs).
fn put_tick_frame(out: &mut BytesMut, opcode: u8, tick: &Tick, format: TickFormat) {
    let start = out.len();
    out.extend_from_slice(&[0x80 | opcode, 0]);
    tick.encode(format, out);
    let len = out.len() - start - 2;
    if len < 126 {
        out[start + 1] = len as u8;
    } else {
        let payload = out.split_off(start + 2);
        out.truncate(start);
        put_server_frame(out, opcode, &payload);
    }
}

/// How a connection ended.
enum Ended {
    /// The client closed it (normal after the end of the stream).
    Peer,
    /// The client broke the protocol or sent an oversized message.
    Protocol(String),
    /// The socket failed.
    Io(String),
    /// The slow-client policy closed it.
    Policy(String),
    /// It neither subscribed nor sent anything for the idle timeout.
    Idle,
}

/// Resolves once `conn` has been unsubscribed and silent for `idle_ns`: it holds a connection
/// slot and gets nothing (a subscribed client is never idle). One timer per connection, armed
/// for when it could next be idle.
async fn idle(conn: &Conn, idle_ns: u64) {
    loop {
        let (subscribed, heard_ns) = {
            let st = conn.st.borrow();
            (st.subscribed, st.heard_ns)
        };
        let now = crate::clock::now_ns();
        let idle_at = heard_ns.saturating_add(idle_ns);
        if !subscribed && now >= idle_at {
            return;
        }
        let wait = if subscribed { idle_ns } else { idle_at - now };
        tokio::time::sleep(std::time::Duration::from_nanos(wait)).await;
    }
}

/// Serves one client: reads its acknowledgements and control messages, writes its queue.
async fn serve(service: Arc<TickService>, local: Rc<Local>, upgrade: Upgrade, mut ws: ServerWs) {
    let name = upgrade
        .param("client")
        .map(String::from)
        .unwrap_or_else(|| {
            format!(
                "anonymous-{}",
                service.anonymous.fetch_add(1, Ordering::Relaxed)
            )
        });
    let format = match upgrade.param("format") {
        Some("json") => TickFormat::Json,
        Some("binary") => TickFormat::Binary,
        _ => service.options.format,
    };
    let conn = Rc::new(Conn {
        name: name.clone(),
        format,
        st: RefCell::new(ConnState {
            per_second: service.options.per_second,
            heard_ns: crate::clock::now_ns(),
            report: ConnReport {
                name: name.clone(),
                format: Some(format),
                ..Default::default()
            },
            ..Default::default()
        }),
    });
    local.conns.borrow_mut().push(conn.clone());
    if upgrade.param("wait") != Some("1") {
        conn.st.borrow_mut().subscribed = true;
        service.mark_ready(&name);
        local.room.notify_one();
    }
    let mut io = Writer::new(service.options.config.write_batch);
    let served = std::future::poll_fn(|cx| io.poll(cx, &service, &local, &conn, &mut ws));
    let ended = match service.options.config.idle_timeout_ns {
        0 => served.await,
        idle_ns => tokio::select! {
            ended = served => ended,
            _ = idle(&conn, idle_ns) => Ended::Idle,
        },
    };
    let now = crate::clock::now_ns();
    let policy_close = matches!(ended, Ended::Policy(_));
    let reason = match ended {
        Ended::Peer => None,
        Ended::Protocol(e) => {
            service
                .counts
                .protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            Some(format!("the server closed it: it sent a bad message ({e})"))
        }
        Ended::Io(e) => Some(format!("its socket failed ({e})")),
        Ended::Policy(why) => Some(why),
        Ended::Idle => {
            service.counts.idle_closed.fetch_add(1, Ordering::Relaxed);
            Some("the server closed it: it neither subscribed nor sent anything for the idle timeout".into())
        }
    };
    // A client that closes after the stream ended is done, not cut short.
    let cut_short = !(local.done.get() && conn.st.borrow().queue.is_empty());
    {
        // Recorded now: if the server stops during the goodbye below, this is what it publishes.
        let mut st = conn.st.borrow_mut();
        st.subscribed = false;
        local
            .queued
            .set(local.queued.get().saturating_sub(st.queue.len()));
        st.queue.clear();
        if let Some(r) = reason.or_else(|| cut_short.then(|| "the client closed it".to_string())) {
            st.report.closed = Some((r, now));
        }
    }
    if policy_close {
        // Say why behind what is already written; a client that reads no more gets a reset.
        let close = Message::close(
            Some(tokio_websockets::CloseCode::SERVICE_OVERLOAD),
            "slow client: its send queue overflowed",
        );
        let goodbye = async {
            // A tick frame half written is finished first: the close must not cut into it.
            if std::future::poll_fn(|cx| io.write_out(cx, &mut ws))
                .await
                .is_err()
            {
                return Ok(());
            }
            ws.send(close).await?;
            // Read on until the client answers the close: closing with its acks unread would
            // reset the connection and throw away what it has not read yet.
            while let Some(Ok(_)) = ws.next().await {}
            Ok::<(), tokio_websockets::Error>(())
        };
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, goodbye).await;
    }
    local.conns.borrow_mut().retain(|c| !Rc::ptr_eq(c, &conn));
    service.publish(conn.st.borrow().report.clone());
    local.room.notify_one();
}

/// The write side of one connection, and what it knows of its progress.
///
/// Ticks are framed here and written straight to the socket, one write per batch, rather than
/// handed to tokio-websockets one `Message` each: at 1000 clients × 10k ticks/s a `perf` of
/// the server put ~45 % of its CPU in the per-message path (splitting and freezing a `Bytes`
/// per tick, queueing and framing it, gathering the frames for the write), next to 23 % making
/// and queueing the ticks. Control messages (the window, the end, pongs, a close) still go
/// through tokio-websockets; the two never interleave: its queue is flushed before tick frames
/// are written, and nothing is read (so no pong is queued) while tick frames are half written.
struct Writer {
    batch: usize,
    /// The batch's tick frames, as they go on the wire.
    out: BytesMut,
    /// How much of `out` the socket has taken.
    out_written: usize,
    /// Frames fed but not yet flushed.
    unflushed: bool,
    /// Measured ticks among them.
    unflushed_measured: u64,
    /// Warm-up ticks among them.
    unflushed_warmup: u64,
    window_sent: bool,
    end_sent: bool,
}

impl Writer {
    fn new(batch: usize) -> Writer {
        Writer {
            batch,
            out: BytesMut::new(),
            out_written: 0,
            unflushed: false,
            unflushed_measured: 0,
            unflushed_warmup: 0,
            window_sent: false,
            end_sent: false,
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        service: &TickService,
        local: &Local,
        conn: &Conn,
        ws: &mut ServerWs,
    ) -> Poll<Ended> {
        // The generator wakes this task through `waker` (new ticks, a policy close), also while
        // a flush is pending: keep the current one there whatever this poll returns.
        {
            let mut st = conn.st.borrow_mut();
            if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.waker = Some(cx.waker().clone());
            }
        }
        catch_up(service, local);
        // Tick frames half written go on first: nothing may come between their bytes (not a
        // pong, so nothing is read meanwhile). A client that reads nothing keeps them half
        // written: the slow-client policy closes it here (its close frame goes behind them:
        // see `serve`).
        if self.out_written < self.out.len() {
            if let Some(why) = conn.st.borrow_mut().closing.take() {
                return Poll::Ready(Ended::Policy(why));
            }
            match self.write_out(cx, ws) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(e),
                Poll::Pending => return Poll::Pending,
            }
        }
        // Everything the client sent: acknowledgements, pings, reports. After a bounded number
        // their answers (pongs, also those tokio-websockets queues for WebSocket pings) are
        // flushed before more is read.
        let mut more_to_read = false;
        for read in 0..=READS_PER_FLUSH {
            if read == READS_PER_FLUSH {
                more_to_read = true;
                break;
            }
            match Pin::new(&mut *ws).poll_next(cx) {
                Poll::Ready(Some(Ok(message))) => {
                    self.unflushed = true;
                    if let Err(e) = self.on_message(service, local, conn, ws, message) {
                        return Poll::Ready(e);
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(ended_by(e)),
                Poll::Ready(None) => return Poll::Ready(Ended::Peer),
                Poll::Pending => break,
            }
        }

        if let Some(why) = conn.st.borrow_mut().closing.take() {
            return Poll::Ready(Ended::Policy(why));
        }
        for _ in 0..MAX_BATCHES_PER_POLL {
            // A batch's write can take tens of µs: the schedule is looked at between them.
            catch_up(service, local);
            if self.unflushed {
                match Pin::new(&mut *ws).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.flushed(local, conn),
                    Poll::Ready(Err(e)) => return Poll::Ready(ended_by(e)),
                    // The socket is full: the flush woke-up registration brings us back.
                    Poll::Pending => return Poll::Pending,
                }
            }
            if let Err(e) = self.feed(service, local, conn, ws) {
                return Poll::Ready(e);
            }
            match self.write_out(cx, ws) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(e),
                // The socket is full: its write registration brings us back.
                Poll::Pending => return Poll::Pending,
            }
            if !self.unflushed {
                // Nothing to write: the generator wakes us for new ticks.
                conn.st.borrow_mut().waker = Some(cx.waker().clone());
                if more_to_read {
                    // Reading stopped with messages left and no read readiness registered
                    // for them: come back now that the answers are flushed.
                    cx.waker().wake_by_ref();
                }
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Feeds the next batch of ticks (and due control messages) into the WebSocket writer.
    fn feed(
        &mut self,
        service: &TickService,
        local: &Local,
        conn: &Conn,
        ws: &mut ServerWs,
    ) -> Result<(), Ended> {
        let Some(schedule) = local.schedule.get() else {
            return Ok(());
        };
        if !self.window_sent {
            self.window_sent = true;
            let window = ServerMessage::Window {
                start_ns: schedule.measure_start_ns,
                end_ns: schedule.end_ns,
            };
            self.send(ws, Message::text(window.to_json()))?;
        }
        let sent_ns = crate::clock::now_ns();
        let symbols = service.options.symbols;
        let opcode = match conn.format {
            TickFormat::Binary => OPCODE_BINARY,
            TickFormat::Json => OPCODE_TEXT,
        };
        let mut st = conn.st.borrow_mut();
        let n = st.queue.len().min(self.batch);
        local.queued.set(local.queued.get().saturating_sub(n));
        let mut measured = 0;
        let mut warmup = 0;
        let frames = local.frames.borrow();
        let binary = conn.format == TickFormat::Binary;
        self.out.reserve(n * BINARY_FRAME_BYTES);
        for _ in 0..n {
            let (seq, intended_ns) = st.queue.pop_front().expect("counted");
            measured += u64::from(schedule.measures(intended_ns));
            warmup += u64::from(intended_ns < schedule.measure_start_ns);
            match frames.get(seq).filter(|_| binary) {
                Some(frame) => {
                    let at = self.out.len();
                    self.out.extend_from_slice(frame);
                    self.out[at + SENT_AT..at + SENT_AT + 8]
                        .copy_from_slice(&sent_ns.to_le_bytes());
                }
                None => {
                    let mut tick = Tick::at(seq, intended_ns, symbols);
                    tick.sent_ns = sent_ns;
                    put_tick_frame(&mut self.out, opcode, &tick, conn.format);
                }
            }
        }
        self.unflushed |= n > 0;
        self.unflushed_measured += measured;
        self.unflushed_warmup += warmup;
        if n == 0 && local.done.get() && !self.end_sent && st.closing.is_none() {
            self.end_sent = true;
            let end = ServerMessage::End {
                generated: st.report.generated_all,
            };
            drop(st);
            self.send(ws, Message::text(end.to_json()))?;
        }
        Ok(())
    }

    /// Writes the tick frames in `out` to the socket, behind what tokio-websockets queued
    /// (flushed first); ready at once when there are none.
    fn write_out(&mut self, cx: &mut Context<'_>, ws: &mut ServerWs) -> Poll<Result<(), Ended>> {
        if self.out_written == self.out.len() {
            return Poll::Ready(Ok(()));
        }
        // Its frames and its write buffer go first (a no-op when both are empty).
        match Pin::new(&mut *ws).poll_flush(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(ended_by(e))),
            Poll::Pending => return Poll::Pending,
        }
        // Its write buffer is empty now: the frames go to the socket without a copy.
        let socket = ws.get_mut().get_mut();
        while self.out_written < self.out.len() {
            match Pin::new(&mut *socket).poll_write(cx, &self.out[self.out_written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(Ended::Io("the socket took no more bytes".into())))
                }
                Poll::Ready(Ok(n)) => self.out_written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(Ended::Io(e.to_string()))),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.clear();
        self.out_written = 0;
        Poll::Ready(Ok(()))
    }

    fn send(&mut self, ws: &mut ServerWs, message: Message) -> Result<(), Ended> {
        drop_on_error(Pin::new(&mut *ws).start_send(message))?;
        self.unflushed = true;
        Ok(())
    }

    fn flushed(&mut self, local: &Local, conn: &Conn) {
        self.unflushed = false;
        let measured = std::mem::take(&mut self.unflushed_measured);
        let warmup = std::mem::take(&mut self.unflushed_warmup);
        let mut st = conn.st.borrow_mut();
        st.report.written_warmup += warmup;
        if measured > 0 {
            st.report.counts.written += measured;
            if let Some(s) = local.schedule.get().filter(|_| st.per_second) {
                add(
                    &mut st.report.per_second,
                    s.second(crate::clock::now_ns()),
                    2,
                    measured,
                );
            }
        }
        drop(st);
        local.room.notify_one();
    }

    fn on_message(
        &mut self,
        service: &TickService,
        local: &Local,
        conn: &Conn,
        ws: &mut ServerWs,
        message: Message,
    ) -> Result<(), Ended> {
        conn.st.borrow_mut().heard_ns = crate::clock::now_ns();
        if message.is_close() {
            // Nothing may follow its answer (RFC 6455 §5.5.1), not even tick frames written
            // by hand: the connection is done.
            return Err(Ended::Peer);
        }
        if message.is_ping() || message.is_pong() {
            return Ok(());
        }
        let Some(text) = message.as_text() else {
            return Err(Ended::Protocol(
                "a binary message; clients send JSON text".into(),
            ));
        };
        let parsed: ClientMessage = serde_json::from_str(text)
            .map_err(|e| Ended::Protocol(format!("not a control message: {e}")))?;
        match parsed {
            ClientMessage::Ack { processed } => {
                let mut st = conn.st.borrow_mut();
                // Acks count every tick; warm-up ticks come first in the stream.
                let measured = processed.saturating_sub(st.report.written_warmup);
                st.report.counts.acked = st.report.counts.acked.max(measured);
            }
            ClientMessage::Ping { t } => {
                let pong = ServerMessage::Pong {
                    t,
                    now_ns: crate::clock::now_ns(),
                };
                self.send(ws, Message::text(pong.to_json()))?;
            }
            ClientMessage::Subscribe => {
                conn.st.borrow_mut().subscribed = true;
                service.mark_ready(&conn.name);
                local.room.notify_one();
            }
            ClientMessage::Clock {
                resolution_ns,
                rtt_ns,
            } => {
                conn.st.borrow_mut().report.page_clock = Some(PageClock {
                    resolution_ns: resolution_ns.max(0.0) as u64,
                    sync_rtt_ns: rtt_ns.max(0.0) as u64,
                });
            }
            ClientMessage::Report(report) => {
                if let Some(sink) = service.reports.lock().expect("not poisoned").as_ref() {
                    let _ = sink.send((conn.name.clone(), report));
                }
            }
        }
        Ok(())
    }
}

fn drop_on_error(r: Result<(), tokio_websockets::Error>) -> Result<(), Ended> {
    r.map_err(ended_by)
}

fn ended_by(e: tokio_websockets::Error) -> Ended {
    match e {
        tokio_websockets::Error::Io(io) => Ended::Io(io.to_string()),
        tokio_websockets::Error::AlreadyClosed => Ended::Peer,
        other => Ended::Protocol(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_encoded_once_and_stamped_is_the_frame_encoded_for_the_client() {
        let mut ring = FrameRing::new();
        for seq in [0, 1, 77, FRAME_RING as u64 + 77] {
            ring.put(&Tick::at(seq, 1_000 + seq, 50));
        }
        // The slot of 77 now holds FRAME_RING + 77: asked for 77, the ring has nothing.
        assert!(ring.get(77).is_none());
        for seq in [0, 1, FRAME_RING as u64 + 77] {
            let mut stamped = ring.get(seq).expect("kept").to_vec();
            stamped[SENT_AT..SENT_AT + 8].copy_from_slice(&4_242u64.to_le_bytes());
            let mut tick = Tick::at(seq, 1_000 + seq, 50);
            tick.sent_ns = 4_242;
            let mut direct = BytesMut::new();
            put_tick_frame(&mut direct, OPCODE_BINARY, &tick, TickFormat::Binary);
            assert_eq!(stamped, &direct[..], "seq {seq}");
        }
    }

    fn report(name: &str, generated: u64) -> ConnReport {
        let mut r = ConnReport {
            name: name.into(),
            ..Default::default()
        };
        r.counts.generated = generated;
        r.generated_all = generated;
        r
    }

    #[test]
    fn ended_connection_reports_stay_bounded_and_lose_no_count() {
        // Before: every tick connection ever made kept its report (~7 KB; 152 MB after 15k).
        let mut finished = Vec::new();
        for i in 0..3 * MAX_KEPT_REPORTS {
            // Half come back under the same name (reconnections), half are new.
            let name = if i % 2 == 0 {
                format!("client-{}", i % 8)
            } else {
                format!("anonymous-{i}")
            };
            keep(&mut finished, report(&name, 1));
        }
        assert!(finished.len() <= MAX_KEPT_REPORTS);
        let total: u64 = finished.iter().map(|r| r.counts.generated).sum();
        assert_eq!(
            total,
            3 * MAX_KEPT_REPORTS as u64,
            "a folded count was lost"
        );
        assert!(finished.iter().any(|r| r.name == "(earlier connections)"));
    }
}

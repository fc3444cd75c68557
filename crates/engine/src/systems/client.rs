//! The request/response driver shared by `rpc` and `redis` (and any protocol with a [`Wire`]).
//!
//! `threads` event loops (mio, one per thread, optionally pinned), each owning `connections`
//! connections. Every connection has its own pacer (rate pacing splits the total rate over the
//! connections, staggered so their union stays even) and a window of at most `window` requests
//! in flight. A request that is due while the window is full waits (`block`: the wait is
//! latency, since latency counts from the *intended* send time), is skipped (`skip`), or is
//! skipped and halves the connection's rate (`adapt`). All requests due at one moment go out in
//! one `write` (a pipelined batch), yet each keeps its own intended time, so a batch's requests
//! never share one latency figure.
//!
//! A response is matched to its request by id (protocols that carry one) or by order (Redis).
//! A timeout, a closed connection or a protocol error fails every request in flight on that
//! connection (counted by kind in [`Faults`]) and then stops the run or reconnects
//! (`client.on_error`). The hot path allocates nothing: buffers, flight tables and histograms
//! are sized before the run.
use super::{EngineError, RunContext};
use crate::affinity::pin_current_thread;
use crate::clock::{lower_timer_slack, Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::net::timer::Timer;
use crate::pacer::Pacer;
use crate::recorder::{Collector, Recorder};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use msgbench_model::client::{ClientConfig, OnError, WindowFull};
use msgbench_model::result::{Faults, ThreadCpu};
use msgbench_model::scenario::{Pacing, Scenario};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

const TIMER: Token = Token(usize::MAX - 1);
/// Longest a loop sleeps without looking at the stop flag.
const STOP_CHECK_NS: u64 = 20_000_000;
/// Lead time for every thread to be ready before the schedule starts.
const START_LEAD_NS: u64 = 20_000_000;
/// Pause between reconnection attempts.
const RECONNECT_NS: u64 = 100_000_000;
/// `adapt`: rate added back per step without a full window, as a share of the target.
const ADAPT_STEP: f64 = 0.05;
/// `adapt`: length of that step.
const ADAPT_STEP_NS: u64 = 100_000_000;
/// `adapt`: lowest share of the target a connection slows down to.
const ADAPT_FLOOR: f64 = 1.0 / 1024.0;

/// One response, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Request id, when the protocol carries one (else responses come in request order).
    pub id: Option<u64>,
    /// Bytes it took.
    pub size: usize,
    /// False for an error reply (the request failed).
    pub ok: bool,
}

/// A protocol, as the driver needs it.
pub trait Wire: Send {
    /// Appends the request of operation class `class` with `id`, sent at `now_ns`.
    fn encode(&mut self, class: usize, id: u64, now_ns: u64, out: &mut Vec<u8>);
    /// Decodes the response at the start of `buf` (`Ok(None)`: incomplete).
    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String>;
}

/// What the driver measured besides the recording.
#[derive(Debug)]
pub struct DriverOutput {
    /// Merged recording.
    pub recording: crate::recorder::Recording,
    /// Measured window, ns.
    pub window_ns: u64,
    /// When it began (clock ns).
    pub measure_start_ns: u64,
    /// CPU of each driver thread over its measured window.
    pub threads: Vec<ThreadCpu>,
    /// Faults by kind.
    pub faults: Faults,
    /// True when Ctrl-C or an error stopped the run early.
    pub interrupted: bool,
    /// Why the run stopped early, when an error stopped it.
    pub stopped_by: Option<String>,
    /// CPU of the system under test over the measured window, seconds.
    pub sut_cpu_s: Option<f64>,
}

/// Everything threads share.
struct Shared<'a> {
    scenario: &'a Scenario,
    client: &'a ClientConfig,
    address: SocketAddr,
    shares: Vec<f64>,
    t0: u64,
    measure_start_ns: u64,
    end_ns: u64,
    drain_ns: u64,
    stop: &'a AtomicBool,
    /// First error that stops the run (`on_error = stop`).
    stopped_by: OnceLock<String>,
    /// Latest end of sending over threads.
    window_end_ns: AtomicU64,
}

impl Shared<'_> {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.stopped_by.get().is_some()
    }
}

/// Runs the driver against `address`. `make_wire(connection index)` builds each connection's
/// protocol state; `sut_cpu_ns` reads the system under test's CPU (called at the window's start
/// and end, from this thread).
pub fn drive<W: Wire>(
    scenario: &Scenario,
    client: &ClientConfig,
    address: SocketAddr,
    classes: usize,
    shares: Vec<f64>,
    make_wire: impl Fn(usize) -> W,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
    hint: &str,
) -> Result<DriverOutput, EngineError> {
    // Connect everything first, on this thread: a refused address fails the run before it
    // starts, with one clear message.
    let mut streams = Vec::with_capacity(client.total_connections());
    for _ in 0..client.total_connections() {
        streams.push(connect(address, Duration::from_secs(3)).map_err(|source| {
            EngineError::Connect {
                address: address.to_string(),
                source,
                hint: hint.to_string(),
            }
        })?);
    }
    let t0 = crate::clock::now_ns() + START_LEAD_NS;
    let measure_start_ns = t0 + scenario.run.warmup.as_nanos() as u64;
    let shared = Shared {
        scenario,
        client,
        address,
        shares,
        t0,
        measure_start_ns,
        end_ns: match (scenario.run.duration.is_zero(), scenario.run.operations) {
            (true, Some(_)) => u64::MAX,
            _ => measure_start_ns.saturating_add(scenario.run.duration.as_nanos() as u64),
        },
        drain_ns: scenario.run.drain_timeout.as_nanos() as u64,
        stop: &ctx.stop,
        stopped_by: OnceLock::new(),
        window_end_ns: AtomicU64::new(0),
    };
    let raw_cap = scenario.run.emit_latencies.unwrap_or(0) as usize / client.threads;
    let mut collector = Collector::new(classes, measure_start_ns, raw_cap);
    let mut loops = Vec::new();
    let mut streams = streams.into_iter();
    for t in 0..client.threads {
        let conns = (0..client.connections)
            .map(|c| {
                let index = t * client.connections + c;
                Conn::new(
                    streams.next().expect("one stream per connection"),
                    make_wire(index),
                    &shared,
                    index,
                )
            })
            .collect();
        loops.push(ThreadLoop {
            shared: &shared,
            index: t,
            conns,
            rec: collector.recorder(true),
            faults: Faults::default(),
            clock: MonotonicClock::new(client.spin_ns),
            budget: budget_share(scenario.run.operations, client.threads, t),
            attempts: 0,
        });
    }
    let collecting = collector.start(ctx.live.clone());
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let sut_window = Mutex::new((None, None));
    let outs = std::thread::scope(|s| {
        let handles: Vec<_> = loops
            .into_iter()
            .map(|l| {
                let done_tx = done_tx.clone();
                std::thread::Builder::new()
                    .name(format!("msgbench-client-{}", l.index))
                    .spawn_scoped(s, move || l.run(done_tx))
                    .expect("spawning a thread")
            })
            .collect();
        drop(done_tx);
        // Read the SUT's CPU at the window's edges: sleep to its start, then wait for every
        // thread to stop sending.
        let mut done = 0;
        while crate::clock::now_ns() < measure_start_ns && done < handles.len() {
            let left = measure_start_ns.saturating_sub(crate::clock::now_ns());
            if done_rx
                .recv_timeout(Duration::from_nanos(left.min(STOP_CHECK_NS)))
                .is_ok()
            {
                done += 1;
            }
        }
        let start_cpu = sut_cpu_ns();
        while done < handles.len() && done_rx.recv().is_ok() {
            done += 1;
        }
        *sut_window.lock().expect("not poisoned") = (start_cpu, sut_cpu_ns());
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    let mut threads = Vec::new();
    let mut faults = Faults::default();
    let mut failed = None;
    for out in outs {
        match out {
            Ok(Ok((cpu, f))) => {
                threads.push(cpu);
                faults.add(&f);
            }
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(EngineError::WorkerPanicked("client")),
        }
    }
    let recording = collecting
        .join()
        .map_err(|_| EngineError::WorkerPanicked("collector"))?;
    if let Some(e) = failed {
        return Err(e);
    }
    let (start_cpu, end_cpu) = *sut_window.lock().expect("not poisoned");
    let window_end = shared.window_end_ns.load(Ordering::Relaxed);
    let stopped_by = shared.stopped_by.get().cloned();
    Ok(DriverOutput {
        recording,
        window_ns: window_end.saturating_sub(measure_start_ns),
        measure_start_ns,
        threads,
        faults,
        interrupted: ctx.stop.load(Ordering::Relaxed) || stopped_by.is_some(),
        stopped_by,
        sut_cpu_s: match (start_cpu, end_cpu) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e9),
            _ => None,
        },
    })
}

fn budget_share(ops: Option<u64>, threads: usize, t: usize) -> u64 {
    match ops {
        None => u64::MAX,
        Some(n) => n / threads as u64 + u64::from((t as u64) < n % threads as u64),
    }
}

fn connect(address: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = std::net::TcpStream::connect_timeout(&address, timeout)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(TcpStream::from_std(s))
}

/// One request in flight.
#[derive(Debug, Clone, Copy, Default)]
struct Flight {
    id: u64,
    intended_ns: u64,
    sent_ns: u64,
    class: u16,
    measured: bool,
    active: bool,
}

/// `adapt` state of one connection.
#[derive(Debug, Clone, Copy)]
struct Adapt {
    share: f64,
    credit: f64,
    last_step_ns: u64,
}

struct Conn<W> {
    stream: Option<TcpStream>,
    wire: W,
    wbuf: Vec<u8>,
    wpos: usize,
    want_write: bool,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    flights: Vec<Flight>,
    free: Vec<u32>,
    /// `(slot, id)` in send order: the oldest request (timeouts) and the next response of an
    /// ordered protocol. Entries whose slot was completed are skipped lazily.
    order: VecDeque<(u32, u64)>,
    in_flight: usize,
    generation: u32,
    pacer: Pacer,
    rng: SmallRng,
    adapt: Adapt,
    reconnect_at: u64,
    /// No more sends: the schedule passed the window's end.
    done: bool,
}

impl<W: Wire> Conn<W> {
    fn new(stream: TcpStream, wire: W, shared: &Shared, index: usize) -> Self {
        let window = shared.client.window;
        let total = shared.client.total_connections() as u64;
        let scenario = shared.scenario;
        // Rate pacing: each connection takes an equal share, offset so the union stays even.
        let (pacing, offset) = match scenario.pacing {
            Pacing::Rate { per_sec, arrivals } => {
                let each = per_sec / total as f64;
                (
                    Pacing::Rate {
                        per_sec: each,
                        arrivals,
                    },
                    (1e9 / per_sec * index as f64) as u64,
                )
            }
            p => (p, 0),
        };
        let seed = scenario.run.seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407);
        Conn {
            stream: Some(stream),
            wire,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            want_write: false,
            rbuf: vec![0; 256 * 1024],
            rstart: 0,
            rend: 0,
            flights: vec![Flight::default(); window],
            free: (0..window as u32).rev().collect(),
            order: VecDeque::with_capacity(window * 2),
            in_flight: 0,
            generation: 0,
            pacer: Pacer::new(pacing, shared.t0 + offset, seed),
            rng: SmallRng::seed_from_u64(seed.wrapping_add(1)),
            adapt: Adapt {
                share: 1.0,
                credit: 0.0,
                last_step_ns: shared.t0,
            },
            reconnect_at: 0,
            done: false,
        }
    }

    fn window_full(&self) -> bool {
        self.free.is_empty()
    }

    /// Time the oldest request in flight times out.
    fn oldest_deadline(&mut self, timeout_ns: u64) -> Option<u64> {
        while let Some(&(slot, id)) = self.order.front() {
            let f = &self.flights[slot as usize];
            if f.active && f.id == id {
                return Some(f.sent_ns.saturating_add(timeout_ns));
            }
            self.order.pop_front();
        }
        None
    }
}

/// Why a connection failed.
#[derive(Debug, Clone, Copy)]
enum Failure {
    Timeout,
    Closed,
    Protocol(&'static str),
}

struct ThreadLoop<'a, W> {
    shared: &'a Shared<'a>,
    index: usize,
    conns: Vec<Conn<W>>,
    rec: Recorder,
    faults: Faults,
    clock: MonotonicClock,
    budget: u64,
    attempts: u64,
}

type ThreadResult = Result<(ThreadCpu, Faults), EngineError>;

impl<W: Wire> ThreadLoop<'_, W> {
    fn run(mut self, done: std::sync::mpsc::Sender<()>) -> ThreadResult {
        let cpu = self.shared.client.pin.get(self.index).copied();
        lower_timer_slack();
        if let Some(c) = cpu {
            if let Err(source) = pin_current_thread(c) {
                let _ = done.send(());
                return Err(EngineError::Pin {
                    role: "client",
                    cpu: c,
                    source,
                });
            }
        }
        let mut poll = Poll::new().map_err(EngineError::Io)?;
        let mut timer = Timer::new(poll.registry(), TIMER).map_err(EngineError::Io)?;
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(s) = c.stream.as_mut() {
                poll.registry()
                    .register(s, Token(i), Interest::READABLE)
                    .map_err(EngineError::Io)?;
            }
        }
        let mut events = Events::with_capacity(1024);
        self.clock.sleep_until(self.shared.t0);
        let mut cpu_before: Option<CpuSnapshot> = None;
        let mut sending = true;
        let mut send_end_ns = 0;
        let mut cpu_used = Default::default();
        loop {
            let now = self.clock.now_ns();
            self.rec.roll_if_due(now);
            if sending {
                if cpu_before.is_none() && now >= self.shared.measure_start_ns {
                    cpu_before = Some(CpuSnapshot::thread());
                }
                if self.shared.stopping()
                    || self.attempts >= self.budget
                    || self.conns.iter().all(|c| c.done)
                {
                    sending = false;
                    // A window that ran its course lasts its full length; otherwise until now.
                    send_end_ns = if self.conns.iter().all(|c| c.done) {
                        now.max(self.shared.end_ns)
                    } else {
                        now
                    };
                    cpu_used = cpu_before
                        .map(|b| CpuSnapshot::thread().since(&b))
                        .unwrap_or_default();
                    self.shared.window_end_ns.fetch_max(
                        send_end_ns.max(self.shared.measure_start_ns),
                        Ordering::Relaxed,
                    );
                    let _ = done.send(());
                } else {
                    for i in 0..self.conns.len() {
                        self.send_due(i, now, &poll);
                    }
                }
            }
            if !sending {
                let in_flight: usize = self.conns.iter().map(|c| c.in_flight).sum();
                if in_flight == 0 || now > send_end_ns.saturating_add(self.shared.drain_ns) {
                    break;
                }
            }
            self.check_timeouts(now, &poll);
            let wake = self.next_wake(now, sending, send_end_ns);
            let timeout = if wake <= now.saturating_add(self.clock.spin_ns) {
                Some(Duration::ZERO)
            } else {
                timer.arm(wake.min(now + STOP_CHECK_NS) - self.clock.spin_ns);
                None
            };
            match poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(EngineError::Io(e)),
            }
            for event in events.iter() {
                match event.token() {
                    TIMER => timer.fired(),
                    Token(i) => {
                        if event.is_writable() {
                            self.flush(i, &poll);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.receive(i, &poll);
                        }
                    }
                }
            }
        }
        let now = self.clock.now_ns();
        let left: u64 = self
            .conns
            .iter()
            .flat_map(|c| c.flights.iter())
            .filter(|f| f.active && f.measured)
            .count() as u64;
        self.rec.in_flight_at_end(left);
        self.rec.finish(now);
        Ok((
            ThreadCpu {
                role: format!("client-{}", self.index),
                pinned_cpu: cpu,
                cpu: cpu_used,
            },
            self.faults,
        ))
    }

    /// When the loop must look again: the next due send that can go, the oldest timeout, a
    /// reconnection, the end of the drain.
    fn next_wake(&mut self, now: u64, sending: bool, send_end_ns: u64) -> u64 {
        let client = self.shared.client;
        let mut wake = if sending {
            u64::MAX
        } else {
            send_end_ns
                .saturating_add(self.shared.drain_ns)
                .saturating_add(1)
        };
        for c in &mut self.conns {
            if let Some(d) = c.oldest_deadline(client.timeout_ns) {
                wake = wake.min(d);
            }
            if !sending || c.done {
                continue;
            }
            if c.stream.is_none() {
                wake = wake.min(c.reconnect_at.max(now));
                continue;
            }
            match c.pacer.upcoming_ns() {
                // Unpaced: `skip` attempts every turn; otherwise send when the window has room.
                // Unpaced: send (or, under `skip`, attempt a batch) when the window has room;
                // with a full window the loop waits for I/O, as an event loop does.
                None => {
                    if !c.window_full() {
                        wake = now;
                    }
                }
                Some(due) => {
                    if client.when_full != WindowFull::Block || !c.window_full() {
                        wake = wake.min(due);
                    }
                }
            }
            if c.pacer.upcoming_ns().is_none() {
                wake = wake.min(self.shared.end_ns);
            }
        }
        if sending && self.shared.measure_start_ns > now {
            wake = wake.min(self.shared.measure_start_ns);
        }
        wake
    }

    /// Sends what is due on connection `i` at `now`.
    fn send_due(&mut self, i: usize, now: u64, poll: &Poll) {
        let shared = self.shared;
        let client = shared.client;
        if self.conns[i].done {
            return;
        }
        if self.conns[i].stream.is_none() && now >= self.conns[i].reconnect_at {
            self.reconnect(i, now, poll);
        }
        let c = &mut self.conns[i];
        match c.pacer.upcoming_ns() {
            None => {
                if now >= shared.end_ns {
                    c.done = true;
                    return;
                }
                // Unpaced and disconnected: nothing is due, so nothing is attempted.
                if c.stream.is_none() {
                    return;
                }
                let measured = now >= shared.measure_start_ns;
                // `skip` attempts a batch per turn of the loop (what does not fit is skipped);
                // otherwise the window is kept full (closed loop).
                let attempts = match client.when_full {
                    WindowFull::Skip if !c.free.is_empty() => client.turn_batch,
                    WindowFull::Skip => 0,
                    _ => c.free.len(),
                };
                for _ in 0..attempts {
                    if self.attempts >= self.budget {
                        break;
                    }
                    if measured {
                        self.attempts += 1;
                        self.rec.attempted();
                    }
                    if c.free.is_empty() {
                        if measured {
                            self.rec.skipped();
                        }
                        continue;
                    }
                    send(c, &mut self.rec, &shared.shares, now, now, now, measured);
                }
            }
            Some(_) => loop {
                let due = c.pacer.upcoming_ns().expect("paced");
                if due >= shared.end_ns {
                    c.done = true;
                    break;
                }
                if due > now {
                    break;
                }
                let measured = due >= shared.measure_start_ns;
                if measured && self.attempts >= self.budget {
                    break;
                }
                if client.when_full == WindowFull::Adapt {
                    if now.saturating_sub(c.adapt.last_step_ns) >= ADAPT_STEP_NS {
                        c.adapt.share = (c.adapt.share + ADAPT_STEP).min(1.0);
                        c.adapt.last_step_ns = now;
                    }
                    // Thin the schedule to `share` of its slots; untaken slots are not attempts.
                    c.adapt.credit += c.adapt.share;
                    if c.adapt.credit < 1.0 {
                        c.pacer.next(&self.clock);
                        continue;
                    }
                    c.adapt.credit -= 1.0;
                }
                let blocked = c.window_full() || c.stream.is_none();
                if blocked && client.when_full == WindowFull::Block && c.stream.is_some() {
                    break;
                }
                let slot = c.pacer.next(&self.clock);
                if measured {
                    self.attempts += 1;
                    self.rec.attempted();
                }
                if blocked {
                    if measured {
                        self.rec.skipped();
                    }
                    if client.when_full == WindowFull::Adapt && c.stream.is_some() {
                        c.adapt.share = (c.adapt.share / 2.0).max(ADAPT_FLOOR);
                        c.adapt.last_step_ns = now;
                    }
                    continue;
                }
                send(
                    c,
                    &mut self.rec,
                    &shared.shares,
                    slot.intended_ns,
                    slot.scheduled_ns,
                    slot.actual_ns,
                    measured,
                );
            },
        }
        if self.conns[i].wbuf.len() > self.conns[i].wpos {
            self.flush(i, poll);
        }
    }

    fn reconnect(&mut self, i: usize, now: u64, poll: &Poll) {
        if self.shared.client.on_error != OnError::Reconnect {
            return;
        }
        // Short: a blocking connect stalls this thread's other connections meanwhile (loopback
        // refusals return at once; an address that drops packets costs at most this).
        let connected =
            connect(self.shared.address, Duration::from_millis(100)).and_then(|mut s| {
                poll.registry()
                    .register(&mut s, Token(i), Interest::READABLE)?;
                Ok(s)
            });
        match connected {
            Ok(s) => self.conns[i].stream = Some(s),
            _ => {
                self.faults.connect_failures += 1;
                self.conns[i].reconnect_at = now + RECONNECT_NS;
            }
        }
    }

    fn flush(&mut self, i: usize, poll: &Poll) {
        let c = &mut self.conns[i];
        let Some(stream) = c.stream.as_mut() else {
            return;
        };
        while c.wpos < c.wbuf.len() {
            match stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => return self.fail(i, Failure::Closed, poll),
                Ok(n) => c.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.fail(i, Failure::Closed, poll),
            }
        }
        let pending = c.wpos < c.wbuf.len();
        if !pending {
            c.wbuf.clear();
            c.wpos = 0;
        }
        if pending != c.want_write {
            c.want_write = pending;
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if poll
                .registry()
                .reregister(stream, Token(i), interest)
                .is_err()
            {
                self.fail(i, Failure::Closed, poll);
            }
        }
    }

    /// Reads what arrived on connection `i` and completes the requests it answers.
    fn receive(&mut self, i: usize, poll: &Poll) {
        loop {
            let c = &mut self.conns[i];
            let Some(stream) = c.stream.as_mut() else {
                return;
            };
            if c.rend == c.rbuf.len() {
                c.rbuf.copy_within(c.rstart..c.rend, 0);
                c.rend -= c.rstart;
                c.rstart = 0;
                if c.rend == c.rbuf.len() {
                    // One response larger than the buffer (big payloads): grow, rarely.
                    let grown = c.rbuf.len() * 2;
                    c.rbuf.resize(grown, 0);
                }
            }
            let n = match stream.read(&mut c.rbuf[c.rend..]) {
                Ok(0) => return self.fail(i, Failure::Closed, poll),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return self.fail(i, Failure::Closed, poll),
            };
            // One timestamp per read: every response in it arrived by now.
            let now = crate::clock::now_ns();
            c.rend += n;
            loop {
                let c = &mut self.conns[i];
                let response = match c.wire.decode(&c.rbuf[c.rstart..c.rend]) {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(_) => {
                        return self.fail(
                            i,
                            Failure::Protocol("bytes that are not a valid response"),
                            poll,
                        )
                    }
                };
                c.rstart += response.size;
                let slot = match response.id {
                    Some(id) => {
                        let slot = (id & 0xFFFF_FFFF) as usize;
                        match c.flights.get(slot) {
                            Some(f) if f.active && f.id == id => slot,
                            _ => {
                                return self.fail(
                                    i,
                                    Failure::Protocol("a response to no request in flight"),
                                    poll,
                                )
                            }
                        }
                    }
                    None => loop {
                        match c.order.pop_front() {
                            Some((slot, id)) => {
                                let f = &c.flights[slot as usize];
                                if f.active && f.id == id {
                                    break slot as usize;
                                }
                            }
                            None => {
                                return self.fail(
                                    i,
                                    Failure::Protocol("a reply with no request in flight"),
                                    poll,
                                )
                            }
                        }
                    },
                };
                let f = &mut c.flights[slot];
                f.active = false;
                c.free.push(slot as u32);
                c.in_flight -= 1;
                if !response.ok {
                    self.faults.server_errors += 1;
                }
                if f.measured {
                    if response.ok {
                        self.rec
                            .delivered(f.class as usize, f.intended_ns, f.sent_ns, now);
                    } else {
                        self.rec.failed();
                    }
                }
            }
            let c = &mut self.conns[i];
            if c.rstart == c.rend {
                c.rstart = 0;
                c.rend = 0;
            }
        }
    }

    fn check_timeouts(&mut self, now: u64, poll: &Poll) {
        let timeout = self.shared.client.timeout_ns;
        for i in 0..self.conns.len() {
            if self.conns[i]
                .oldest_deadline(timeout)
                .is_some_and(|d| now > d)
            {
                self.fail(i, Failure::Timeout, poll);
            }
        }
    }

    /// Fails every request in flight on connection `i`, closes it, and stops the run or plans a
    /// reconnection.
    fn fail(&mut self, i: usize, why: Failure, poll: &Poll) {
        let now = crate::clock::now_ns();
        let c = &mut self.conns[i];
        for f in c.flights.iter_mut().filter(|f| f.active) {
            f.active = false;
            if f.measured {
                self.rec.failed();
            }
        }
        c.free = (0..c.flights.len() as u32).rev().collect();
        c.order.clear();
        c.in_flight = 0;
        c.wbuf.clear();
        c.wpos = 0;
        c.want_write = false;
        c.rstart = 0;
        c.rend = 0;
        if let Some(mut s) = c.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        c.reconnect_at = now + RECONNECT_NS;
        let what = match why {
            Failure::Timeout => {
                self.faults.timeouts += 1;
                format!(
                    "a request got no response within {}",
                    msgbench_model::duration::format(Duration::from_nanos(
                        self.shared.client.timeout_ns
                    ))
                )
            }
            Failure::Closed => {
                self.faults.disconnects += 1;
                "the connection was closed or reset".to_string()
            }
            Failure::Protocol(what) => {
                self.faults.protocol_errors += 1;
                format!("the server sent {what}")
            }
        };
        if self.shared.client.on_error == OnError::Stop {
            let when = if now < self.shared.measure_start_ns {
                "during the warm-up".to_string()
            } else {
                format!(
                    "{:.2} s into the measured window",
                    (now - self.shared.measure_start_ns) as f64 / 1e9
                )
            };
            let _ = self.shared.stopped_by.set(format!(
                "{what} on connection {} to {} {when}; the run stopped (set `client.on_error = \"reconnect\"` to go on)",
                self.index * self.shared.client.connections + i,
                self.shared.address
            ));
        }
    }
}

/// Encodes one request into the connection's write buffer and records it as sent.
#[inline]
fn send<W: Wire>(
    c: &mut Conn<W>,
    rec: &mut Recorder,
    shares: &[f64],
    intended_ns: u64,
    scheduled_ns: u64,
    actual_ns: u64,
    measured: bool,
) {
    let slot = c.free.pop().expect("window has room");
    c.generation = c.generation.wrapping_add(1);
    let id = (u64::from(c.generation) << 32) | u64::from(slot);
    let class = pick_class(shares, &mut c.rng);
    c.wire.encode(class, id, actual_ns, &mut c.wbuf);
    c.flights[slot as usize] = Flight {
        id,
        intended_ns,
        sent_ns: actual_ns,
        class: class as u16,
        measured,
        active: true,
    };
    c.order.push_back((slot, id));
    c.in_flight += 1;
    // Out-of-order completions leave stale entries behind a slow request: drop them before
    // the queue outgrows its pre-allocated capacity.
    if c.order.len() >= 2 * c.flights.len() {
        let flights = &c.flights;
        c.order
            .retain(|&(s, id)| flights[s as usize].active && flights[s as usize].id == id);
    }
    if measured {
        rec.sent(scheduled_ns, actual_ns);
    }
}

#[inline]
fn pick_class(shares: &[f64], rng: &mut SmallRng) -> usize {
    if shares.len() == 1 {
        return 0;
    }
    let mut r: f64 = rng.gen();
    for (i, s) in shares.iter().enumerate() {
        if r < *s {
            return i;
        }
        r -= s;
    }
    shares.len() - 1
}

/// Resolves `host:port` (the first address it names).
pub fn resolve(address: &str) -> Result<SocketAddr, EngineError> {
    use std::net::ToSocketAddrs;
    address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| EngineError::Resolve(address.to_string()))
}

/// Turns what the driver measured into the engine's [`super::Measured`].
pub fn measured(
    out: DriverOutput,
    classes: Vec<String>,
    process_before: CpuSnapshot,
    config: String,
    mut notes: Vec<String>,
) -> super::Measured {
    if let Some(why) = &out.stopped_by {
        notes.insert(0, format!("stopped early: {why}"));
    }
    let now_ns = crate::clock::now_ns();
    super::Measured {
        recording: out.recording,
        classes,
        window_ns: out.window_ns,
        window_start_unix_ms: crate::environment::unix_ms()
            - now_ns.saturating_sub(out.measure_start_ns) / 1_000_000,
        process_cpu: CpuSnapshot::process().since(&process_before),
        threads: out.threads,
        interrupted: out.interrupted,
        config,
        faults: out.faults,
        sut_cpu_s: out.sut_cpu_s,
        notes,
        streams: Vec::new(),
    }
}

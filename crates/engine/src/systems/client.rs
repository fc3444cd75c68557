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
use super::window::{Budget, Failure, Launcher, Rules, Window};
use super::{EngineError, RunContext};
use crate::affinity::pin_current_thread;
use crate::clock::{lower_timer_slack, Clock, MonotonicClock};
use crate::cpu::CpuSnapshot;
use crate::net::timer::Timer;
use crate::recorder::{Collector, Recorder};
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use msgbench_model::client::{ClientConfig, OnError};
use msgbench_model::result::{Faults, ThreadCpu};
use msgbench_model::scenario::Scenario;
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
    /// The rules every connection's launcher follows.
    fn rules(&self) -> Rules<'_> {
        Rules {
            client: self.client,
            shares: &self.shares,
            measure_start_ns: self.measure_start_ns,
            end_ns: self.end_ns,
        }
    }

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
            budget: Budget::share(scenario.run.operations, client.threads, t),
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
    let gathered = gather(
        outs.into_iter()
            .map(|o| o.map(|r| r.map(|(cpu, f)| (vec![cpu], f)))),
        "client",
    );
    // The collector is joined first: it ends once every recorder has, error or not.
    let recording = collecting
        .join()
        .map_err(|_| EngineError::WorkerPanicked("collector"))?;
    let (threads, faults) = gathered?;
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

fn connect(address: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let s = std::net::TcpStream::connect_timeout(&address, timeout)?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(TcpStream::from_std(s))
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
    window: Window,
    launcher: Launcher,
    reconnect_at: u64,
}

impl<W: Wire> Conn<W> {
    fn new(stream: TcpStream, wire: W, shared: &Shared, index: usize) -> Self {
        Conn {
            stream: Some(stream),
            wire,
            wbuf: Vec::with_capacity(64 * 1024),
            wpos: 0,
            want_write: false,
            rbuf: vec![0; 256 * 1024],
            rstart: 0,
            rend: 0,
            window: Window::new(shared.client.window),
            launcher: Launcher::new(
                shared.scenario,
                shared.t0,
                index,
                shared.client.total_connections(),
            ),
            reconnect_at: 0,
        }
    }
}

struct ThreadLoop<'a, W> {
    shared: &'a Shared<'a>,
    index: usize,
    conns: Vec<Conn<W>>,
    rec: Recorder,
    faults: Faults,
    clock: MonotonicClock,
    budget: Budget,
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
                let all_done = self.conns.iter().all(|c| c.launcher.done);
                if self.shared.stopping() || self.budget.spent() || all_done {
                    sending = false;
                    // A window that ran its course lasts its full length; otherwise until now.
                    send_end_ns = if all_done {
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
                let in_flight: usize = self.conns.iter().map(|c| c.window.in_flight()).sum();
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
            .map(|c| c.window.measured_in_flight())
            .sum();
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
        let rules = self.shared.rules();
        for c in &mut self.conns {
            if let Some(d) = c.window.oldest_deadline(client.timeout_ns) {
                wake = wake.min(d);
            }
            if !sending || c.launcher.done {
                continue;
            }
            if c.stream.is_none() {
                wake = wake.min(c.reconnect_at.max(now));
                continue;
            }
            if let Some(w) = c.launcher.next_wake(&c.window, &rules, now) {
                wake = wake.min(w);
            }
        }
        if sending && self.shared.measure_start_ns > now {
            wake = wake.min(self.shared.measure_start_ns);
        }
        wake
    }

    /// Sends what is due on connection `i` at `now`.
    fn send_due(&mut self, i: usize, now: u64, poll: &Poll) {
        if self.conns[i].launcher.done {
            return;
        }
        if self.conns[i].stream.is_none() && now >= self.conns[i].reconnect_at {
            self.reconnect(i, now, poll);
        }
        let rules = self.shared.rules();
        let Conn {
            stream,
            wire,
            wbuf,
            window,
            launcher,
            ..
        } = &mut self.conns[i];
        launcher.send_due(
            window,
            stream.is_some(),
            now,
            &rules,
            &self.clock,
            &mut self.budget,
            &mut self.rec,
            |l| wire.encode(l.class, l.id, l.sent_ns, wbuf),
        );
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
                let flight = match response.id {
                    Some(id) => c.window.complete(id),
                    None => c.window.complete_oldest(),
                };
                let Some(f) = flight else {
                    let what = if response.id.is_some() {
                        "a response to no request in flight"
                    } else {
                        "a reply with no request in flight"
                    };
                    return self.fail(i, Failure::Protocol(what), poll);
                };
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
                .window
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
        let rec = &mut self.rec;
        c.window.fail_all(|f| {
            if f.measured {
                rec.failed();
            }
        });
        c.wbuf.clear();
        c.wpos = 0;
        c.want_write = false;
        c.rstart = 0;
        c.rend = 0;
        if let Some(mut s) = c.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        c.reconnect_at = now + RECONNECT_NS;
        let what = why.count(&mut self.faults, self.shared.client.timeout_ns);
        if self.shared.client.on_error == OnError::Stop {
            let _ = self.shared.stopped_by.set(super::window::stop_message(
                &what,
                self.index * self.shared.client.connections + i,
                &self.shared.address.to_string(),
                now,
                self.shared.measure_start_ns,
            ));
        }
    }
}

/// What a driver thread returns: its threads' CPU and its faults.
pub(crate) type ThreadOutput = Result<(Vec<ThreadCpu>, Faults), EngineError>;

/// Merges what the driver threads returned; the last error (or panic of `role`) wins.
pub(crate) fn gather(
    outs: impl IntoIterator<Item = std::thread::Result<ThreadOutput>>,
    role: &'static str,
) -> ThreadOutput {
    let mut threads = Vec::new();
    let mut faults = Faults::default();
    let mut failed = None;
    for out in outs {
        match out {
            Ok(Ok((cpu, f))) => {
                threads.extend(cpu);
                faults.add(&f);
            }
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(EngineError::WorkerPanicked(role)),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((threads, faults)),
    }
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

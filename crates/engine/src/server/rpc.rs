//! The built-in request/response server: msgbench's framed protocol (`msgbench serve rpc`, or
//! in-process for an `rpc` scenario without an address) and, with another [`ServerWire`],
//! HTTP/1.1 (`msgbench serve http`, [`super::http`]). One acceptor thread deals connections round-robin to `threads` workers; each worker
//! runs its own mio event loop (no work stealing: on two cores, a predictable thread per
//! connection beats a pool). A request asks for its service time: `busy` computes it on the
//! worker (which serves nothing else meanwhile, so a worker's capacity is 1/service time);
//! `sleep` holds the response on a timer. Responses go out in completion order.
//!
//! The server protects itself (limits in `docs/limits.md`): a frame larger than `max_frame`, a
//! short or unknown frame gets that one connection closed (counted); a service time above
//! `max_service` is served for `max_service` (counted as clamped); a connection stops being read
//! while its queued responses (written but unread, or held by `sleep`) exceed 4 MiB, or while
//! its worker's share of the server-wide 256 MiB budget is spent; a connection that neither sends
//! nor reads for `idle_timeout` is closed (counted as idle, or as a slow reader when responses
//! were waiting); a connection beyond `max_connections` replaces one silent for a second or
//! more, or is closed on accept.
use crate::clock::now_ns;
use crate::cpu::ThreadCpuClock;
use crate::harness::timer::Timer;
use crate::net::endpoint::{Endpoint, Listener, Stream};
use crate::net::frame::{self, FrameError, Header, FLAG_SLEEP, KIND_REQUEST, KIND_RESPONSE};
use mio::{Events, Interest, Poll, Token, Waker};
use msgbench_model::rpc::RpcServerConfig;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

const LISTENER: Token = Token(usize::MAX - 1);
const WAKE: Token = Token(usize::MAX - 2);
const TIMER: Token = Token(usize::MAX - 3);
/// Work (ns) after which responses computed so far are written, even in mid-batch.
const FLUSH_AFTER_WORK_NS: u64 = 20_000;
/// Responses queued for one client (unread or held) beyond which its requests are left unread:
/// backpressure, so one client's memory is bounded whatever it sends.
const PAUSE_READING_BYTES: usize = 4 << 20;
/// Responses queued on the whole server beyond which no connection holding any takes more.
pub const SERVER_QUEUE_BUDGET: usize = 256 << 20;
/// How often idle connections are looked for.
const IDLE_SWEEP_NS: u64 = 1_000_000_000;
/// Silence after which a connection may be replaced by a new one when the server is full.
const EVICT_IDLE_NS: u64 = 1_000_000_000;
/// Entries of closed connections left in the delay queue beyond which it is compacted.
const STALE_DELAYED_COMPACT: usize = 4096;

/// A protocol the server speaks: where a request ends and what it asks for, and how its
/// response is written. Everything else (connections, budgets, service, stalls) is shared.
pub trait ServerWire: Send + 'static {
    /// Responses must leave in request order (HTTP/1.1): one is never released before a
    /// response held before it on its connection.
    const IN_ORDER: bool;
    /// The request at the start of `buf` and the bytes it took; `Ok(None)` when incomplete;
    /// `Err` for bytes that cannot be one, or one larger than `max_frame` (its connection is
    /// closed and counted). `seq` numbers the connection's requests.
    fn decode(
        &mut self,
        buf: &[u8],
        max_frame: u32,
        seq: u64,
    ) -> Result<Option<(Ask, usize)>, BadRequest>;
    /// Appends the response to the request described by `key`.
    fn respond(&self, key: &HeaderKey, out: &mut Vec<u8>);
    /// What is written (best effort) to a connection closed for a bad request before it is
    /// closed, when nothing else is still to be written on it: HTTP's `400`. Nothing by default.
    fn rejection(&self) -> &'static [u8] {
        b""
    }
}

/// Bytes that are not a request the server serves: its connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadRequest;

/// What one request asks of the server.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// What its response needs.
    pub key: HeaderKey,
    /// Hold the response on a timer for the service time (else compute for it).
    pub sleep: bool,
}

/// msgbench's framed protocol ([`crate::net::frame`]): the client's header says the service
/// time, its kind and the response's size; responses go out in completion order.
pub struct FrameWire;

impl ServerWire for FrameWire {
    const IN_ORDER: bool = false;

    #[inline]
    fn decode(
        &mut self,
        buf: &[u8],
        max_frame: u32,
        _seq: u64,
    ) -> Result<Option<(Ask, usize)>, BadRequest> {
        let (h, size) = match frame::decode(buf, max_frame, KIND_REQUEST) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(
                FrameError::TooLarge { .. }
                | FrameError::TooShort { .. }
                | FrameError::WrongKind { .. },
            ) => return Err(BadRequest),
        };
        let key = HeaderKey {
            class: h.class,
            id: h.id,
            client_ns: h.client_ns,
            service_ns: h.service_ns,
            reply_bytes: h.reply_bytes.min(max_frame.saturating_sub(64)),
        };
        Ok(Some((
            Ask {
                key,
                sleep: h.flags & FLAG_SLEEP != 0,
            },
            size,
        )))
    }

    #[inline]
    fn respond(&self, k: &HeaderKey, out: &mut Vec<u8>) {
        frame::encode(
            &Header {
                kind: KIND_RESPONSE,
                flags: 0,
                class: k.class,
                id: k.id,
                client_ns: k.client_ns,
                service_ns: k.service_ns,
                reply_bytes: 0,
            },
            k.reply_bytes as usize,
            out,
        );
    }
}

/// What the server counted since it started.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections closed at once because `max_connections` were open.
    pub rejected: AtomicU64,
    /// Connections closed for a bad frame (oversized, short, wrong kind).
    pub protocol_errors: AtomicU64,
    /// Connections closed because the client stopped reading.
    pub slow_readers: AtomicU64,
    /// Connections closed after `idle_timeout` without a byte either way.
    pub idle_closed: AtomicU64,
    /// Idle connections closed to admit a new one when `max_connections` were open.
    pub evicted: AtomicU64,
    /// Requests that asked for more than `max_service` (served for `max_service`).
    pub clamped: AtomicU64,
    /// Accepts that failed (out of file descriptors and the like).
    pub accept_errors: AtomicU64,
    /// Requests answered.
    pub responses: AtomicU64,
    open: AtomicUsize,
}

/// A running server; stops when dropped.
pub struct RpcServer {
    addr: Endpoint,
    shutdown: Arc<AtomicBool>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
    clocks: Vec<ThreadCpuClock>,
    /// Counters.
    pub stats: Arc<ServerStats>,
}

impl RpcServer {
    /// Binds `listen` and starts serving msgbench's framed protocol.
    pub fn start(config: &RpcServerConfig, listen: SocketAddr) -> io::Result<RpcServer> {
        RpcServer::start_on(config, &listen.into())
    }

    /// [`RpcServer::start`] on a TCP address or a Unix socket.
    pub fn start_on(config: &RpcServerConfig, listen: &Endpoint) -> io::Result<RpcServer> {
        RpcServer::start_serving(config, listen, "rpc", || FrameWire)
    }

    /// Binds `listen` and starts serving the protocol `make_wire` gives each thread; `name`
    /// names the threads (`<name>-server-0`).
    pub fn start_serving<W: ServerWire>(
        config: &RpcServerConfig,
        listen: &Endpoint,
        name: &str,
        make_wire: impl Fn() -> W,
    ) -> io::Result<RpcServer> {
        let mut listener = Listener::bind(listen)?;
        let addr = listener.endpoint()?;
        let shutdown = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServerStats::default());
        let (clock_tx, clock_rx) = channel();
        let mut wakers = Vec::new();
        let mut handoffs = Vec::new();
        let mut threads = Vec::new();
        for i in 0..config.threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
            let (tx, rx) = channel::<(Stream, bool)>();
            let shared = (shutdown.clone(), stats.clone());
            let mut worker = Worker::new(make_wire(), poll, rx, config, shared);
            let pin = config.pin.get(i).copied();
            let clock_tx = clock_tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{name}-server-{i}"))
                    .spawn(move || {
                        crate::harness::worker::prepare_server(i, pin);
                        let _ = clock_tx.send(ThreadCpuClock::current());
                        if let Err(e) = worker.run() {
                            eprintln!("msgbench serve: server thread {i} failed: {e}");
                        }
                    })?,
            );
            handoffs.push((tx, waker.clone()));
            wakers.push(waker);
        }
        let accept_poll = Poll::new()?;
        accept_poll
            .registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let accept_waker = Arc::new(Waker::new(accept_poll.registry(), WAKE)?);
        wakers.push(accept_waker);
        let (sd, st) = (shutdown.clone(), stats.clone());
        let max_connections = config.max_connections;
        let clock_tx2 = clock_tx.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-acceptor"))
                .spawn(move || {
                    let _ = clock_tx2.send(ThreadCpuClock::current());
                    accept_loop(accept_poll, listener, handoffs, max_connections, sd, st);
                })?,
        );
        drop(clock_tx);
        let clocks = clock_rx.iter().take(threads.len()).flatten().collect();
        Ok(RpcServer {
            addr,
            shutdown,
            wakers,
            threads,
            clocks,
            stats,
        })
    }

    /// The TCP address it listens on (with the real port when started on port 0).
    ///
    /// # Panics
    /// On a server started on a Unix socket (a caller's mistake: see [`RpcServer::endpoint`]).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
            .tcp()
            .expect("local_addr of a server on a Unix socket: use endpoint()")
    }

    /// Where it listens: a TCP address or a Unix socket.
    pub fn endpoint(&self) -> &Endpoint {
        &self.addr
    }

    /// CPU used by all server threads so far, ns.
    pub fn cpu_ns(&self) -> u64 {
        self.clocks.iter().map(|c| c.read_ns()).sum()
    }

    /// Stops every thread and waits for them.
    pub fn stop(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for w in &self.wakers {
            let _ = w.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Where the acceptor hands a worker its connections: `(stream, the server was full)`.
type Handoff = (Sender<(Stream, bool)>, Arc<Waker>);

fn accept_loop(
    mut poll: Poll,
    listener: Listener,
    workers: Vec<Handoff>,
    max_connections: usize,
    shutdown: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
) {
    let mut events = Events::with_capacity(64);
    let mut next = 0;
    let mut retry = None;
    let mut log = super::RateLimitedLog::default();
    while !shutdown.load(Ordering::Relaxed) {
        // After an accept error (out of descriptors) no new edge may come for the connections
        // still queued: look again shortly.
        if poll.poll(&mut events, retry.take()).is_err() {
            continue;
        }
        loop {
            match listener.accept() {
                Ok(stream) => {
                    // Full: the worker lets it replace a connection idle for a second or more
                    // (a flood of idle connections must not lock real clients out), or
                    // refuses it.
                    let full = stats.open.load(Ordering::Relaxed) >= max_connections;
                    if full {
                        log.say(|| format!("msgbench rpc server: {max_connections} connections are open (max_connections): new ones replace idle ones or are refused; raise --max-connections or rpc.server.max_connections"));
                    } else {
                        stats.open.fetch_add(1, Ordering::Relaxed);
                    }
                    let (tx, waker) = &workers[next % workers.len()];
                    next += 1;
                    if tx.send((stream, full)).is_ok() {
                        let _ = waker.wake();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    log.say(|| format!("msgbench rpc server: cannot accept a connection: {e}; out of file descriptors? raise `ulimit -n`"));
                    retry = Some(std::time::Duration::from_millis(10));
                    break;
                }
            }
        }
    }
}

/// A response held back by a `sleep` service time.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Delayed {
    due_ns: u64,
    slot: usize,
    generation: u64,
    header: HeaderKey,
}

/// What a response needs, orderable for the heap of held responses (equal due times leave in
/// `id` order).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
pub struct HeaderKey {
    /// The request's id (HTTP: its number on the connection). First: it orders responses
    /// held until the same moment.
    pub id: u64,
    /// The request's class (HTTP: the status to answer with).
    pub class: u16,
    /// The client's timestamp, echoed.
    pub client_ns: u64,
    /// The service time asked for, ns.
    pub service_ns: u64,
    /// The response's payload size, bytes.
    pub reply_bytes: u32,
}

struct Conn {
    stream: Stream,
    generation: u64,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    want_write: bool,
    /// Responses held by `sleep` service times.
    held: usize,
    /// What they will cost once written, bytes (counted as queued meanwhile).
    held_bytes: usize,
    /// The last time a byte went either way, ns.
    active_ns: u64,
    /// Requests read on it (numbers them for the wire).
    requests: u64,
    /// When its last held response is due (in-order protocols hold later ones behind it).
    last_due_ns: u64,
}

impl Conn {
    /// Bytes of responses queued for this client: written but unread, or held.
    fn queued(&self) -> usize {
        self.wbuf.len() - self.wpos + self.held_bytes
    }
}

struct Worker<W> {
    wire: W,
    poll: Poll,
    /// New connections; `true`: the server was full when it came.
    incoming: Receiver<(Stream, bool)>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    delayed: BinaryHeap<Reverse<Delayed>>,
    /// Entries of `delayed` whose connection has closed.
    stale_delayed: usize,
    /// Bytes queued on all of this worker's connections.
    queued: usize,
    /// This worker's share of [`SERVER_QUEUE_BUDGET`].
    budget: usize,
    /// Connections whose reading paused for the budget (their own socket gives no event when
    /// the budget frees up).
    paused: Vec<usize>,
    /// Connections whose turn ended with requests still to serve: served again after the
    /// others with events had theirs (round-robin).
    ready: Vec<usize>,
    /// Requests served in the current connection's turn.
    turn_frames: u32,
    max_frame: u32,
    max_service_ns: u64,
    idle_timeout_ns: u64,
    next_sweep_ns: u64,
    evict_cursor: usize,
    stall: Option<(u64, u64)>,
    started_ns: u64,
    shutdown: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
    next_generation: u64,
}

/// Why a connection is closed.
enum Close {
    Peer,
    Protocol,
    SlowReader,
    Idle,
    Evicted,
}

/// What serving the buffered frames of a connection came to.
enum Served {
    /// Every complete frame is served: read more.
    NeedBytes,
    /// Its own queued responses are over the limit: read nothing until they drain (a writable
    /// event or a released response resumes it).
    Paused,
    /// The server's budget is spent: read nothing until it has room (the main loop resumes it).
    OverBudget,
    /// This connection's turn is over ([`TURN_FRAMES`]): the main loop serves it again after
    /// the other connections.
    TurnOver,
}

/// Requests one connection is served per turn before the worker moves on. A client that
/// refills faster than the worker drains would otherwise hold the worker: with reading until
/// the socket is empty, 1 thread x 4 connections at interval 0 reached 456 ms max latency
/// where one connection alone had 1.7 ms (issue 22).
const TURN_FRAMES: u32 = 64;

/// Bytes a response held by a timer is counted as while it waits.
fn held_cost(reply_bytes: u32) -> usize {
    frame::HEADER_BYTES + reply_bytes as usize + std::mem::size_of::<Delayed>()
}

impl<W: ServerWire> Worker<W> {
    /// A worker speaking `wire` on `poll`, taking its connections from `incoming`, with its
    /// share of the server's queue budget and `(shutdown, stats)` shared with the server.
    fn new(
        wire: W,
        poll: Poll,
        incoming: std::sync::mpsc::Receiver<(Stream, bool)>,
        config: &RpcServerConfig,
        (shutdown, stats): (Arc<AtomicBool>, Arc<ServerStats>),
    ) -> Worker<W> {
        Worker {
            wire,
            poll,
            incoming,
            conns: Vec::new(),
            free: Vec::new(),
            delayed: BinaryHeap::new(),
            stale_delayed: 0,
            queued: 0,
            budget: SERVER_QUEUE_BUDGET / config.threads.max(1),
            paused: Vec::new(),
            ready: Vec::new(),
            turn_frames: 0,
            max_frame: config.max_frame,
            max_service_ns: config.max_service_ns,
            idle_timeout_ns: config.idle_timeout_ns,
            next_sweep_ns: 0,
            evict_cursor: 0,
            stall: config.stall,
            started_ns: now_ns(),
            shutdown,
            stats,
            next_generation: 0,
        }
    }
}

impl<W: ServerWire> Worker<W> {
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut timer = Timer::new(self.poll.registry(), TIMER)?;
        while !self.shutdown.load(Ordering::Relaxed) {
            self.stall_if_due();
            if let Some(at) = self.next_wake(now_ns()) {
                timer.arm(at);
            }
            // Connections still owed a turn: look for events, do not sleep.
            let timeout = (!self.ready.is_empty()).then_some(std::time::Duration::ZERO);
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    WAKE => self.adopt_new_connections()?,
                    TIMER => timer.fired(),
                    Token(slot) => {
                        if event.is_writable() {
                            self.on_writable(slot);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.on_readable(slot);
                        }
                    }
                }
            }
            for slot in self.release_due() {
                // Reading may have paused on the responses just written.
                self.on_readable(slot);
            }
            self.resume_paused();
            for slot in std::mem::take(&mut self.ready) {
                self.on_readable(slot);
            }
            self.close_idle();
        }
        Ok(())
    }

    /// When the loop must wake without a socket event: the next held response, the next stall,
    /// the next idle sweep (never in the past). `None`: only sockets and wakers.
    fn next_wake(&self, now: u64) -> Option<u64> {
        let mut at = self.delayed.peek().map(|d| d.0.due_ns);
        if let Some((every, _)) = self.stall {
            let next_stall = self.started_ns + ((now - self.started_ns) / every + 1) * every;
            at = Some(at.map_or(next_stall, |a| a.min(next_stall)));
        }
        if self.idle_timeout_ns > 0 && self.conns.len() > self.free.len() {
            // The same deadline for a whole second: re-arming it is free.
            at = Some(at.map_or(self.next_sweep_ns, |a| a.min(self.next_sweep_ns)));
        }
        at.map(|a| a.max(now + 1))
    }

    /// Fault injection: sleeps through a stall window if one is open now.
    fn stall_if_due(&self) {
        if let Some((every, length)) = self.stall {
            let phase = (now_ns() - self.started_ns) % every;
            if phase < length {
                std::thread::sleep(std::time::Duration::from_nanos(length - phase));
            }
        }
    }

    fn adopt_new_connections(&mut self) -> io::Result<()> {
        while let Ok((mut stream, full)) = self.incoming.try_recv() {
            if full {
                match self.idle_victim() {
                    Some(victim) => {
                        self.close(victim, Close::Evicted);
                        self.stats.open.fetch_add(1, Ordering::Relaxed);
                    }
                    None => {
                        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                }
            }
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let slot = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            self.poll
                .registry()
                .register(&mut stream, Token(slot), Interest::READABLE)?;
            self.next_generation += 1;
            self.conns[slot] = Some(Conn {
                stream,
                generation: self.next_generation,
                rbuf: vec![0; 64 * 1024],
                rstart: 0,
                rend: 0,
                wbuf: Vec::with_capacity(64 * 1024),
                wpos: 0,
                want_write: false,
                held: 0,
                held_bytes: 0,
                active_ns: now_ns(),
                requests: 0,
                last_due_ns: 0,
            });
            // Data may have arrived before registration (edge-triggered): read now.
            self.on_readable(slot);
        }
        Ok(())
    }

    /// A connection of this worker that has been silent both ways for [`EVICT_IDLE_NS`] and
    /// is owed nothing, found from a rotating cursor (an idle flood yields one at once).
    fn idle_victim(&mut self) -> Option<usize> {
        let now = now_ns();
        let n = self.conns.len();
        for step in 0..n {
            let slot = (self.evict_cursor + step) % n;
            let quiet = self.conns[slot].as_ref().is_some_and(|c| {
                c.held == 0
                    && c.wpos == c.wbuf.len()
                    && now.saturating_sub(c.active_ns) >= EVICT_IDLE_NS
            });
            if quiet {
                self.evict_cursor = slot + 1;
                return Some(slot);
            }
        }
        None
    }

    fn on_readable(&mut self, slot: usize) {
        self.turn_frames = 0;
        loop {
            let served = self.read_and_serve(slot).and_then(|served| {
                self.flush(slot)?;
                Ok(served)
            });
            match served {
                // Paused, and the flush drained everything: no writable event will come, and
                // requests may wait in the buffer or the socket with no new edge to announce
                // them, so serve on now (with nothing queued, a request is always served).
                Ok(Served::Paused)
                    if self.conns[slot].as_ref().is_some_and(|c| c.queued() == 0) => {}
                // Otherwise a writable event or a released response resumes it.
                Ok(Served::NeedBytes | Served::Paused) => return,
                Ok(Served::OverBudget) => {
                    if !self.paused.contains(&slot) {
                        self.paused.push(slot);
                    }
                    return;
                }
                Ok(Served::TurnOver) => {
                    // At most once per turn, so the list stays within the connections.
                    self.ready.push(slot);
                    return;
                }
                Err(why) => return self.close(slot, why),
            }
        }
    }

    fn on_writable(&mut self, slot: usize) {
        if let Err(why) = self.flush(slot) {
            self.close(slot, why);
            return;
        }
        // Reading may have paused for backpressure: resume.
        self.on_readable(slot);
    }

    /// Serves what is buffered, then reads and serves until the socket is empty
    /// (`NeedBytes`) or the connection's responses are over the limit (`Paused`).
    fn read_and_serve(&mut self, slot: usize) -> Result<Served, Close> {
        let max_frame = self.max_frame;
        loop {
            match self.serve_frames(slot)? {
                Served::NeedBytes => {}
                paused => return Ok(paused),
            }
            let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                return Ok(Served::NeedBytes);
            };
            // Make room: move the partial frame to the front, grow for a frame that needs it.
            if conn.rend == conn.rbuf.len() {
                conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                conn.rend -= conn.rstart;
                conn.rstart = 0;
                if conn.rend == conn.rbuf.len() {
                    let grown = (conn.rbuf.len() * 2).min(max_frame as usize + 4);
                    conn.rbuf.resize(grown.max(conn.rbuf.len() + 1), 0);
                }
            }
            let n = match conn.stream.read(&mut conn.rbuf[conn.rend..]) {
                Ok(0) => return Err(Close::Peer),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Served::NeedBytes),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Close::Peer),
            };
            conn.rend += n;
            conn.active_ns = now_ns();
        }
    }

    /// Whether a response of `cost` bytes may be queued for `conn` (`None`), or why not. A
    /// connection with nothing queued always may: every connection makes progress.
    fn may_queue(&self, conn: &Conn, cost: usize) -> Option<Served> {
        let queued = conn.queued();
        if queued == 0 {
            None
        } else if queued + cost > PAUSE_READING_BYTES {
            Some(Served::Paused)
        } else if self.queued + cost > self.budget {
            Some(Served::OverBudget)
        } else {
            None
        }
    }

    /// Serves the complete frames in the read buffer.
    fn serve_frames(&mut self, slot: usize) -> Result<Served, Close> {
        let mut last_flush_ns = now_ns();
        loop {
            // A flush failure inside `release_due` below may have closed this connection.
            let Some(conn) = self.conns.get(slot).and_then(|c| c.as_ref()) else {
                return Err(Close::Peer);
            };
            let decoded = self.wire.decode(
                &conn.rbuf[conn.rstart..conn.rend],
                self.max_frame,
                conn.requests,
            );
            let (ask, size) = match decoded {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(Served::NeedBytes),
                Err(BadRequest) => return Err(Close::Protocol),
            };
            if self.turn_frames >= TURN_FRAMES {
                return Ok(Served::TurnOver);
            }
            self.turn_frames += 1;
            let key = ask.key;
            let reply_bytes = key.reply_bytes;
            if let Some(paused) = self.may_queue(conn, held_cost(reply_bytes)) {
                return Ok(paused);
            }
            let service_ns = if key.service_ns > self.max_service_ns {
                self.stats.clamped.fetch_add(1, Ordering::Relaxed);
                self.max_service_ns
            } else {
                key.service_ns
            };
            let conn = self.conns[slot].as_mut().expect("checked above");
            conn.requests += 1;
            conn.rstart += size;
            if conn.rstart == conn.rend {
                conn.rstart = 0;
                conn.rend = 0;
            }
            let sleeps = service_ns > 0 && ask.sleep;
            // In order: nothing passes a response held before it on this connection.
            if sleeps || (W::IN_ORDER && conn.held > 0) {
                let mut due_ns = now_ns().saturating_add(if sleeps { service_ns } else { 0 });
                if W::IN_ORDER {
                    due_ns = due_ns.max(conn.last_due_ns);
                    conn.last_due_ns = due_ns;
                }
                conn.held += 1;
                conn.held_bytes += held_cost(reply_bytes);
                self.queued += held_cost(reply_bytes);
                let generation = conn.generation;
                self.delayed.push(Reverse(Delayed {
                    due_ns,
                    slot,
                    generation,
                    header: key,
                }));
                continue;
            }
            if service_ns > 0 {
                self.compute_for(service_ns);
            }
            let conn = self.conns[slot].as_mut().expect("checked above");
            let before = conn.wbuf.len();
            self.wire.respond(&key, &mut conn.wbuf);
            self.queued += conn.wbuf.len() - before;
            self.stats.responses.fetch_add(1, Ordering::Relaxed);
            // A read can hold hundreds of requests: responses of computed ones must not
            // wait for the whole batch, or one busy batch delays every answer in it.
            // Cheap requests are still answered with one write per batch.
            let now = now_ns();
            if now.saturating_sub(last_flush_ns) >= FLUSH_AFTER_WORK_NS {
                self.flush(slot)?;
                // Connections paused on the responses released here resume in the main loop.
                let _ = self.release_due();
                last_flush_ns = now;
            }
        }
    }

    /// `busy` service: computes for `ns`, but gives up when the server stops (stopping never
    /// waits on a request).
    fn compute_for(&self, ns: u64) {
        let until = now_ns().saturating_add(ns);
        while now_ns() < until && !self.shutdown.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    }

    /// Sends the delayed responses that are due; returns the connections written to.
    fn release_due(&mut self) -> Vec<usize> {
        let now = now_ns();
        let mut touched = Vec::new();
        while self.delayed.peek().is_some_and(|d| d.0.due_ns <= now) {
            let Reverse(d) = self.delayed.pop().expect("peeked");
            let live = self.conns.get_mut(d.slot).and_then(|c| c.as_mut());
            match live {
                Some(conn) if conn.generation == d.generation => {
                    let cost = held_cost(d.header.reply_bytes);
                    conn.held -= 1;
                    conn.held_bytes -= cost;
                    let before = conn.wbuf.len();
                    self.wire.respond(&d.header, &mut conn.wbuf);
                    self.queued = self.queued.saturating_sub(cost) + (conn.wbuf.len() - before);
                    self.stats.responses.fetch_add(1, Ordering::Relaxed);
                    if touched.last() != Some(&d.slot) {
                        touched.push(d.slot);
                    }
                }
                _ => self.stale_delayed = self.stale_delayed.saturating_sub(1),
            }
        }
        touched.sort_unstable();
        touched.dedup();
        touched.retain(|&slot| match self.flush(slot) {
            Ok(()) => true,
            Err(why) => {
                self.close(slot, why);
                false
            }
        });
        touched
    }

    /// Reads again from connections paused for the budget, once there is room.
    fn resume_paused(&mut self) {
        if self.paused.is_empty() || self.queued >= self.budget {
            return;
        }
        for slot in std::mem::take(&mut self.paused) {
            self.on_readable(slot);
        }
    }

    /// Closes connections that sent and read nothing for `idle_timeout` (a connection waiting
    /// for a held response is not idle: it waits for the server).
    fn close_idle(&mut self) {
        let now = now_ns();
        if self.idle_timeout_ns == 0 || now < self.next_sweep_ns {
            return;
        }
        self.next_sweep_ns = now + IDLE_SWEEP_NS.min(self.idle_timeout_ns);
        let timeout = self.idle_timeout_ns;
        let idle: Vec<(usize, Close)> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| {
                let c = c.as_ref()?;
                let quiet = c.held == 0 && now.saturating_sub(c.active_ns) > timeout;
                let why = if c.wpos < c.wbuf.len() {
                    Close::SlowReader
                } else {
                    Close::Idle
                };
                quiet.then_some((slot, why))
            })
            .collect();
        for (slot, why) in idle {
            self.close(slot, why);
        }
    }

    fn flush(&mut self, slot: usize) -> Result<(), Close> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        let start = conn.wpos;
        while conn.wpos < conn.wbuf.len() {
            match conn.stream.write(&conn.wbuf[conn.wpos..]) {
                Ok(0) => return Err(Close::Peer),
                Ok(n) => conn.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Close::Peer),
            }
        }
        if conn.wpos > start {
            self.queued = self.queued.saturating_sub(conn.wpos - start);
            conn.active_ns = now_ns();
        }
        let pending = conn.wpos < conn.wbuf.len();
        if !pending {
            conn.wbuf.clear();
            conn.wpos = 0;
        }
        if pending != conn.want_write {
            conn.want_write = pending;
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.poll
                .registry()
                .reregister(&mut conn.stream, Token(slot), interest)
                .map_err(|_| Close::Peer)?;
        }
        Ok(())
    }

    fn close(&mut self, slot: usize, why: Close) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(|c| c.take()) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if matches!(why, Close::Protocol) && conn.queued() == 0 {
            // Best effort, never waited for: a client that does not read loses it.
            use std::io::Write;
            let _ = conn.stream.write(self.wire.rejection());
        }
        self.free.push(slot);
        self.paused.retain(|&s| s != slot);
        self.queued = self.queued.saturating_sub(conn.queued());
        self.forget_held(conn.held);
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
        let counter = match why {
            Close::Peer => return,
            Close::Protocol => &self.stats.protocol_errors,
            Close::SlowReader => &self.stats.slow_readers,
            Close::Idle => &self.stats.idle_closed,
            Close::Evicted => &self.stats.evicted,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A closed connection had `held` responses in the delay queue: they are skipped when due,
    /// and the queue is compacted once they are many (a client that floods `sleep` requests
    /// and reconnects must not grow it for `max_service`).
    fn forget_held(&mut self, held: usize) {
        self.stale_delayed += held;
        if self.stale_delayed < STALE_DELAYED_COMPACT || self.stale_delayed * 2 < self.delayed.len()
        {
            return;
        }
        let conns = &self.conns;
        self.delayed.retain(|Reverse(d)| {
            conns
                .get(d.slot)
                .and_then(|c| c.as_ref())
                .is_some_and(|c| c.generation == d.generation)
        });
        self.stale_delayed = 0;
    }
}

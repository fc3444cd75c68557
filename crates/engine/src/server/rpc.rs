//! The built-in RPC server (`msgbench serve rpc`, or in-process for an `rpc` scenario without an
//! address). One acceptor thread deals connections round-robin to `threads` workers; each worker
//! runs its own mio event loop (no work stealing: on two cores, a predictable thread per
//! connection beats a pool). A request asks for its service time: `busy` computes it on the
//! worker (which serves nothing else meanwhile, so a worker's capacity is 1/service time);
//! `sleep` holds the response on a timer. Responses go out in completion order.
//!
//! The server protects itself: a frame larger than `max_frame`, a short or unknown frame, or a
//! client that stops reading while its responses pile up gets that one connection closed
//! (counted); connections beyond `max_connections` are closed on accept.
use crate::clock::now_ns;
use crate::cpu::ThreadCpuClock;
use crate::harness::timer::Timer;
use crate::net::frame::{self, FrameError, Header, FLAG_SLEEP, KIND_REQUEST, KIND_RESPONSE};
use mio::net::{TcpListener, TcpStream};
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
/// Responses queued for one client beyond which its requests are left unread (backpressure).
const PAUSE_READING_BYTES: usize = 4 << 20;
/// Responses queued for one client beyond which it is disconnected as a non-reader.
const MAX_PENDING_BYTES: usize = 64 << 20;

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
    /// Requests answered.
    pub responses: AtomicU64,
    open: AtomicUsize,
}

/// A running server; stops when dropped.
pub struct RpcServer {
    addr: SocketAddr,
    shutdown: Arc<AtomicBool>,
    wakers: Vec<Arc<Waker>>,
    threads: Vec<JoinHandle<()>>,
    clocks: Vec<ThreadCpuClock>,
    /// Counters.
    pub stats: Arc<ServerStats>,
}

impl RpcServer {
    /// Binds `listen` and starts serving.
    pub fn start(config: &RpcServerConfig, listen: SocketAddr) -> io::Result<RpcServer> {
        let mut listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let shutdown = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(ServerStats::default());
        let (clock_tx, clock_rx) = channel();
        let mut wakers = Vec::new();
        let mut handoffs = Vec::new();
        let mut threads = Vec::new();
        for i in 0..config.threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
            let (tx, rx) = channel::<TcpStream>();
            let mut worker = Worker {
                poll,
                incoming: rx,
                conns: Vec::new(),
                free: Vec::new(),
                delayed: BinaryHeap::new(),
                max_frame: config.max_frame,
                stall: config.stall,
                started_ns: now_ns(),
                shutdown: shutdown.clone(),
                stats: stats.clone(),
                next_generation: 0,
            };
            let pin = config.pin.get(i).copied();
            let clock_tx = clock_tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("rpc-server-{i}"))
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
                .name("rpc-acceptor".into())
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

    /// The address it listens on (with the real port when started on port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
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

fn accept_loop(
    mut poll: Poll,
    listener: TcpListener,
    workers: Vec<(Sender<TcpStream>, Arc<Waker>)>,
    max_connections: usize,
    shutdown: Arc<AtomicBool>,
    stats: Arc<ServerStats>,
) {
    let mut events = Events::with_capacity(64);
    let mut next = 0;
    let mut retry = None;
    while !shutdown.load(Ordering::Relaxed) {
        // After an accept error (out of descriptors) no new edge may come for the connections
        // still queued: look again shortly.
        if poll.poll(&mut events, retry.take()).is_err() {
            continue;
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stats.open.load(Ordering::Relaxed) >= max_connections {
                        stats.rejected.fetch_add(1, Ordering::Relaxed);
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    stats.open.fetch_add(1, Ordering::Relaxed);
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let (tx, waker) = &workers[next % workers.len()];
                    next += 1;
                    if tx.send(stream).is_ok() {
                        let _ = waker.wake();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
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

/// The header fields a delayed response needs, orderable for the heap.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
struct HeaderKey {
    class: u16,
    id: u64,
    client_ns: u64,
    service_ns: u64,
    reply_bytes: u32,
}

struct Conn {
    stream: TcpStream,
    generation: u64,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    want_write: bool,
}

struct Worker {
    poll: Poll,
    incoming: Receiver<TcpStream>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    delayed: BinaryHeap<Reverse<Delayed>>,
    max_frame: u32,
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
}

impl Worker {
    fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut timer = Timer::new(self.poll.registry(), TIMER)?;
        while !self.shutdown.load(Ordering::Relaxed) {
            self.stall_if_due();
            let now = now_ns();
            let mut wake_at = self.delayed.peek().map(|d| d.0.due_ns);
            if let Some((every, _)) = self.stall {
                let next_stall = self.started_ns + ((now - self.started_ns) / every + 1) * every;
                wake_at = Some(wake_at.map_or(next_stall, |w| w.min(next_stall)));
            }
            if let Some(at) = wake_at {
                timer.arm(at.max(now + 1));
            }
            match self.poll.poll(&mut events, None) {
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
            self.release_due();
        }
        Ok(())
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
        while let Ok(mut stream) = self.incoming.try_recv() {
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
            });
            // Data may have arrived before registration (edge-triggered): read now.
            self.on_readable(slot);
        }
        Ok(())
    }

    fn on_readable(&mut self, slot: usize) {
        loop {
            let paused = match self.read_and_serve(slot).and_then(|paused| {
                self.flush(slot)?;
                Ok(paused)
            }) {
                Ok(paused) => paused,
                Err(why) => return self.close(slot, why),
            };
            // Reading paused for backpressure and the flush drained it: bytes may still wait
            // in the socket with no new edge to announce them, so read on now.
            let drained = self.conns[slot]
                .as_ref()
                .is_some_and(|c| c.wbuf.len() - c.wpos <= PAUSE_READING_BYTES);
            if !(paused && drained) {
                return;
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

    /// Reads and serves until the socket is empty (`Ok(false)`) or responses pile up beyond
    /// the backpressure threshold (`Ok(true)`: reading paused).
    fn read_and_serve(&mut self, slot: usize) -> Result<bool, Close> {
        let max_frame = self.max_frame;
        loop {
            let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
                return Ok(false);
            };
            if conn.wbuf.len() - conn.wpos > PAUSE_READING_BYTES {
                return Ok(true);
            }
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Close::Peer),
            };
            conn.rend += n;
            self.serve_frames(slot)?;
        }
    }

    fn serve_frames(&mut self, slot: usize) -> Result<(), Close> {
        let mut last_flush_ns = now_ns();
        loop {
            let conn = self.conns[slot].as_mut().expect("open");
            let decoded = frame::decode(
                &conn.rbuf[conn.rstart..conn.rend],
                self.max_frame,
                KIND_REQUEST,
            );
            let (h, size) = match decoded {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(
                    FrameError::TooLarge { .. }
                    | FrameError::TooShort { .. }
                    | FrameError::WrongKind { .. },
                ) => return Err(Close::Protocol),
            };
            conn.rstart += size;
            if conn.rstart == conn.rend {
                conn.rstart = 0;
                conn.rend = 0;
            }
            let key = HeaderKey {
                class: h.class,
                id: h.id,
                client_ns: h.client_ns,
                service_ns: h.service_ns,
                reply_bytes: h.reply_bytes.min(self.max_frame.saturating_sub(64)),
            };
            if h.service_ns > 0 && h.flags & FLAG_SLEEP != 0 {
                let generation = conn.generation;
                self.delayed.push(Reverse(Delayed {
                    due_ns: now_ns().saturating_add(h.service_ns),
                    slot,
                    generation,
                    header: key,
                }));
            } else {
                if h.service_ns > 0 {
                    let until = now_ns().saturating_add(h.service_ns);
                    while now_ns() < until {
                        std::hint::spin_loop();
                    }
                }
                respond(conn, key);
                self.stats.responses.fetch_add(1, Ordering::Relaxed);
                if conn.wbuf.len() - conn.wpos > MAX_PENDING_BYTES {
                    return Err(Close::SlowReader);
                }
                // A read can hold hundreds of requests: responses of computed ones must not
                // wait for the whole batch, or one busy batch delays every answer in it.
                // Cheap requests are still answered with one write per batch.
                let now = now_ns();
                if now.saturating_sub(last_flush_ns) >= FLUSH_AFTER_WORK_NS {
                    self.flush(slot)?;
                    self.release_due();
                    last_flush_ns = now;
                }
            }
        }
    }

    /// Sends the delayed responses that are due.
    fn release_due(&mut self) {
        let now = now_ns();
        let mut touched = Vec::new();
        while self.delayed.peek().is_some_and(|d| d.0.due_ns <= now) {
            let Reverse(d) = self.delayed.pop().expect("peeked");
            if let Some(conn) = self.conns.get_mut(d.slot).and_then(|c| c.as_mut()) {
                if conn.generation == d.generation {
                    respond(conn, d.header);
                    self.stats.responses.fetch_add(1, Ordering::Relaxed);
                    touched.push(d.slot);
                }
            }
        }
        touched.dedup();
        for slot in touched {
            if let Err(why) = self.flush(slot) {
                self.close(slot, why);
            }
        }
    }

    fn flush(&mut self, slot: usize) -> Result<(), Close> {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return Ok(());
        };
        while conn.wpos < conn.wbuf.len() {
            match conn.stream.write(&conn.wbuf[conn.wpos..]) {
                Ok(0) => return Err(Close::Peer),
                Ok(n) => conn.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Err(Close::Peer),
            }
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
        if let Some(mut conn) = self.conns[slot].take() {
            let _ = self.poll.registry().deregister(&mut conn.stream);
            self.free.push(slot);
            self.stats.open.fetch_sub(1, Ordering::Relaxed);
            match why {
                Close::Peer => {}
                Close::Protocol => {
                    self.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                }
                Close::SlowReader => {
                    self.stats.slow_readers.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

#[inline]
fn respond(conn: &mut Conn, k: HeaderKey) {
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
        &mut conn.wbuf,
    );
}

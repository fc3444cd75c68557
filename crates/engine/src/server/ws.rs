//! What msgbench's WebSocket servers (the tick stream, JSON-RPC) share: `threads` threads,
//! each a single-threaded tokio runtime (no work stealing: on two cores a predictable thread
//! per connection beats a pool), optionally pinned, and an acceptor thread that reads request
//! heads and deals upgraded connections round-robin. Each connection's request head is read
//! on the acceptor as its bytes arrive (readiness-driven:
//! a slow sender costs one wake-up per segment, never a polling timer) within a handshake
//! timeout; a WebSocket upgrade is answered here (RFC 6455's accept key) and the stream handed
//! to tokio-websockets and then to the [`Service`]; a plain `GET` gets the service's page (the
//! browser client) or a 404. Answering the upgrade here rather than in tokio-websockets keeps
//! every head it cannot take (it panicked on a path with a backtick) a counted `400`. The
//! service decides what a connection and a thread do.
//!
//! Writes go through a 64 KiB `BufWriter`: tokio-websockets writes each frame as its own
//! vectored slice (32 frames per `writev`), which for 36-byte ticks meant ~1 KB per syscall and
//! 3× fewer messages per second than tokio-tungstenite; with the buffer one flush is one write
//! of up to 64 KiB (see docs/architecture.md).
use crate::cpu::ThreadCpuClock;
use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;

/// A server-side WebSocket stream with a write-coalescing buffer.
pub type ServerWs = tokio_websockets::WebSocketStream<BufWriter<TcpStream>>;
/// WebSocket opcodes of text and binary frames (RFC 6455 §5.2): one set, the client's.
pub use crate::net::ws_client::{OP_BINARY as OPCODE_BINARY, OP_TEXT as OPCODE_TEXT};

/// Appends one final, unmasked WebSocket frame (what a server sends, RFC 6455 §5.2) carrying
/// `payload` with `opcode`. Written by hand for the tick server's hot path (see `ticks.rs`'s
/// `Writer`): two header bytes and a copy per tick instead of a `Message` each.
pub fn put_server_frame(out: &mut bytes::BytesMut, opcode: u8, payload: &[u8]) {
    out.extend_from_slice(&[0x80 | opcode]);
    let n = payload.len();
    if n < 126 {
        out.extend_from_slice(&[n as u8]);
    } else if let Ok(short) = u16::try_from(n) {
        out.extend_from_slice(&[126]);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.extend_from_slice(&[127]);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
}

/// Bytes a flush may coalesce into one write.
pub const WRITE_BUFFER: usize = 64 << 10;
/// Longest a connection may take to send its request head: 5 s, plus up to 2 s spread by the
/// peer's port. Connections an attacker opens together would otherwise time out together, and
/// closing 10 000 at once stalls the thread for ~35 ms (`bench/hostile.sh`).
pub fn handshake_timeout(peer: SocketAddr) -> std::time::Duration {
    let spread_ms = u64::from(peer.port()).wrapping_mul(7919) % 2000;
    std::time::Duration::from_millis(5000 + spread_ms)
}
/// Connections the kernel queues before they are accepted (as mio's listener for rpc).
const LISTEN_BACKLOG: libc::c_int = 4096;
/// Largest request head read before the handshake.
const MAX_HEAD: usize = 8 << 10;
/// Longest the acceptor spends writing an answer (a page, an error, a `101`) to a peer that
/// does not read it.
const REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// RFC 6455's key suffix for `Sec-WebSocket-Accept`.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// A boxed future that stays on its thread.
pub type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

/// The parts of an upgrade request a service looks at.
#[derive(Debug, Clone)]
pub struct Upgrade {
    /// Path, e.g. `/ticks`.
    pub path: String,
    /// Query parameters in order.
    pub query: Vec<(String, String)>,
    /// The peer's address.
    pub peer: SocketAddr,
}

impl Upgrade {
    /// The value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What a WebSocket server does with its threads and connections.
pub trait Service: Send + Sync + Sized + 'static {
    /// State of one thread (not shared across threads).
    type Local: 'static;
    /// Builds thread `index`'s state, on that thread.
    fn local(self: &Arc<Self>, index: usize) -> Rc<Self::Local>;
    /// Background work of a thread (the tick generator); it may return at any time.
    fn background(self: &Arc<Self>, local: Rc<Self::Local>) -> LocalFuture;
    /// Serves one WebSocket connection until it ends.
    fn connection(
        self: &Arc<Self>,
        local: Rc<Self::Local>,
        upgrade: Upgrade,
        ws: ServerWs,
    ) -> LocalFuture;
    /// Answer to a plain HTTP `GET path`: `(content type, body)`, or `None` for a 404.
    fn page(&self, path: &str) -> Option<(&'static str, &'static str)>;
    /// The thread is stopping: publish what its connections measured.
    fn finish(self: &Arc<Self>, local: Rc<Self::Local>);
    /// The common settings.
    fn settings(&self) -> &Settings;
}

/// Settings every WebSocket server has.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Threads.
    pub threads: usize,
    /// CPU per thread.
    pub pin: Vec<usize>,
    /// Largest message a client may send.
    pub max_frame: usize,
    /// `SO_SNDBUF` of accepted sockets (0: OS default).
    pub send_buffer: u32,
    /// Most open connections.
    pub max_connections: usize,
    /// Thread name prefix.
    pub name: &'static str,
    /// The pool's stop signal, shared with the service (its busy work gives up on it).
    pub stop: Arc<Shutdown>,
}

/// Connection-level counts every WebSocket server keeps.
#[derive(Debug, Default)]
pub struct Counts {
    /// WebSocket connections accepted.
    pub accepted: AtomicU64,
    /// Connections refused over `max_connections`.
    pub refused: AtomicU64,
    /// Peers that sent no valid upgrade (or failed the handshake).
    pub handshake_failures: AtomicU64,
    /// Plain HTTP requests answered (the page).
    pub pages: AtomicU64,
    /// Connections closed for a protocol violation or an oversized message.
    pub protocol_errors: AtomicU64,
    /// Open connections.
    pub open: AtomicUsize,
    /// Connections closed without a byte (browsers open spare connections in advance).
    pub idle: AtomicU64,
    /// Connections closed after the service's idle timeout.
    pub idle_closed: AtomicU64,
    /// Connections closed because the client stopped reading.
    pub slow_readers: AtomicU64,
    /// Accepts that failed (out of file descriptors and the like).
    pub accept_errors: AtomicU64,
    /// Connections whose head was still unfinished after half a second, dropped to admit a new
    /// connection when the server was full.
    pub evicted: AtomicU64,
}

/// A reading of [`Counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// WebSocket connections accepted.
    pub accepted: u64,
    /// Connections refused over `max_connections`.
    pub refused: u64,
    /// Peers that sent no valid upgrade (or failed the handshake).
    pub handshake_failures: u64,
    /// Plain HTTP requests answered.
    pub pages: u64,
    /// Connections closed for a protocol violation or an oversized message.
    pub protocol_errors: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// Connections closed because the client stopped reading.
    pub slow_readers: u64,
    /// Accepts that failed.
    pub accept_errors: u64,
    /// Unfinished heads dropped to admit a new connection.
    pub evicted: u64,
}

impl Counts {
    /// The counts now.
    pub fn snapshot(&self) -> ConnectionCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ConnectionCounts {
            accepted: get(&self.accepted),
            refused: get(&self.refused),
            handshake_failures: get(&self.handshake_failures),
            pages: get(&self.pages),
            protocol_errors: get(&self.protocol_errors),
            idle_closed: get(&self.idle_closed),
            slow_readers: get(&self.slow_readers),
            accept_errors: get(&self.accept_errors),
            evicted: get(&self.evicted),
        }
    }
}

/// A running pool; stops when dropped.
pub struct Pool {
    addr: SocketAddr,
    shutdown: Arc<Shutdown>,
    threads: Vec<JoinHandle<()>>,
    clocks: Vec<ThreadCpuClock>,
}

/// The stop signal every thread watches.
#[derive(Default, Debug)]
pub struct Shutdown {
    flag: AtomicBool,
    notify: tokio::sync::Notify,
}

impl Shutdown {
    /// Raises the signal.
    pub fn raise(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// True once raised.
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Resolves once raised.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.raised() {
                return;
            }
            notified.await;
        }
    }
}

impl Pool {
    /// Binds `listen` and starts the service's threads and the acceptor.
    pub fn start<S: Service>(
        service: Arc<S>,
        counts: Arc<Counts>,
        listen: SocketAddr,
    ) -> io::Result<Pool> {
        let listener = std::net::TcpListener::bind(listen)?;
        {
            // std listens with a backlog of 128: a burst of connections beyond it is reset
            // (seen with 500 at once). The kernel caps this at net.core.somaxconn.
            use std::os::fd::AsRawFd;
            // SAFETY: listen() again on a listening socket only changes its backlog.
            unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) };
        }
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let settings = service.settings().clone();
        let shutdown = settings.stop.clone();
        let (clock_tx, clock_rx) = std::sync::mpsc::channel();
        let mut workers = Vec::new();
        let mut threads = Vec::new();
        for index in 0..settings.threads {
            let (tx, incoming) = tokio::sync::mpsc::unbounded_channel::<Handoff>();
            workers.push(tx);
            let (service, counts, shutdown) = (service.clone(), counts.clone(), shutdown.clone());
            let clock_tx = clock_tx.clone();
            let pin = settings.pin.get(index).copied();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{}-{index}", settings.name))
                    .spawn(move || {
                        crate::harness::worker::prepare_server(index, pin);
                        let _ = clock_tx.send(ThreadCpuClock::current());
                        run_thread(service, counts, shutdown, index, incoming);
                    })?,
            );
        }
        {
            let (service, counts, shutdown) = (service.clone(), counts.clone(), shutdown.clone());
            let clock_tx = clock_tx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{}-accept", settings.name))
                    .spawn(move || {
                        crate::clock::lower_timer_slack();
                        let _ = clock_tx.send(ThreadCpuClock::current());
                        run_acceptor(listener, workers, service, counts, shutdown);
                    })?,
            );
        }
        drop(clock_tx);
        let clocks = clock_rx.iter().take(threads.len()).flatten().collect();
        Ok(Pool {
            addr,
            shutdown,
            threads,
            clocks,
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

    /// Stops every thread (each publishes what it measured first) and waits for them.
    pub fn stop(&mut self) {
        self.shutdown.raise();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An upgraded connection on its way from the acceptor to a service thread.
struct Handoff {
    stream: std::net::TcpStream,
    upgrade: Upgrade,
}

fn run_thread<S: Service>(
    service: Arc<S>,
    counts: Arc<Counts>,
    shutdown: Arc<Shutdown>,
    index: usize,
    mut incoming: tokio::sync::mpsc::UnboundedReceiver<Handoff>,
) {
    let runtime = match crate::harness::worker::runtime() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("msgbench serve: server thread {index} cannot start its event loop: {e}");
            return;
        }
    };
    let local_set = tokio::task::LocalSet::new();
    let local = service.local(index);
    local_set.block_on(&runtime, async {
        tokio::task::spawn_local(service.background(local.clone()));
        let stop = shutdown.wait();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                handoff = incoming.recv() => match handoff {
                    Some(h) => {
                        tokio::task::spawn_local(serve(h, service.clone(), local.clone(), counts.clone()));
                    }
                    None => break,
                },
            }
        }
    });
    service.finish(local);
}

/// The acceptor's thread: accepts, reads each request head, answers pages and bad heads, and
/// hands upgraded connections to the service threads round-robin. Heads are read here, not on
/// a service thread, so slow or hostile heads never delay the connections being served: 500
/// slowloris heads that each got a byte at once cost a serving thread a 2.5 ms burst ten times
/// a second (a well-behaved ws-rpc client's p99 went from 84 µs to 2.5 ms, `bench/hostile.sh`).
fn run_acceptor<S: Service>(
    listener: std::net::TcpListener,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<Handoff>>,
    service: Arc<S>,
    counts: Arc<Counts>,
    shutdown: Arc<Shutdown>,
) {
    let name = service.settings().name;
    let runtime = match crate::harness::worker::runtime() {
        Ok(r) => r,
        Err(e) => {
            return eprintln!("msgbench {name}: the acceptor cannot start its event loop: {e}")
        }
    };
    let local_set = tokio::task::LocalSet::new();
    local_set.block_on(&runtime, async {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => return eprintln!("msgbench {name}: cannot listen: {e}"),
        };
        tokio::select! {
            _ = shutdown.wait() => {}
            _ = accept_loop(listener, workers, service, counts) => {}
        }
    });
}

async fn accept_loop<S: Service>(
    listener: tokio::net::TcpListener,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<Handoff>>,
    service: Arc<S>,
    counts: Arc<Counts>,
) {
    let workers = Rc::new(Dealer {
        workers,
        next: Cell::new(0),
    });
    // Connections still sending their head: they count against `max_connections` too, so a
    // flood of heads is bounded like a flood of open connections. When full, a new connection
    // takes the place of a head unfinished for half a second (a real client's head takes
    // microseconds): 10 000 idle connections no longer lock every client out for the whole
    // handshake timeout.
    let heads = Rc::new(Cell::new(0usize));
    let mut pending = PendingHeads::default();
    let mut log = super::RateLimitedLog::default();
    let name = service.settings().name;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let max = service.settings().max_connections;
                if counts.open.load(Ordering::Relaxed) + heads.get() >= max {
                    if pending.evict_stale() {
                        counts.evicted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        counts.refused.fetch_add(1, Ordering::Relaxed);
                        log.say(|| format!("msgbench {name}: refused a connection: {max} are open (max_connections); raise --max-connections"));
                        drop(stream);
                        continue;
                    }
                }
                let slot = HeadSlot::take(&heads);
                let (service, counts, workers) = (service.clone(), counts.clone(), workers.clone());
                let task = tokio::task::spawn_local(async move {
                    let _slot = slot; // freed when the head is done, or dropped when evicted
                    if let Some(upgrade) = handshake(stream, peer, &*service, &counts).await {
                        workers.deal(upgrade, &counts);
                    }
                });
                pending.push(task.abort_handle(), max);
            }
            // Out of descriptors and the like: no new edge may come for queued connections.
            Err(e) => {
                counts.accept_errors.fetch_add(1, Ordering::Relaxed);
                log.say(|| format!("msgbench {name}: cannot accept a connection: {e}; out of file descriptors? raise `ulimit -n`"));
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
        }
    }
}

/// How long a head may be unfinished before a new connection may take its place when the
/// server is full: a real client sends its head in one segment right after connecting, so half
/// a second is far beyond any client's, and short enough that a flood of idle connections
/// locks nobody out for long (the hostile matrix's client connects 0.5 s after 10 000 idle ones).
const HEAD_EVICTABLE_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// One connection counted in the acceptor's `heads` until its task ends or is dropped.
struct HeadSlot(Rc<Cell<usize>>);

impl HeadSlot {
    fn take(heads: &Rc<Cell<usize>>) -> HeadSlot {
        heads.set(heads.get() + 1);
        HeadSlot(heads.clone())
    }
}

impl Drop for HeadSlot {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// The heads being read, oldest first, with how to drop them.
#[derive(Default)]
struct PendingHeads(std::collections::VecDeque<(std::time::Instant, tokio::task::AbortHandle)>);

impl PendingHeads {
    /// Remembers a head's task; forgets finished ones so the queue stays within 2 × `max`.
    fn push(&mut self, task: tokio::task::AbortHandle, max: usize) {
        self.0.push_back((std::time::Instant::now(), task));
        if self.0.len() > 2 * max.max(1) {
            self.0.retain(|(_, t)| !t.is_finished());
        }
    }

    /// Drops the oldest head unfinished for [`HEAD_EVICTABLE_AFTER`]; false when there is none.
    fn evict_stale(&mut self) -> bool {
        while let Some((since, task)) = self.0.front() {
            if task.is_finished() {
                self.0.pop_front();
                continue;
            }
            if since.elapsed() < HEAD_EVICTABLE_AFTER {
                return false;
            }
            task.abort();
            self.0.pop_front();
            return true;
        }
        false
    }
}

/// Deals upgraded connections to the service threads in turn.
struct Dealer {
    workers: Vec<tokio::sync::mpsc::UnboundedSender<Handoff>>,
    next: Cell<usize>,
}

impl Dealer {
    fn deal(&self, handoff: Handoff, counts: &Counts) {
        let i = self.next.get();
        self.next.set(i.wrapping_add(1));
        counts.accepted.fetch_add(1, Ordering::Relaxed);
        // Counted open from here, so the acceptor's limit sees it before its thread does.
        counts.open.fetch_add(1, Ordering::Relaxed);
        if self.workers[i % self.workers.len()].send(handoff).is_err() {
            counts.open.fetch_sub(1, Ordering::Relaxed); // stopping
        }
    }
}

/// Sets `SO_SNDBUF` or `SO_RCVBUF` of a socket (0: leave the OS default).
pub fn set_socket_buffer(fd: std::os::fd::RawFd, option: libc::c_int, bytes: u32) {
    if bytes == 0 {
        return;
    }
    let value = bytes.min(i32::MAX as u32) as libc::c_int;
    // SAFETY: a valid socket fd and a c_int option value of the right size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Reads one connection's request head within the handshake timeout and answers it: a page, an
/// error, or the `101` of a WebSocket upgrade, in which case the connection is returned to be
/// served (as a std stream, to move to its service thread).
async fn handshake<S: Service>(
    stream: TcpStream,
    peer: SocketAddr,
    service: &S,
    counts: &Counts,
) -> Option<Handoff> {
    let _ = stream.set_nodelay(true);
    {
        use std::os::fd::AsRawFd;
        set_socket_buffer(
            stream.as_raw_fd(),
            libc::SO_SNDBUF,
            service.settings().send_buffer,
        );
    }
    let mut stream = stream;
    let mut received = Vec::with_capacity(1024);
    let read = tokio::time::timeout(
        handshake_timeout(peer),
        read_head(&mut stream, &mut received),
    );
    let head = match read.await {
        Ok(Ok(head)) => head,
        // A connection that never says anything (a browser's speculative preconnect) is not a
        // failed handshake.
        Ok(Err(HeadError::Silent)) | Err(_) if received.is_empty() => {
            counts.idle.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Ok(Err(e)) => {
            counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
            reply(stream, "400 Bad Request", "text/plain", e.text()).await;
            return None;
        }
        Err(_) => {
            // Part of a head, then nothing more for the whole timeout (slowloris).
            counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
            let why = "request head too slow\n";
            reply(stream, "408 Request Timeout", "text/plain", why).await;
            return None;
        }
    };
    let key = match head.asks {
        Asks::Page => {
            counts.pages.fetch_add(1, Ordering::Relaxed);
            let page = (head.method == "GET")
                .then(|| service.page(&head.path))
                .flatten();
            match page {
                Some((kind, body)) => reply(stream, "200 OK", kind, body).await,
                None => reply(stream, "404 Not Found", "text/plain", "not found\n").await,
            }
            return None;
        }
        Asks::BadUpgrade(why) => {
            counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
            reply(stream, "400 Bad Request", "text/plain", why).await;
            return None;
        }
        Asks::Upgrade(key) => key,
    };
    switch(stream, &key, (head.path, head.query, peer), counts).await
}

/// Answers an upgrade with its `101` (within [`REPLY_TIMEOUT`]) and hands the connection
/// over, with what its service needs of the request.
async fn switch(
    mut stream: TcpStream,
    key: &str,
    (path, query, peer): (String, Vec<(String, String)>, SocketAddr),
    counts: &Counts,
) -> Option<Handoff> {
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key)
    );
    let written = tokio::time::timeout(REPLY_TIMEOUT, stream.write_all(answer.as_bytes())).await;
    if !matches!(written, Ok(Ok(()))) {
        counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    let stream = stream.into_std().ok()?;
    Some(Handoff {
        stream,
        upgrade: Upgrade { path, query, peer },
    })
}

/// Serves an upgraded connection on its service thread until it ends.
async fn serve<S: Service>(
    handoff: Handoff,
    service: Arc<S>,
    local: Rc<S::Local>,
    counts: Arc<Counts>,
) {
    if let Ok(stream) = TcpStream::from_std(handoff.stream) {
        let limits =
            tokio_websockets::Limits::default().max_payload_len(Some(service.settings().max_frame));
        let config = tokio_websockets::Config::default().flush_threshold(usize::MAX);
        let ws = tokio_websockets::ServerBuilder::new()
            .limits(limits)
            .config(config)
            .serve(BufWriter::with_capacity(WRITE_BUFFER, stream));
        service.connection(local, handoff.upgrade, ws).await;
    }
    counts.open.fetch_sub(1, Ordering::Relaxed);
}

/// A request head, as the server reads it.
#[derive(Debug)]
pub struct Head {
    /// `GET`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// Query parameters in order.
    pub query: Vec<(String, String)>,
    /// What it asks for.
    pub asks: Asks,
}

/// What a head asks for.
#[derive(Debug)]
pub enum Asks {
    /// A plain HTTP request.
    Page,
    /// A WebSocket upgrade with this `Sec-WebSocket-Key`.
    Upgrade(String),
    /// An upgrade that cannot be answered, and why.
    BadUpgrade(&'static str),
}

/// Why no request head was read.
#[derive(Debug)]
pub enum HeadError {
    /// The peer sent nothing and closed.
    Silent,
    /// The peer closed in the middle of the head.
    Truncated,
    /// Not HTTP.
    Malformed,
    /// Longer than [`MAX_HEAD`].
    TooLong,
}

impl HeadError {
    fn text(&self) -> &'static str {
        match self {
            HeadError::Silent | HeadError::Truncated => "incomplete request head\n",
            HeadError::Malformed => "not an HTTP request\n",
            HeadError::TooLong => "request head over 8 KiB\n",
        }
    }
}

/// Reads the request head as its bytes arrive (each read waits for readiness: no polling).
/// A WebSocket client sends nothing more before the server's answer (RFC 6455, 4.1), so the
/// head is all there is to read.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Head, HeadError> {
    use tokio::io::AsyncReadExt;
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Truncated)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                HeadError::Silent
            } else {
                HeadError::Truncated
            });
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = parse_request_head(buf)? {
            return Ok(head);
        }
    }
}

/// Parses a request head: `Ok(None)` while it is incomplete (and under 8 KiB). Every peer's
/// head goes through here first (fuzzed in `tests/fuzz.rs`).
pub fn parse_request_head(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(_)) => Ok(Some(parse_head(&request))),
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => Ok(None),
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            Err(HeadError::TooLong)
        }
        Err(_) => Err(HeadError::Malformed),
    }
}

fn parse_head(request: &httparse::Request<'_, '_>) -> Head {
    let target = request.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    let wants_upgrade = header("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let asks = if !wants_upgrade {
        Asks::Page
    } else if request.method != Some("GET") || request.version != Some(1) {
        Asks::BadUpgrade("a WebSocket upgrade is a GET over HTTP/1.1\n")
    } else if !header("connection").is_some_and(|v| v.to_ascii_lowercase().contains("upgrade")) {
        Asks::BadUpgrade("Connection: Upgrade is missing\n")
    } else if header("sec-websocket-version").as_deref() != Some("13") {
        Asks::BadUpgrade("Sec-WebSocket-Version: 13 is missing\n")
    } else {
        match header("sec-websocket-key") {
            Some(key) if is_key(&key) => Asks::Upgrade(key),
            _ => Asks::BadUpgrade("Sec-WebSocket-Key is not 16 bytes in base64\n"),
        }
    };
    Head {
        method: request.method.unwrap_or_default().to_string(),
        path: path.to_string(),
        query: parse_query(query),
        asks,
    }
}

/// A `Sec-WebSocket-Key`: 16 bytes in base64.
fn is_key(key: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(key)
        .is_ok_and(|k| k.len() == 16)
}

/// `Sec-WebSocket-Accept` for `key` (RFC 6455, 4.2.2).
fn accept_key(key: &str) -> String {
    use base64::Engine;
    let mut sha1 = sha1_smol::Sha1::new();
    sha1.update(key.as_bytes());
    sha1.update(WS_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha1.digest().bytes())
}

/// `a=1&b=x%20y` → `[("a","1"), ("b","x y")]`.
pub fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

fn unescape(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| Some(hex(bytes[i + 1])? * 16 + hex(bytes[i + 2])?))
            .flatten();
        match (bytes[i], escaped) {
            (_, Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b'+', _) => out.push(b' '),
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Answers a plain HTTP request and closes. The page is served cross-origin isolated
/// (COOP/COEP), which gives its `performance.now()` 5 µs resolution instead of 100 µs.
async fn reply(mut stream: TcpStream, status: &str, kind: &str, body: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    // A peer that never reads must not hold the acceptor's task (and its socket) for ever.
    let _ = tokio::time::timeout(REPLY_TIMEOUT, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_and_unescape() {
        assert_eq!(
            parse_query("client=fast-0&format=json&x=a%20b+c&flag"),
            vec![
                ("client".into(), "fast-0".into()),
                ("format".into(), "json".into()),
                ("x".into(), "a b c".into()),
                ("flag".into(), String::new()),
            ]
        );
        assert_eq!(parse_query(""), vec![]);
        assert_eq!(parse_query("bad=%zz%"), vec![("bad".into(), "%zz%".into())]);
    }

    #[test]
    fn the_accept_key_is_rfc_6455s() {
        // The example of RFC 6455, section 1.3.
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(is_key("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!is_key("short"));
    }

    #[test]
    fn server_frames_carry_the_payload_length_in_the_shortest_form() {
        for (n, header) in [
            (0usize, vec![0x82, 0]),
            (125, vec![0x82, 125]),
            (126, vec![0x82, 126, 0, 126]),
            (65_535, vec![0x82, 126, 0xff, 0xff]),
            (65_536, vec![0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        ] {
            let payload = vec![7u8; n];
            let mut out = bytes::BytesMut::from(&[1u8, 2][..]); // appended behind what is there
            put_server_frame(&mut out, OPCODE_BINARY, &payload);
            assert_eq!(&out[..2], [1, 2]);
            assert_eq!(out[2..2 + header.len()], header[..], "{n} bytes");
            assert_eq!(&out[2 + header.len()..], payload.as_slice());
        }
        let mut out = bytes::BytesMut::new();
        put_server_frame(&mut out, OPCODE_TEXT, b"{}");
        assert_eq!(&out[..], [0x81, 2, b'{', b'}']);
    }
}

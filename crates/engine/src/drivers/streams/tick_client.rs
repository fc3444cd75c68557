//! msgbench's native tick client: threads, each a single-threaded tokio runtime (optionally
//! pinned) holding some of one group's connections. For every message it reads: decode, check
//! the sequence number, spend the simulated cost, read the clock, record the latency from the
//! tick's intended send time — every tick, no sampling — and acknowledge what it processed every
//! `ack_every`. Nothing on that path allocates (tokio-websockets hands out each payload as a
//! slice of its read buffer; acks are written once per `ack_every`).
//!
//! A connection ends when the server says the stream is over (`end`), when a tick due after the
//! window arrives (a server that sends no `end`), at the drain deadline, or when the server
//! closes it; then `ticks.on_close` decides: go on without it, reconnect, or stop the run.
use super::grpc_feed::{GrpcFeed, GrpcPlan};
use super::source::{FeedMessage, FeedSource, StreamEnd};
use super::sse_feed::{SseFeed, SsePlan};
use super::stream_stats::StreamStats;
use super::udp_feed::UdpFeed;
use crate::clock::now_ns;
use crate::cpu::CpuSnapshot;
use crate::drivers::failure::OpenError;
use crate::error::EngineError;
use crate::harness::threads::{Handshake, Start};
use crate::harness::worker;
use crate::net::feed::{stamp_bound_ns, FeedDecoder};
use crate::net::tick::{is_control, Schedule, ServerMessage, Tick};
use crate::net::ws_client::{Msg, RawWs, WsError, OP_TEXT};
use crate::recorder::Recorder;
use crate::server::ws::set_socket_buffer;
use msgbench_model::result::ThreadCpu;
use msgbench_model::ticks::{CostWork, OnClose};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_websockets::{Connector, MaybeTlsStream, WebSocketStream};

/// A client-side WebSocket, over TLS for `wss://`.
pub type ClientWs = WebSocketStream<MaybeTlsStream<TcpStream>>;
/// The same, read frame by frame in place (the tick client's: see [`crate::net::ws_client`]).
pub type TickWs = RawWs<MaybeTlsStream<TcpStream>>;
/// How `wss://` connections verify their server (`None`: the Mozilla roots).
pub type WsTls = Option<Arc<tokio_rustls::rustls::ClientConfig>>;
/// Messages handled before a connection lets the others on its thread run.
const MESSAGES_PER_POLL: usize = 1024;
/// Reads in one batch (its end looks at the deadline, acknowledges and yields), whether they
/// made messages or not.
const FILLS_PER_CHECK: u32 = 16;
/// How often an idle connection looks at the stop flag and the deadline.
const CHECK_EVERY: Duration = Duration::from_millis(10);
/// Pause between reconnection attempts.
const RECONNECT_EVERY: Duration = Duration::from_millis(100);
/// Longest a TCP connect or a WebSocket handshake may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages of a feed that must fail to decode, before any succeeded, for the schema to be
/// judged wrong (the connection ends with what the messages hold).
const SCHEMA_TRIES: u64 = 10;
/// Largest message a client accepts.
const MAX_MESSAGE: usize = 1 << 20;

/// One connection to open.
#[derive(Debug, Clone)]
pub struct ConnPlan {
    /// Connection name (`fast-0`), sent as `?client=`.
    pub name: String,
    /// `ws://…` with the client's query.
    pub url: String,
    /// Group index.
    pub group: usize,
    /// Its place among the run's clients (a unicast UDP feed's port offset).
    pub ordinal: usize,
    /// Simulated cost per message, ns.
    pub cost_ns: u64,
    /// How the cost is spent.
    pub work: CostWork,
}

/// One client thread.
#[derive(Debug, Clone)]
pub struct ThreadPlan {
    /// Its role in the result's CPU table (`client-fast-0`).
    pub role: String,
    /// CPU to pin it to.
    pub pin: Option<usize>,
    /// Its connections.
    pub conns: Vec<ConnPlan>,
}

/// What every client thread and the run's supervisor share.
#[derive(Debug)]
pub struct Shared {
    /// The measured window, set once every client is connected.
    pub schedule: OnceLock<Schedule>,
    /// End of the measured window; moved earlier by Ctrl-C.
    pub end_ns: AtomicU64,
    /// No connection stays open past this (the window's end + the drain timeout).
    pub deadline_ns: AtomicU64,
    /// Acknowledgement period, ns.
    pub ack_every_ns: u64,
    /// What a client does when the server closes its connection.
    pub on_close: OnClose,
    /// `SO_RCVBUF` (0: the OS default).
    pub receive_buffer: u32,
    /// Why the run stops early (a connection closed under `on_close = stop`).
    pub stopped_by: OnceLock<String>,
    /// Give up at once (Ctrl-C before the start, another thread failed).
    pub abort: AtomicBool,
    /// Someone else's feed: how to read its messages (`None`: msgbench's ticks). No
    /// acknowledgements go to a feed.
    pub feed: Option<FeedDecoder>,
    /// How `wss://` servers are verified.
    pub tls: WsTls,
    /// A gRPC server stream instead of a WebSocket (`[ticks.grpc]`): its messages are the
    /// feed's.
    pub grpc: Option<Arc<GrpcPlan>>,
    /// A Server-Sent Events feed instead of a WebSocket (`[ticks.sse]`): its events' data
    /// are the feed's messages.
    pub sse: Option<Arc<SsePlan>>,
    /// A UDP feed instead of a WebSocket (`udp://`): each datagram a message.
    pub udp: Option<msgbench_model::udp::UdpFeed>,
}

impl Shared {
    /// Settings for a run that has not started yet.
    pub fn new(ack_every_ns: u64, on_close: OnClose, receive_buffer: u32) -> Shared {
        Shared {
            schedule: OnceLock::new(),
            end_ns: AtomicU64::new(u64::MAX),
            deadline_ns: AtomicU64::new(u64::MAX),
            ack_every_ns,
            on_close,
            receive_buffer,
            stopped_by: OnceLock::new(),
            abort: AtomicBool::new(false),
            feed: None,
            tls: None,
            grpc: None,
            sse: None,
            udp: None,
        }
    }

    /// True once no connection should stay open: deadline passed, run aborted or stopping.
    pub fn over(&self, now: u64) -> bool {
        now >= self.deadline_ns.load(Ordering::Relaxed)
            || self.abort.load(Ordering::Relaxed)
            || self.stopped_by.get().is_some()
    }
}

/// What a client thread measured.
#[derive(Debug)]
pub struct ThreadOut {
    /// One entry per connection.
    pub stats: Vec<StreamStats>,
    /// The thread's CPU over the measured window.
    pub cpu: ThreadCpu,
}

/// The TLS session of a `wss://` connection, its handshake bounded like the rest of opening;
/// a certificate that does not verify says how to pass a CA file.
async fn tls_wrap(
    stream: TcpStream,
    authority: &str,
    tls: &WsTls,
) -> Result<MaybeTlsStream<TcpStream>, OpenError> {
    // Without options, one configuration (the Mozilla roots) serves every connection: built
    // once, and its session cache lets reconnections resume.
    static DEFAULT: OnceLock<Result<Arc<tokio_rustls::rustls::ClientConfig>, String>> =
        OnceLock::new();
    let config = match tls {
        Some(c) => c.clone(),
        None => DEFAULT
            .get_or_init(|| crate::drivers::tls::client_config(None, false).map(|(c, _)| c))
            .clone()
            .map_err(OpenError::Handshake)?,
    };
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let connector = Connector::Rustls(tokio_rustls::TlsConnector::from(config));
    match tokio::time::timeout(OPEN_TIMEOUT, connector.wrap(host, stream)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(OpenError::Handshake(format!(
            "the TLS handshake failed ({e}); a private CA's certificate needs `ticks.ca_file = \"ca.pem\"`, or skip the check with `ticks.insecure = true`"
        ))),
        Err(_) => Err(OpenError::Handshake(
            "the TLS handshake got no answer in time (is it a TLS port?)".into(),
        )),
    }
}

/// Opens a WebSocket to `url` (`ws://host:port/path?query`).
pub async fn open(url: &str, receive_buffer: u32, tls: &WsTls) -> Result<ClientWs, OpenError> {
    let stream = dial(url, receive_buffer, tls).await?;
    let builder = client_builder(url)?;
    let opened = tokio::time::timeout(OPEN_TIMEOUT, builder.connect_on(stream)).await;
    upgraded(opened.map(|r| r.map(|(ws, _)| ws)))
}

/// Opens a WebSocket to `url` whose messages the tick client reads in place.
pub async fn open_tick_ws(
    url: &str,
    receive_buffer: u32,
    tls: &WsTls,
) -> Result<TickWs, OpenError> {
    let stream = dial(url, receive_buffer, tls).await?;
    let builder = client_builder(url)?;
    let opened = tokio::time::timeout(
        OPEN_TIMEOUT,
        crate::net::ws_client::connect(&builder, stream, MAX_MESSAGE),
    )
    .await;
    upgraded(opened)
}

/// The TCP connection (and TLS session, for `wss://`) a WebSocket opens on.
async fn dial(
    url: &str,
    receive_buffer: u32,
    tls: &WsTls,
) -> Result<MaybeTlsStream<TcpStream>, OpenError> {
    let authority = msgbench_model::check::ws_authority(url);
    let address = tokio::net::lookup_host(authority)
        .await
        .map_err(OpenError::Connect)?
        .next()
        .ok_or_else(|| {
            OpenError::Connect(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{authority}` does not resolve"),
            ))
        })?;
    let stream = tokio::time::timeout(OPEN_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| OpenError::Connect(std::io::ErrorKind::TimedOut.into()))?
        .map_err(OpenError::Connect)?;
    let _ = stream.set_nodelay(true);
    {
        use std::os::fd::AsRawFd;
        set_socket_buffer(stream.as_raw_fd(), libc::SO_RCVBUF, receive_buffer);
    }
    if url.starts_with("wss://") {
        tls_wrap(stream, authority, tls).await
    } else {
        Ok(MaybeTlsStream::Plain(stream))
    }
}

fn client_builder(url: &str) -> Result<tokio_websockets::ClientBuilder<'static>, OpenError> {
    Ok(tokio_websockets::ClientBuilder::new()
        .uri(url)
        .map_err(|e| OpenError::Handshake(format!("`{url}` is not a valid URI: {e}")))?
        .limits(tokio_websockets::Limits::default().max_payload_len(Some(MAX_MESSAGE))))
}

/// The outcome of an upgrade bounded by [`OPEN_TIMEOUT`].
fn upgraded<W>(
    opened: Result<Result<W, tokio_websockets::Error>, tokio::time::error::Elapsed>,
) -> Result<W, OpenError> {
    match opened {
        Ok(Ok(ws)) => Ok(ws),
        Ok(Err(e)) => Err(OpenError::Handshake(format!(
            "the WebSocket upgrade failed ({e}); is this a WebSocket server?"
        ))),
        Err(_) => Err(OpenError::Handshake(format!(
            "no WebSocket upgrade answer within {} s; is this a WebSocket server?",
            OPEN_TIMEOUT.as_secs()
        ))),
    }
}

/// One client thread's work, for [`crate::harness::threads::run_around`]: it connects,
/// reports on its handshake's `ready`, waits for its start (a closed channel: the run was
/// called off), then reads until its connections end. Its `done` is held until it returns:
/// the run watches for every client's thread to end.
pub fn worker(
    plan: ThreadPlan,
    shared: Arc<Shared>,
    hint: &'static str,
) -> impl FnOnce(Handshake) -> Option<ThreadOut> + Send {
    move |handshake| {
        let Handshake { ready, start, done } = handshake;
        let out = run_thread(plan, shared, hint, ready, start);
        drop(done);
        out
    }
}

fn run_thread(
    plan: ThreadPlan,
    shared: Arc<Shared>,
    hint: &'static str,
    ready: Sender<Result<(), EngineError>>,
    start: Receiver<Start>,
) -> Option<ThreadOut> {
    let prepared = worker::prepare("tick client", plan.pin, true)
        .and_then(|()| worker::runtime().map_err(EngineError::Io));
    let runtime = match prepared {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return None;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let mut sockets = Vec::with_capacity(plan.conns.len());
        for c in &plan.conns {
            if shared.abort.load(Ordering::Relaxed) {
                return None; // another client could not connect: the run is called off
            }
            match open_subscribed(&c.url, &c.name, c.ordinal, &shared, None).await {
                Ok(ws) => sockets.push(ws),
                Err(e) => {
                    let _ = ready.send(Err(e.into_engine(&c.url, hint)));
                    return None;
                }
            }
        }
        let _ = ready.send(Ok(()));
        // Said once: a worker that panics before it is ready must leave the run's wait for
        // readiness with no sender (else it would wait for ever).
        drop(ready);
        // Nothing else runs on this thread yet: a blocking wait is fine.
        let (_, recorder) = start.recv().ok()?;
        let recorder = Rc::new(RefCell::new(recorder));
        let window_cpu = tokio::task::spawn_local(window_cpu(shared.clone()));
        let tasks: Vec<_> = plan
            .conns
            .into_iter()
            .zip(sockets)
            .map(|(c, ws)| {
                tokio::task::spawn_local(connection(c, ws, shared.clone(), recorder.clone()))
            })
            .collect();
        let mut stats = Vec::with_capacity(tasks.len());
        for t in tasks {
            match t.await {
                Ok(s) => stats.extend(s),
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        let (before, after) = window_cpu.await.unwrap_or_default();
        let after = after.unwrap_or_else(CpuSnapshot::thread);
        let cpu = before.map(|b| after.since(&b)).unwrap_or_default();
        let Ok(recorder) = Rc::try_unwrap(recorder) else {
            unreachable!("every task holding the recorder ended")
        };
        recorder.into_inner().finish(now_ns());
        Some(ThreadOut {
            stats,
            cpu: ThreadCpu {
                role: plan.role,
                pinned_cpu: plan.pin,
                cpu,
            },
        })
    })
}

/// The thread's CPU counters at the measured window's start and end (`None`: not reached).
async fn window_cpu(shared: Arc<Shared>) -> (Option<CpuSnapshot>, Option<CpuSnapshot>) {
    let Some(schedule) = shared.schedule.get().copied() else {
        return (None, None);
    };
    sleep_until_ns(schedule.measure_start_ns).await;
    let before = CpuSnapshot::thread();
    loop {
        let end = shared.end_ns.load(Ordering::Relaxed);
        let now = now_ns();
        if now >= end || shared.over(now) {
            return (Some(before), Some(CpuSnapshot::thread()));
        }
        tokio::time::sleep(Duration::from_nanos(end - now).min(CHECK_EVERY)).await;
    }
}

async fn sleep_until_ns(deadline_ns: u64) {
    let wait = deadline_ns.saturating_sub(now_ns());
    if wait > 0 {
        tokio::time::sleep(Duration::from_nanos(wait)).await;
    }
}

/// How a connection's reading ended.
enum Ended {
    /// The stream is over for it (end message, window passed, deadline, run stopping).
    Done,
    /// The connection broke: a fault of this kind, and why.
    Broken(Fault, String),
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Disconnect,
    Protocol,
}

/// A client's connection: a WebSocket, or a gRPC call's stream.
// One per connection, made once: boxing the WebSocket would put a pointer between every
// message and its reader for no saving.
#[allow(clippy::large_enum_variant)]
pub enum Socket {
    /// msgbench's ticks or a WebSocket feed.
    Ws(TickWs),
    /// A gRPC server stream.
    Grpc(GrpcFeed),
    /// A Server-Sent Events stream.
    Sse(SseFeed),
    /// A UDP socket.
    Udp(UdpFeed),
}

impl Socket {
    /// The client's kind in the result: `native` (a WebSocket client of its own), or the
    /// feed's transport.
    fn kind(&self) -> &'static str {
        match self {
            Socket::Ws(_) => "native",
            Socket::Grpc(_) => "grpc",
            Socket::Sse(_) => "sse",
            Socket::Udp(_) => "udp",
        }
    }
}

/// Where a reconnection picks a stream up: the last event id read (an event stream's), and
/// how long the server asked clients to wait before reconnecting.
#[derive(Default)]
struct Resume {
    last_id: Option<Vec<u8>>,
    retry_ms: Option<u64>,
}

/// Longest wait before a reconnection a server's `retry:` may ask for.
const MAX_RETRY: Duration = Duration::from_secs(5);
/// Shortest.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// Reads one connection (and its reconnections) until the stream ends for it: what it
/// measured (a UDP client's, one entry per sender it heard).
async fn connection(
    plan: ConnPlan,
    socket: Socket,
    shared: Arc<Shared>,
    recorder: Rc<RefCell<Recorder>>,
) -> Vec<StreamStats> {
    let mut stats = StreamStats::new(plan.name.clone(), plan.group, socket.kind());
    let mut others = Vec::new();
    let mut reader = Reader::new(&plan, shared.clone());
    let mut socket = Some(socket);
    let mut resume = Resume::default();
    while let Some(open) = socket.as_mut() {
        let ended = std::future::poll_fn(|cx| match &mut *open {
            Socket::Ws(ws) => reader.poll(cx, ws, &mut stats, &recorder),
            Socket::Grpc(feed) => reader.poll_feed(cx, feed, &mut stats, &recorder),
            Socket::Sse(feed) => reader.poll_feed(cx, feed, &mut stats, &recorder),
            Socket::Udp(feed) => reader.poll_udp(cx, feed, &mut stats, &mut others, &recorder),
        })
        .await;
        let (fault, why) = match ended {
            Ended::Done => {
                let ack = shared.feed.is_none();
                if let Some(open) = socket.take() {
                    if let Socket::Udp(feed) = &open {
                        count_udp_faults(feed, &mut stats);
                    }
                    goodbye(open, reader.on_this_connection(stats.processed), ack).await;
                }
                break;
            }
            Ended::Broken(fault, why) => (fault, why),
        };
        if let Some(old) = socket.take() {
            let gone = let_go(old, &mut stats);
            // A stream that gave no id (or no `retry:`) this time resumes as the last did.
            resume = Resume {
                last_id: gone.last_id.or(resume.last_id.take()),
                retry_ms: gone.retry_ms.or(resume.retry_ms),
            };
        }
        match fault {
            Fault::Disconnect => stats.faults.disconnects += 1,
            Fault::Protocol => stats.faults.protocol_errors += 1,
        }
        let now = now_ns();
        if shared.over(now) || stats.end_seen {
            break;
        }
        if shared.on_close == OnClose::Reconnect {
            socket = reopen(&plan, &shared, &mut stats, &resume).await;
            match &socket {
                Some(_) => reader.reconnected(stats.processed),
                // Still reconnecting when the run ended: it did not end early.
                None if shared.over(now_ns()) => {}
                None => stats.closed = Some((why, now_ns())),
            }
            continue;
        }
        if shared.on_close == OnClose::Stop {
            let when = match shared.schedule.get() {
                Some(s) if now >= s.measure_start_ns => format!(
                    "{:.2} s into the measured window",
                    (now - s.measure_start_ns) as f64 / 1e9
                ),
                _ => "during the warm-up".into(),
            };
            let _ = shared.stopped_by.set(format!(
                "{why} (client {}, {when}); the run stopped (set `ticks.on_close = \"continue\"` or \"reconnect\" to go on)",
                plan.name
            ));
        }
        stats.closed = Some((why, now));
        break;
    }
    finished(stats, others)
}

/// A connection's statistics, finished: its own, then its other senders' (a UDP feed's),
/// which ended early with it if it did.
fn finished(stats: StreamStats, others: Vec<OtherSender>) -> Vec<StreamStats> {
    let closed = stats.closed.clone();
    let mut all = vec![stats];
    all.extend(others.into_iter().map(|mut o| {
        if o.stats.closed.is_none() && !o.over {
            o.stats.closed = closed.clone();
        }
        o.stats
    }));
    for s in &mut all {
        s.finish();
    }
    all
}

/// A UDP client's later sender (the first is the client's own): its statistics, its numbering
/// (a feed without sequence numbers), and whether it is read no more.
struct OtherSender {
    stats: StreamStats,
    counter: u64,
    /// Its stream went past the window, or broke (a protocol fault of its own).
    over: bool,
}

impl OtherSender {
    /// Sender `from`'s entry among `others` (a new one, named after the client, if new).
    fn of<'a>(
        others: &'a mut Vec<OtherSender>,
        client: &StreamStats,
        from: std::net::SocketAddr,
    ) -> &'a mut OtherSender {
        let k = match others.iter().position(|o| o.stats.source == Some(from)) {
            Some(k) => k,
            None => {
                let name = format!("{}@{from}", client.name);
                let mut stats = StreamStats::new(name, client.group, client.kind);
                stats.source = Some(from);
                others.push(OtherSender {
                    stats,
                    counter: 0,
                    over: false,
                });
                others.len() - 1
            }
        };
        &mut others[k]
    }

    /// What its message said of its stream: past the window, or broken (then counted as its
    /// fault, and its reading stops).
    fn ended(&mut self, ended: Option<Ended>) {
        match ended {
            None => {}
            Some(Ended::Done) => self.over = true,
            Some(Ended::Broken(fault, why)) => {
                match fault {
                    Fault::Disconnect => self.stats.faults.disconnects += 1,
                    Fault::Protocol => self.stats.faults.protocol_errors += 1,
                }
                self.stats.closed = Some((why, now_ns()));
                self.over = true;
            }
        }
    }
}

/// What a UDP socket lost and skipped: datagrams the kernel dropped, others' datagrams.
fn count_udp_faults(feed: &UdpFeed, stats: &mut StreamStats) {
    stats.faults.receive_buffer_drops += feed.receive_buffer_drops();
    stats.faults.protocol_errors += feed.strays;
    if stats.first_protocol_error.is_none() {
        stats.first_protocol_error = feed.first_stray.clone();
    }
}

/// Ends a broken connection (its connection may outlive the stream: it ends before another
/// opens); an event stream's says where a reconnection resumes, a UDP socket what it lost.
fn let_go(socket: Socket, stats: &mut StreamStats) -> Resume {
    match socket {
        Socket::Grpc(feed) => feed.close(),
        Socket::Udp(feed) => count_udp_faults(&feed, stats),
        Socket::Sse(feed) => {
            let resume = Resume {
                last_id: feed.last_id(),
                retry_ms: feed.retry_ms(),
            };
            feed.close();
            return resume;
        }
        Socket::Ws(_) => {}
    }
    Resume::default()
}

/// A new connection in place of a broken one, counted: an event stream that resumes goes on
/// with its sequence (what the server does not replay shows as a gap); any other starts anew.
async fn reopen(
    plan: &ConnPlan,
    shared: &Shared,
    stats: &mut StreamStats,
    resume: &Resume,
) -> Option<Socket> {
    let new = reconnect(plan, shared, stats, resume).await?;
    // Without an id to resume after, the server starts the stream afresh.
    match &shared.sse {
        Some(sse) if sse.stream.resume && resume.last_id.is_some() => stats.resumed(),
        _ => stats.reconnected(),
    }
    Some(new)
}

/// Connects again every 100 ms (or after what an event stream's `retry:` asked, up to
/// [`MAX_RETRY`]) until it works or the run is over; the new connection is named `<name>.<n>`
/// so the server keeps its counts apart.
async fn reconnect(
    plan: &ConnPlan,
    shared: &Shared,
    stats: &mut StreamStats,
    resume: &Resume,
) -> Option<Socket> {
    // A `retry: 0` would reconnect in a loop that never lets the thread's other clients run.
    let wait = resume.retry_ms.map_or(RECONNECT_EVERY, |ms| {
        Duration::from_millis(ms).clamp(MIN_RETRY, MAX_RETRY)
    });
    let name = format!("{}.{}", plan.name, stats.reconnects + 1);
    let url = plan.url.replacen(
        &format!("client={}", plan.name),
        &format!("client={name}"),
        1,
    );
    loop {
        sleep_unless_over(wait, shared).await;
        if shared.over(now_ns()) {
            return None;
        }
        match open_subscribed(&url, &name, plan.ordinal, shared, resume.last_id.as_deref()).await {
            Ok(socket) => return Some(socket),
            Err(OpenError::Connect(_)) => stats.faults.connect_failures += 1,
            Err(OpenError::Handshake(_) | OpenError::Stream(_) | OpenError::Bind(_)) => {
                stats.faults.handshake_failures += 1
            }
        }
    }
}

/// Sleeps `wait`, looking at the run's end every [`CHECK_EVERY`].
async fn sleep_unless_over(wait: Duration, shared: &Shared) {
    let until = tokio::time::Instant::now() + wait;
    while tokio::time::Instant::now() < until && !shared.over(now_ns()) {
        tokio::time::sleep_until(until.min(tokio::time::Instant::now() + CHECK_EVERY)).await;
    }
}

/// Opens a connection: a gRPC call for a gRPC stream, a request for an event stream (resuming
/// after `last_id`); else a WebSocket and, to a feed, its subscribe messages.
async fn open_subscribed(
    url: &str,
    name: &str,
    ordinal: usize,
    shared: &Shared,
    last_id: Option<&[u8]>,
) -> Result<Socket, OpenError> {
    if let Some(udp) = &shared.udp {
        let text = shared
            .feed
            .as_ref()
            .is_some_and(|f| f.format() != msgbench_model::feed::FeedFormat::Binary);
        return UdpFeed::open(udp, ordinal, shared.receive_buffer, text).map(Socket::Udp);
    }
    if let Some(plan) = &shared.grpc {
        return GrpcFeed::open(plan, name).await.map(Socket::Grpc);
    }
    if let Some(plan) = &shared.sse {
        return SseFeed::open(plan, name, last_id, shared.receive_buffer)
            .await
            .map(Socket::Sse);
    }
    let mut ws = open_tick_ws(url, shared.receive_buffer, &shared.tls).await?;
    if let Some(feed) = &shared.feed {
        for m in feed.subscribe() {
            ws.send_text(m).await.map_err(|e| {
                OpenError::Handshake(format!("the subscribe message could not be sent ({e})"))
            })?;
        }
    }
    Ok(Socket::Ws(ws))
}

/// Sends the last acknowledgement (not to a feed) and closes, briefly: the server may be gone.
/// A gRPC stream is cancelled.
async fn goodbye(socket: Socket, processed: u64, ack: bool) {
    let mut ws = match socket {
        Socket::Ws(ws) => ws,
        Socket::Grpc(feed) => return feed.close(),
        Socket::Sse(feed) => return feed.close(),
        Socket::Udp(_) => return,
    };
    let last_ack = ack.then(|| ack_text(processed));
    let bye = ws.close(last_ack.as_deref());
    let _ = tokio::time::timeout(Duration::from_millis(500), bye).await;
}

fn ack_text(processed: u64) -> String {
    format!(r#"{{"type":"ack","processed":{processed}}}"#)
}

/// The read side of one connection.
struct Reader {
    shared: Arc<Shared>,
    cost: crate::drivers::cost::Cost,
    window: Option<Schedule>,
    next_ack_ns: u64,
    ack_due: bool,
    /// Ticks processed before this connection opened.
    ack_base: u64,
    acked: u64,
    flushing: bool,
    check: Pin<Box<tokio::time::Sleep>>,
    /// A feed without sequence numbers: its messages, numbered as they come.
    counter: u64,
}

impl Reader {
    fn new(plan: &ConnPlan, shared: Arc<Shared>) -> Reader {
        Reader {
            shared,
            cost: crate::drivers::cost::Cost::new(plan.cost_ns, plan.work),
            window: None,
            next_ack_ns: 0,
            ack_due: false,
            ack_base: 0,
            acked: 0,
            flushing: false,
            check: Box::pin(tokio::time::sleep(CHECK_EVERY)),
            counter: 0,
        }
    }

    /// A new connection: its acknowledgements count from zero again.
    fn reconnected(&mut self, processed: u64) {
        self.ack_base = processed;
        self.acked = 0;
        self.ack_due = false;
        self.flushing = false;
    }

    /// What this connection has processed (acks are per connection).
    fn on_this_connection(&self, processed: u64) -> u64 {
        processed - self.ack_base
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut TickWs,
        stats: &mut StreamStats,
        recorder: &RefCell<Recorder>,
    ) -> Poll<Ended> {
        let (mut handled, mut fills) = (0, 0u32);
        while handled < MESSAGES_PER_POLL {
            match ws.next_message() {
                Ok(Some(message)) => {
                    handled += 1;
                    if let Some(ended) = self.on_message(message, stats, recorder) {
                        // A close's answer goes if the socket takes it now.
                        let _ = ws.poll_flush(cx);
                        return Poll::Ready(ended);
                    }
                }
                Ok(None) => {
                    // Answers to pings go before each read, not once per 1024 messages: a
                    // server that pings a lot and reads its pongs is not cut off as one that
                    // does not.
                    if ws.unflushed() {
                        if let Poll::Ready(Err(e)) = ws.poll_flush(cx) {
                            return Poll::Ready(broken(e));
                        }
                    }
                    match ws.poll_fill(cx) {
                        Poll::Ready(Ok(_)) => {
                            // Frames that make no message (pongs, empty continuations) can
                            // come without end: every few reads end the batch as messages
                            // do — the deadline looked at, the ack written, the thread's
                            // other connections let run (issue 43, finding 3).
                            fills += 1;
                            if fills == FILLS_PER_CHECK {
                                break;
                            }
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(broken(e)),
                        Poll::Pending => return self.idle(cx, ws, stats),
                    }
                }
                Err(e) => return Poll::Ready(broken(e)),
            }
        }
        // A long backlog never goes idle: look at the deadline between batches too.
        if self.shared.over(now_ns()) {
            return Poll::Ready(Ended::Done);
        }
        if let Err(e) = self.write_ack(cx, ws, stats.processed) {
            return Poll::Ready(e);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Nothing to read: acknowledge, and look at the clock and the flags now and then.
    fn idle(&mut self, cx: &mut Context<'_>, ws: &mut TickWs, stats: &StreamStats) -> Poll<Ended> {
        if let Err(e) = self.write_ack(cx, ws, stats.processed) {
            return Poll::Ready(e);
        }
        while self.check.as_mut().poll(cx).is_ready() {
            let now = now_ns();
            if self.shared.over(now) {
                return Poll::Ready(Ended::Done);
            }
            self.ack_due |= self.shared.feed.is_none()
                && stats.processed != self.acked
                && now >= self.next_ack_ns;
            if self.ack_due {
                if let Err(e) = self.write_ack(cx, ws, stats.processed) {
                    return Poll::Ready(e);
                }
            }
            self.check
                .as_mut()
                .reset(tokio::time::Instant::now() + CHECK_EVERY);
        }
        Poll::Pending
    }

    /// Writes a due acknowledgement (and answers to pings) and keeps flushing them.
    fn write_ack(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut TickWs,
        processed: u64,
    ) -> Result<(), Ended> {
        if self.ack_due && !self.flushing {
            ws.queue(
                OP_TEXT,
                ack_text(self.on_this_connection(processed)).as_bytes(),
            );
            self.acked = processed;
            self.ack_due = false;
            self.flushing = true;
        }
        if self.flushing || ws.unflushed() {
            match ws.poll_flush(cx) {
                Poll::Ready(Ok(())) => self.flushing = false,
                Poll::Ready(Err(e)) => return Err(broken(e)),
                Poll::Pending => {}
            }
        }
        Ok(())
    }

    /// Reads a feed source's messages (a gRPC stream's, an event stream's), like
    /// [`Reader::poll`] a WebSocket's.
    fn poll_feed(
        &mut self,
        cx: &mut Context<'_>,
        feed: &mut impl FeedSource,
        stats: &mut StreamStats,
        recorder: &RefCell<Recorder>,
    ) -> Poll<Ended> {
        for _ in 0..MESSAGES_PER_POLL {
            match feed.poll_message(cx) {
                Poll::Ready(Ok(message)) => {
                    if let Some(ended) = self.on_feed_message(message, stats, recorder) {
                        return Poll::Ready(ended);
                    }
                }
                Poll::Ready(Err(end)) => return Poll::Ready(self.feed_ended(end, stats)),
                Poll::Pending => return self.idle_check(cx),
            }
        }
        if self.shared.over(now_ns()) {
            return Poll::Ready(Ended::Done);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Reads a UDP feed's datagrams, each measured as its sender's: the first sender heard is
    /// the client's own (`stats`); each later one gets statistics of its own (`others`, with
    /// its numbering for a feed without sequence numbers), its sequence its own.
    fn poll_udp(
        &mut self,
        cx: &mut Context<'_>,
        feed: &mut UdpFeed,
        stats: &mut StreamStats,
        others: &mut Vec<OtherSender>,
        recorder: &RefCell<Recorder>,
    ) -> Poll<Ended> {
        for _ in 0..MESSAGES_PER_POLL {
            let ended = match feed.poll_datagram(cx) {
                Poll::Ready(Ok((from, message))) if *stats.source.get_or_insert(from) == from => {
                    self.on_feed_message(message, stats, recorder)
                }
                Poll::Ready(Ok((from, message))) => {
                    let o = OtherSender::of(others, stats, from);
                    if !o.over {
                        std::mem::swap(&mut self.counter, &mut o.counter);
                        let ended = self.on_feed_message(message, &mut o.stats, recorder);
                        std::mem::swap(&mut self.counter, &mut o.counter);
                        o.ended(ended);
                    }
                    // Another sender's stream ends only its own reading, never the client's.
                    None
                }
                Poll::Ready(Err(end)) => return Poll::Ready(self.feed_ended(end, stats)),
                Poll::Pending => return self.idle_check(cx),
            };
            if let Some(ended) = ended {
                return Poll::Ready(ended);
            }
        }
        if self.shared.over(now_ns()) {
            return Poll::Ready(Ended::Done);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// How a feed source's stream ended, for the connection.
    fn feed_ended(&self, end: StreamEnd, stats: &mut StreamStats) -> Ended {
        match end {
            StreamEnd::Finished => {
                stats.end_seen = true;
                let (now, end) = (now_ns(), self.shared.end_ns.load(Ordering::Relaxed));
                if now < end {
                    // Finished before the window did: what the window lacks is not lost, but
                    // the run must say why it has less.
                    let early = (end - now) as f64 / 1e9;
                    let why = format!("the server finished the stream (gRPC OK) {early:.2} s before the measured window's end");
                    stats.closed = Some((why, now));
                }
                Ended::Done
            }
            StreamEnd::Lost(why) => Ended::Broken(Fault::Disconnect, why),
            StreamEnd::Protocol(why) => Ended::Broken(Fault::Protocol, why),
        }
    }

    /// Nothing to read on a stream that takes no acknowledgements: look at the flags now and
    /// then.
    fn idle_check(&mut self, cx: &mut Context<'_>) -> Poll<Ended> {
        while self.check.as_mut().poll(cx).is_ready() {
            if self.shared.over(now_ns()) {
                return Poll::Ready(Ended::Done);
            }
            self.check
                .as_mut()
                .reset(tokio::time::Instant::now() + CHECK_EVERY);
        }
        Poll::Pending
    }

    #[inline]
    fn on_message(
        &mut self,
        message: Msg<'_>,
        stats: &mut StreamStats,
        recorder: &RefCell<Recorder>,
    ) -> Option<Ended> {
        match message {
            Msg::Text(payload) if self.shared.feed.is_none() && is_control(payload) => {
                self.on_control(payload, stats)
            }
            Msg::Text(payload) => self.on_payload(payload, true, stats, recorder),
            Msg::Binary(payload) => self.on_payload(payload, false, stats, recorder),
            Msg::Close(code, reason) => Some(Ended::Broken(
                Fault::Disconnect,
                format!(
                    "the server closed the connection ({})",
                    close_words(code, reason)
                ),
            )),
        }
    }

    /// Measures one message of a feed source.
    #[inline]
    fn on_feed_message(
        &mut self,
        message: FeedMessage<'_>,
        stats: &mut StreamStats,
        recorder: &RefCell<Recorder>,
    ) -> Option<Ended> {
        match message {
            FeedMessage::Bytes { payload, text } => self.on_payload(payload, text, stats, recorder),
            FeedMessage::Event { data, id } => {
                let feed = self.shared.feed.as_ref()?;
                let decoded = feed.decode_event(data, id, &mut self.counter);
                self.on_decoded(decoded, data, true, stats, recorder)
            }
        }
    }

    /// Measures one data message (a tick, or a feed's message): decode, check its place in
    /// the sequence, spend the simulated cost, record its latency.
    #[inline]
    fn on_payload(
        &mut self,
        payload: &[u8],
        text: bool,
        stats: &mut StreamStats,
        recorder: &RefCell<Recorder>,
    ) -> Option<Ended> {
        let decoded = match &self.shared.feed {
            Some(feed) => feed.decode(payload, text, &mut self.counter),
            None => Tick::decode(payload, text)
                .map(Some)
                .map_err(|_| crate::net::feed::FeedError::Shape),
        };
        self.on_decoded(decoded, payload, text, stats, recorder)
    }

    /// Checks a decoded message's place in the sequence, spends the simulated cost, records its
    /// latency.
    #[inline]
    fn on_decoded(
        &mut self,
        decoded: Result<Option<Tick>, crate::net::feed::FeedError>,
        payload: &[u8],
        text: bool,
        stats: &mut StreamStats,
        recorder: &RefCell<Recorder>,
    ) -> Option<Ended> {
        let tick = match decoded {
            Ok(Some(t)) => t,
            Ok(None) => return None, // a feed's message outside the filter
            Err(e) => {
                stats.faults.protocol_errors += 1;
                if stats.first_protocol_error.is_none() {
                    if let Some(feed) = &self.shared.feed {
                        stats.first_protocol_error = Some(feed.fault(payload, &e));
                    }
                }
                if stats.processed == 0 && stats.faults.protocol_errors >= SCHEMA_TRIES {
                    if let Some(feed) = &self.shared.feed {
                        return Some(Ended::Broken(Fault::Protocol, feed.mismatch(payload, &e)));
                    }
                }
                return None;
            }
        };
        if stats.processed == 0 {
            if let Some(why) = self.implausible_stamp(tick.intended_ns, payload, text) {
                return Some(Ended::Broken(Fault::Protocol, why));
            }
        }
        if self.window.is_none() {
            self.window = self.shared.schedule.get().copied();
        }
        if tick.intended_ns >= self.shared.end_ns.load(Ordering::Relaxed) {
            // A server that sends no `end`: a tick due after the window means every tick of
            // the window has arrived (the stream is FIFO).
            return Some(Ended::Done);
        }
        let completed = self.cost.spend();
        stats.on_tick(
            &tick,
            completed,
            self.window.as_ref(),
            &mut recorder.borrow_mut(),
        );
        if completed >= self.next_ack_ns && self.shared.feed.is_none() {
            self.next_ack_ns = completed + self.shared.ack_every_ns;
            self.ack_due = true;
        }
        None
    }

    /// Why a feed's first stamp cannot be right: further from this host's clock than a
    /// feed's latency can be (60 s for a monotonic stamp, which comes from this host; an hour
    /// for a wall-clock one, which allows for a host whose clock is off). A wrong `clock`, or a
    /// `timestamp` field that is not the stamp, would otherwise make every message fall outside
    /// the window: measured nowhere, with nothing said.
    fn implausible_stamp(&self, stamp_ns: u64, payload: &[u8], text: bool) -> Option<String> {
        let feed = self.shared.feed.as_ref()?;
        let now = now_ns();
        let off = now.abs_diff(stamp_ns);
        // A stamp from before this host booted is clamped to 0 (`FeedDecoder::to_monotonic`):
        // on a host up for less than the bound 0 is "near" now, yet it is no stamp of this run
        // (monotonic stamps read as unix-ns went unsaid so on a freshly booted host).
        if off <= stamp_bound_ns(feed.clock()) && stamp_ns != 0 {
            return None;
        }
        // A unit set wrong: say the one under which the stamp is now (µs read as ms was
        // "18446743158 s ahead", a u64 at its end, asking for the unit already set).
        if let Some(fits) = feed.clock_that_fits(payload, text, now) {
            return Some(format!(
                "the feed's first timestamp, read as {}, is not near this host's clock; read as {fits} it is: set [ticks.feed] clock = \"{fits}\"",
                feed.clock_name()
            ));
        }
        if stamp_ns == u64::MAX {
            return Some(format!(
                "the feed's first timestamp, read as {}, lies past the year 2554 (what 64-bit nanoseconds hold): check [ticks.feed] clock and that timestamp names the field holding the stamp",
                feed.clock_name()
            ));
        }
        Some(format!(
                "the feed's first timestamp is {:.0} s {} this host's clock: check [ticks.feed] clock (is it {}?) and that timestamp names the field holding the stamp",
                off as f64 / 1e9,
                if stamp_ns < now { "behind" } else { "ahead of" },
                feed.clock_name()
        ))
    }

    fn on_control(&mut self, payload: &[u8], stats: &mut StreamStats) -> Option<Ended> {
        match serde_json::from_slice::<ServerMessage>(payload) {
            Ok(ServerMessage::End { .. }) => {
                stats.end_seen = true;
                Some(Ended::Done)
            }
            Ok(_) => None,
            // A control message msgbench does not know: counted and skipped, like a malformed
            // tick (the stream goes on).
            Err(_) => {
                stats.faults.protocol_errors += 1;
                None
            }
        }
    }
}

fn broken(e: WsError) -> Ended {
    match e {
        WsError::Io(io) => {
            Ended::Broken(Fault::Disconnect, format!("the connection failed ({io})"))
        }
        WsError::Eof => Ended::Broken(Fault::Disconnect, "the server closed the connection".into()),
        WsError::Protocol(what) => Ended::Broken(
            Fault::Protocol,
            format!("the server broke the WebSocket protocol ({what})"),
        ),
    }
}

/// A close frame in words: `close code 1008, policy violation: "too slow"`.
fn close_words(code: u16, reason: &str) -> String {
    let name = match code {
        1000 => "normal closure",
        1001 => "going away",
        1002 => "protocol error",
        1003 => "unsupported data",
        1005 => "no status code",
        1007 => "invalid payload data",
        1008 => "policy violation",
        1009 => "message too big",
        1010 => "mandatory extension",
        1011 => "internal error",
        1012 => "service restart",
        1013 => "try again later",
        1014 => "bad gateway",
        _ => "",
    };
    let mut words = format!("close code {code}");
    if !name.is_empty() {
        words += &format!(", {name}");
    }
    if !reason.is_empty() {
        words += &format!(": {reason:?}");
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_frame_reads_as_words() {
        assert_eq!(close_words(1000, ""), "close code 1000, normal closure");
        assert_eq!(
            close_words(1008, "too slow"),
            "close code 1008, policy violation: \"too slow\""
        );
        assert_eq!(close_words(4001, "bye"), "close code 4001: \"bye\"");
    }
}

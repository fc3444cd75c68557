//! `msgbench serve grpc`: a built-in gRPC server over HTTP/2 (the `h2` crate), so that tests and
//! users can measure gRPC against a server whose latency they control. Every unary call, on any
//! path, is answered by echoing its request message back (`protos/msgbench.proto` describes
//! `msgbench.Echo/Call`; any other service's unary methods are echoed the same way) after the
//! service time — fixed or exponential, spent busy (the one server thread computes: calls are
//! served one at a time) or asleep (a timer holds the answer: any number at once). Stall
//! injection holds every answer due during a stall until its end, as `serve rpc` does. Server
//! reflection (`grpc.reflection.v1`, `v1alpha`) describes its services
//! ([`super::grpc_reflection`]).
//!
//! Bounded like the other built-in servers: concurrent streams per connection
//! (`SETTINGS_MAX_CONCURRENT_STREAMS`), message size (a larger one is answered
//! `RESOURCE_EXHAUSTED` and not read further), request bytes held across all calls (256 MiB:
//! past it, calls are answered `RESOURCE_EXHAUSTED`), header lists (64 KiB), connections (more
//! are closed on accept), idle connections (closed after 60 s without a call), and service
//! times (clamped). It runs on one thread.
use super::grpc_stream::{end_stream, grpc_head, window_takes};
use crate::cpu::ThreadCpuClock;
use bytes::{BufMut, Bytes, BytesMut};
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How the server answers.
#[derive(Debug, Clone)]
pub struct GrpcServerOptions {
    /// Service time of a call (the mean when `exponential`).
    pub service: Duration,
    /// Exponential service times instead of fixed ones.
    pub exponential: bool,
    /// Sleep the service time (a timer) instead of spinning it.
    pub sleep: bool,
    /// Longest service time; longer draws are clamped (and counted).
    pub max_service: Duration,
    /// Stall every this long (`None`: never) …
    pub stall_every: Option<Duration>,
    /// … for this long.
    pub stall_for: Duration,
    /// Largest request message, bytes.
    pub max_message: usize,
    /// Concurrent streams per connection.
    pub max_streams: u32,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Answer server reflection (else UNIMPLEMENTED, as a server without it).
    pub reflection: bool,
    /// Metadata every call must carry, name (lower case) and value; calls without it are
    /// answered UNAUTHENTICATED, reflection included.
    pub require: Option<(String, String)>,
}

impl Default for GrpcServerOptions {
    fn default() -> Self {
        GrpcServerOptions {
            service: Duration::ZERO,
            exponential: false,
            sleep: false,
            max_service: Duration::from_secs(10),
            stall_every: None,
            stall_for: Duration::from_millis(100),
            max_message: 4 << 20,
            max_streams: 256,
            max_connections: 4096,
            reflection: true,
            require: None,
        }
    }
}

/// What the server counted.
#[derive(Debug, Default)]
pub struct GrpcStats {
    /// Calls answered OK.
    pub answered: AtomicU64,
    /// Calls answered with an error status (too large, malformed, compressed).
    pub refused: AtomicU64,
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections closed on accept, over the limit.
    pub rejected: AtomicU64,
    /// Connections that ended with an HTTP/2 error (not a gRPC client, or gone mid-call).
    pub protocol_errors: AtomicU64,
    /// Service times clamped to the longest.
    pub clamped: AtomicU64,
    /// Tick streams started (`msgbench.Feed/Ticks`).
    pub streams: AtomicU64,
    /// Tick messages whose time came, sent or skipped.
    pub streamed: AtomicU64,
    /// Tick messages left out on purpose (`gap_every`).
    pub skipped: AtomicU64,
}

/// A running server.
pub struct GrpcServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
    cpu: Arc<OnceLock<ThreadCpuClock>>,
    /// Its counts, live.
    pub stats: Arc<GrpcStats>,
}

impl GrpcServer {
    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// CPU its thread used, ns.
    pub fn cpu_ns(&self) -> u64 {
        self.cpu.get().map_or(0, |c| c.read_ns())
    }

    /// Stops it: connections are dropped, the thread joined.
    pub fn stop(mut self) -> Arc<GrpcStats> {
        self.halt();
        self.stats.clone()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Starts the server on `listen` (port 0: any free one).
pub fn start(options: GrpcServerOptions, listen: SocketAddr) -> std::io::Result<GrpcServer> {
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(tokio::sync::Notify::new());
    let cpu = Arc::new(OnceLock::new());
    let stats = Arc::new(GrpcStats::default());
    let runtime = crate::harness::worker::runtime()?;
    let thread = {
        let (stop, wake, cpu, stats) = (stop.clone(), wake.clone(), cpu.clone(), stats.clone());
        std::thread::Builder::new()
            .name("msgbench-grpc-server".into())
            .spawn(move || {
                crate::harness::worker::prepare_server(0, None);
                if let Some(c) = ThreadCpuClock::current() {
                    let _ = cpu.set(c);
                }
                let local = tokio::task::LocalSet::new();
                local.block_on(&runtime, async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let shared = Rc::new(Shared::new(options, stats));
                    let stopped = async {
                        while !stop.load(Ordering::Acquire) {
                            wake.notified().await;
                        }
                    };
                    tokio::select! {
                        () = accept(listener, shared.clone()) => {}
                        () = stopped => {}
                    }
                    // Stopping: every connection is told with a GOAWAY (NO_ERROR), as a server
                    // shutting down gently does, and given a moment to finish its calls.
                    shared.closing.set(true);
                    shared.close.notify_waiters();
                    let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
                    while shared.open.get() > 0 && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                });
            })?
    };
    Ok(GrpcServer {
        addr,
        stop,
        wake,
        thread: Some(thread),
        cpu,
        stats,
    })
}

/// Request bytes all calls together may hold.
const HELD_BYTES: usize = 256 << 20;
/// A connection with no call for this long is closed.
const IDLE: Duration = Duration::from_secs(60);
/// How long a stopping server lets its connections finish after their GOAWAY.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// What every connection's calls share.
struct Shared {
    /// Request bytes held by calls being read or served.
    held: std::cell::Cell<usize>,
    /// The server is stopping ([`Self::close`] was raised).
    closing: std::cell::Cell<bool>,
    /// Raised when the server stops: every connection sends its GOAWAY.
    close: tokio::sync::Notify,
    options: GrpcServerOptions,
    stats: Arc<GrpcStats>,
    /// Stalls are counted from here.
    started: Instant,
    rng: std::cell::RefCell<rand::rngs::SmallRng>,
    open: std::cell::Cell<usize>,
    /// What server reflection answers.
    descriptors: super::grpc_reflection::Descriptors,
}

impl Shared {
    fn new(options: GrpcServerOptions, stats: Arc<GrpcStats>) -> Shared {
        Shared {
            held: std::cell::Cell::new(0),
            closing: std::cell::Cell::new(false),
            close: tokio::sync::Notify::new(),
            options,
            stats,
            started: Instant::now(),
            rng: std::cell::RefCell::new(rand::rngs::SmallRng::seed_from_u64(0x6772_7063)),
            open: std::cell::Cell::new(0),
            descriptors: super::grpc_reflection::Descriptors::own(),
        }
    }

    /// One call's service time.
    fn service(&self) -> Duration {
        let o = &self.options;
        let mut t = o.service;
        if o.exponential && !t.is_zero() {
            let u: f64 = self.rng.borrow_mut().gen_range(f64::MIN_POSITIVE..1.0);
            t = t.mul_f64(-u.ln());
        }
        if t > o.max_service {
            self.stats.clamped.fetch_add(1, Ordering::Relaxed);
            t = o.max_service;
        }
        t
    }

    /// When the stall under way at `now` ends (`None`: no stall now).
    fn stall_end(&self, now: Instant) -> Option<Instant> {
        let every = self.options.stall_every?;
        let since = now.duration_since(self.started).as_nanos();
        let into = since % every.as_nanos().max(1);
        let stall = self.options.stall_for.as_nanos();
        (into < stall).then(|| now + Duration::from_nanos((stall - into) as u64))
    }
}

async fn accept(listener: tokio::net::TcpListener, shared: Rc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await; // out of descriptors: breathe
            continue;
        };
        if shared.open.get() >= shared.options.max_connections {
            shared.stats.rejected.fetch_add(1, Ordering::Relaxed);
            continue; // dropped: closed on accept
        }
        let _ = tcp.set_nodelay(true);
        shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
        shared.open.set(shared.open.get() + 1);
        let shared = shared.clone();
        tokio::task::spawn_local(async move {
            if connection(tcp, &shared).await.is_err() {
                shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            }
            shared.open.set(shared.open.get() - 1);
        });
    }
}

/// Serves one connection's calls until the client goes.
async fn connection(tcp: tokio::net::TcpStream, shared: &Rc<Shared>) -> Result<(), h2::Error> {
    let mut conn = h2::server::Builder::new()
        .max_header_list_size(64 << 10)
        .max_concurrent_streams(shared.options.max_streams)
        .max_frame_size(1 << 20)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .handshake::<_, Bytes>(tcp)
        .await?;
    let calls = Rc::new(std::cell::Cell::new(0usize));
    let mut told = false;
    loop {
        if shared.closing.get() && !told {
            conn.graceful_shutdown();
            told = true;
        }
        let next = tokio::select! {
            next = tokio::time::timeout(IDLE, conn.accept()) => next,
            () = shared.close.notified(), if !told => continue,
        };
        let call = match next {
            Ok(Some(call)) => call,
            Ok(None) => return Ok(()),
            Err(_) if calls.get() == 0 => return Ok(()), // idle: closed
            Err(_) => continue,
        };
        let (request, respond) = call?;
        let (shared, calls) = (shared.clone(), calls.clone());
        calls.set(calls.get() + 1);
        tokio::task::spawn_local(async move {
            let mut held = 0;
            let _ = answer(request, respond, &shared, &mut held).await;
            shared.held.set(shared.held.get() - held);
            calls.set(calls.get() - 1);
        });
    }
}

/// Reads one call's request message, then streams ticks (`msgbench.Feed/Ticks`) or echoes the
/// message back after the service time (any other path).
async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
    held: &mut usize,
) -> Result<(), h2::Error> {
    if let Some((name, value)) = &shared.options.require {
        if request.headers().get(name.as_str()).map(|v| v.as_bytes()) != Some(value.as_bytes()) {
            return refuse(
                &mut respond,
                shared,
                16,
                "the call lacks the metadata this server requires, or carries another value (--require-metadata)",
            );
        }
    }
    if request.uri().path() == CHAT_PATH {
        return chat(request.into_body(), respond, shared).await;
    }
    if request.uri().path() == UPLOAD_PATH {
        return upload(request.into_body(), respond, shared).await;
    }
    let path = request.uri().path();
    if path == crate::net::grpc_reflection::V1 || path == crate::net::grpc_reflection::V1ALPHA {
        if !shared.options.reflection {
            return refuse(
                &mut respond,
                shared,
                12,
                "server reflection is off (--no-reflection)",
            );
        }
        let body = request.into_body();
        return super::grpc_reflection::serve(body, respond, &shared.descriptors).await;
    }
    let ticks = request.uri().path() == TICKS_PATH;
    let message = match read_message(request.into_body(), shared, held).await? {
        Ok(m) => m,
        Err((code, why)) => return refuse(&mut respond, shared, code, why),
    };
    if ticks {
        return stream_ticks(&message[5..], respond, shared).await;
    }
    serve_delay(shared).await;
    reply(respond, shared, message.freeze())
}

/// Holds a call for what the server model says: a stall under way at its arrival (to the
/// stall's end), then its service time — waited on a timer (`--work sleep`: any number at
/// once) or computed on this thread (busy: calls are served one at a time, as by one CPU).
async fn serve_delay(shared: &Shared) {
    if let Some(end) = shared.stall_end(Instant::now()) {
        tokio::time::sleep_until(end.into()).await;
    }
    let service = shared.service();
    if shared.options.sleep {
        tokio::time::sleep(service).await;
    } else {
        spin(service);
    }
}

/// Computes for `service` on this thread.
fn spin(service: Duration) {
    let until = Instant::now() + service;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Answers a unary-response call with one framed `message` and status OK.
fn reply(
    mut respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
    message: Bytes,
) -> Result<(), h2::Error> {
    let mut stream = respond.send_response(grpc_head(), false)?;
    stream.send_data(message, false)?;
    end_stream(&mut stream, ("0", None))?;
    shared.stats.answered.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A call's request message, framed (`Ok(Err)`: the status to refuse it with, and why).
async fn read_message(
    mut body: h2::RecvStream,
    shared: &Shared,
    held: &mut usize,
) -> Result<Result<BytesMut, (u32, &'static str)>, h2::Error> {
    let max = shared.options.max_message;
    let mut message = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if message.len() + chunk.len() > max + 5 {
            return Ok(Err((8, "message larger than the server's limit")));
        }
        if shared.held.get() + chunk.len() > HELD_BYTES {
            return Ok(Err((8, "the server holds too many bytes of calls")));
        }
        shared.held.set(shared.held.get() + chunk.len());
        *held += chunk.len();
        message.extend_from_slice(&chunk);
    }
    let length = message
        .get(1..5)
        .map(|l| u32::from_be_bytes(l.try_into().expect("4")) as usize);
    Ok(match message.first() {
        Some(0) if length == Some(message.len() - 5) => Ok(message),
        Some(1) => Err((12, "compressed messages are not served")),
        _ => Err((13, "not one length-prefixed gRPC message")),
    })
}

/// The path of the client-streaming count.
const UPLOAD_PATH: &str = "/msgbench.Echo/Upload";

/// `msgbench.Echo/Upload`: reads every message of the call (holding none of them), then,
/// after the service time (and a stall's end), answers one `Message` whose `seq` is how many
/// came.
async fn upload(
    mut body: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
) -> Result<(), h2::Error> {
    let mut frames = crate::net::grpc_frame::Frames::default();
    let mut count = 0u64;
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        frames.push(chunk);
        loop {
            match frames.cut() {
                Ok(Some(m)) if m.len() <= shared.options.max_message => count += 1,
                Ok(Some(_)) => {
                    return refuse(
                        &mut respond,
                        shared,
                        8,
                        "message larger than the server's limit",
                    )
                }
                Ok(None) => break,
                Err(_) => {
                    let why = "not a stream of uncompressed gRPC messages";
                    return refuse(&mut respond, shared, 13, why);
                }
            }
        }
    }
    if !frames.is_empty() {
        return refuse(&mut respond, shared, 13, "the call ended inside a message");
    }
    serve_delay(shared).await;
    let mut answer = BytesMut::new();
    let mut seq = [0u8; 10];
    let n = crate::net::proto_wire::put_varint(&mut seq, count);
    crate::net::grpc_frame::put_head(&mut answer, 1 + n);
    answer.put_u8(0x10); // msgbench.Message.seq
    answer.extend_from_slice(&seq[..n]);
    reply(respond, shared, answer.freeze())
}

/// The path of the bidirectional echo.
const CHAT_PATH: &str = "/msgbench.Echo/Chat";
/// Bytes of messages one chat stream holds (read, not yet echoed) before it stops reading.
const CHAT_HELD: usize = 4 << 20;

/// `msgbench.Echo/Chat`: every message of the stream echoed back after its own service time
/// (busy: computed as it is read, one at a time; sleep: a timer each, so any number overlap
/// and replies may pass one another), held to a stall's end like any answer. The stream stops
/// reading while it holds [`CHAT_HELD`] bytes or while its client does not take the replies
/// (their flow-control window), so neither a fast sender nor a slow reader costs memory.
async fn chat(
    body: h2::RecvStream,
    respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
) -> Result<(), h2::Error> {
    let mut held = 0;
    let result = chat_stream(body, respond, shared, &mut held).await;
    shared.held.set(shared.held.get() - held); // however the stream ended
    result
}

/// [`chat`]'s stream; `held` counts the bytes it holds (also in `shared.held`).
async fn chat_stream(
    mut body: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
    held: &mut usize,
) -> Result<(), h2::Error> {
    use std::cmp::Reverse;
    let mut stream = respond.send_response(grpc_head(), false)?;
    let mut frames = crate::net::grpc_frame::Frames::default();
    // Messages waiting for their service time to end: (due, arrival order, message).
    let mut due = std::collections::BinaryHeap::<Reverse<(Instant, u64, Bytes)>>::new();
    let (mut arrived, mut reading) = (0u64, true);
    let mut out = BytesMut::new();
    let status: (&'static str, Option<&'static str>) = loop {
        while due
            .peek()
            .is_some_and(|Reverse((t, ..))| *t <= Instant::now())
        {
            let Reverse((_, _, message)) = due.pop().expect("peeked");
            if !window_takes(&mut stream, 5 + message.len()).await? {
                return Ok(()); // the client reset the stream
            }
            crate::net::grpc_frame::put_head(&mut out, message.len());
            out.extend_from_slice(&message);
            *held -= message.len();
            shared.held.set(shared.held.get() - message.len());
            stream.send_data(out.split().freeze(), false)?;
            shared.stats.answered.fetch_add(1, Ordering::Relaxed);
        }
        if !reading && due.is_empty() {
            break ("0", None);
        }
        if shared.closing.get() {
            break ("14", Some("the server is stopping"));
        }
        let next = due.peek().map(|Reverse((t, ..))| *t);
        let room = *held < CHAT_HELD && shared.held.get() < HELD_BYTES;
        tokio::select! {
            data = body.data(), if reading && room => match data {
                Some(Ok(chunk)) => {
                    let _ = body.flow_control().release_capacity(chunk.len());
                    frames.push(chunk);
                    let refused = loop {
                        let message = match frames.cut() {
                            Ok(Some(m)) if m.len() <= shared.options.max_message => m,
                            Ok(Some(_)) => break Some(("8", Some("message larger than the server's limit"))),
                            Ok(None) => break None,
                            Err(_) => break Some(("13", Some("not a stream of uncompressed gRPC messages"))),
                        };
                        *held += message.len();
                        shared.held.set(shared.held.get() + message.len());
                        let mut at = Instant::now();
                        if let Some(end) = shared.stall_end(at) {
                            at = end; // read in a stall: answered at its end
                        }
                        let service = shared.service();
                        if shared.options.sleep {
                            at += service;
                        } else {
                            spin(service);
                        }
                        arrived += 1;
                        due.push(Reverse((at, arrived, message)));
                    };
                    if let Some(status) = refused {
                        break status;
                    }
                }
                Some(Err(e)) => return Err(e),
                None => reading = false,
            },
            () = sleep_until_instant(next) => {}
            () = shared.close.notified() => {}
        }
    };
    end_stream(&mut stream, status)
}

/// Sleeps until `at` (`None`: forever).
async fn sleep_until_instant(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The path of the server-streaming tick feed.
const TICKS_PATH: &str = "/msgbench.Feed/Ticks";
/// Most messages one DATA frame of the tick feed carries.
const TICKS_PER_WRITE: u64 = 4096;
/// Highest rate a tick feed may be asked for, messages/s.
const MAX_TICK_RATE: u64 = 10_000_000;

/// What a `msgbench.TickRequest` asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TickRequest {
    rate: u64,
    seconds: f64,
    size: usize,
    gap_every: u64,
}

impl TickRequest {
    /// The request in `message` (protobuf), or why it cannot be served.
    fn parse(message: &[u8], max_size: usize) -> Result<TickRequest, &'static str> {
        use crate::net::proto_wire::{read, Value};
        use msgbench_model::grpc::{ProtoField, ProtoKind};
        let field = |n: u32, kind| {
            let at = ProtoField {
                path: String::new(),
                numbers: vec![n],
                kind,
            };
            read(message, &at).map_err(|_| "not a msgbench.TickRequest")
        };
        let int = |n| -> Result<u64, &'static str> {
            match field(n, ProtoKind::Varint)? {
                Some(Value::Int(v)) => Ok(v),
                _ => Ok(0),
            }
        };
        let seconds = match field(2, ProtoKind::Double)? {
            Some(Value::Float(s)) => s,
            _ => 0.0,
        };
        let request = TickRequest {
            rate: match int(1)? {
                0 => 1000,
                r => r,
            },
            seconds,
            size: int(3)? as usize,
            gap_every: int(4)?,
        };
        if request.rate > MAX_TICK_RATE {
            return Err("rate is over 10000000 messages/s");
        }
        if !seconds.is_finite() || !(0.0..=86_400.0).contains(&seconds) {
            return Err("seconds is not between 0 (no end) and 86400");
        }
        if request.size > max_size.min(1 << 20) {
            return Err("size is over the server's message limit (or 1 MiB)");
        }
        Ok(request)
    }

    /// Messages in the whole stream (`u64::MAX`: no end).
    fn total(&self) -> u64 {
        if self.seconds == 0.0 {
            u64::MAX
        } else {
            (self.seconds * self.rate as f64).ceil() as u64
        }
    }

    /// Offset of message `seq`'s intended send time from the stream's start, ns.
    fn due_ns(&self, seq: u64) -> u64 {
        (seq as u128 * 1_000_000_000 / self.rate as u128) as u64
    }

    /// Whether `seq` is left out on purpose: a gap the client must see.
    fn skipped(&self, seq: u64) -> bool {
        self.gap_every > 0 && (seq + 1).is_multiple_of(self.gap_every)
    }
}

/// Appends message `seq` (`msgbench.Tick`: seq, its intended send time, the payload),
/// framed.
fn put_tick(out: &mut BytesMut, seq: u64, intended_ns: u64, size: usize) {
    use crate::net::proto_wire::put_varint;
    let mut head = [0u8; 32];
    let mut n = 0;
    for (key, value) in [(0x08, seq), (0x10, intended_ns)] {
        if value != 0 {
            head[n] = key;
            n += 1 + put_varint(&mut head[n + 1..], value);
        }
    }
    if size > 0 {
        head[n] = 0x1a;
        n += 1 + put_varint(&mut head[n + 1..], size as u64);
    }
    out.put_u8(0);
    out.put_u32((n + size) as u32);
    out.extend_from_slice(&head[..n]);
    out.put_bytes(0, size);
}

/// Streams ticks as the request asks: message `seq` is due `seq / rate` s after the start and
/// carries that time (CLOCK_MONOTONIC ns), so a client's latency counts from when it was due,
/// however late it went out. Messages due together go in one DATA frame, as many as the
/// client's flow-control window takes: a slow reader holds the stream back (the lateness shows
/// in its latency), never the server's memory. A stall holds the stream until its end. Ends
/// with `grpc-status` 0 after `seconds` (never when 0), or UNAVAILABLE when the server stops.
async fn stream_ticks(
    message: &[u8],
    mut respond: h2::server::SendResponse<Bytes>,
    shared: &Shared,
) -> Result<(), h2::Error> {
    let request = match TickRequest::parse(message, shared.options.max_message) {
        Ok(r) => r,
        Err(why) => return refuse(&mut respond, shared, 3, why),
    };
    let mut stream = respond.send_response(grpc_head(), false)?;
    shared.stats.streams.fetch_add(1, Ordering::Relaxed);
    let start_ns = crate::clock::now_ns();
    let per_message = 5 + 32 + request.size;
    let (total, mut next) = (request.total(), 0u64);
    let mut out = BytesMut::new();
    let status = loop {
        if next >= total {
            break ("0", None);
        }
        if shared.closing.get() {
            break ("14", Some("the server is stopping"));
        }
        if let Some(end) = shared.stall_end(Instant::now()) {
            tokio::time::sleep_until(end.into()).await;
            continue;
        }
        let elapsed = crate::clock::now_ns().saturating_sub(start_ns);
        let next_due = request.due_ns(next);
        if next_due > elapsed {
            tokio::time::sleep(Duration::from_nanos(next_due - elapsed)).await;
            continue;
        }
        // Every message due by now, as many as the window takes.
        let due = (elapsed as u128 * request.rate as u128 / 1_000_000_000) as u64 + 1;
        let mut count = due
            .min(total)
            .saturating_sub(next)
            .clamp(1, TICKS_PER_WRITE);
        stream.reserve_capacity(count as usize * per_message);
        let mut room = stream.capacity();
        while room < per_message {
            match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(n)) => room = n,
                Some(Err(e)) => return Err(e),
                None => return Ok(()), // the client reset the stream
            }
        }
        count = count.min((room / per_message) as u64).max(1);
        out.reserve(count as usize * per_message);
        for seq in next..next + count {
            if request.skipped(seq) {
                shared.stats.skipped.fetch_add(1, Ordering::Relaxed);
            } else {
                put_tick(&mut out, seq, start_ns + request.due_ns(seq), request.size);
            }
        }
        next += count;
        shared.stats.streamed.fetch_add(count, Ordering::Relaxed);
        if !out.is_empty() {
            // (a batch of skipped numbers sends nothing: empty DATA frames are a flood)
            stream.send_data(out.split().freeze(), false)?;
        }
    };
    end_stream(&mut stream, status)
}

/// Answers a call with an error status alone (trailers-only).
fn refuse(
    respond: &mut h2::server::SendResponse<Bytes>,
    shared: &Shared,
    code: u32,
    message: &'static str,
) -> Result<(), h2::Error> {
    shared.stats.refused.fetch_add(1, Ordering::Relaxed);
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", code.to_string())
        .header("grpc-message", message)
        .body(())
        .expect("a static response head");
    respond.send_response(head, true).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_hold_what_falls_in_them_until_their_end() {
        let options = GrpcServerOptions {
            stall_every: Some(Duration::from_secs(2)),
            stall_for: Duration::from_millis(500),
            ..GrpcServerOptions::default()
        };
        let s = Shared::new(options, Arc::default());
        let t0 = s.started;
        assert_eq!(
            s.stall_end(t0 + Duration::from_millis(100)),
            Some(t0 + Duration::from_millis(500))
        );
        assert_eq!(s.stall_end(t0 + Duration::from_millis(600)), None);
        assert_eq!(
            s.stall_end(t0 + Duration::from_millis(2100)),
            Some(t0 + Duration::from_millis(2500))
        );
    }

    #[test]
    fn service_times_are_clamped_and_counted() {
        let options = GrpcServerOptions {
            service: Duration::from_secs(60),
            ..GrpcServerOptions::default()
        };
        let s = Shared::new(options, Arc::default());
        assert_eq!(s.service(), Duration::from_secs(10));
        assert_eq!(s.stats.clamped.load(Ordering::Relaxed), 1);
    }
}

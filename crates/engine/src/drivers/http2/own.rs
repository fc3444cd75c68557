//! msgbench's own HTTP/2 client: cleartext unary requests and gRPC calls, the default there
//! (`http.client`). Its protocol state without I/O is [`super::wire`] (why it was written, with
//! the measurement, is said there); this is its socket turn. Seen from the caller and the
//! results it behaves as the `h2` crate's client ([`super::h2_crate`]) does: the window is how
//! many streams a connection carries; requests the server has no stream for yet wait here in
//! order; a response is judged by the same [`Judge`]; what a connection does when the server
//! retires it, when it goes down and when it opens again is the same [`Slot`]'s (here, what a
//! retired connection did not take is sent again on the new one).
use super::connect::OPEN_TIMEOUT;
use super::rules::{
    answer, open_all, ready_to_serve, serve, Judge, Outcome, Reopened, Slot, SocketTurn,
};
use super::wire::{Client, Finished, State};
use super::H2Plan;
use crate::drivers::request_response::caller::{Down, Ends, Event, Turns, FLUSH, RESET};
use crate::error::EngineError;
use bytes::Bytes;
use msgbench_model::result::ErrorCount;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Reads from one socket in one turn, at most (then the others get theirs).
const READS_PER_TURN: usize = 16;
/// Bytes asked of the socket per read.
const READ_SIZE: usize = 64 << 10;

/// A request class as this client sends it.
pub struct WireRequest {
    /// Its header block (HPACK, encoded once).
    pub block: Vec<u8>,
    /// Its body (empty: none).
    pub body: Bytes,
    /// Its response body is checked (kept until the stream ends).
    pub keep: bool,
}

/// How this client sends a plan's requests.
pub struct WirePlan {
    /// Per class.
    pub requests: Vec<WireRequest>,
    /// Streams per connection at most (the caller's window).
    pub window: usize,
    /// The run has no schedule (closed loop, `immediate`): the client may sleep while answers
    /// come steadily ([`Linger`]).
    pub unpaced: bool,
}

/// What a run on this client says of how it measured (its result's notes): the same words for
/// every run of a sweep, so a report says them once. `awaited_most`: the most answers a caller
/// thread could await (its connections × the streams each may have open) — with fewer than
/// [`Linger::SHARE`], the client never sleeps.
pub fn how_it_measures(plan: &WirePlan, awaited_most: usize) -> Vec<String> {
    use msgbench_model::http::HTTP2_CLIENT_NOTE;
    let mut notes = vec![format!(
        "{HTTP2_CLIENT_NOTE}msgbench's own client (http.client = \"h2\" selects the h2 crate's)"
    )];
    if plan.unpaced && awaited_most >= Linger::SHARE {
        notes.push("unpaced HTTP/2: while answers come steadily the client sleeps between looks at its sockets instead of waiting for each, every sleep kept to about 1/32 of a request's latency (docs/http2-grpc.md)".into());
    }
    notes
}

impl WirePlan {
    /// The requests of `config` (cleartext, unary: the model chose this client) with their
    /// header blocks encoded once. `unpaced`: the run has no schedule.
    pub fn new(
        config: &msgbench_model::http::HttpConfig,
        window: usize,
        unpaced: bool,
    ) -> WirePlan {
        let requests = (config.requests.iter())
            .map(|r| WireRequest {
                block: super::hpack::request_block(
                    &r.parts.method,
                    "http",
                    &config.authority,
                    &r.parts.target,
                    &r.parts.headers,
                ),
                body: Bytes::from(r.parts.body.clone()),
                keep: r.expect.is_some() || (config.json_rpc && !r.grpc),
            })
            .collect();
        WirePlan {
            requests,
            window,
            unpaced,
        }
    }
}

/// When an unpaced run's client, with nothing to do, sleeps rather than waits in epoll for
/// its sockets' news. Why: a client that waits in epoll is woken by each write of the server
/// — one answer or two at a time from a saturated nginx — and on loopback the server's
/// `writev` pays for that wake-up (an inter-processor interrupt on a VM); measured: nginx
/// spent 15.4 µs of CPU per request serving msgbench at 4 × 256 streams and 12.8 µs with the
/// client sleeping 10 µs at a time, and served 1.14× h2load's requests/s instead of 0.98×
/// (`bench/http2-vs-h2load.sh`, docs/http2-grpc.md). A sleeping client is woken by its own
/// timer and finds several answers at once.
///
/// What it costs, and how it is kept small: an answer is read up to one sleep late, and the
/// request that replaces it goes out as late. Each sleep is adjusted after it by what it
/// brought, so that a sleep brings between 1/64 and 1/32 of the answers the client awaits
/// (halved when it brought more, doubled when less, from 20 µs, between 10 µs and 1 ms); by
/// Little's law that is a sleep of about 1/32 of a request's mean latency, so the server
/// keeps ~31/32 of its work through a sleep and a closed loop's latency grows by ~1/64 at
/// most even when the server is not saturated (when it is, the wait only moves from the
/// server's queue to the client's socket: latency is the window over the throughput). No
/// sleep with fewer than 32 answers awaited; a sleep that finds nothing ends the sleeping
/// until the next answer; a server that makes even a 10 µs sleep bring too much turns it off
/// for [`Linger::PAUSE_NS`] (so only a series' first sleeps, 20 µs and then 10, are not yet
/// fitted to the server). Paced runs never sleep here: their due requests and answers are timed to
/// the schedule.
#[derive(Debug, Default)]
pub struct Linger {
    /// The next sleep, ns (below [`Linger::LEAST_NS`]: none).
    nap_ns: u64,
    /// The last idle turn slept, with this many answers awaited.
    slept_awaiting: Option<usize>,
    /// Answers read since the loop last went idle.
    answers: usize,
    /// No sleep before this time (ns): the server answered too fast.
    paused_until_ns: u64,
}

impl Linger {
    /// The first sleep.
    const FIRST_NS: u64 = 20_000;
    /// Shorter sleeps are not worth their wake-up: wait in epoll.
    const LEAST_NS: u64 = 10_000;
    /// The longest sleep.
    const MOST_NS: u64 = 1_000_000;
    /// A sleep should bring at most 1/SHARE of the answers awaited (and none is taken with
    /// fewer awaited).
    pub const SHARE: usize = 32;
    /// How long a server too fast for the bound keeps the client from sleeping.
    const PAUSE_NS: u64 = 100_000_000;

    /// An answer was read.
    pub fn answered(&mut self) {
        self.answers += 1;
    }

    /// The loop has nothing to do at `now_ns` and awaits `awaited` answers: how long to sleep
    /// (`None`: wait in epoll).
    pub fn idle(&mut self, awaited: usize, now_ns: u64) -> Option<std::time::Duration> {
        let answers = std::mem::take(&mut self.answers);
        match self.slept_awaiting.take() {
            // The last sleep brought nothing: the server is slow or gone; wait for news.
            Some(_) if answers == 0 => self.nap_ns = 0,
            Some(before) if answers * Self::SHARE > before => {
                self.nap_ns /= 2;
                if self.nap_ns < Self::LEAST_NS {
                    self.paused_until_ns = now_ns + Self::PAUSE_NS;
                }
            }
            Some(before) if answers * Self::SHARE * 2 < before => {
                self.nap_ns = (self.nap_ns * 2).min(Self::MOST_NS);
            }
            Some(_) => {}
            // Woken by an answer: sleeping may start (again).
            None if answers > 0 && self.nap_ns < Self::LEAST_NS => self.nap_ns = Self::FIRST_NS,
            None => {}
        }
        if self.nap_ns < Self::LEAST_NS || awaited < Self::SHARE || now_ns < self.paused_until_ns {
            return None;
        }
        self.slept_awaiting = Some(awaited);
        Some(std::time::Duration::from_nanos(self.nap_ns))
    }
}

/// The first bytes of `input` as text a message can quote (`"HTTP/1.1 400 Bad Request\r\n…"`):
/// printable ASCII as it is, anything else escaped, at most 32 bytes.
fn first_bytes(input: &[u8]) -> String {
    let shown: String = (input.iter().take(32))
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    let more = if input.len() > 32 { "…" } else { "" };
    format!("\"{shown}{more}\"")
}

/// `input` begins with a SETTINGS frame's head: the server speaks HTTP/2, however badly.
fn settings_first(input: &[u8]) -> bool {
    input.get(3) == Some(&4)
}

/// Why a socket's turn ended its connection.
enum Lost {
    /// The socket closed or failed.
    Socket,
    /// The server broke the protocol, or ended the connection with an error: the reason.
    Protocol(String),
}

/// One connection: its socket and its protocol state.
struct Wire {
    socket: TcpStream,
    client: Client,
    /// Bytes read, unread from `start` to `end`.
    input: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of `client.out` already written.
    written: usize,
    /// Bytes read, in all.
    received: u64,
    /// The last write stopped with bytes left (the socket's buffer is full).
    write_blocked: bool,
    /// Whether the socket may have bytes to read.
    readable: Arc<Readable>,
}

/// A socket's readability, as its own waker hears it from tokio: the flag is set and the event
/// loop woken.
struct Readable {
    flag: AtomicBool,
    task: futures_util::task::AtomicWaker,
}

impl futures_util::task::ArcWake for Readable {
    fn wake_by_ref(this: &Arc<Self>) {
        this.flag.store(true, Ordering::Release);
        this.task.wake();
    }
}

impl Wire {
    /// It has bytes for the server not written yet, and the socket took all it was last
    /// given (else tokio wakes this thread when it takes more).
    fn holds(&self) -> bool {
        self.written < self.client.out.len() && !self.write_blocked
    }

    /// Opens a connection: TCP, the preface and settings, the server's settings and a PING
    /// answered (the proof that it speaks HTTP/2), within [`OPEN_TIMEOUT`].
    async fn open(plan: &H2Plan, window: usize) -> Result<Wire, EngineError> {
        let problem = |problem: String| EngineError::Http2 {
            address: plan.url.clone(),
            problem,
        };
        // Whether the server's SETTINGS came, known after a timeout dropped the opening.
        let settings_seen = std::cell::Cell::new(false);
        let opening = async {
            let socket =
                TcpStream::connect(plan.address)
                    .await
                    .map_err(|source| EngineError::Connect {
                        address: plan.url.clone(),
                        source,
                        hint: plan.hint.clone(),
                    })?;
            let _ = socket.set_nodelay(true);
            let stream_window = plan.config.max_response.clamp(65_535, 16 << 20) as u32;
            let mut wire = Wire {
                socket,
                client: Client::new(window, stream_window, plan.config.max_response),
                input: vec![0; READ_SIZE],
                start: 0,
                end: 0,
                received: 0,
                write_blocked: false,
                readable: Arc::new(Readable {
                    flag: AtomicBool::new(true),
                    task: futures_util::task::AtomicWaker::new(),
                }),
                written: 0,
            };
            let not_h2 = if plan.config.requests.iter().any(|r| r.grpc) {
                "is it a gRPC server?"
            } else {
                "use version = \"1.1\""
            };
            std::future::poll_fn(|cx| match wire.read(cx, &mut |_, _, _| {}).and_then(|s| wire.flush(cx).map(|()| s)) {
                Err(Lost::Socket) => Poll::Ready(Err(problem(format!(
                    "the server closed the connection before answering HTTP/2's preface: it does not speak HTTP/2 (then {not_h2}), or it is at its connection limit"
                )))),
                // What it sent instead of HTTP/2's SETTINGS says what it speaks (`HTTP/1.1
                // 400 …`, `<!DOCTYPE …`) better than the frame it would make.
                Err(Lost::Protocol(why)) if !wire.client.settings_seen && !settings_first(&wire.input[..wire.end]) => Poll::Ready(Err(problem(format!(
                    "the server does not speak HTTP/2: it answered the preface with {} ({why}); is it an HTTP/1.1 server? {not_h2}",
                    first_bytes(&wire.input[..wire.end])
                )))),
                Err(Lost::Protocol(why)) => Poll::Ready(Err(problem(format!(
                    "the server broke HTTP/2 while the connection opened ({why})"
                )))),
                Ok(_) if wire.client.settings_seen && wire.client.ping_answered => {
                    Poll::Ready(Ok(()))
                }
                Ok(_) => {
                    settings_seen.set(wire.client.settings_seen);
                    Poll::Pending
                }
            })
            .await?;
            Ok(wire)
        };
        match tokio::time::timeout(OPEN_TIMEOUT, opening).await {
            Ok(r) => r,
            Err(_) if settings_seen.get() => Err(problem(format!(
                "the server sent its HTTP/2 SETTINGS but answered no PING within {} s (a server too busy to answer, or one that stops reading)",
                OPEN_TIMEOUT.as_secs()
            ))),
            Err(_) => Err(problem(format!(
                "no HTTP/2 answer within {} s (is it an HTTP/2 port?)",
                OPEN_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Reads what came, handing ended streams to `done` (what it has to answer waits in
    /// `client.out` for [`Wire::flush`]).
    fn read(
        &mut self,
        cx: &mut Context<'_>,
        done: &mut dyn FnMut(u64, u32, Finished<'_>),
    ) -> Result<State, Lost> {
        let mut state = if self.client.spent() {
            State::Retired
        } else {
            State::Open
        };
        // Only a socket tokio said is readable is asked (its own waker sets the flag): asking
        // every socket on every turn was 11 % of the client's user-space CPU (tokio's
        // readiness checks, `perf`, nginx 4 × 64 streams).
        self.readable.task.register(cx.waker());
        if !self.readable.flag.load(Ordering::Acquire) {
            return Ok(state);
        }
        let readable = self.readable.clone();
        let waker = futures_util::task::waker_ref(&readable);
        let mut socket_cx = Context::from_waker(&waker);
        for read in 0.. {
            if read == READS_PER_TURN {
                cx.waker().wake_by_ref(); // more may be there: the next turn reads on
                break;
            }
            self.make_room();
            let mut buf = ReadBuf::new(&mut self.input[self.end..]);
            // Cleared before a read that may find nothing: tokio then keeps the waker, and
            // sets it again when epoll has news.
            self.readable.flag.store(false, Ordering::Release);
            // tokio's `poll_read` (not `try_read`): a read shorter than the room offered
            // drained the socket, and it then waits for epoll's next word instead of asking
            // the kernel for an EAGAIN (recvfrom calls per response 2.5 → 1.4 against `try_read_buf`,
            // `perf stat`, nginx 4 × 64 streams).
            match Pin::new(&mut self.socket).poll_read(&mut socket_cx, &mut buf) {
                Poll::Pending => break,
                Poll::Ready(Err(_)) => return Err(Lost::Socket),
                Poll::Ready(Ok(())) => self.readable.flag.store(true, Ordering::Release),
            }
            let n = buf.filled().len();
            self.end += n;
            self.received += n as u64;
            let (used, result) =
                (self.client).receive_from(&self.input[self.start..self.end], done);
            self.start += used;
            state = result.map_err(Lost::Protocol)?;
            if n == 0 {
                // Closed; what came before the end still counted (a GOAWAY, last answers).
                return Err(Lost::Socket);
            }
        }
        if self.client.spent() {
            state = State::Retired;
        }
        Ok(state)
    }

    /// Room for the next read: the unread part moved to the front, and the buffer grown when
    /// a frame is larger than it (frames are bounded, so the buffer is).
    fn make_room(&mut self) {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.input.len() - self.end >= READ_SIZE / 2 {
            return;
        }
        self.input.copy_within(self.start..self.end, 0);
        (self.start, self.end) = (0, self.end - self.start);
        if self.input.len() - self.end < READ_SIZE / 2 {
            self.input.resize(self.input.len() * 2, 0);
        }
    }

    /// Writes what the client has for the server, as far as the socket takes it.
    fn flush(&mut self, cx: &mut Context<'_>) -> Result<(), Lost> {
        let out = &mut self.client.out;
        self.write_blocked = false;
        while self.written < out.len() {
            match Pin::new(&mut self.socket).poll_write(cx, &out[self.written..]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Err(Lost::Socket),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Pending => {
                    self.write_blocked = true;
                    break;
                }
            }
        }
        if self.written == out.len() {
            out.clear();
            self.written = 0;
        } else if self.written >= READ_SIZE {
            out.drain(..self.written);
            self.written = 0;
        }
        Ok(())
    }
}

/// One connection: the open one, those the server retired, the requests waiting for a stream.
type Conn = Slot<Wire>;

/// Answers connection `c` awaits from the server: its streams open, its retired connections'
/// too.
fn awaited(c: &Conn) -> usize {
    let open = |w: &Wire| w.client.open_streams();
    c.open.as_ref().map_or(0, open) + c.retiring.iter().map(open).sum::<usize>()
}

/// The sockets of one caller.
pub struct WireIo {
    plan: Arc<H2Plan>,
    ends: Ends,
    judge: Judge,
    conns: Vec<Conn>,
    errors: Vec<ErrorCount>,
    /// Output is held until the runtime's next pass ([`WireIo::write`]).
    awaiting_pass: bool,
    /// Passes of the runtime since output was held.
    passes: u32,
    /// Sleeps of an unpaced run.
    linger: Linger,
}

/// Passes of the runtime output is held for at most, while reads keep bringing answers.
const MAX_PASSES: u32 = 2;

/// Runs the sockets as `super::run` asks, on an already prepared runtime.
pub(super) fn run(
    runtime: tokio::runtime::Runtime,
    plan: Arc<H2Plan>,
    connections: usize,
    ends: Ends,
    ready: Sender<Result<(), EngineError>>,
    turns: Option<&mut dyn Turns>,
) -> Vec<ErrorCount> {
    let window = own_plan(&plan).window;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let open = || Wire::open(&plan, window);
        let Some(opened) = open_all(connections, open, &ready, &plan).await else {
            return Vec::new();
        };
        let conns = opened.into_iter().map(Slot::up).collect();
        let Some(timer) = ready_to_serve(turns.is_some(), &ready) else {
            return Vec::new();
        };
        let mut io = WireIo {
            judge: Judge::new(&plan.config),
            plan,
            ends,
            conns,
            errors: Vec::new(),
            awaiting_pass: false,
            passes: 0,
            linger: Linger::default(),
        };
        serve(&mut io, turns, timer).await;
        io.errors
    })
}

/// The plan's requests as this client sends them (`super::run` runs this client only with
/// them).
fn own_plan(plan: &H2Plan) -> &WirePlan {
    plan.own
        .as_ref()
        .expect("msgbench's own client has its plan")
}

impl SocketTurn for WireIo {
    fn ends(&mut self) -> &mut Ends {
        &mut self.ends
    }

    /// One turn: takes the caller's requests, reads and writes every connection, starts the
    /// streams the server has room for, hands over what ended.
    fn turn(&mut self, cx: &mut Context<'_>) -> bool {
        while let Some(r) = self.ends.requests.pop() {
            let i = r.conn as usize;
            if r.class == RESET {
                self.down(i, Down::Reset, None);
            } else if r.class != FLUSH {
                self.conns[i].wait(r.class, r.id);
            }
        }
        let mut read = false;
        for i in 0..self.conns.len() {
            read |= self.service(i, cx);
        }
        self.write(cx, read);
        self.reopen(cx);
        self.ends.end_turn(cx)
    }

    fn begin_poll(&mut self) {
        if std::mem::take(&mut self.awaiting_pass) {
            self.passes += 1;
        }
    }

    fn linger(&mut self) -> Option<Duration> {
        // Paced: answers are read as they come. Output held for a pass of the runtime goes
        // first (a sleep would hold it too).
        let held = (self.conns.iter()).any(|c| c.open.as_ref().is_some_and(Wire::holds));
        if !own_plan(&self.plan).unpaced || held {
            return None;
        }
        let awaited = self.conns.iter().map(awaited).sum();
        self.linger.idle(awaited, crate::clock::now_ns())
    }
}

impl WireIo {
    /// Writes what the connections hold for their servers once the runtime has had a look
    /// at the sockets since it was held (a `yield_now`: epoll without waiting) and this turn
    /// read nothing more — whose answers the caller has not turned into requests yet. Why:
    /// written at once, requests went out ~1 per segment against a saturated nginx, which then
    /// answered in as small batches and served 0.86× as many requests a second as it did for
    /// the `h2` path or h2load (5 rounds of `bench/http2-vs-h2load.sh`); held for one pass of
    /// the runtime, it serves as many (1.00×) at the same CPU per request. The pass costs no
    /// sleep: a few µs, in the requests' latency like any time before they are written.
    fn write(&mut self, cx: &mut Context<'_>, read: bool) {
        // A socket that did not take all it was given is written as soon as it takes more
        // (no syscall while it is not writable: tokio knows).
        for i in 0..self.conns.len() {
            let Some(wire) = self.conns[i].open.as_mut() else {
                continue;
            };
            if wire.write_blocked && wire.flush(cx).is_err() {
                let why = "HTTP/2 connection lost".to_string();
                self.down(i, Down::Closed, Some(why));
            }
        }
        let held = (self.conns.iter()).any(|c| c.open.as_ref().is_some_and(|w| w.holds()));
        if !held {
            self.passes = 0;
            return;
        }
        if self.passes == 0 || (read && self.passes < MAX_PASSES) {
            self.awaiting_pass = true;
            let _ = std::pin::pin!(tokio::task::yield_now()).poll(cx);
            return;
        }
        self.passes = 0;
        for i in 0..self.conns.len() {
            let Some(wire) = self.conns[i].open.as_mut() else {
                continue;
            };
            if wire.flush(cx).is_err() {
                let why = "HTTP/2 connection lost".to_string();
                self.down(i, Down::Closed, Some(why));
            }
        }
    }

    /// Reads and starts streams on connection `i` (and reads those it retired); says whether
    /// it read anything.
    fn service(&mut self, i: usize, cx: &mut Context<'_>) -> bool {
        let (read, ended) = self.read_connection(i, cx);
        match ended {
            Some(Ended::Lost(why)) => self.down(i, Down::Closed, Some(why)),
            Some(Ended::Retired) => {
                // What the last read has to answer (window updates, acks) goes now: a retired
                // connection is next written when it is next read.
                if let Some(wire) = self.conns[i].open.as_mut() {
                    let _ = wire.flush(cx);
                }
                self.retire(i);
            }
            None => self.start_streams(i),
        }
        read
    }

    /// Reads what connection `i` and those it retired have brought, handing ended streams
    /// over; says whether it read anything and whether its open connection ended.
    fn read_connection(&mut self, i: usize, cx: &mut Context<'_>) -> (bool, Option<Ended>) {
        let WireIo {
            ends,
            judge,
            conns,
            errors,
            linger,
            ..
        } = self;
        let c = &mut conns[i];
        let conn = i as u32;
        let mut requeued = Vec::new();
        let mut done = |id: u64, class: u32, how: Finished<'_>| {
            let outcome = match how {
                Finished::Answered {
                    status,
                    grpc_status,
                    body,
                } => match http::StatusCode::from_u16(status) {
                    Ok(status) => judge.judge(class as usize, status, grpc_status, body),
                    Err(_) => Outcome::Failed(format!("HTTP {status}")),
                },
                Finished::Failed(why) => Outcome::Failed(why),
                Finished::Unprocessed => return requeued.push((class, id)),
            };
            linger.answered();
            answer(errors, ends, conn, id, outcome);
        };
        // Retired connections: done once they have no stream left; a lost one fails what it
        // still had.
        c.retiring.retain_mut(|old| {
            let ended = match old.read(cx, &mut done).and_then(|_| old.flush(cx)) {
                Ok(()) => return old.client.open_streams() > 0,
                Err(Lost::Socket) => "HTTP/2 connection lost".to_string(),
                Err(Lost::Protocol(why)) => why,
            };
            old.client.fail_all(&ended, &mut done);
            false
        });
        let (mut read, mut ended) = (false, None);
        if let Some(wire) = c.open.as_mut() {
            let before = wire.received;
            let outcome = wire.read(cx, &mut done);
            read = wire.received != before;
            ended = match outcome {
                Ok(State::Open) => None,
                Ok(State::Retired) => Some(Ended::Retired),
                // Closed after its GOAWAY (NO_ERROR): retired; streams it still had fail
                // when it is next read, as a retired connection's.
                Err(Lost::Socket) if wire.client.spent() => Some(Ended::Retired),
                Err(Lost::Socket) => Some(Ended::Lost("HTTP/2 connection lost".to_string())),
                Err(Lost::Protocol(why)) => Some(Ended::Lost(why)),
            };
        }
        // Streams the server did not take go first on the next connection, in their order.
        requeued.sort_unstable_by_key(|&(_, id)| std::cmp::Reverse(id));
        for r in requeued {
            c.waiting.push_front(r);
        }
        (read, ended)
    }

    /// Starts the waiting requests of connection `i` the server has room for.
    fn start_streams(&mut self, i: usize) {
        let c = &mut self.conns[i];
        let Some(wire) = c.open.as_mut() else {
            return;
        };
        let requests = &own_plan(&self.plan).requests;
        while wire.client.can_start() {
            let Some((class, id)) = c.waiting.pop_front() else {
                break;
            };
            let request = &requests[class as usize];
            (wire.client).start(id, class, &request.block, &request.body, request.keep);
        }
        let max = wire.client.peer_max_streams;
        if max != u32::MAX {
            self.plan
                .max_streams
                .fetch_min(max as usize, Ordering::Relaxed);
        }
        for ns in wire.client.flow_waits.drain(..) {
            self.ends.push(Event::FlowControlWait { ns });
        }
    }

    /// The server retired connection `i` gracefully ([`Slot::retire`]); the oldest retired
    /// one, dropped to make room, fails what it still had.
    fn retire(&mut self, i: usize) {
        if let Some(mut oldest) = self.conns[i].retire() {
            let why = "HTTP/2 connection dropped (too many retired connections)";
            let (errors, ends) = (&mut self.errors, &mut self.ends);
            oldest.client.fail_all(why, &mut |id, _, _| {
                answer(errors, ends, i as u32, id, Outcome::Failed(why.into()));
            });
        }
        self.ends.push(Event::Retired { conn: i as u32 });
    }

    /// Marks connection `i` down (`why` is counted); under `reconnect` it is opened again.
    fn down(&mut self, i: usize, kind: Down, why: Option<String>) {
        if self.conns[i].down(kind, self.plan.reconnect).is_none() {
            return;
        }
        if let Some(why) = why {
            ErrorCount::add(&mut self.errors, &why, 1);
        }
        self.ends.push(Event::Down {
            conn: i as u32,
            why: kind,
        });
    }

    /// Starts reopening the connections that went down or were retired; takes over those that
    /// came back.
    fn reopen(&mut self, cx: &mut Context<'_>) {
        let window = own_plan(&self.plan).window;
        for i in 0..self.conns.len() {
            let plan = &self.plan;
            let reopened = self.conns[i].reopen(cx, || {
                let plan = plan.clone();
                async move { Wire::open(&plan, window).await }
            });
            match reopened {
                None | Some(Reopened::Up { was_down: false }) => {}
                Some(Reopened::Up { was_down: true }) => {
                    self.ends.push(Event::Up { conn: i as u32 })
                }
                Some(Reopened::ReplacementFailed(why)) => self.down(i, Down::Closed, Some(why)),
                Some(Reopened::ConnectFailed { handshake }) => {
                    self.ends.push(Event::ConnectFailed { handshake })
                }
            }
        }
    }
}

/// How a connection's read ended it.
enum Ended {
    /// The server retired it (GOAWAY with NO_ERROR, or closed after one).
    Retired,
    /// Lost, for this reason.
    Lost(String),
}

#[cfg(test)]
mod tests {
    use super::Linger;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    /// Sleeps `linger` while `awaited` answers are awaited and each sleep brings `per_sleep` of
    /// them, `n` times from `now`; the sleeps taken (`None`: waited in epoll).
    fn sleeps(
        linger: &mut Linger,
        awaited: usize,
        per_sleep: usize,
        n: usize,
        now: u64,
    ) -> Vec<Option<Duration>> {
        (0..n)
            .map(|_| {
                (0..per_sleep).for_each(|_| linger.answered());
                linger.idle(awaited, now)
            })
            .collect()
    }

    #[test]
    fn no_sleep_before_an_answer_came_nor_with_fewer_than_32_answers_awaited() {
        let mut l = Linger::default();
        assert_eq!(l.idle(256, 0), None, "nothing answered yet");
        l.answered();
        assert_eq!(
            l.idle(31, 0),
            None,
            "1/32 of 31 awaited is less than one answer"
        );
        l.answered();
        assert_eq!(l.idle(32, 0), Some(Duration::from_micros(20)));
    }

    #[test]
    fn sleeps_grow_while_each_brings_less_than_1_64_of_what_is_awaited_up_to_1_ms() {
        let mut l = Linger::default();
        let naps = sleeps(&mut l, 256, 1, 12, 0);
        let us: Vec<u64> = naps.iter().map(|n| n.unwrap().as_micros() as u64).collect();
        assert_eq!(us[..7], [20, 40, 80, 160, 320, 640, 1000]);
        assert!(us[7..].iter().all(|&u| u == 1000), "{us:?}");
    }

    #[test]
    fn sleeps_hold_while_each_brings_between_1_64_and_1_32_of_what_is_awaited() {
        let mut l = Linger::default();
        let naps = sleeps(&mut l, 256, 6, 10, 0);
        assert!(
            naps.iter().all(|n| *n == Some(Duration::from_micros(20))),
            "{naps:?}"
        );
    }

    #[test]
    fn a_sleep_that_brings_more_than_1_32_of_what_is_awaited_is_halved_and_below_10_us_paused() {
        let mut l = Linger::default();
        l.answered();
        assert_eq!(l.idle(256, 0), Some(Duration::from_micros(20)));
        (0..9).for_each(|_| l.answered()); // 9 × 32 > 256
        assert_eq!(l.idle(256, 0), Some(Duration::from_micros(10)));
        (0..9).for_each(|_| l.answered());
        assert_eq!(l.idle(256, 0), None, "5 µs is not worth a wake-up");
        // Paused for 100 ms whatever comes; then it may start again.
        assert_eq!(sleeps(&mut l, 256, 1, 3, 99 * MS), [None, None, None]);
        assert_eq!(
            sleeps(&mut l, 256, 1, 1, 100 * MS),
            [Some(Duration::from_micros(20))]
        );
    }

    #[test]
    fn a_sleep_that_brings_nothing_ends_the_sleeping_until_the_next_answer() {
        let mut l = Linger::default();
        assert!(sleeps(&mut l, 256, 1, 3, 0).iter().all(Option::is_some));
        assert_eq!(l.idle(256, 0), None, "the last sleep brought nothing");
        assert_eq!(l.idle(256, 0), None, "still nothing: wait in epoll");
        assert_eq!(
            sleeps(&mut l, 256, 1, 1, 0),
            [Some(Duration::from_micros(20))]
        );
    }
}

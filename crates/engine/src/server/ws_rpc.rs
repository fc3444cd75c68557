//! The built-in JSON-RPC 2.0 server over WebSocket (`msgbench serve ws-rpc`, or in-process for
//! a `ws-rpc` scenario without an address): answers the scenario's methods (e.g. `eth_chainId`
//! with `"0x1"`) after each method's service time — `busy` spins the server thread (answers in
//! order), `sleep` answers from a timer (a slow method is overtaken by fast ones: out-of-order
//! responses, matched by id on the client). Unknown methods get JSON-RPC's "Method not found",
//! malformed requests "Parse error"; a message over `max_frame` closes the connection. A
//! streamed method (`stream = true`) answers with `messages` responses carrying the request's
//! id — the first after the service time, then one every `every`, on an absolute schedule —
//! and then one whose `result` is `stream_done`.
use super::ws::{
    ConnectionCounts, Counts, LocalFuture, Pool, ServerWs, Service, Settings, Upgrade,
};
use crate::harness::timer::AsyncTimer;
use bytes::{BufMut, BytesMut};
use futures_util::{FutureExt, SinkExt, StreamExt};
use msgbench_model::rpc::ServiceWork;
use msgbench_model::ws_rpc::WsRpcServerConfig;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio_websockets::Message;

/// Requests read (when already buffered) before one flush of their answers: one connection's
/// turn. A connection that used its whole turn yields to the others on its server thread
/// before it reads more, so a flooding client cannot keep them waiting beyond one turn each
/// (the same policy as the request server's `TURN_FRAMES`).
const READS_PER_FLUSH: usize = 64;
/// Answers one connection may have waiting on `sleep` timers; beyond, its requests are left
/// unread until some are due (backpressure: a flood of slow calls costs the server a bounded
/// ~6 MiB per connection, not memory until it dies).
pub const MAX_HELD: usize = 65_536;
/// Answers that fell due sent in one turn of a connection, at most (then it yields).
const DUE_PER_TURN: usize = 1024;

/// What the server answers for one method.
#[derive(Debug, Clone)]
pub struct MethodAnswer {
    /// JSON-RPC method name.
    pub method: String,
    /// The `result`, as JSON text.
    pub result_json: String,
    /// Time spent per call, ns.
    pub service_ns: u64,
    /// How it is spent.
    pub work: ServiceWork,
    /// A streamed answer (`None`: one response).
    pub stream: Option<StreamAnswer>,
}

/// A streamed answer: `messages` results, then the end.
#[derive(Debug, Clone)]
pub struct StreamAnswer {
    /// Results before the end.
    pub messages: u32,
    /// Between two of them, ns (the first comes after the method's service time).
    pub every_ns: u64,
    /// The end's `result`, as JSON text.
    pub done_json: String,
}

/// A running JSON-RPC server; stops when dropped.
pub struct WsRpcServer {
    pool: Pool,
    service: Arc<RpcService>,
    /// Connection-level counts (accepted, refused, handshake failures, …).
    pub counts: Arc<Counts>,
}

/// What the server counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct WsRpcReport {
    /// Calls answered with a `result` (a streamed one once, at its first message).
    pub results: u64,
    /// Error responses (unknown method, parse error).
    pub errors: u64,
    /// Connection-level counts.
    pub counts: ConnectionCounts,
}

impl WsRpcServer {
    /// Binds `listen` and serves `methods`.
    pub fn start(
        config: &WsRpcServerConfig,
        methods: Vec<MethodAnswer>,
        listen: SocketAddr,
    ) -> std::io::Result<WsRpcServer> {
        let counts = Arc::new(Counts::default());
        let service = Arc::new(RpcService {
            settings: Settings {
                threads: config.threads,
                pin: config.pin.clone(),
                max_frame: config.max_frame,
                send_buffer: 0,
                max_connections: config.max_connections,
                name: "ws-rpc-server",
                stop: Arc::new(super::ws::Shutdown::default()),
            },
            idle_timeout_ns: config.idle_timeout_ns,
            methods,
            results: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            counts: counts.clone(),
        });
        let pool = Pool::start(service.clone(), counts.clone(), listen)?;
        Ok(WsRpcServer {
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

    /// What it counted so far.
    pub fn report(&self) -> WsRpcReport {
        WsRpcReport {
            results: self.service.results.load(Ordering::Relaxed),
            errors: self.service.errors.load(Ordering::Relaxed),
            counts: self.counts.snapshot(),
        }
    }

    /// Stops every thread; returns what it counted.
    pub fn stop(mut self) -> WsRpcReport {
        self.pool.stop();
        self.report()
    }
}

struct RpcService {
    settings: Settings,
    idle_timeout_ns: u64,
    methods: Vec<MethodAnswer>,
    results: AtomicU64,
    errors: AtomicU64,
    counts: Arc<Counts>,
}

impl Service for RpcService {
    type Local = ();

    fn local(self: &Arc<Self>, _index: usize) -> Rc<()> {
        Rc::new(())
    }

    fn background(self: &Arc<Self>, _local: Rc<()>) -> LocalFuture {
        Box::pin(async {})
    }

    fn connection(
        self: &Arc<Self>,
        _local: Rc<()>,
        _upgrade: Upgrade,
        ws: ServerWs,
    ) -> LocalFuture {
        Box::pin(serve(self.clone(), ws))
    }

    fn page(&self, _path: &str) -> Option<(&'static str, &'static str)> {
        None
    }

    fn finish(self: &Arc<Self>, _local: Rc<()>) {}

    fn settings(&self) -> &Settings {
        &self.settings
    }
}

/// The parts of a request the server reads; `id` is echoed verbatim.
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
}

/// An answer waiting for its timer: `(due, arrival order, id, method index, message of its
/// stream)`.
type Delayed = Reverse<(u64, u64, String, usize, u32)>;

async fn serve(service: Arc<RpcService>, mut ws: ServerWs) {
    let Ok(timer) = AsyncTimer::new() else {
        return;
    };
    let idle = (service.idle_timeout_ns > 0)
        .then(|| std::time::Duration::from_nanos(service.idle_timeout_ns));
    let mut delayed: BinaryHeap<Delayed> = BinaryHeap::new();
    let mut arrivals = 0u64;
    let mut arena = BytesMut::with_capacity(64 << 10);
    let mut heard = tokio::time::Instant::now();
    loop {
        let due = delayed.peek().map(|Reverse((due, ..))| *due);
        // Idle: nothing heard, and no answer owed.
        let idle_at = idle.filter(|_| delayed.is_empty()).map(|i| heard + i);
        let mut answered = 0;
        let mut heard_now = false;
        let mut turn_used = false;
        tokio::select! {
            biased;
            message = ws.next(), if delayed.len() < MAX_HELD => {
                let message = match message {
                    Some(Ok(m)) => m,
                    Some(Err(_)) => {
                        // An oversized or broken frame: tokio-websockets has queued the close.
                        service.counts.protocol_errors.fetch_add(1, Ordering::Relaxed);
                        let _ = ws.flush().await;
                        return;
                    }
                    None => return,
                };
                heard_now = true;
                answered += handle(&service, &message, &mut ws, &mut arena, &mut delayed, &mut arrivals).await;
                // Answer what is already buffered before one flush.
                turn_used = true;
                for _ in 1..READS_PER_FLUSH {
                    if delayed.len() >= MAX_HELD {
                        turn_used = false;
                        break;
                    }
                    match ws.next().now_or_never() {
                        Some(Some(Ok(m))) => {
                            answered += handle(&service, &m, &mut ws, &mut arena, &mut delayed, &mut arrivals).await;
                        }
                        Some(_) | None => {
                            turn_used = false;
                            break;
                        }
                    }
                }
            }
            _ = timer.sleep_until(due.unwrap_or(u64::MAX)), if due.is_some() => {}
            _ = tokio::time::sleep_until(idle_at.unwrap_or(heard)), if idle_at.is_some() => {
                service.counts.idle_closed.fetch_add(1, Ordering::Relaxed);
                let close = Message::close(Some(tokio_websockets::CloseCode::GOING_AWAY), "idle");
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), ws.send(close)).await;
                return;
            }
        }
        if heard_now {
            heard = tokio::time::Instant::now();
        }
        let now = crate::clock::now_ns();
        match send_due(&service, now, &mut arena, &mut delayed, &mut ws).await {
            Some((fed, more)) => {
                answered += fed;
                turn_used |= more;
            }
            None => return,
        }
        // Pings read are answered by pongs queued inside the stream: flush those too, or a
        // client that pings without reading grows the queue.
        if answered > 0 || heard_now {
            let flushed = match idle {
                Some(limit) => tokio::time::timeout(limit, ws.flush()).await,
                None => Ok(ws.flush().await),
            };
            match flushed {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) => {
                    // Nothing of its answers read for the whole idle timeout.
                    service.counts.slow_readers.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
        if turn_used {
            // Requests may be left buffered: the other connections' turns come first.
            tokio::task::yield_now().await;
        }
    }
}

/// Answers (or schedules the answer of) one request; returns how many answers were fed.
async fn handle(
    service: &RpcService,
    message: &Message,
    ws: &mut ServerWs,
    arena: &mut BytesMut,
    delayed: &mut BinaryHeap<Delayed>,
    arrivals: &mut u64,
) -> usize {
    if !message.is_text() && !message.is_binary() {
        return 0; // ping, pong, close
    }
    let parsed = serde_json::from_slice::<Request>(message.as_payload());
    let (id, method) = match &parsed {
        Ok(Request {
            id: Some(id),
            method: Some(method),
        }) => (id.get(), method.as_ref()),
        Ok(Request { id: Some(id), .. }) => {
            service.errors.fetch_add(1, Ordering::Relaxed);
            respond(arena, id.get(), Err((-32600, "Invalid Request")));
            return feed(ws, arena).await;
        }
        _ => {
            service.errors.fetch_add(1, Ordering::Relaxed);
            respond(arena, "null", Err((-32700, "Parse error")));
            return feed(ws, arena).await;
        }
    };
    let Some(m) = service.methods.iter().position(|a| a.method == method) else {
        service.errors.fetch_add(1, Ordering::Relaxed);
        respond(arena, id, Err((-32601, "Method not found")));
        return feed(ws, arena).await;
    };
    let answer = &service.methods[m];
    match answer.work {
        _ if answer.stream.is_some() => {
            *arrivals += 1;
            let due = crate::clock::now_ns().saturating_add(answer.service_ns);
            delayed.push(Reverse((due, *arrivals, id.to_string(), m, 0)));
            0
        }
        ServiceWork::Sleep if answer.service_ns > 0 => {
            *arrivals += 1;
            let due = crate::clock::now_ns().saturating_add(answer.service_ns);
            delayed.push(Reverse((due, *arrivals, id.to_string(), m, 0)));
            0
        }
        _ => {
            if answer.service_ns > 0 {
                // Busy work gives up when the server stops: stopping never waits on a call.
                let until = crate::clock::now_ns().saturating_add(answer.service_ns);
                while crate::clock::now_ns() < until && !service.settings.stop.raised() {
                    std::hint::spin_loop();
                }
            }
            respond(arena, id, Ok(&answer.result_json));
            service.results.fetch_add(1, Ordering::Relaxed);
            feed(ws, arena).await
        }
    }
}

/// Sends the answers that fell due by `now`, a turn's worth at most (a stream whose messages
/// are all due at once — `every` 0, or the server behind — waits for the next turn, and the
/// other connections get theirs): how many were fed, and whether more are due; `None`: the
/// connection is gone.
async fn send_due(
    service: &RpcService,
    now: u64,
    arena: &mut BytesMut,
    delayed: &mut BinaryHeap<Delayed>,
    ws: &mut ServerWs,
) -> Option<(usize, bool)> {
    let is_due = |d: &BinaryHeap<Delayed>| d.peek().is_some_and(|Reverse((due, ..))| *due <= now);
    let mut fed = 0;
    for _ in 0..DUE_PER_TURN {
        if !is_due(delayed) {
            return Some((fed, false));
        }
        let Reverse(entry) = delayed.pop().expect("peeked");
        fed += due_answer(service, entry, arena, delayed, ws).await?;
    }
    Some((fed, is_due(delayed)))
}

/// Sends an answer that fell due: a call's one response, or a stream's next message (and its
/// end after the last; the message after it is scheduled). How many were fed; `None`: the
/// connection is gone.
async fn due_answer(
    service: &RpcService,
    (due, arrival, id, m, k): (u64, u64, String, usize, u32),
    arena: &mut BytesMut,
    delayed: &mut BinaryHeap<Delayed>,
    ws: &mut ServerWs,
) -> Option<usize> {
    let answer = &service.methods[m];
    let mut fed = 0;
    if k == 0 {
        // A call answered (a stream's first message counts it).
        service.results.fetch_add(1, Ordering::Relaxed);
    }
    if answer.stream.as_ref().is_none_or(|s| k < s.messages) {
        respond(arena, &id, Ok(&answer.result_json));
        ws.feed(Message::text(arena.split().freeze())).await.ok()?;
        fed += 1;
    }
    if let Some(s) = &answer.stream {
        if k + 1 < s.messages {
            delayed.push(Reverse((due + s.every_ns, arrival, id, m, k + 1)));
        } else {
            respond(arena, &id, Ok(&s.done_json));
            ws.feed(Message::text(arena.split().freeze())).await.ok()?;
            fed += 1;
        }
    }
    Some(fed)
}

async fn feed(ws: &mut ServerWs, arena: &mut BytesMut) -> usize {
    usize::from(ws.feed(Message::text(arena.split().freeze())).await.is_ok())
}

/// Appends a response: `{"jsonrpc":"2.0","id":…,"result":…}` or an `error` object.
fn respond(arena: &mut BytesMut, id: &str, outcome: Result<&str, (i32, &str)>) {
    if arena.capacity() - arena.len() < 256 {
        arena.reserve(64 << 10);
    }
    let mut w = arena.writer();
    // Writing into memory cannot fail.
    let _ = match outcome {
        Ok(result) => write!(w, r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
        Err((code, message)) => write!(
            w,
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"{message}"}}}}"#
        ),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_echo_the_id_verbatim() {
        let mut arena = BytesMut::new();
        respond(&mut arena, "42", Ok("\"0x1\""));
        assert_eq!(&arena[..], br#"{"jsonrpc":"2.0","id":42,"result":"0x1"}"#);
        arena.clear();
        respond(&mut arena, "\"a\"", Err((-32601, "Method not found")));
        assert_eq!(
            &arena[..],
            br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"Method not found"}}"#
        );
    }

    #[test]
    fn requests_parse_with_any_id_and_escaped_methods() {
        let r: Request = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":"x-1","method":"eth_\u0063hainId","params":[]}"#,
        )
        .unwrap();
        assert_eq!(r.id.unwrap().get(), "\"x-1\"");
        assert_eq!(r.method.unwrap(), "eth_chainId");
    }
}

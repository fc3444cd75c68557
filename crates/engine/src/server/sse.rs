//! `msgbench serve sse`: Server-Sent Events with known timing, for truth runs of event-stream
//! feeds and of streamed responses. Over HTTP/1.1 (keep-alive, chunked):
//!
//! - `GET /events` — a feed: event `n` due at the server's start + n/rate, for every client
//!   (`id: n`, `event: tick`, `data: {"seq":n,"ts":<due, CLOCK_MONOTONIC ns>}`); a client starts
//!   at the event due when it connects, or after its `Last-Event-ID` (what it missed is sent at
//!   once, with its own stamps; at most [`MAX_REPLAY`] events back). `?rate=N` sets its own.
//! - any other request (`POST /v1/chat/completions`, `GET /stream`) — a stream per request: its
//!   first message due `first` after the request arrived, then one every `every`, `messages` in
//!   all, then `data: [DONE]` and the body's end; `?messages=N&first_us=U&every_us=U` set them.
//!
//! Times are due on an absolute schedule (a late message does not push the next) and kept by a
//! precise sleep ([`crate::clock::MonotonicClock`]) on one thread per connection: this is a
//! model server, not a fast one. A stall (`stall_every`, `stall_for`, from the server's start,
//! or once at `stall_at` after the first request) holds every message due inside it until it
//! ends, as a GC pause or a failover would. Bounded: request heads of 64 KiB, bodies of 1 MiB
//! (read and dropped), [`MAX_CONNECTIONS`] connections, 10 s to send a request head.
use crate::clock::{now_ns, Clock, MonotonicClock};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Most connections open at once; more are closed at accept.
pub const MAX_CONNECTIONS: usize = 1024;
/// Most events a feed's client may ask to have replayed (`Last-Event-ID`).
pub const MAX_REPLAY: u64 = 1 << 20;
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1 << 20;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The model: what is sent, and when.
#[derive(Debug, Clone)]
pub struct SseOptions {
    /// Feed events per second (`/events`).
    pub rate: f64,
    /// Messages per streamed response.
    pub messages: u32,
    /// A streamed response's first message, after the request, ns.
    pub first_ns: u64,
    /// Between its messages, ns.
    pub every_ns: u64,
    /// Stalls: one every this long from the start (0: none) …
    pub stall_every_ns: u64,
    /// … lasting this long.
    pub stall_for_ns: u64,
    /// A single stall this long after the first request (0: none).
    pub stall_at_ns: u64,
}

/// What the server counted.
#[derive(Debug, Default)]
pub struct SseCounts {
    /// Streamed responses finished.
    pub streams: AtomicU64,
    /// Messages sent (feed events and stream messages).
    pub messages: AtomicU64,
    /// Feed connections opened.
    pub feeds: AtomicU64,
    /// Connections closed at accept (over the limit).
    pub refused: AtomicU64,
}

/// A running server; [`SseServer::stop`] ends it.
pub struct SseServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// What it counted.
    pub counts: Arc<SseCounts>,
    accept: Option<JoinHandle<()>>,
}

/// What every connection shares.
struct Shared {
    options: SseOptions,
    start_ns: u64,
    /// When the first request came (0: none yet): `stall_at`'s clock.
    first_request_ns: AtomicU64,
    stop: Arc<AtomicBool>,
    counts: Arc<SseCounts>,
    open: AtomicUsize,
}

impl SseServer {
    /// Listens on `listen` and serves until stopped.
    pub fn start(options: SseOptions, listen: SocketAddr) -> io::Result<SseServer> {
        if !(options.rate > 0.0 && options.rate <= 1e7) || options.messages == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a feed rate of 1 to 10 M per second and at least one message per stream",
            ));
        }
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(SseCounts::default());
        let shared = Arc::new(Shared {
            options,
            start_ns: now_ns(),
            first_request_ns: AtomicU64::new(0),
            stop: stop.clone(),
            counts: counts.clone(),
            open: AtomicUsize::new(0),
        });
        let accept = std::thread::Builder::new()
            .name("sse-accept".into())
            .spawn(move || accept_loop(&listener, &shared))?;
        Ok(SseServer {
            addr,
            stop,
            counts,
            accept: Some(accept),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and ends every connection (within a few ms).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SseServer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if shared.open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                    shared.counts.refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                shared.open.fetch_add(1, Ordering::Relaxed);
                let s = shared.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("sse-conn".into())
                        .spawn(move || {
                            let _ = serve_connection(stream, &s);
                            s.open.fetch_sub(1, Ordering::Relaxed);
                        });
                if spawned.is_err() {
                    shared.open.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// One request's head, as the server needs it.
struct Request {
    feed: bool,
    query: String,
    last_id: Option<u64>,
}

fn serve_connection(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(4096);
    loop {
        stream.set_read_timeout(Some(HEAD_TIMEOUT))?;
        let Some(request) = read_request(&mut stream, &mut buf)? else {
            return Ok(());
        };
        let arrived = now_ns();
        let _ = shared.first_request_ns.compare_exchange(
            0,
            arrived,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
        )?;
        if request.feed {
            shared.counts.feeds.fetch_add(1, Ordering::Relaxed);
            return feed(&mut stream, shared, &request);
        }
        respond_stream(&mut stream, shared, &request, arrived)?;
    }
}

/// Reads one request (its body dropped); `None` when the client closed between requests.
fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<Request>> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    let mut chunk = [0u8; 4096];
    let (size, path, length, last_id) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(size)) = req.parse(buf) {
            let header = |name: &str| {
                (req.headers.iter())
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(str::trim)
            };
            let length: usize = header("content-length")
                .map_or(Ok(0), str::parse)
                .map_err(|_| bad("a bad Content-Length"))?;
            let last_id = header("last-event-id").and_then(|v| v.parse().ok());
            break (size, req.path.unwrap_or("/").to_string(), length, last_id);
        }
        if buf.len() > MAX_HEAD {
            return Err(bad("a request head over 64 KiB"));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if length > MAX_BODY {
        return Err(bad("a request body over 1 MiB"));
    }
    while buf.len() < size + length {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    buf.drain(..size + length);
    let (route, query) = path.split_once('?').unwrap_or((&path, ""));
    Ok(Some(Request {
        feed: route == "/events",
        query: query.to_string(),
        last_id,
    }))
}

/// A number of the query (`rate=5000`).
fn query_number(query: &str, name: &str) -> Option<f64> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
}

/// When a send due at `due` may go: the end of the stall it falls in, if it does.
fn after_stalls(o: &SseOptions, shared: &Shared, due: u64) -> u64 {
    let mut due = due;
    if o.stall_every_ns > 0 && o.stall_for_ns > 0 {
        let since = due.saturating_sub(shared.start_ns);
        let into = since % o.stall_every_ns;
        if since >= o.stall_every_ns && into < o.stall_for_ns {
            due += o.stall_for_ns - into;
        }
    }
    let first = shared.first_request_ns.load(Ordering::Relaxed);
    if o.stall_at_ns > 0 && first > 0 {
        let begin = first + o.stall_at_ns;
        if (begin..begin + o.stall_for_ns).contains(&due) {
            due = begin + o.stall_for_ns;
        }
    }
    due
}

/// Waits until `due` (past the stalls); false when the server is stopping.
fn wait_for(shared: &Shared, due: u64) -> bool {
    let clock = MonotonicClock::new(0);
    let due = after_stalls(&shared.options, shared, due);
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = now_ns();
        if now >= due {
            return true;
        }
        clock.sleep_until(due.min(now + 10_000_000));
    }
}

fn chunk(stream: &mut TcpStream, data: &[u8]) -> io::Result<()> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    stream.write_all(&out)
}

/// A per-request stream: `messages` messages, then `[DONE]` and the body's end.
fn respond_stream(
    stream: &mut TcpStream,
    shared: &Shared,
    request: &Request,
    arrived: u64,
) -> io::Result<()> {
    let o = &shared.options;
    let messages = query_number(&request.query, "messages").map_or(o.messages as u64, |v| v as u64);
    let first = query_number(&request.query, "first_us").map_or(o.first_ns, |v| (v * 1e3) as u64);
    let every = query_number(&request.query, "every_us").map_or(o.every_ns, |v| (v * 1e3) as u64);
    for k in 0..messages.min(1_000_000) {
        let due = arrived + first + k * every;
        if !wait_for(shared, due) {
            return Ok(());
        }
        let data = format!("data: {{\"seq\":{k},\"ts\":{due}}}\n\n");
        chunk(stream, data.as_bytes())?;
        shared.counts.messages.fetch_add(1, Ordering::Relaxed);
    }
    chunk(stream, b"data: [DONE]\n\n")?;
    stream.write_all(b"0\r\n\r\n")?;
    shared.counts.streams.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A feed from the event due now, or after the client's last id.
fn feed(stream: &mut TcpStream, shared: &Shared, request: &Request) -> io::Result<()> {
    let rate = query_number(&request.query, "rate")
        .filter(|r| *r > 0.0 && *r <= 1e7)
        .unwrap_or(shared.options.rate);
    let period = 1e9 / rate;
    let due_of = |n: u64| shared.start_ns + (n as f64 * period) as u64;
    let now_index = ((now_ns() - shared.start_ns) as f64 / period) as u64;
    let mut n = match request.last_id {
        Some(id) if id < now_index => (id + 1).max(now_index.saturating_sub(MAX_REPLAY)),
        _ => now_index,
    };
    chunk(stream, b"retry: 100\n\n")?;
    loop {
        let due = due_of(n);
        if !wait_for(shared, due) {
            return Ok(());
        }
        // Everything due by now goes in one write.
        let (mut batch, mut events) = (String::new(), 0);
        while due_of(n) <= now_ns() && batch.len() < 64 * 1024 {
            let d = due_of(n);
            batch.push_str(&format!(
                "id: {n}\nevent: tick\ndata: {{\"seq\":{n},\"ts\":{d}}}\n\n"
            ));
            n += 1;
            events += 1;
        }
        chunk(stream, batch.as_bytes())?;
        shared.counts.messages.fetch_add(events, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_due_in_a_stall_waits_for_its_end() {
        let shared = Shared {
            options: SseOptions {
                rate: 1.0,
                messages: 1,
                first_ns: 0,
                every_ns: 0,
                stall_every_ns: 1_000,
                stall_for_ns: 100,
                stall_at_ns: 0,
            },
            start_ns: 10_000,
            first_request_ns: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            counts: Arc::default(),
            open: AtomicUsize::new(0),
        };
        let o = shared.options.clone();
        assert_eq!(after_stalls(&o, &shared, 10_500), 10_500);
        // The first period has no stall; the second's first 100 ns are one.
        assert_eq!(after_stalls(&o, &shared, 10_050), 10_050);
        assert_eq!(after_stalls(&o, &shared, 11_040), 11_100);
        assert_eq!(after_stalls(&o, &shared, 11_100), 11_100);
        assert_eq!(query_number("a=1&rate=2.5", "rate"), Some(2.5));
        assert_eq!(query_number("rate=-1", "rate"), None);
    }
}

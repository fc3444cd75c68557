//! What msgbench's WebSocket servers (the tick stream, JSON-RPC) share: `threads` threads,
//! each a single-threaded tokio runtime (no work stealing: on two cores a predictable thread
//! per connection beats a pool), optionally pinned; thread 0 also accepts and deals connections
//! round-robin. Each connection's first bytes are peeked: a WebSocket upgrade is handed to
//! tokio-websockets for the handshake and then to the [`Service`]; a plain `GET` gets the
//! service's page (the browser client) or a 404. The service decides what a connection and a
//! thread do.
//!
//! Writes go through a 64 KiB `BufWriter`: tokio-websockets writes each frame as its own
//! vectored slice (32 frames per `writev`), which for 36-byte ticks meant ~1 KB per syscall and
//! 3× fewer messages per second than tokio-tungstenite; with the buffer one flush is one write
//! of up to 64 KiB (see docs/architecture.md).
use crate::cpu::ThreadCpuClock;
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
/// Bytes a flush may coalesce into one write.
pub const WRITE_BUFFER: usize = 64 << 10;
/// Longest a connection may take to send its request head.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Largest request head read before the handshake.
const MAX_HEAD: usize = 8 << 10;

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
#[derive(Default)]
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
    /// Binds `listen` and starts the service's threads.
    pub fn start<S: Service>(
        service: Arc<S>,
        counts: Arc<Counts>,
        listen: SocketAddr,
    ) -> io::Result<Pool> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shutdown = Arc::new(Shutdown::default());
        let settings = service.settings().clone();
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..settings.threads {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<std::net::TcpStream>();
            senders.push(tx);
            receivers.push(rx);
        }
        let (clock_tx, clock_rx) = std::sync::mpsc::channel();
        let mut listener = Some(listener);
        let mut threads = Vec::new();
        for (index, incoming) in receivers.into_iter().enumerate() {
            let (service, counts, shutdown) = (service.clone(), counts.clone(), shutdown.clone());
            let clock_tx = clock_tx.clone();
            let accept = listener.take().map(|l| (l, senders.clone()));
            let pin = settings.pin.get(index).copied();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{}-{index}", settings.name))
                    .spawn(move || {
                        crate::harness::worker::prepare_server(index, pin);
                        let _ = clock_tx.send(ThreadCpuClock::current());
                        run_thread(service, counts, shutdown, index, incoming, accept);
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

type Accept = (
    std::net::TcpListener,
    Vec<tokio::sync::mpsc::UnboundedSender<std::net::TcpStream>>,
);

fn run_thread<S: Service>(
    service: Arc<S>,
    counts: Arc<Counts>,
    shutdown: Arc<Shutdown>,
    index: usize,
    mut incoming: tokio::sync::mpsc::UnboundedReceiver<std::net::TcpStream>,
    accept: Option<Accept>,
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
        if let Some((listener, workers)) = accept {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => {
                    tokio::task::spawn_local(accept_loop(l, workers, service.clone(), counts.clone()));
                }
                Err(e) => eprintln!("msgbench serve: cannot listen: {e}"),
            }
        }
        let stop = shutdown.wait();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                stream = incoming.recv() => match stream {
                    Some(s) => {
                        tokio::task::spawn_local(handle(s, service.clone(), local.clone(), counts.clone()));
                    }
                    None => break,
                },
            }
        }
    });
    service.finish(local);
}

async fn accept_loop<S: Service>(
    listener: tokio::net::TcpListener,
    workers: Vec<tokio::sync::mpsc::UnboundedSender<std::net::TcpStream>>,
    service: Arc<S>,
    counts: Arc<Counts>,
) {
    let mut next = 0usize;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if counts.open.load(Ordering::Relaxed) >= service.settings().max_connections {
                    counts.refused.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                }
                let Ok(std_stream) = stream.into_std() else {
                    continue;
                };
                let _ = workers[next % workers.len()].send(std_stream);
                next = next.wrapping_add(1);
            }
            // Out of descriptors and the like: no new edge may come for queued connections.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
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

async fn handle<S: Service>(
    stream: std::net::TcpStream,
    service: Arc<S>,
    local: Rc<S::Local>,
    counts: Arc<Counts>,
) {
    let Ok(stream) = TcpStream::from_std(stream) else {
        return;
    };
    let _ = stream.set_nodelay(true);
    {
        use std::os::fd::AsRawFd;
        set_socket_buffer(
            stream.as_raw_fd(),
            libc::SO_SNDBUF,
            service.settings().send_buffer,
        );
    }
    let peer = stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let head = match tokio::time::timeout(HANDSHAKE_TIMEOUT, peek_head(&stream)).await {
        Ok(Some(head)) => head,
        // A connection that never says anything (a browser's speculative preconnect) is not a
        // failed handshake.
        _ if !has_bytes(&stream) => {
            counts.idle.fetch_add(1, Ordering::Relaxed);
            return;
        }
        _ => {
            counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
            return reply(
                stream,
                "400 Bad Request",
                "text/plain",
                "not an HTTP request\n",
            )
            .await;
        }
    };
    if !head.upgrade {
        counts.pages.fetch_add(1, Ordering::Relaxed);
        let page = (head.method == "GET")
            .then(|| service.page(&head.path))
            .flatten();
        return match page {
            Some((kind, body)) => reply(stream, "200 OK", kind, body).await,
            None => reply(stream, "404 Not Found", "text/plain", "not found\n").await,
        };
    }
    let limits =
        tokio_websockets::Limits::default().max_payload_len(Some(service.settings().max_frame));
    let config = tokio_websockets::Config::default().flush_threshold(usize::MAX);
    let accepted = tokio_websockets::ServerBuilder::new()
        .limits(limits)
        .config(config)
        .accept(BufWriter::with_capacity(WRITE_BUFFER, stream))
        .await;
    let mut ws = match accepted {
        Ok((_, ws)) => ws,
        Err(_) => {
            counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    // The handshake's answer sits in the write buffer until flushed.
    if ws.get_mut().flush().await.is_err() {
        counts.handshake_failures.fetch_add(1, Ordering::Relaxed);
        return;
    }
    counts.accepted.fetch_add(1, Ordering::Relaxed);
    counts.open.fetch_add(1, Ordering::Relaxed);
    let upgrade = Upgrade {
        path: head.path,
        query: head.query,
        peer,
    };
    service.connection(local, upgrade, ws).await;
    counts.open.fetch_sub(1, Ordering::Relaxed);
}

struct Head {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    upgrade: bool,
}

/// True when the peer sent anything at all.
fn has_bytes(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut one = [0u8; 1];
    // SAFETY: a valid socket and a 1-byte buffer; MSG_PEEK leaves the byte where it is.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            one.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// Peeks (without consuming) until the request head is complete, so that tokio-websockets can
/// still read it for the handshake. `None`: not HTTP, or too long.
async fn peek_head(stream: &TcpStream) -> Option<Head> {
    let mut buf = vec![0u8; MAX_HEAD];
    loop {
        let n = stream.peek(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..n]) {
            Ok(httparse::Status::Complete(_)) => {
                let target = request.path.unwrap_or("/");
                let (path, query) = target.split_once('?').unwrap_or((target, ""));
                let upgrade = request.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("upgrade")
                        && String::from_utf8_lossy(h.value)
                            .to_ascii_lowercase()
                            .contains("websocket")
                });
                return Some(Head {
                    method: request.method.unwrap_or_default().to_string(),
                    path: path.to_string(),
                    query: parse_query(query),
                    upgrade,
                });
            }
            Ok(httparse::Status::Partial) if n < MAX_HEAD => {
                // A peek returns the same bytes until more arrive: wait a little.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            _ => return None,
        }
    }
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
    use tokio::io::AsyncReadExt;
    // Consume the request so closing does not reset the connection under the answer.
    let mut sink = [0u8; 4096];
    let _ =
        tokio::time::timeout(std::time::Duration::from_millis(50), stream.read(&mut sink)).await;
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
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
}

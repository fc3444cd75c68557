//! A broker connection's bytes, plain TCP or TLS (`[pubsub.tls]`): blocking while it opens
//! ([`OpeningStream`], every read bounded by the opening's timeout), then non-blocking for the
//! run ([`BrokerStream`], what the publisher and subscriber threads poll). The TLS session is
//! the HTTP client's ([`crate::drivers::tls`]): its handshake is done in the opening and timed
//! apart ([`TlsOpening`]), never inside a message's latency.
use crate::drivers::request_response::byte_stream::Transport;
use crate::drivers::tls::{handshake, TlsConnector, TlsStream};
use rustls::{ClientConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

/// How a run's connections start TLS, and the handshakes they took.
pub struct TlsOpening {
    /// The client configuration and the name the certificate must carry.
    pub connector: TlsConnector,
    /// The broker speaks first in plaintext and TLS starts after it (NATS's `INFO`).
    pub after_greeting: bool,
    /// Each handshake's time, ns.
    handshakes: Mutex<Vec<u64>>,
}

impl TlsOpening {
    /// TLS with `connector`, started after the broker's plaintext greeting when
    /// `after_greeting`.
    pub fn new(connector: TlsConnector, after_greeting: bool) -> TlsOpening {
        TlsOpening {
            connector,
            after_greeting,
            handshakes: Mutex::new(Vec::new()),
        }
    }

    /// Starts TLS on `stream` (blocking, bounded by its timeouts), its handshake counted.
    pub fn start(&self, stream: OpeningStream) -> io::Result<OpeningStream> {
        let OpeningStream::Plain(mut tcp) = stream else {
            return Ok(stream);
        };
        let (session, ns) = handshake(&self.connector, &mut tcp)?;
        self.handshakes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ns);
        Ok(OpeningStream::Tls(Box::new(StreamOwned::new(session, tcp))))
    }

    /// [`TlsOpening::start`] with a server that names itself `host` (a cluster's other
    /// broker): its certificate must carry that name.
    pub fn start_named(&self, stream: OpeningStream, host: &str) -> io::Result<OpeningStream> {
        let OpeningStream::Plain(mut tcp) = stream else {
            return Ok(stream);
        };
        let connector = self.connector.named(host).map_err(io::Error::other)?;
        let (session, ns) = handshake(&connector, &mut tcp)?;
        self.handshakes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ns);
        Ok(OpeningStream::Tls(Box::new(StreamOwned::new(session, tcp))))
    }

    /// Each handshake's time, ns, in the order they were made.
    pub fn handshakes(&self) -> Vec<u64> {
        self.handshakes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The run's handshakes in words: how many, their median and longest.
    pub fn summary(&self) -> String {
        let mut ns = self.handshakes();
        ns.sort_unstable();
        let ms = |v: u64| v as f64 / 1e6;
        let (median, longest) = match ns.len() {
            0 => (0.0, 0.0),
            n => (ms(ns[n / 2]), ms(ns[n - 1])),
        };
        format!(
            "TLS to the broker, its certificate checked against {}: {} handshakes in the opening, median {median:.2} ms, longest {longest:.2} ms (none inside a message's latency)",
            self.connector.roots(),
            ns.len()
        )
    }
}

/// A connection while it opens: blocking, plain or TLS.
pub enum OpeningStream {
    /// Plain TCP (or TCP before its TLS starts).
    Plain(TcpStream),
    /// A TLS session over TCP, its handshake done.
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl OpeningStream {
    /// The TCP stream under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            OpeningStream::Plain(tcp) => tcp,
            OpeningStream::Tls(tls) => tls.get_ref(),
        }
    }

    /// Bounds its reads (`None`: unbounded).
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tcp().set_read_timeout(timeout)
    }

    /// Makes its reads and writes non-blocking, or blocking again (Kafka's group joins, which
    /// wait on several connections at once).
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.tcp().set_nonblocking(nonblocking)
    }

    /// The connection for the run, non-blocking, and the plaintext the TLS session had read
    /// past what the opening took (it would get no new readiness event of its own).
    pub fn into_running(self) -> io::Result<(BrokerStream, Vec<u8>)> {
        match self {
            OpeningStream::Plain(tcp) => {
                tcp.set_nonblocking(true)?;
                Ok((
                    BrokerStream::Plain(mio::net::TcpStream::from_std(tcp)),
                    Vec::new(),
                ))
            }
            OpeningStream::Tls(tls) => {
                let StreamOwned { mut conn, sock } = *tls;
                let mut held = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    match conn.reader().read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => held.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                }
                let stream = TlsStream::from_handshaken(sock, conn, None)?;
                Ok((BrokerStream::Tls(Box::new(stream)), held))
            }
        }
    }
}

impl Read for OpeningStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            OpeningStream::Plain(tcp) => tcp.read(buf),
            OpeningStream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for OpeningStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            OpeningStream::Plain(tcp) => tcp.write(buf),
            OpeningStream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            OpeningStream::Plain(tcp) => tcp.flush(),
            OpeningStream::Tls(tls) => tls.flush(),
        }
    }
}

/// A connection during the run: non-blocking, plain or TLS, an event source for mio.
pub enum BrokerStream {
    /// Plain TCP.
    Plain(mio::net::TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream>),
}

impl BrokerStream {
    /// A read that filled less than the buffer emptied the socket: true for TCP (epoll raises
    /// a new edge for later data), not for TLS (the session may hold records already read).
    pub fn short_read_drains(&self) -> bool {
        matches!(self, BrokerStream::Plain(_))
    }

    /// A TLS session holds encrypted bytes the socket did not take yet.
    pub fn wants_write(&self) -> bool {
        match self {
            BrokerStream::Plain(_) => false,
            BrokerStream::Tls(tls) => tls.wants_write(),
        }
    }

    /// Writes the encrypted bytes a TLS session holds that the socket did not take yet
    /// (nothing for TCP); a full socket leaves them for its next writability.
    pub fn write_held(&mut self) -> io::Result<()> {
        match self {
            BrokerStream::Tls(tls) if Transport::wants_write(tls.as_ref()) => match tls.flush() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// The TCP stream under it.
    pub fn tcp(&self) -> &mio::net::TcpStream {
        match self {
            BrokerStream::Plain(tcp) => tcp,
            BrokerStream::Tls(tls) => tls.tcp(),
        }
    }
}

impl Read for BrokerStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BrokerStream::Plain(tcp) => tcp.read(buf),
            BrokerStream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for BrokerStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            BrokerStream::Plain(tcp) => tcp.write(buf),
            BrokerStream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            BrokerStream::Plain(tcp) => tcp.flush(),
            BrokerStream::Tls(tls) => tls.flush(),
        }
    }
}

impl mio::event::Source for BrokerStream {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        match self {
            BrokerStream::Plain(tcp) => tcp.register(registry, token, interests),
            BrokerStream::Tls(tls) => tls.register(registry, token, interests),
        }
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        match self {
            BrokerStream::Plain(tcp) => tcp.reregister(registry, token, interests),
            BrokerStream::Tls(tls) => tls.reregister(registry, token, interests),
        }
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        match self {
            BrokerStream::Plain(tcp) => tcp.deregister(registry),
            BrokerStream::Tls(tls) => tls.deregister(registry),
        }
    }
}

//! Where a request/response connection goes: a TCP address or a Unix domain socket
//! (`unix:///run/app.sock`), and the byte stream and listener of either, so that a driver or a
//! built-in server holds one type whichever it is.
//!
//! Why Unix sockets: local IPC servers (Redis, nginx, a sidecar) listen on them, and on
//! loopback TCP costs about twice a Unix socket per message (`bench/unix-socket.sh`). The
//! enum costs one predictable branch per read or write: the driver is not duplicated per
//! transport.
use mio::event::Source;
use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The scheme of a Unix socket's address.
pub const UNIX_SCHEME: &str = "unix://";

/// A connection's destination, or a server's listening place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix domain stream socket's path.
    Unix(PathBuf),
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Self {
        Endpoint::Tcp(a)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "{UNIX_SCHEME}{}", p.display()),
        }
    }
}

impl Endpoint {
    /// `unix:///path` or `host:port` (resolved; the first address it names). `None`: it
    /// resolves to nothing.
    pub fn resolve(address: &str) -> Option<Endpoint> {
        use std::net::ToSocketAddrs;
        if let Some(path) = address.strip_prefix(UNIX_SCHEME) {
            return Some(Endpoint::Unix(PathBuf::from(path)));
        }
        address
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(Endpoint::Tcp)
    }

    /// The TCP address, when it is one.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            Endpoint::Tcp(a) => Some(*a),
            Endpoint::Unix(_) => None,
        }
    }

    /// True when something accepts a connection there now.
    pub fn accepts(&self) -> bool {
        Stream::connect(self, Duration::from_millis(200)).is_ok()
    }
}

/// A connected byte stream over TCP or a Unix socket, non-blocking, for mio.
#[derive(Debug)]
pub enum Stream {
    /// Over TCP (`TCP_NODELAY` set).
    Tcp(TcpStream),
    /// Over a Unix domain socket.
    Unix(UnixStream),
}

impl Stream {
    /// Connects within `timeout` (a Unix socket whose listener's backlog is full waits too),
    /// ready for non-blocking use.
    pub fn connect(to: &Endpoint, timeout: Duration) -> io::Result<Stream> {
        match to {
            Endpoint::Tcp(a) => {
                let s = std::net::TcpStream::connect_timeout(a, timeout)?;
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
                Ok(Stream::Tcp(TcpStream::from_std(s)))
            }
            Endpoint::Unix(path) => {
                let address = socket2::SockAddr::unix(path)?;
                let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
                s.connect_timeout(&address, timeout)?;
                s.set_nonblocking(true)?;
                let s: std::os::unix::net::UnixStream = s.into();
                Ok(Stream::Unix(UnixStream::from_std(s)))
            }
        }
    }
}

/// Forwards a call to the stream inside, whichever it is.
macro_rules! either {
    ($self:expr, $s:ident => $call:expr) => {
        match $self {
            Stream::Tcp($s) => $call,
            Stream::Unix($s) => $call,
        }
    };
}

impl Read for Stream {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        either!(self, s => s.read(buf))
    }
}

impl Write for Stream {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        either!(self, s => s.write(buf))
    }
    #[inline]
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        either!(self, s => s.write_vectored(bufs))
    }
    fn flush(&mut self) -> io::Result<()> {
        either!(self, s => s.flush())
    }
}

impl Source for Stream {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        either!(self, s => s.register(r, t, i))
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        either!(self, s => s.reregister(r, t, i))
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        either!(self, s => s.deregister(r))
    }
}

/// A listening socket over TCP or at a Unix socket's path. The path's socket file is removed
/// when it is dropped (only a socket: never another kind of file).
#[derive(Debug)]
pub enum Listener {
    /// On TCP.
    Tcp(TcpListener),
    /// On a Unix socket, and its path.
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `at`. A Unix socket's path that holds a socket nothing accepts on (left by a
    /// server that died) is taken over; one a live server accepts on, or a file that is not a
    /// socket, is refused.
    pub fn bind(at: &Endpoint) -> io::Result<Listener> {
        match at {
            Endpoint::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(*a)?)),
            Endpoint::Unix(path) => {
                remove_stale_socket(path)?;
                Ok(Listener::Unix(UnixListener::bind(path)?, path.clone()))
            }
        }
    }

    /// Where it listens (with the real port when bound to port 0).
    pub fn endpoint(&self) -> io::Result<Endpoint> {
        match self {
            Listener::Tcp(l) => Ok(Endpoint::Tcp(l.local_addr()?)),
            Listener::Unix(_, path) => Ok(Endpoint::Unix(path.clone())),
        }
    }

    /// Accepts a connection (`WouldBlock` when none waits).
    pub fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                let _ = s.set_nodelay(true);
                Ok(Stream::Tcp(s))
            }
            Listener::Unix(l, _) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.register(r, t, i),
            Listener::Unix(l, _) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.reregister(r, t, i),
            Listener::Unix(l, _) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.deregister(r),
            Listener::Unix(l, _) => l.deregister(r),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            if is_socket(path) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Makes room for a new socket at `path`: nothing there, or a dead server's socket (removed).
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket (left alone); pick another path",
                path.display()
            ),
        ));
    }
    if Endpoint::Unix(path.to_path_buf()).accepts() {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "a server already accepts connections on {}; stop it or pick another path",
                path.display()
            ),
        ));
    }
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unix_socket_is_bound_taken_over_when_stale_and_removed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let at = Endpoint::resolve(&format!("unix://{}", path.display())).unwrap();
        assert_eq!(at, Endpoint::Unix(path.clone()));
        assert_eq!(at.to_string(), format!("unix://{}", path.display()));
        let first = Listener::bind(&at).unwrap();
        assert!(at.accepts());
        let busy = Listener::bind(&at).unwrap_err();
        assert_eq!(busy.kind(), io::ErrorKind::AddrInUse, "{busy}");
        drop(first);
        assert!(
            !path.exists(),
            "the socket file is removed with its listener"
        );
        // A socket nobody accepts on (a server killed before it could remove it).
        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        assert!(path.exists() && !at.accepts());
        let second = Listener::bind(&at).unwrap();
        let mut client = Stream::connect(&at, Duration::from_secs(1)).unwrap();
        assert!(matches!(client, Stream::Unix(_)));
        client.write_all(b"x").unwrap();
        drop(second);
        // Never a file that is not a socket.
        std::fs::write(&path, b"data").unwrap();
        let refused = Listener::bind(&at).unwrap_err();
        assert!(refused.to_string().contains("not a socket"), "{refused}");
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
    }

    #[test]
    fn a_missing_unix_socket_is_refused_at_once() {
        let at = Endpoint::Unix("/nonexistent/msgbench.sock".into());
        let e = Stream::connect(&at, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }
}

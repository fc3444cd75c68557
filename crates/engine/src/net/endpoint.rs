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
    /// Connects within `timeout`, ready for non-blocking use. A Unix socket is connected
    /// blocking with a send timeout: a listener whose backlog is full makes a non-blocking
    /// connect fail at once (`EAGAIN`), where a blocking one waits for room, as TCP's does.
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
                s.set_write_timeout(Some(timeout))?;
                s.connect(&address)?;
                s.set_write_timeout(None)?;
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
/// when it is dropped — only the one it bound (same device and inode), never another server's
/// socket that took the path since, nor another kind of file.
#[derive(Debug)]
pub enum Listener {
    /// On TCP.
    Tcp(TcpListener),
    /// On a Unix socket: its path and the socket file's identity.
    Unix(UnixListener, PathBuf, (u64, u64)),
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
                let listener = UnixListener::bind(path)?;
                let identity = file_identity(path).ok_or_else(|| {
                    io::Error::other(format!("{} vanished once bound", path.display()))
                })?;
                Ok(Listener::Unix(listener, path.clone(), identity))
            }
        }
    }

    /// Where it listens (with the real port when bound to port 0).
    pub fn endpoint(&self) -> io::Result<Endpoint> {
        match self {
            Listener::Tcp(l) => Ok(Endpoint::Tcp(l.local_addr()?)),
            Listener::Unix(_, path, _) => Ok(Endpoint::Unix(path.clone())),
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
            Listener::Unix(l, ..) => Ok(Stream::Unix(l.accept()?.0)),
        }
    }
}

impl Source for Listener {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.register(r, t, i),
            Listener::Unix(l, ..) => l.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.reregister(r, t, i),
            Listener::Unix(l, ..) => l.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.deregister(r),
            Listener::Unix(l, ..) => l.deregister(r),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path, identity) = self {
            if file_identity(path) == Some(*identity) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// A socket file's (device, inode); `None` for anything else.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(path).ok()?;
    m.file_type().is_socket().then(|| (m.dev(), m.ino()))
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
    // Only a refusal says nobody listens: a full backlog, a socket of another user's
    // (permission denied) or a slow server is someone's, and left alone. Connected as a
    // client is (with its timeout): a plain blocking connect to a full backlog never returns.
    match Stream::connect(&Endpoint::Unix(path.to_path_buf()), Duration::from_millis(200)) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "a server already accepts connections on {}; stop it or pick another path",
                path.display()
            ),
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "{} is a socket that may be in use ({e}); left alone: remove it or pick another path",
                path.display()
            ),
        )),
    }
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
        // Another server's socket at the path (the first's file removed by hand, a new one
        // bound): the first listener's drop leaves it.
        std::fs::remove_file(&path).unwrap();
        let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(second);
        assert!(path.exists(), "another server's socket is not removed");
        drop(other);
        std::fs::remove_file(&path).unwrap();
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

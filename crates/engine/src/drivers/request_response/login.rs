//! A connection that logs in before it carries requests (`[redis.auth]`: `AUTH [user]
//! password`): the [`Transport`] [`LoggedIn`] sends the login right after connecting and waits
//! for its answer, within the connect's deadline, before the driver sees the connection — so
//! the login is never inside a request's latency, a reconnection logs in again, and a refusal
//! fails the connection with the server's words (`PermissionDenied`: the run's first
//! connections fail it, as a refused address does). It wraps any transport: plain TCP, or TLS
//! (`[redis.tls]`), whose handshake comes first.
use super::byte_stream::Transport;
use crate::net::endpoint::Endpoint;
use mio::{event::Source, Interest, Registry, Token};
use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

/// What a connection says first, and how its answer is read, over connections opened with
/// `C` (nothing for TCP, a TLS configuration for TLS).
pub struct Login<C = ()> {
    /// How the connection under the login opens.
    pub under: C,
    /// The bytes sent (empty: no login; the connection is used as it opens).
    pub request: Vec<u8>,
    /// The answer at the start of what came: `None` while incomplete, else `Ok` or the
    /// server's refusal in words.
    pub answered: fn(&[u8]) -> Option<Result<(), String>>,
}

/// Most bytes a login's answer may take.
const MAX_ANSWER: usize = 64 * 1024;

/// A connection over `T` that has logged in.
pub struct LoggedIn<T>(T);

impl<T: Transport> Transport for LoggedIn<T> {
    type Connector = Login<T::Connector>;
    const SHORT_READ_DRAINS: bool = T::SHORT_READ_DRAINS;

    fn connect(
        login: &Login<T::Connector>,
        address: &Endpoint,
        timeout: Duration,
    ) -> io::Result<LoggedIn<T>> {
        let deadline = Instant::now() + timeout;
        let mut stream = T::connect(&login.under, address, timeout)?;
        if !login.request.is_empty() {
            log_in(&mut stream, login, deadline)?;
        }
        Ok(LoggedIn(stream))
    }

    fn take_handshake_ns(&mut self) -> Option<u64> {
        self.0.take_handshake_ns()
    }

    fn wants_write(&self) -> bool {
        self.0.wants_write()
    }
}

/// Sends the login and reads its answer on a non-blocking stream, by `deadline`.
fn log_in<C>(stream: &mut impl Transport, login: &Login<C>, deadline: Instant) -> io::Result<()> {
    let mut sent = 0;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the server did not answer the login in time",
            ));
        }
        if stream.wants_write() {
            // TLS: records the socket did not take with the login's last write.
            match stream.flush() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
        if sent < login.request.len() {
            match stream.write(&login.request[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the server closed the connection at the login",
                ))
            }
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            Err(e) => return Err(e),
        }
        match (login.answered)(&answer) {
            Some(Ok(())) => return Ok(()),
            Some(Err(words)) => {
                let words = words.trim_end_matches('.').to_string();
                return Err(io::Error::new(io::ErrorKind::PermissionDenied, words));
            }
            None if answer.len() > MAX_ANSWER => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the login's answer is over 64 KiB and not whole",
                ))
            }
            None => {}
        }
    }
}

impl<T: Read> Read for LoggedIn<T> {
    #[inline]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<T: Write> Write for LoggedIn<T> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    #[inline]
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<T: Source> Source for LoggedIn<T> {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.0.register(r, t, i)
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.0.reregister(r, t, i)
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        self.0.deregister(r)
    }
}

//! A UDP feed received by a tick client (`ticks.address = "udp://…"`): one socket per client —
//! bound to its own port for a unicast feed, or to a multicast group's port and joined to the
//! group — each datagram handed to the reader as one message (msgbench's 36-byte binary tick,
//! or what `[ticks.feed]` says).
//!
//! Each sender is a source with a sequence of its own (an A/B pair of feed lines, publishers
//! sharing a group): [`UdpFeed::poll_datagram`] says which source sent each datagram, and the
//! client counts gaps, duplicates and reordering per source. At most [`MAX_SOURCES`] are
//! followed; datagrams from more are counted as protocol faults and skipped.
//! What the kernel dropped because the socket's receive buffer was full is read from
//! `/proc/net/udp` (and `udp6`) by the socket's inode when the client stops: UDP says nothing
//! to the receiver of what it lost, but Linux counts it per socket.
//!
//! Bounded: one datagram at a time, in one buffer of 64 KiB (every UDP payload fits).
use super::source::{FeedMessage, FeedSource, StreamEnd};
use crate::drivers::failure::OpenError;
use msgbench_model::udp::UdpFeed as UdpAddress;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use tokio::io::ReadBuf;

/// Largest UDP payload (IPv4: 65 507 bytes).
const MAX_DATAGRAM: usize = 64 * 1024;
/// Senders a client follows, each its own sequence (more are counted and skipped).
pub const MAX_SOURCES: usize = 64;

/// One client's socket.
pub struct UdpFeed {
    socket: tokio::net::UdpSocket,
    buf: Box<[u8]>,
    /// Datagrams are JSON text (else binary).
    text: bool,
    /// The senders heard from, in the order first heard (index: the source).
    sources: Vec<SocketAddr>,
    /// Datagrams from senders past [`MAX_SOURCES`].
    pub strays: u64,
    /// The first of those, in words.
    pub first_stray: Option<String>,
    inode: u64,
}

impl FeedSource for UdpFeed {
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<FeedMessage<'_>, StreamEnd>> {
        self.poll_datagram(cx).map_ok(|(_, message)| message)
    }
}

impl UdpFeed {
    /// The next datagram, and its sender.
    pub fn poll_datagram(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(SocketAddr, FeedMessage<'_>), StreamEnd>> {
        loop {
            let mut read = ReadBuf::new(&mut self.buf);
            let from = match self.socket.poll_recv_from(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(StreamEnd::Lost(format!(
                        "the UDP socket failed ({e})"
                    ))))
                }
                Poll::Ready(Ok(from)) => from,
            };
            let len = read.filled().len();
            if !self.follows(from) {
                continue;
            }
            return Poll::Ready(Ok((
                from,
                FeedMessage::Bytes {
                    payload: &self.buf[..len],
                    text: self.text,
                },
            )));
        }
    }

    /// Whether sender `from` is followed (a new one is, up to [`MAX_SOURCES`]).
    #[inline]
    fn follows(&mut self, from: SocketAddr) -> bool {
        // The common case, one sender, is the first compare.
        if self.sources.contains(&from) {
            return true;
        }
        if self.sources.len() < MAX_SOURCES {
            self.sources.push(from);
            return true;
        }
        self.strays += 1;
        self.first_stray.get_or_insert_with(|| {
            format!("a datagram from {from}, a sender past the {MAX_SOURCES} this client follows")
        });
        false
    }

    /// Binds run-wide client `ordinal`'s socket (and joins the group of a multicast feed);
    /// `receive_buffer`: `SO_RCVBUF` (0: the OS default); `text`: datagrams are JSON.
    pub fn open(
        feed: &UdpAddress,
        ordinal: usize,
        receive_buffer: u32,
        text: bool,
    ) -> Result<UdpFeed, OpenError> {
        let at = feed.bind_for(ordinal);
        let failed =
            |e: std::io::Error| OpenError::Bind(format!("cannot receive on udp://{at}: {e}"));
        let socket =
            socket2::Socket::new(socket2::Domain::for_address(at), socket2::Type::DGRAM, None)
                .map_err(failed)?;
        if feed.multicast.is_some() {
            // Every client of the run (and other programs) receives the group's datagrams
            // on the same port.
            socket.set_reuse_address(true).map_err(failed)?;
        }
        if receive_buffer > 0 {
            socket
                .set_recv_buffer_size(receive_buffer as usize)
                .map_err(failed)?;
        }
        socket.bind(&at.into()).map_err(failed)?;
        if let (Some(interface), SocketAddr::V4(group)) = (feed.multicast, at) {
            socket
                .join_multicast_v4(group.ip(), &interface)
                .map_err(failed)?;
        }
        socket.set_nonblocking(true).map_err(failed)?;
        let inode = inode_of(&socket);
        let socket = tokio::net::UdpSocket::from_std(socket.into()).map_err(failed)?;
        Ok(UdpFeed {
            socket,
            buf: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            text,
            sources: Vec::new(),
            strays: 0,
            first_stray: None,
            inode,
        })
    }

    /// Datagrams the kernel dropped for this socket (its receive buffer full), so far.
    pub fn receive_buffer_drops(&self) -> u64 {
        ["/proc/net/udp", "/proc/net/udp6"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .find_map(|table| drops_of(&table, self.inode))
            .unwrap_or(0)
    }
}

/// The socket's inode (what `/proc/net/udp` names it by).
fn inode_of(socket: &socket2::Socket) -> u64 {
    use std::os::fd::AsRawFd;
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `stat`, a valid, writable struct, for an open descriptor.
    let ok = unsafe { libc::fstat(socket.as_raw_fd(), &mut stat) } == 0;
    if ok {
        stat.st_ino
    } else {
        0
    }
}

/// The `drops` column of the row of `/proc/net/udp` whose inode is `inode`.
fn drops_of(table: &str, inode: u64) -> Option<u64> {
    // The header names "tx_queue rx_queue" and "tr tm->when" as one column each where rows
    // have two: the columns are found from the row's end, where `inode` and `drops` are.
    table.lines().skip(1).find_map(|row| {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let n = fields.len();
        // … uid timeout inode ref pointer drops
        (n >= 6 && fields[n - 4].parse::<u64>().ok()? == inode && inode != 0)
            .then(|| fields[n - 1].parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_are_read_from_the_sockets_row() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  1: 0100007F:251C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31337 2 0000000000000000 42\n\
  2: 0100007F:251D 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31338 2 0000000000000000 0\n";
        assert_eq!(drops_of(table, 31337), Some(42));
        assert_eq!(drops_of(table, 31338), Some(0));
        assert_eq!(drops_of(table, 7), None);
    }

    #[test]
    fn a_bound_socket_is_found_in_the_kernels_table() {
        let feed = UdpAddress {
            address: "127.0.0.1:0".parse().unwrap(),
            multicast: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let f = UdpFeed::open(&feed, 0, 0, false).unwrap();
            assert_ne!(f.inode, 0);
            let table = std::fs::read_to_string("/proc/net/udp").unwrap();
            assert_eq!(drops_of(&table, f.inode), Some(0));
        });
    }
}

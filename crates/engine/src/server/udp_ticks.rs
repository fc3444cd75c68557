//! Ticks over UDP (`msgbench serve ticks --udp-to …`): one thread sends msgbench's 36-byte
//! binary ticks (`net/tick.rs`, one per datagram) on an absolute schedule to every destination
//! — unicast addresses, or a multicast group — each stamped with its sequence number and its
//! intended send time on this host's monotonic clock. For tests and truth runs of UDP feeds it
//! can break the stream on purpose, exactly and on known numbers: skip every N-th tick, send one
//! twice, or send two swapped.
//!
//! Nothing is queued: a datagram the kernel cannot take (`ENOBUFS`, a full send buffer) is
//! counted and lost, as UDP loses it.
use crate::clock::now_ns;
use crate::net::tick::Tick;
use bytes::BytesMut;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What to send, where, and how to break it.
#[derive(Debug, Clone)]
pub struct UdpTickOptions {
    /// Where every tick goes (each gets every tick).
    pub to: Vec<SocketAddr>,
    /// Ticks per second.
    pub rate: f64,
    /// Symbols the stream cycles through.
    pub symbols: u32,
    /// Every tick whose number is a multiple of this is never sent (0: none).
    pub skip_every: u64,
    /// Every tick whose number is ≡ half of this (mod this) is sent twice (0: none).
    pub duplicate_every: u64,
    /// Every tick whose number is ≡ a third of this (mod this) is sent after the next one (0:
    /// none).
    pub reorder_every: u64,
    /// Multicast: the TTL of its datagrams and the interface they leave by (`None`: unicast).
    pub multicast_interface: Option<std::net::Ipv4Addr>,
}

/// What the sender did.
#[derive(Debug, Default)]
pub struct UdpTickCounts {
    /// Ticks made (skipped ones included).
    pub made: AtomicU64,
    /// Datagrams sent (to all destinations).
    pub sent: AtomicU64,
    /// Datagrams the kernel refused.
    pub refused: AtomicU64,
}

/// A running sender; stops when dropped.
pub struct UdpTickSender {
    stop: Arc<AtomicBool>,
    counts: Arc<UdpTickCounts>,
    thread: Option<JoinHandle<()>>,
}

impl UdpTickSender {
    /// Starts sending now (tick 0 is due at once).
    pub fn start(options: UdpTickOptions) -> std::io::Result<UdpTickSender> {
        if options.to.is_empty() || !(options.rate > 0.0 && options.rate <= 1e7) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "give at least one destination and a rate between 1 and 10 M per second",
            ));
        }
        let v6 = options.to[0].is_ipv6();
        if options.to.iter().any(|a| a.is_ipv6() != v6) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "give destinations of one family: all IPv4 or all IPv6",
            ));
        }
        let domain = if v6 {
            socket2::Domain::IPV6
        } else {
            socket2::Domain::IPV4
        };
        let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, None)?;
        if let Some(interface) = options.multicast_interface {
            socket.set_multicast_if_v4(&interface)?;
            socket.set_multicast_loop_v4(true)?;
            socket.set_multicast_ttl_v4(1)?;
        }
        let any: SocketAddr = if v6 {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            ([0, 0, 0, 0], 0).into()
        };
        socket.bind(&any.into())?;
        let socket: UdpSocket = socket.into();
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(UdpTickCounts::default());
        let (s, c) = (stop.clone(), counts.clone());
        let thread = std::thread::Builder::new()
            .name("udp-ticks".into())
            .spawn(move || send_ticks(&socket, &options, &s, &c))?;
        Ok(UdpTickSender {
            stop,
            counts,
            thread: Some(thread),
        })
    }

    /// What it did so far.
    pub fn counts(&self) -> &UdpTickCounts {
        &self.counts
    }
}

impl Drop for UdpTickSender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The longest the sender sleeps before it looks at the stop flag again.
const CHECK_EVERY_NS: u64 = 10_000_000;

fn send_ticks(socket: &UdpSocket, o: &UdpTickOptions, stop: &AtomicBool, counts: &UdpTickCounts) {
    let t0 = now_ns();
    let period = 1e9 / o.rate;
    let mut out = BytesMut::with_capacity(64);
    let mut held: Option<Tick> = None;
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        let due = t0 + (seq as f64 * period) as u64;
        if due > now {
            std::thread::sleep(Duration::from_nanos((due - now).min(CHECK_EVERY_NS)));
            continue;
        }
        let tick = Tick::at(seq, due, o.symbols);
        counts.made.fetch_add(1, Ordering::Relaxed);
        seq += 1;
        if hits(tick.seq, o.skip_every, 0) {
            continue;
        }
        if hits(tick.seq, o.reorder_every, o.reorder_every / 3) && held.is_none() {
            held = Some(tick); // goes after the next one
            continue;
        }
        let copies = if hits(tick.seq, o.duplicate_every, o.duplicate_every / 2) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            send(socket, &tick, o, &mut out, counts);
        }
        if let Some(late) = held.take() {
            send(socket, &late, o, &mut out, counts);
        }
    }
}

/// True when `every` is set and `seq ≡ at (mod every)`.
fn hits(seq: u64, every: u64, at: u64) -> bool {
    every > 0 && seq % every == at
}

fn send(
    socket: &UdpSocket,
    tick: &Tick,
    o: &UdpTickOptions,
    out: &mut BytesMut,
    counts: &UdpTickCounts,
) {
    let mut tick = *tick;
    tick.sent_ns = now_ns();
    out.clear();
    tick.encode_binary(out);
    for to in &o.to {
        match socket.send_to(out, to) {
            Ok(_) => counts.sent.fetch_add(1, Ordering::Relaxed),
            Err(_) => counts.refused.fetch_add(1, Ordering::Relaxed),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_broken_numbers_are_the_ones_asked_for() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let sender = UdpTickSender::start(UdpTickOptions {
            to: vec![rx.local_addr().unwrap()],
            rate: 20_000.0,
            symbols: 10,
            skip_every: 25,
            duplicate_every: 30,
            reorder_every: 30,
            multicast_interface: None,
        })
        .unwrap();
        let mut seqs = Vec::new();
        let mut buf = [0u8; 64];
        while seqs.len() < 40 {
            let n = rx.recv(&mut buf).unwrap();
            seqs.push(Tick::decode_binary(&buf[..n]).unwrap().seq);
        }
        drop(sender);
        // 0 and 25 skipped, 10 after 11, 15 twice.
        assert_eq!(
            &seqs[..12],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 10, 12],
            "{seqs:?}"
        );
        assert_eq!(seqs.iter().filter(|&&s| s == 15).count(), 2, "{seqs:?}");
        assert!(!seqs.contains(&25) && seqs.contains(&26), "{seqs:?}");
    }
}

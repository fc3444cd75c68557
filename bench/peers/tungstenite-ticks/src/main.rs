//! A tick server on tokio-tungstenite, the peer of `msgbench serve ticks` in
//! bench/ticks-vs-tungstenite.sh. It streams msgbench's 36-byte binary ticks (sequence number,
//! intended send time on CLOCK_MONOTONIC, write time, symbol, price; little-endian) to every
//! client on an absolute schedule (`--rate`, 0 = as fast as the socket takes them), feeding up to
//! `--batch` frames per flush, from one current-thread runtime on one (optionally pinned) thread:
//! the same shape as msgbench's server, so the comparison is the WebSocket crate.
//!
//!   tungstenite-ticks --listen 127.0.0.1:9100 --rate 1000000 --pin 0
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Encodes one tick into `arena` and splits it off (one allocation per ~1800 ticks, as
/// msgbench's server does).
fn tick(arena: &mut bytes::BytesMut, seq: u64, intended_ns: u64, sent_ns: u64) -> bytes::Bytes {
    use bytes::BufMut;
    if arena.capacity() < 64 {
        *arena = bytes::BytesMut::with_capacity(64 << 10);
    }
    arena.put_u64_le(seq);
    arena.put_u64_le(intended_ns);
    arena.put_u64_le(sent_ns);
    arena.put_u32_le((seq % 100) as u32);
    arena.put_f64_le((10_000 + (seq.wrapping_mul(7_919) % 10_000)) as f64 / 100.0);
    arena.split().freeze()
}

struct Args {
    listen: String,
    rate: f64,
    batch: u64,
    pin: Option<usize>,
}

fn args() -> Args {
    let mut a = Args {
        listen: "127.0.0.1:9100".into(),
        rate: 1e6,
        batch: 256,
        pin: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => a.listen = value,
            "--rate" => a.rate = value.parse().expect("--rate PER_SEC"),
            "--batch" => a.batch = value.parse().expect("--batch N"),
            "--pin" => a.pin = Some(value.parse().expect("--pin CPU")),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

async fn serve(stream: tokio::net::TcpStream, rate: f64, batch: u64) {
    let _ = stream.set_nodelay(true);
    let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let (mut write, mut read) = ws.split();
    // Acknowledgements and the client's close: read and drop.
    tokio::task::spawn_local(async move { while let Some(Ok(_)) = read.next().await {} });
    let t0 = now_ns();
    let mut seq = 0u64;
    let mut arena = bytes::BytesMut::with_capacity(64 << 10);
    loop {
        let now = now_ns();
        let due = if rate > 0.0 {
            ((now - t0) as f64 * rate / 1e9) as u64 + 1
        } else {
            seq + batch
        };
        let upto = due.min(seq + batch);
        if upto > seq {
            while seq < upto {
                let intended = t0 + (seq as f64 * 1e9 / rate.max(1e-9)) as u64;
                let intended = if rate > 0.0 { intended } else { now };
                let payload = tick(&mut arena, seq, intended, now);
                if write.feed(Message::binary(payload)).await.is_err() {
                    return;
                }
                seq += 1;
            }
            if write.flush().await.is_err() {
                return;
            }
            continue;
        }
        let next_ns = t0 + (seq as f64 * 1e9 / rate) as u64;
        if next_ns > now + 1_000_000 {
            tokio::time::sleep(Duration::from_nanos(next_ns - now)).await;
        } else {
            tokio::task::yield_now().await;
        }
    }
}

fn main() {
    let a = args();
    if let Some(cpu) = a.pin {
        // SAFETY: a zeroed cpu_set_t with one bit set, for the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = tokio::net::TcpListener::bind(&a.listen)
            .await
            .expect("listen");
        println!("tungstenite-ticks streaming on ws://{}/", listener.local_addr().unwrap());
        while let Ok((stream, _)) = listener.accept().await {
            tokio::task::spawn_local(serve(stream, a.rate, a.batch));
        }
    });
}

//! UDP feeds (`ticks.address = "udp://…"`): msgbench's 36-byte ticks sent by the UDP tick
//! sender (`serve ticks --udp-to`, here in-process) that breaks the stream on known numbers —
//! every 1000th tick never sent, one in 5000 sent twice, one in 5000 sent after the next — and
//! a client too slow for its small receive buffer, whose losses the kernel counts.
mod common;

use common::run;
use msgbench_engine::server::udp_ticks::{UdpTickOptions, UdpTickSender};
use msgbench_model::result::StreamClient;
use msgbench_model::RunResult;

/// A unicast feed to two clients on `port` and `port + 1`.
fn sender(port: u16, rate: f64, broken: bool) -> UdpTickSender {
    let every = |n| if broken { n } else { 0 };
    UdpTickSender::start(UdpTickOptions {
        to: vec![
            format!("127.0.0.1:{port}").parse().unwrap(),
            format!("127.0.0.1:{}", port + 1).parse().unwrap(),
        ],
        rate,
        symbols: 100,
        skip_every: every(1000),
        duplicate_every: every(5000),
        reorder_every: every(5000),
        multicast_interface: None,
    })
    .unwrap()
}

/// Two free UDP ports side by side.
fn two_ports() -> u16 {
    loop {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if port < 65_535 && std::net::UdpSocket::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

fn feed(port: u16) -> String {
    format!(
        "system = \"ticks\"\n[run]\nduration = \"2s\"\nwarmup = \"500ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 20000\n[ticks]\naddress = \"udp://127.0.0.1:{port}\"\ngaps = \"drops\"\n"
    )
}

fn client<'a>(r: &'a RunResult, name: &str) -> &'a StreamClient {
    r.streams.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn skipped_duplicated_and_reordered_datagrams_are_counted_as_sent() {
    let port = two_ports();
    let _sender = sender(port, 20_000.0, true);
    let r = &run(
        &format!("{}[ticks.clients.fast]\nconnections = 2\n", feed(port)),
        &[],
    )[0];
    r.counters.check().unwrap();
    assert_eq!(r.latency.count, r.counters.delivered);
    // Declared lossy: what the network does is counted, not the feed's error.
    assert_eq!(r.sequence.total(), 0, "{:?}", r.sequence);
    for c in &r.streams {
        // Every 1000th number never came: one gap each, counted as dropped.
        let expected = c.counters.delivered as f64 / 999.0;
        assert!(
            (c.counters.dropped as f64 - expected).abs() <= 2.0,
            "{}: {:?}",
            c.name,
            c.counters
        );
        // One in 5000 twice, one in 5000 late: over the whole run (2.5 s and the drain at
        // 20k/s: 10 or 11 of each), every one of them seen.
        assert!(
            (9..=12).contains(&c.duplicates_seen),
            "{}: {}",
            c.name,
            c.duplicates_seen
        );
        assert!(
            c.reordered_seen.abs_diff(c.duplicates_seen) <= 1,
            "{}: {} reordered, {} duplicated",
            c.name,
            c.reordered_seen,
            c.duplicates_seen
        );
        // A late number fills the gap it opened: gaps seen are the skipped ones only.
        assert!(c.gaps_seen * 999 <= c.counters.delivered * 2 + 999 * 4);
        assert_eq!(c.faults.receive_buffer_drops, 0, "{:?}", c.faults);
    }
    assert!(
        r.info.iter().any(|i| i.contains("datagrams read twice")),
        "{:?}",
        r.info
    );
}

#[test]
fn a_client_too_slow_for_its_receive_buffer_shows_the_kernels_drops() {
    let port = two_ports();
    let _sender = sender(port, 20_000.0, false);
    // 100 µs per datagram: half the rate; an 8 KiB buffer holds a few dozen datagrams.
    let toml = format!(
        "{}receive_buffer = 8192\n[ticks.clients.fast]\nconnections = 1\n[ticks.clients.slow]\nconnections = 1\ncost = \"100us\"\nwork = \"sleep\"\n",
        feed(port)
    );
    let r = &run(&toml, &[])[0];
    r.counters.check().unwrap();
    let (fast, slow) = (client(r, "fast-0"), client(r, "slow-0"));
    let drops = slow.faults.receive_buffer_drops;
    assert!(drops > 10_000, "{:?}", slow.faults);
    // What the kernel dropped is what the client found missing (the warm-up's included in
    // both; a few at the edges of its reading).
    assert!(
        slow.gaps_seen.abs_diff(drops) * 50 <= drops,
        "{} gaps, {drops} kernel drops",
        slow.gaps_seen
    );
    assert!(slow.counters.dropped > 10_000, "{:?}", slow.counters);
    assert!(fast.counters.delivered > slow.counters.delivered * 3 / 2);
    assert!(
        r.info.iter().any(|i| i.contains("dropped by the kernel")),
        "{:?}",
        r.info
    );
}

/// Two senders to one client (two feed lines on one port, as an A/B pair or two publishers of
/// a group): each is a sequence of its own, counted apart — the one that skips every 1000th
/// number shows its gaps, the other none; neither's numbers are the other's errors.
#[test]
fn each_sender_is_a_sequence_of_its_own() {
    let port = two_ports();
    let one = |rate, skip_every| {
        UdpTickSender::start(UdpTickOptions {
            to: vec![format!("127.0.0.1:{port}").parse().unwrap()],
            rate,
            symbols: 100,
            skip_every,
            duplicate_every: 0,
            reorder_every: 0,
            multicast_interface: None,
        })
        .unwrap()
    };
    let (_clean, _skipping) = (one(10_000.0, 0), one(5_000.0, 1000));
    let r = &run(
        &format!("{}[ticks.clients.fast]\nconnections = 1\n", feed(port)),
        &[],
    )[0];
    r.counters.check().unwrap();
    assert_eq!(r.streams.len(), 2, "{:?}", r.streams);
    assert_eq!(r.sequence.total(), 0, "{:?}", r.sequence);
    let mut by_rate: Vec<&StreamClient> = r.streams.iter().collect();
    by_rate.sort_by_key(|c| std::cmp::Reverse(c.counters.delivered));
    let (clean, skipping) = (by_rate[0], by_rate[1]);
    for c in [clean, skipping] {
        assert_eq!(c.kind, "udp");
        let source = c.source.as_deref().expect("a sender");
        assert!(source.starts_with("127.0.0.1:"), "{source}");
        assert_eq!(c.duplicates_seen + c.reordered_seen, 0, "{}", c.name);
    }
    assert_ne!(clean.source, skipping.source);
    // The second heard is named after the client and its sender.
    let second = r.streams.iter().find(|c| c.name != "fast-0").unwrap();
    assert_eq!(
        second.name,
        format!("fast-0@{}", second.source.as_deref().unwrap())
    );
    // 2 s at 10k/s and 5k/s.
    assert!(clean.counters.delivered > 15_000, "{:?}", clean.counters);
    assert!(
        skipping.counters.delivered > 7_500,
        "{:?}",
        skipping.counters
    );
    assert_eq!(clean.counters.dropped, 0, "{:?}", clean.counters);
    // Each sender's span is its own: neither is charged with what the other sent.
    for c in [clean, skipping] {
        assert_eq!(c.counters.failed, 0, "{}: {:?}", c.name, c.counters);
        assert!(
            c.counters.in_flight_end <= 50,
            "{}: {:?}",
            c.name,
            c.counters
        );
    }
    let expected = skipping.counters.delivered as f64 / 999.0;
    assert!(
        (skipping.counters.dropped as f64 - expected).abs() <= 2.0,
        "{:?}",
        skipping.counters
    );
}

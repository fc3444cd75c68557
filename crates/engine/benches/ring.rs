//! Raw SPSC ring throughput, no timing per item: msgbench's ring vs rtrb through the same loop.
//! Producer and consumer on two threads (pinned to the first two CPUs), started together by a
//! barrier; prints median items/s of each and the ratio.
use msgbench_engine::ring::{RingConsumer, RingProducer};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const ITEMS: u64 = 2_000_000;
const CAPACITY: usize = 1024;

fn transfer<P: RingProducer<u64> + 'static, C: RingConsumer<u64> + 'static>(
    mut p: P,
    mut c: C,
) -> Duration {
    let cpus = msgbench_engine::affinity::allowed_cpus();
    let (producer_cpu, consumer_cpu) = (cpus.first().copied(), cpus.get(1).copied());
    let barrier = Arc::new(Barrier::new(2));
    let b2 = barrier.clone();
    let producer = std::thread::spawn(move || {
        if let Some(cpu) = producer_cpu {
            let _ = msgbench_engine::affinity::pin_current_thread(cpu);
        }
        b2.wait();
        for i in 0..ITEMS {
            let mut v = i;
            while let Err(back) = p.push(v) {
                v = back;
                std::hint::spin_loop();
            }
        }
    });
    let consumer = std::thread::spawn(move || {
        if let Some(cpu) = consumer_cpu {
            let _ = msgbench_engine::affinity::pin_current_thread(cpu);
        }
        barrier.wait();
        let start = Instant::now();
        let mut expected = 0;
        while expected < ITEMS {
            if let Some(v) = c.pop() {
                assert_eq!(v, expected);
                expected += 1;
            } else {
                std::hint::spin_loop();
            }
        }
        start.elapsed()
    });
    producer.join().unwrap();
    consumer.join().unwrap()
}

/// Items per second of one transfer.
fn rate(elapsed: Duration) -> f64 {
    ITEMS as f64 / elapsed.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Not a criterion loop on purpose: this host moves its vCPUs around, so a ring measured minutes
/// after its peer can look 5x faster or slower. Alternating the two rings round by round and
/// comparing medians keeps both under the same conditions.
#[derive(Clone, Copy)]
enum Contestant {
    Ours,
    Rtrb,
    /// rtrb again: the A/A control that shows how far two identical rings differ here.
    RtrbAgain,
}

fn run(who: Contestant) -> f64 {
    match who {
        Contestant::Ours => {
            let (p, c) = msgbench_engine::ring::channel::<u64>(CAPACITY);
            rate(transfer(p, c))
        }
        Contestant::Rtrb | Contestant::RtrbAgain => {
            let (p, c) = rtrb::RingBuffer::<u64>::new(CAPACITY);
            rate(transfer(p, c))
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(21);
    let order = [Contestant::Ours, Contestant::Rtrb, Contestant::RtrbAgain];
    let mut rates = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..rounds {
        // Rotate who goes first, so no one always gets the warmer start.
        for k in 0..3 {
            let who = order[(round + k) % 3];
            rates[who as usize].push(run(who));
        }
    }
    // Each round's transfers ran back to back under the same host conditions: the median of the
    // per-round ratios is the steadiest comparison on a noisy machine, and the A/A ratio (rtrb
    // against itself) shows how much of any difference is this machine rather than the ring.
    let paired = |a: &[f64], b: &[f64]| median(a.iter().zip(b).map(|(x, y)| x / y).collect());
    let ours_vs_rtrb = paired(&rates[0], &rates[1]);
    let control = paired(&rates[2], &rates[1]);
    let [ours, rtrb, again] = rates.map(median);
    println!("spsc-ring: {ITEMS} u64 items through {CAPACITY} slots, producer/consumer pinned to the first two CPUs, {rounds} rotating rounds");
    println!("  msgbench ring    median {:.1} M items/s", ours / 1e6);
    println!("  rtrb             median {:.1} M items/s", rtrb / 1e6);
    println!("  rtrb (again)     median {:.1} M items/s", again / 1e6);
    println!("  msgbench / rtrb = {ours_vs_rtrb:.2} (median of per-round ratios; target >= 0.90); A/A control rtrb / rtrb = {control:.2}");
}

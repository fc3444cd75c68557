//! Raw SPSC ring throughput, no timing per item: msgbench's ring vs rtrb through the same loop.
//! Producer and consumer on two threads (pinned to CPUs 0 and 1 when they exist), started
//! together by a barrier; criterion's time per element is the inverse of items/s.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
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
    let barrier = Arc::new(Barrier::new(2));
    let b2 = barrier.clone();
    let producer_cpu = cpus.first().copied();
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
    if let Some(cpu) = cpus.get(1) {
        let _ = msgbench_engine::affinity::pin_current_thread(*cpu);
    }
    barrier.wait();
    let start = Instant::now();
    let mut expected = 0;
    while expected < ITEMS {
        if let Some(v) = c.pop() {
            assert_eq!(v, expected);
            expected += 1;
        }
    }
    let elapsed = start.elapsed();
    producer.join().unwrap();
    elapsed
}

fn rings(c: &mut Criterion) {
    let mut group = c.benchmark_group("spsc-ring");
    group
        .throughput(Throughput::Elements(ITEMS))
        .sample_size(20);
    group.bench_function("msgbench", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let (p, c) = msgbench_engine::ring::channel::<u64>(CAPACITY);
                    transfer(p, c)
                })
                .sum()
        })
    });
    group.bench_function("rtrb", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let (p, c) = rtrb::RingBuffer::<u64>::new(CAPACITY);
                    transfer(p, c)
                })
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, rings);
criterion_main!(benches);

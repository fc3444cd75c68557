//! Cost of recording one message: what the hot path pays per send and per delivery
//! (counters, send-lag / latency / service-time histograms, sequence check; target ≤ 15 ns), and
//! of the clock read each of those takes.
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use msgbench_engine::recorder::Collector;

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("recorder");
    group.throughput(Throughput::Elements(1));
    // Timestamps stay inside the first interval, so no roll happens (that is off the hot path).
    let start = 1_000_000_000_000u64;
    let mut collector = Collector::new(1, start, 0);
    let mut consumer = collector.recorder(false);
    let mut producer = collector.recorder(false);
    let mut seq = 0u64;
    group.bench_function("delivered (latency + service + counters + sequence)", |b| {
        b.iter(|| {
            let t = start + (seq & 0xFFFF) * 7;
            consumer.sequence.check(seq);
            consumer.delivered(
                0,
                black_box(t),
                black_box(t + 100),
                black_box(t + 5_000 + (seq & 0x3FF)),
            );
            seq += 1;
        })
    });
    group.bench_function("sent (send lag + counters)", |b| {
        let mut i = 0u64;
        b.iter(|| {
            producer.attempted();
            producer.sent(black_box(start + i), black_box(start + i + (i & 0xFF)));
            i += 1;
        })
    });
    group.finish();
}

/// The recorder's other per-message cost: one clock read per send and per delivery.
fn clock(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    group.throughput(Throughput::Elements(1));
    msgbench_engine::clock::calibrate();
    group.bench_function("now_ns (TSC, slope kept on CLOCK_MONOTONIC)", |b| {
        b.iter(|| black_box(msgbench_engine::clock::now_ns()))
    });
    group.bench_function("CLOCK_MONOTONIC (vDSO clock_gettime)", |b| {
        b.iter(|| black_box(msgbench_engine::clock::monotonic_ns()))
    });
    group.finish();
}

criterion_group!(benches, record, clock);
criterion_main!(benches);

//! Lateness of the pacer's precise sleep on this machine: 3000 absolute 1 ms deadlines.
//! `cargo run --release -p msgbench-engine --example sleep_probe [SPIN_NS]`
use msgbench_engine::clock::{lower_timer_slack, now_ns, Clock, MonotonicClock};
fn main() {
    let spin: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(80_000);
    lower_timer_slack();
    let c = MonotonicClock::new(spin);
    let start = now_ns() + 1_000_000;
    let mut late = Vec::new();
    for k in 0..3000u64 {
        let due = start + k * 1_000_000;
        let t = c.sleep_until(due);
        late.push(t - due);
    }
    late.sort();
    let q = |p: f64| late[((late.len() as f64 - 1.0) * p) as usize] as f64 / 1e3;
    println!(
        "spin {} us: lateness p50 {:.1} us, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}",
        spin / 1000,
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        q(1.0)
    );
}

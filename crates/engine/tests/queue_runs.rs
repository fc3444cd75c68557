//! Real runs of the queue lab, checked for what must always hold: complete accounting under
//! every when-full policy and pacing, exact schedule counts, drops when overloaded, and files.
mod common;

use msgbench_engine::runner::Outcome;
use msgbench_model::RunResult;

fn run(toml: &str, sets: &[&str]) -> (Outcome, tempfile::TempDir) {
    let (outcome, dir) = common::try_run(toml, sets);
    (outcome.unwrap(), dir)
}

fn assert_accounted(r: &RunResult) {
    r.counters
        .check()
        .unwrap_or_else(|e| panic!("{}: {e}", r.run_id));
    assert_eq!(r.sequence.total(), 0, "{}: {:?}", r.run_id, r.sequence);
    assert_eq!(
        r.latency.count, r.counters.delivered,
        "{}: every delivery recorded",
        r.run_id
    );
    assert_eq!(
        r.send_lag.count, r.counters.sent,
        "{}: every send recorded",
        r.run_id
    );
}

const SHORT: &str = "[run]\nduration = \"400ms\"\nwarmup = \"100ms\"\n";

#[test]
fn accounting_holds_for_every_pacing_and_when_full_policy() {
    let sweep = r#"
[queue]
capacity = 16
[sweep]
"queue.when_full" = ["drop", "block"]
"pacing" = [{mode = "immediate"}, {mode = "rate", per_sec = 50000}, {mode = "interval", every = "1ms", batch = 20}, {mode = "relative", every = "1ms", batch = 5}]
"#;
    let (outcome, _dir) = run(&format!("{SHORT}{sweep}"), &[]);
    assert_eq!(outcome.results.len(), 8);
    for r in &outcome.results {
        assert_accounted(r);
        assert!(r.counters.delivered > 0, "{}", r.run_id);
        assert_eq!(r.counters.skipped, 0);
        if r.param("queue.when_full") == Some("block") {
            assert_eq!(r.counters.dropped, 0, "{}", r.run_id);
        }
    }
}

#[test]
fn an_overloaded_small_queue_drops_and_still_accounts_for_everything() {
    let (outcome, _dir) = run(
        SHORT,
        &[
            "queue.capacity=8",
            "queue.when_full=drop",
            "queue.work=\"2us\"",
        ],
    );
    let r = &outcome.results[0];
    assert_accounted(r);
    assert!(
        r.counters.dropped > r.counters.delivered,
        "{:?}",
        r.counters
    );
    assert!(r.latency.p99_ns >= 2_000, "each item costs 2 µs of work");
}

#[test]
fn blocking_counts_the_wait_as_latency_but_not_as_service_time() {
    // 400k/s offered to a consumer that manages 200k/s, producer blocking on a 64-slot ring:
    // the schedule falls further behind every second, and latency from the intended send time
    // shows it, while service time (from the push that got in) stays near 64 x 5 us.
    let (outcome, _dir) = run(
        SHORT,
        &[
            "queue.capacity=64",
            "queue.when_full=block",
            "queue.work=\"5us\"",
            "pacing.mode=rate",
            "pacing.per_sec=400000",
        ],
    );
    let r = &outcome.results[0];
    assert_accounted(r);
    assert_eq!(r.counters.dropped, 0);
    assert!(r.latency.p99_ns > 50_000_000, "latency {:?}", r.latency);
    assert!(
        r.service.p99_ns < r.latency.p99_ns / 10,
        "service {:?}",
        r.service
    );
    assert!(
        r.send_lag.p99_ns > 50_000_000,
        "the lag shows the driver fell behind: {:?}",
        r.send_lag
    );
}

#[test]
fn rate_pacing_sends_exactly_the_scheduled_count() {
    let (outcome, _dir) = run("[run]\nduration = \"500ms\"\nwarmup = \"100ms\"\n[pacing]\nmode = \"rate\"\nper_sec = 20000\n", &[]);
    let r = &outcome.results[0];
    assert_accounted(r);
    assert_eq!(r.counters.attempted, 10_000);
    assert!(
        r.warnings.iter().all(|w| !w.is_target_missed()),
        "{:?}",
        r.warnings
    );
}

#[test]
fn an_operation_budget_ends_the_run() {
    let (outcome, _dir) = run(
        "[run]\nduration = \"30s\"\noperations = 50000\nwarmup = \"0\"\n",
        &[],
    );
    let r = &outcome.results[0];
    assert_accounted(r);
    assert_eq!(r.counters.attempted, 50_000);
    assert!(r.duration_s < 10.0);
}

#[test]
fn relative_sleeping_misses_its_target_and_says_so() {
    let (outcome, _dir) = run("[run]\nduration = \"500ms\"\nwarmup = \"0\"\n[pacing]\nmode = \"relative\"\nevery = \"20us\"\n", &[]);
    let r = &outcome.results[0];
    assert_accounted(r);
    assert!(
        r.counters.attempted < 20_000,
        "20 µs relative sleeps cannot reach 50k/s: {}",
        r.counters.attempted
    );
    assert!(
        r.warnings.iter().any(|w| w.is_target_missed()),
        "{:?}",
        r.warnings
    );
    assert!(
        r.send_lag.max_ns > 1_000_000,
        "the drift shows in the send lag: {:?}",
        r.send_lag
    );
}

#[test]
fn every_wait_strategy_and_both_rings_deliver_in_order() {
    let sweep = r#"
[pacing]
mode = "rate"
per_sec = 20000
[sweep]
"queue.consumer_wait" = ["busy-spin", "yield", "park", "backoff"]
"queue.ring" = ["msgbench", "rtrb"]
"#;
    let (outcome, _dir) = run(
        &format!("[run]\nduration = \"200ms\"\nwarmup = \"50ms\"\n{sweep}"),
        &[],
    );
    assert_eq!(outcome.results.len(), 8);
    for r in &outcome.results {
        assert_accounted(r);
        assert_eq!(r.counters.attempted, 4_000, "{}", r.run_id);
        assert_eq!(r.counters.delivered, 4_000, "{}", r.run_id);
    }
}

#[test]
fn files_are_written_for_every_run() {
    let (outcome, _dir) = run(SHORT, &["run.emit_latencies=1000", "run.replicates=2"]);
    let dir = &outcome.dir;
    for name in ["experiment.toml", "environment.json", "metrics.csv"] {
        assert!(dir.join(name).is_file(), "{name}");
    }
    let csv = std::fs::read_to_string(dir.join("metrics.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "header and one row per run");
    for r in &outcome.results {
        let json = std::fs::read_to_string(dir.join(format!("runs/{}.json", r.run_id))).unwrap();
        let back: RunResult = serde_json::from_str(&json).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(r).unwrap(),
            "{} round-trips",
            r.run_id
        );
        let raw =
            std::fs::read_to_string(dir.join(format!("runs/{}.latencies.csv", r.run_id))).unwrap();
        assert_eq!(raw.lines().count(), 1001);
        let hlog = std::fs::read(dir.join(format!("runs/{}.hlog", r.run_id))).unwrap();
        let mut total = 0;
        for entry in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&hlog) {
            if let hdrhistogram::serialization::interval_log::LogEntry::Interval(i) = entry.unwrap()
            {
                total += msgbench_model::histogram::decode(i.encoded_histogram())
                    .unwrap()
                    .len();
            }
        }
        assert_eq!(
            total, r.counters.delivered,
            "the interval log holds every delivery"
        );
    }
    assert!(std::fs::read_dir(dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));
}

#[test]
fn an_operation_budget_alone_ends_the_window() {
    let (outcome, _dir) = run(
        "[run]\nduration = \"0\"\noperations = 20000\nwarmup = \"0\"\n",
        &[],
    );
    let r = &outcome.results[0];
    assert_accounted(r);
    assert_eq!(r.counters.attempted, 20_000);
}

#[test]
fn relative_sleeping_sends_nothing_after_the_window() {
    let (outcome, _dir) = run("[run]\nduration = \"1s\"\nwarmup = \"0\"\n[pacing]\nmode = \"relative\"\nevery = \"100ms\"\n", &[]);
    let r = &outcome.results[0];
    assert_accounted(r);
    // Wake-ups at 0, ~100, ~200 ms …: at most 10 start before 1 s, never an 11th after it.
    assert!(
        (8..=10).contains(&r.counters.attempted),
        "{}",
        r.counters.attempted
    );
}

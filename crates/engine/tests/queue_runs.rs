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

/// Compiles C `source` (with examples/queues/msgbench_queue.h on the include path) into a
/// shared library in `dir`; its path.
fn queue_library(dir: &std::path::Path, name: &str, source: &str) -> std::path::PathBuf {
    let queues = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/queues");
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).unwrap();
    let lib = dir.join(format!("lib{name}.so"));
    let o = std::process::Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-I"])
        .arg(&queues)
        .arg("-o")
        .arg(&lib)
        .arg(&c)
        .output()
        .expect("a C compiler (cc)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    lib
}

/// Issue 46: the user's queue through the ABI — the example C ring runs with the lab's
/// producer, consumer, pacing and accounting, in order, every item delivered.
#[test]
fn a_queue_from_a_shared_library_runs_in_the_lab() {
    let tmp = tempfile::tempdir().unwrap();
    let source =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/queues/spsc_ring.c");
    let lib = queue_library(
        tmp.path(),
        "spsc_ring",
        &std::fs::read_to_string(source).unwrap(),
    );
    let queue = format!(
        "[queue]\ncapacity = 64\nring = \"library\"\nlibrary = \"{}\"\n[sweep]\n\"pacing\" = [{{mode = \"immediate\"}}, {{mode = \"rate\", per_sec = 50000}}]\n\"queue.consumer_wait\" = [\"busy-spin\", \"park\"]\n",
        lib.display()
    );
    let (outcome, _dir) = run(&format!("{SHORT}{queue}"), &[]);
    assert_eq!(outcome.results.len(), 4);
    for r in &outcome.results {
        assert_accounted(r);
        assert!(r.counters.delivered > 0, "{}", r.run_id);
        assert_eq!(r.counters.delivered, r.counters.sent, "{}", r.run_id);
        if r.param("pacing").is_some_and(|p| p.contains("rate")) {
            assert_eq!(r.counters.attempted, 20_000, "{}", r.run_id);
        }
    }
}

/// A queue that lies: every 1000th empty pop claims an item (it repeats the last one it gave),
/// some empty pops make up the next number before it was pushed, every 1500th pop writes a
/// sequence number it was never given and every 1700th flips the item's measured flag. Caught
/// by the sequence check, counted: the accounting still holds, and msgbench lives.
#[test]
fn a_broken_queue_library_is_caught_not_believed() {
    let tmp = tempfile::tempdir().unwrap();
    let broken = r#"
#include "msgbench_queue.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
struct q { _Atomic size_t head, tail; size_t cap, bytes, pops; unsigned char *slots, last[64]; };
uint32_t msgbench_queue_abi(void) { return MSGBENCH_QUEUE_ABI; }
void *msgbench_queue_create(size_t cap, size_t bytes) {
    struct q *q = calloc(1, sizeof *q);
    q->cap = cap; q->bytes = bytes; q->slots = calloc(cap, bytes);
    return q;
}
int msgbench_queue_try_push(void *v, const void *item) {
    struct q *q = v;
    size_t t = atomic_load(&q->tail);
    if (t - atomic_load(&q->head) == q->cap) return 0;
    memcpy(q->slots + (t % q->cap) * q->bytes, item, q->bytes);
    atomic_store(&q->tail, t + 1);
    return 1;
}
int msgbench_queue_try_pop(void *v, void *item) {
    struct q *q = v;
    size_t h = atomic_load(&q->head);
    if (h == atomic_load(&q->tail)) {
        if (++q->pops % 1000 == 0) { memcpy(item, q->last, q->bytes); return 1; }
        if (q->pops % 2500 == 1) { /* the next number, made up before it was pushed */
            memcpy(item, q->last, q->bytes);
            ((unsigned char *)item)[8] += 1;
            return 1;
        }
        return 0;
    }
    memcpy(item, q->slots + (h % q->cap) * q->bytes, q->bytes);
    memcpy(q->last, item, q->bytes);
    unsigned char *p = item;
    if (++q->pops % 1500 == 0) { p[8] ^= 0x55; p[9] ^= 0x3c; p[10] ^= 0x7f; }
    if (q->pops % 1700 == 0) p[11] ^= 0x80; /* the measured flag */
    atomic_store(&q->head, h + 1);
    return 1;
}
size_t msgbench_queue_len(void *v) { struct q *q = v; return atomic_load(&q->tail) - atomic_load(&q->head); }
void msgbench_queue_destroy(void *v) { struct q *q = v; free(q->slots); free(q); }
"#;
    let lib = queue_library(tmp.path(), "broken", broken);
    let queue = format!(
        "[queue]\ncapacity = 64\nring = \"library\"\nlibrary = \"{}\"\n[pacing]\nmode = \"rate\"\nper_sec = 50000\n",
        lib.display()
    );
    // The run stops the experiment as a broken FIFO does, said so, with the run on disk.
    let (outcome, _dir) = common::try_run(&format!("{SHORT}{queue}"), &[]);
    let Err(e) = outcome else {
        panic!("a broken queue fails its run")
    };
    let said = e.to_string();
    assert!(
        said.contains("duplicates") && said.contains("queue.library returned items"),
        "{said}"
    );
    let json = e.dir().unwrap().join("runs/000.json");
    let r: RunResult = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    r.counters.check().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        r.counters.delivered <= r.counters.sent,
        "nothing delivered that was not sent: {:?}",
        r.counters
    );
    assert!(
        r.sequence.duplicates > 0,
        "the lies are counted: {:?}",
        r.sequence
    );

    // A library without the ABI, and one that is not a library: one message each, no crash.
    let empty = queue_library(
        tmp.path(),
        "empty",
        "int nothing_here(void) { return 0; }\n",
    );
    for (path, says) in [
        (empty, "it must export msgbench_queue_abi"),
        (tmp.path().join("broken.c"), "queue.library"),
    ] {
        let queue = format!(
            "[queue]\nring = \"library\"\nlibrary = \"{}\"\n",
            path.display()
        );
        let (outcome, _dir) = common::try_run(&format!("{SHORT}{queue}"), &[]);
        let Err(e) = outcome else {
            panic!("{} refused", path.display())
        };
        let e = e.to_string();
        assert!(e.contains(says), "{e}");
    }
}

/// A queue that is always full, under `when_full = "block"`: the producer's wait for room
/// ends at the run's deadline (the window's end and its drain), not never; every item due is
/// skipped (the run ended), none sent, and the accounting holds.
#[test]
fn a_queue_that_never_makes_room_cannot_hold_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let full = r#"
#include "msgbench_queue.h"
#include <stdlib.h>
uint32_t msgbench_queue_abi(void) { return MSGBENCH_QUEUE_ABI; }
void *msgbench_queue_create(size_t c, size_t b) { (void)c; (void)b; return malloc(8); }
int msgbench_queue_try_push(void *q, const void *i) { (void)q; (void)i; return 0; }
int msgbench_queue_try_pop(void *q, void *i) { (void)q; (void)i; return 0; }
size_t msgbench_queue_len(void *q) { (void)q; return 0; }
void msgbench_queue_destroy(void *q) { free(q); }
"#;
    let lib = queue_library(tmp.path(), "full", full);
    let queue = format!(
        "[run]\nduration = \"400ms\"\nwarmup = \"0\"\ndrain_timeout = \"300ms\"\n[queue]\nring = \"library\"\nlibrary = \"{}\"\nwhen_full = \"block\"\n[pacing]\nmode = \"rate\"\nper_sec = 10000\n",
        lib.display()
    );
    let started = std::time::Instant::now();
    let (outcome, _dir) = run(&queue, &[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let r = &outcome.results[0];
    r.counters.check().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.counters.sent, 0, "{:?}", r.counters);
    assert_eq!(r.counters.skipped, r.counters.attempted, "{:?}", r.counters);
    assert!(r.counters.attempted > 0);
}

//! The shards section of both reports: for a merged run (`msgbench merge`), each load
//! generator's own figures beside the whole, and how far apart their clocks and starts were.
use crate::format::{count, duration_ns};
use msgbench_model::result::RunResult;
use msgbench_model::result::ShardRow;

/// True when some run was merged from shards.
pub fn any(runs: &[RunResult]) -> bool {
    runs.iter().any(|r| !r.shards.is_empty())
}

const HEADER: [&str; 10] = [
    "run",
    "shard",
    "host",
    "connections",
    "delivered/s",
    "p50",
    "p99",
    "send lag p99",
    "start (late by)",
    "wall clock",
];

const EXPLAINED: &str = "Each shard offered its slice of the run's connections on its own \
    schedule; the run's figures above are the whole (histograms added, counters summed). \
    Seconds are aligned on the shards' wall clocks, so clocks that are not synchronized (or \
    whose error is large) shift one shard's seconds against another's. A request's latency is \
    measured on one host's clock; a publish/subscribe message's is stamped on its publisher's \
    host and read on its subscriber's, so across hosts it carries both clocks' error (the \
    notes say each host's bound).";

fn cells(r: &RunResult, s: &ShardRow) -> [String; 10] {
    let clock = &s.shard.clock;
    [
        r.run_id.clone(),
        format!("{}/{}", s.shard.index, s.shard.count),
        s.shard.host.clone(),
        format!("{} of {}", s.shard.connections, s.shard.total_connections),
        if s.duration_s > 0.0 {
            count(s.counters.delivered as f64 / s.duration_s)
        } else {
            "–".into()
        },
        duration_ns(s.latency.p50_ns),
        duration_ns(s.latency.p99_ns),
        duration_ns(s.send_lag.p99_ns),
        format!(
            "+{:.3} s ({} ms)",
            s.started_unix_ms.saturating_sub(r.started_unix_ms) as f64 / 1e3,
            s.shard.start_late_ms
        ),
        if clock.synchronized {
            format!(
                "synchronized, ±{}",
                duration_ns(clock.estimated_error_us * 1000)
            )
        } else {
            "not synchronized".into()
        },
    ]
}

fn rows(runs: &[RunResult]) -> Vec<[String; 10]> {
    (runs.iter())
        .flat_map(|r| r.shards.iter().map(move |s| cells(r, s)))
        .collect()
}

/// The `## Shards` section of report.md (empty unless a run was merged).
pub fn markdown(runs: &[RunResult]) -> String {
    if !any(runs) {
        return String::new();
    }
    crate::format::markdown_section("Shards", EXPLAINED, &HEADER, &rows(runs))
}

/// The shards section of report.html (empty unless a run was merged).
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    if !any(runs) {
        return String::new();
    }
    crate::format::html_section(("Shards", EXPLAINED), &HEADER, &rows(runs), escape, |_| {
        false
    })
}

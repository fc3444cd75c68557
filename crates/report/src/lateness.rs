//! The "Send lag: whose lateness" section of both reports: for runs that went out late or whose
//! threads waited for a CPU, the send lag split into the pacer's own lateness (the host's) and
//! the sends that waited for room (the system pushing back), beside the longest wait of one of
//! msgbench's threads for a CPU. The two causes need opposite fixes: a quieter host, or a
//! lower rate.
use crate::format::duration_ns;
use msgbench_model::result::RunResult;
use msgbench_model::verdict::{HOST_WAIT_SHARE, SEND_LAG_LIMIT_NS};

/// A run is shown when its send lag p99 passed its bound or a thread of msgbench's waited for a
/// CPU more than a fifth of what makes a run the host's.
fn shown(r: &RunResult) -> bool {
    let late = r.send_lag.p99_ns > r.send_lag_limit_ns.unwrap_or(SEND_LAG_LIMIT_NS);
    late || wait(r).is_some_and(|(_, s)| s > HOST_WAIT_SHARE / 5.0 * r.duration_s)
}

/// The thread of msgbench's that waited longest for a CPU, and its wait in seconds.
fn wait(r: &RunResult) -> Option<(&str, f64)> {
    (r.cpu.threads.iter())
        .filter_map(|t| Some((t.role.as_str(), t.cpu.cpu_wait_s?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

const HEADER: [&str; 7] = [
    "run",
    "send lag p99",
    "pacer's p99",
    "held sends",
    "held p99",
    "longest CPU wait",
    "thread",
];

const EXPLAINED: &str = "Whose lateness the send lag is. `pacer's p99`: sends that waited for \
    nothing but msgbench's pacer — its thread woke or ran late, the host's lateness (a busy \
    host, a thread short of CPU). `held sends`: sends that first waited for room in a full \
    window (`when_full = \"block\"`), queue or socket — the system pushing back, slower than the \
    schedule, unless msgbench's own thread waited for a CPU meanwhile (its replies then sat \
    unread and its window looked full: the host's again). `longest CPU wait`: the most one of msgbench's threads waited for a CPU while \
    ready to run (over 5 % of the span makes a run the host's, invalid).";

fn cells(r: &RunResult) -> Vec<String> {
    let split = &r.send_lag_split;
    let known = split.pacer.count + split.held.count > 0;
    let ns = |count: u64, v: u64| {
        if count == 0 {
            "–".to_string()
        } else {
            duration_ns(v)
        }
    };
    let (thread, wait) = match wait(r) {
        Some((role, s)) => (
            role.to_string(),
            format!(
                "{} ({:.1} %)",
                duration_ns((s * 1e9) as u64),
                100.0 * s / r.duration_s.max(1e-9)
            ),
        ),
        None => ("–".into(), "–".into()),
    };
    vec![
        r.run_id.clone(),
        ns(r.send_lag.count, r.send_lag.p99_ns),
        match (known, r.send_lag.count) {
            (true, _) => ns(split.pacer.count, split.pacer.p99_ns),
            (false, 0) => "–".into(),
            // A file written before the split.
            (false, _) => "not split".into(),
        },
        split.held.count.to_string(),
        ns(split.held.count, split.held.p99_ns),
        wait,
        thread,
    ]
}

fn rows(runs: &[RunResult]) -> Vec<Vec<String>> {
    runs.iter().filter(|r| shown(r)).map(cells).collect()
}

/// The section of report.md (empty when no run was late nor waited).
pub fn markdown(runs: &[RunResult]) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    crate::format::markdown_section("Send lag: whose lateness", EXPLAINED, &HEADER, &rows)
}

/// The section of report.html (empty when no run was late nor waited).
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    crate::format::html_section(
        ("Send lag: whose lateness", &EXPLAINED.replace('`', "")),
        &HEADER,
        &rows,
        escape,
        |_| false,
    )
}

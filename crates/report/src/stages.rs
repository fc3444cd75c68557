//! The "Stages" section of both reports: for runs paced in stages (`pacing.mode = "stages"`),
//! each stage's rate, its whole seconds' delivered rate and median p99, and a spike's recovery
//! time (from its end until a second's p99, and the next one's, is back within its factor of
//! the stage before's).
use crate::format::duration_ns;
use msgbench_model::result::RunResult;
use msgbench_model::stages::{Shape, StageResult};

const HEADER: [&str; 7] = [
    "run",
    "stage",
    "rate",
    "seconds",
    "delivered/s",
    "p99 (median of its seconds)",
    "recovery",
];

const EXPLAINED: &str = "The run's load changed shape stage by stage (`pacing.stages`), on one \
    open-loop schedule: latency still counts from each request's intended send time across the \
    stages' boundaries. `delivered/s` and `p99` are over each stage's whole seconds. A spike's \
    `recovery` is the time from its end until a second's p99, and the next second's, was back \
    within `pacing.recovered_within` times the stage before's (whole seconds: up to one second \
    later than the moment the backlog was gone).";

/// A stage's rate as it goes: `500/s`, `500→1500/s`.
fn rate(s: &StageResult) -> String {
    match s.shape {
        Shape::Ramp if s.from_per_sec != s.to_per_sec => {
            format!("{:.0}→{:.0}/s", s.from_per_sec, s.to_per_sec)
        }
        _ => format!("{:.0}/s", s.to_per_sec),
    }
}

/// A spike's recovery, or `–` for another stage.
fn recovery(s: &StageResult) -> String {
    match (s.shape, s.recovery_s, s.not_recovered) {
        (Shape::Spike, Some(r), _) => {
            format!("{r:.0} s (within {}×)", s.recovered_within.unwrap_or(0.0))
        }
        (Shape::Spike, None, true) => "not by the run's end".into(),
        (Shape::Spike, None, false) => "no stage before to compare".into(),
        _ => "–".into(),
    }
}

fn rows(runs: &[RunResult]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for r in runs {
        for (i, s) in r.stages.iter().enumerate() {
            rows.push(vec![
                r.run_id.clone(),
                format!("{} {}", i + 1, shape_name(s.shape)),
                rate(s),
                format!("{:.0}–{:.0}", s.start_s, s.end_s),
                s.delivered_per_sec
                    .map_or("–".into(), |d| format!("{d:.0}")),
                s.p99_ns.map_or("–".into(), duration_ns),
                recovery(s),
            ]);
        }
    }
    rows
}

/// The stage's shape as a scenario writes it.
pub fn shape_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Ramp => "ramp",
        Shape::Step => "step",
        Shape::Hold => "hold",
        Shape::Spike => "spike",
    }
}

/// The terminal's line for a run in stages: each stage's rate, delivered rate and p99, a
/// spike's recovery (`None` without stages).
pub fn line(r: &RunResult) -> Option<String> {
    if r.stages.is_empty() {
        return None;
    }
    let parts: Vec<String> = (r.stages.iter())
        .map(|s| {
            let delivered = s
                .delivered_per_sec
                .map_or("–".into(), |d| format!("{d:.0}/s"));
            let p99 = s.p99_ns.map_or("–".into(), duration_ns);
            let back = match s.shape {
                Shape::Spike => format!(", recovery {}", recovery(s)),
                _ => String::new(),
            };
            format!(
                "{} {}: delivered {delivered}, p99 {p99}{back}",
                shape_name(s.shape),
                rate(s)
            )
        })
        .collect();
    Some(parts.join(" | "))
}

/// The section of report.md (empty when no run had stages).
pub fn markdown(runs: &[RunResult]) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    crate::format::markdown_section("Stages", EXPLAINED, &HEADER, &rows)
}

/// The section of report.html (empty when no run had stages).
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    crate::format::html_section(
        ("Stages", &EXPLAINED.replace('`', "")),
        &HEADER,
        &rows,
        escape,
        |_| false,
    )
}

//! `metrics.csv`: one row per run, one column per sweep parameter (`param_<axis>`) and metric,
//! then per operation class (`class_<name>_latency_p99_ns`, …). Units are in the column names.
//! Every column is documented in `docs/metrics.md`.
use crate::percentile::latency_columns;
use crate::result::{ClassResult, RunResult};

/// Metric columns after `run_id`, `replicate` and the `param_*` columns, in order: these, the
/// latency columns (`latency_<p>_ns` for [`latency_columns::ALL`]), then [`AFTER_LATENCY`].
pub const BEFORE_LATENCY: &[&str] = &[
    "duration_s",
    "target_per_sec",
    "attempted",
    "sent",
    "delivered",
    "dropped",
    "skipped",
    "failed",
    "in_flight_end",
    "delivered_per_sec",
    "success_rate",
    "drop_rate",
];

/// Metric columns after the latency percentiles.
pub const AFTER_LATENCY: &[&str] = &[
    "latency_mean_ns",
    "service_p50_ns",
    "service_p99_ns",
    "send_lag_p99_ns",
    "send_lag_pacer_p99_ns",
    "send_lag_held_p99_ns",
    "driver_cpu_s",
    "delivered_per_cpu_s",
    "ctx_switches_voluntary",
    "ctx_switches_involuntary",
    "migrations",
    "cpu_wait_ms",
    "sequence_errors",
    "interrupted",
    "sut_cpu_s",
    "sut_cpu_per_delivered_ns",
    "fairness_jain_index",
    "fairness_least_share",
    "fairness_p99_max_over_median",
    "recovery_s",
    "valid",
    "invalid_reasons",
];

/// The metric columns after `run_id`, `replicate` and the `param_*` columns, in order.
pub fn metric_columns() -> Vec<String> {
    let latency = latency_columns::ALL
        .iter()
        .map(|m| format!("latency_{}_ns", m.column()));
    (BEFORE_LATENCY.iter().map(|c| c.to_string()))
        .chain(latency)
        .chain(AFTER_LATENCY.iter().map(|c| c.to_string()))
        .collect()
}

/// Per operation class, after the metric columns: `class_<name>_` and one of these
/// (`latency_<p>_ns` for [`latency_columns::CLASS`]).
pub fn class_columns() -> Vec<String> {
    (latency_columns::CLASS.iter())
        .map(|m| format!("latency_{}_ns", m.column()))
        .collect()
}

/// The longest recovery of the run's spike stages, seconds (`inf`: one had not recovered by the
/// run's end); empty without a judged spike.
fn recovery_cell(r: &RunResult) -> String {
    let spikes = r
        .stages
        .iter()
        .filter(|s| s.shape == crate::stages::Shape::Spike);
    let worst = spikes
        .filter_map(|s| match (s.recovery_s, s.not_recovered) {
            (_, true) => Some(f64::INFINITY),
            (r, false) => r,
        })
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    match worst {
        Some(v) if v.is_infinite() => "inf".into(),
        Some(v) => format!("{v:.0}"),
        None => String::new(),
    }
}

/// The fairness columns: the worst over the run's fairness figures (the lowest index and share,
/// the highest p99 ratio); empty with fewer than two connections.
fn fairness_cells(r: &RunResult) -> [String; 3] {
    if r.fairness.is_empty() {
        return Default::default();
    }
    let f = r.fairness.iter();
    let lowest =
        |v: fn(&crate::fairness::Fairness) -> f64| f.clone().map(v).fold(f64::MAX, f64::min);
    let highest = f.clone().map(|f| f.p99_max_over_median).fold(0.0, f64::max);
    [
        format!("{:.4}", lowest(|f| f.jain_index)),
        format!("{:.6}", lowest(|f| f.least_share)),
        format!("{highest:.3}"),
    ]
}

/// Column name of a sweep axis: `queue.capacity` → `param_queue_capacity`.
pub fn param_column(axis: &str) -> String {
    let clean: String = axis
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("param_{clean}")
}

/// The operation classes of `runs`, in order of first appearance: the class columns.
pub fn classes<'a>(runs: impl IntoIterator<Item = &'a RunResult>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in runs {
        for c in &r.classes {
            if !names.contains(&c.name) {
                names.push(c.name.clone());
            }
        }
    }
    names
}

/// The header row for an experiment with these sweep axes and operation classes.
pub fn header(axes: &[String], classes: &[String]) -> Vec<String> {
    let mut row = vec!["run_id".to_string(), "replicate".to_string()];
    row.extend(axes.iter().map(|a| param_column(a)));
    row.extend(metric_columns());
    let per_class = class_columns();
    for class in classes {
        let prefix = param_column(class).replacen("param_", "class_", 1);
        row.extend(per_class.iter().map(|c| format!("{prefix}_{c}")));
    }
    row
}

/// One row, aligned with [`header`]; a class the run does not have is left empty.
pub fn row(r: &RunResult, axes: &[String], classes: &[String]) -> Vec<String> {
    let c = &r.counters;
    let threads = r.cpu.threads.iter().map(|t| t.cpu);
    let voluntary: u64 = threads.clone().map(|t| t.ctx_switches_voluntary).sum();
    let involuntary: u64 = threads.clone().map(|t| t.ctx_switches_involuntary).sum();
    let migrations: Option<u64> = threads.clone().map(|t| t.migrations).sum();
    let cpu_wait_s: Option<f64> = threads.filter_map(|t| t.cpu_wait_s).reduce(|a, b| a + b);
    let mut out = vec![r.run_id.clone(), r.replicate.to_string()];
    out.extend(
        axes.iter()
            .map(|a| r.param(a).unwrap_or_default().to_string()),
    );
    let metrics: Vec<String> = vec![
        format!("{:.6}", r.duration_s),
        r.target_per_sec
            .map(|t| format!("{t:.3}"))
            .unwrap_or_default(),
        c.attempted.to_string(),
        c.sent.to_string(),
        c.delivered.to_string(),
        c.dropped.to_string(),
        c.skipped.to_string(),
        c.failed.to_string(),
        c.in_flight_end.to_string(),
        format!("{:.3}", r.delivered_per_sec()),
        format!("{:.6}", c.success_rate()),
        format!("{:.6}", c.drop_rate()),
    ];
    let latency = latency_columns::ALL
        .iter()
        .map(|m| m.of(&r.latency).to_string());
    let mut metrics: Vec<String> = metrics.into_iter().chain(latency).collect();
    metrics.extend([
        format!("{:.1}", r.latency.mean_ns),
        r.service.p50_ns.to_string(),
        r.service.p99_ns.to_string(),
        r.send_lag.p99_ns.to_string(),
        r.send_lag_split.pacer.p99_ns.to_string(),
        r.send_lag_split.held.p99_ns.to_string(),
        format!("{:.6}", r.cpu.driver_cpu_s),
        format!("{:.1}", r.cpu.delivered_per_cpu_s),
        voluntary.to_string(),
        involuntary.to_string(),
        migrations.map(|m| m.to_string()).unwrap_or_default(),
        cpu_wait_s
            .map(|s| format!("{:.3}", s * 1e3))
            .unwrap_or_default(),
        r.sequence.total().to_string(),
        r.interrupted.to_string(),
        r.cpu
            .sut_cpu_s
            .map(|s| format!("{s:.6}"))
            .unwrap_or_default(),
        sut_cpu_per_delivered_ns(r)
            .map(|ns| format!("{ns:.1}"))
            .unwrap_or_default(),
    ]);
    metrics.extend(fairness_cells(r));
    metrics.push(recovery_cell(r));
    // The verdict the reports give, so that a dashboard or a script reading this file alone
    // cannot take an invalid run's figures for the system's.
    let verdict = crate::verdict::judge(r);
    metrics.push(verdict.is_valid().to_string());
    metrics.push(verdict.reasons.join("; "));
    debug_assert_eq!(metrics.len(), metric_columns().len());
    out.extend(metrics);
    for name in classes {
        let class = r.classes.iter().find(|c| &c.name == name);
        out.extend(class_cells(class));
    }
    out
}

/// CPU of the system under test per delivered message, ns (when its CPU was measured and
/// something was delivered).
pub fn sut_cpu_per_delivered_ns(r: &RunResult) -> Option<f64> {
    let cpu = r.cpu.sut_cpu_s?;
    (r.counters.delivered > 0).then(|| cpu * 1e9 / r.counters.delivered as f64)
}

fn class_cells(class: Option<&ClassResult>) -> Vec<String> {
    match class {
        Some(c) => (latency_columns::CLASS.iter())
            .map(|m| m.of(&c.latency).to_string())
            .collect(),
        None => vec![String::new(); latency_columns::CLASS.len()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn param_columns_are_snake_case() {
        assert_eq!(param_column("queue.capacity"), "param_queue_capacity");
        assert_eq!(param_column("queue.pin"), "param_queue_pin");
    }

    #[test]
    fn header_has_the_required_columns() {
        let h = header(
            &["pacing.every".into()],
            &["strong".into(), "eth_chainId".into()],
        );
        for c in [
            "run_id",
            "replicate",
            "param_pacing_every",
            "delivered_per_sec",
            "latency_p9999_ns",
            "send_lag_p99_ns",
            "ctx_switches_involuntary",
            "sut_cpu_s",
            "sut_cpu_per_delivered_ns",
            "class_strong_latency_p99_ns",
            "class_eth_chainid_latency_p50_ns",
            "valid",
            "invalid_reasons",
        ] {
            assert!(h.iter().any(|x| x == c), "missing {c}");
        }
    }

    #[test]
    fn the_row_carries_the_verdict() {
        let h = header(&[], &[]);
        let at = |name: &str| h.iter().position(|c| c == name).unwrap();
        let valid = RunResult::default();
        let cells = row(&valid, &[], &[]);
        assert_eq!(cells.len(), h.len());
        assert_eq!(
            (&*cells[at("valid")], &*cells[at("invalid_reasons")]),
            ("true", "")
        );
        let stopped = RunResult {
            warnings: vec![crate::warning::Warning::Interrupted],
            ..Default::default()
        };
        let cells = row(&stopped, &[], &[]);
        assert_eq!(cells[at("valid")], "false");
        assert_eq!(
            cells[at("invalid_reasons")],
            crate::warning::Warning::Interrupted.to_string()
        );
    }
}

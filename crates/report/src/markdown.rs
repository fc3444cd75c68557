//! `report.md`: one table for the sweep in the style of the reports msgbench grew from, replicates
//! shown as median with their spread (min–max), then every run's validity verdict.
use crate::format::{count, duration_ns, latency_raised, latency_value, percent};
use crate::validity::judge;
use msgbench_model::percentile::{latency_columns, SloMetric};
use msgbench_model::result::RunResult;
use msgbench_model::sweep::short_axis;
use std::collections::BTreeMap;

/// Renders the report of one experiment's runs.
/// `environment` heads it (see [`crate::environment::read`]).
pub fn render(
    runs: &[RunResult],
    advice: &[crate::advice::Advice],
    environment: &[(&str, String)],
) -> String {
    let mut out = String::new();
    let name = runs.first().map(|r| r.experiment.as_str()).unwrap_or("?");
    let points = group(runs);
    let replicates = points.values().map(Vec::len).max().unwrap_or(0);
    out.push_str(&format!("# Experiment `{name}`\n\n"));
    for (label, value) in environment {
        let value = if *label == "command" {
            format!("`{value}`")
        } else {
            value.clone()
        };
        out.push_str(&format!("- {label}: {value}\n"));
    }
    if !environment.is_empty() {
        out.push('\n');
    }
    out.push_str(&format!(
        "{} run(s): {} point(s), up to {replicates} replicate(s) each. Latency is measured from each message's intended send time; \
         with replicates, cells read `median (min–max)`.\n\n",
        runs.len(),
        points.len()
    ));
    // With several classes, each class's figures answer the question (a 50/50 mix of a fast
    // and a slow class has a bimodal combined p50): they come first.
    if runs.iter().any(|r| r.classes.len() > 1) {
        out.push_str("## Per operation class\n\n");
        out.push_str(&class_table(&points));
        out.push_str("\n## All classes together\n\n");
    }
    out.push_str(&table(
        &points,
        runs.iter().any(|r| r.cpu.sut_cpu_s.is_some()),
    ));
    out.push_str(&crate::advice::markdown(advice));
    if crate::streams::any(runs) {
        out.push_str(&crate::streams::markdown(runs));
    }
    out.push_str(&crate::fairness::markdown(runs));
    out.push_str(&crate::stages::markdown(runs));
    out.push_str(&crate::streamed::markdown(runs));
    out.push_str(&crate::lateness::markdown(runs));
    out.push_str(&crate::shards::markdown(runs));
    out.push_str(&fault_sections(runs));
    out.push_str(&status_table(runs));
    out.push_str(&notes_and_validity(runs));
    out
}

/// The faults, skipped sends and connections of the runs that had any.
fn fault_sections(runs: &[RunResult]) -> String {
    let mut out = String::new();
    if runs.iter().any(|r| r.faults.total() > 0) {
        out.push_str("\n## Faults\n\n");
        out.push_str(&fault_table(runs));
        out.push('\n');
        for r in runs {
            if let Some(line) = crate::faults::line(r) {
                out.push_str(&format!("- {}: {line}\n", r.run_id));
            }
        }
    }
    if runs.iter().any(|r| r.counters.skipped > 0) {
        out.push_str("\n## Skipped\n\nRequests attempted and never sent (the `drop` column counts them with the system's drops), by why.\n\n");
        for r in runs {
            if let Some(line) = crate::faults::skipped_line(r) {
                out.push_str(&format!("- {}: {line}\n", r.run_id));
            }
        }
    }
    if runs.iter().any(|r| !r.faults.connections.is_empty()) {
        out.push_str("\n## Connections\n\n");
        for r in runs {
            if let Some(line) = crate::faults::connections_line(r) {
                out.push_str(&format!("- {}: {line}\n", r.run_id));
            }
        }
    }
    out
}

/// How to read the figures (what the runs' notes say), then which runs are invalid and why.
fn notes_and_validity(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let info = crate::faults::info_lines(runs);
    if !info.is_empty() {
        out.push_str("\n## How to read these figures\n\n");
        for line in info {
            out.push_str(&format!("- {line}\n"));
        }
    }
    out.push_str("\n## Validity\n\n");
    let invalid = crate::validity::invalid_runs(runs);
    for (id, reasons) in &invalid {
        out.push_str(&format!("- **{id}** invalid: {reasons}\n"));
    }
    if invalid.is_empty() {
        out.push_str(&crate::validity::all_valid(runs));
        out.push('\n');
    }
    out
}

/// Runs by sweep point, in point order.
fn group(runs: &[RunResult]) -> BTreeMap<usize, Vec<&RunResult>> {
    let mut points: BTreeMap<usize, Vec<&RunResult>> = BTreeMap::new();
    for r in runs {
        points.entry(r.point).or_default().push(r);
    }
    points
}

/// The metric columns: header and how to read the number from a run.
/// A column of the main table: its name, what it reads from a run and how it shows it.
type Column = (&'static str, Read, fn(f64) -> String);

/// What a column reads from a run.
enum Read {
    /// A figure of the run.
    Value(fn(&RunResult) -> f64),
    /// A latency percentile: a lower bound with the unanswered requests, marked `≥`, where
    /// that is higher than the answered requests' figure.
    Latency(SloMetric),
}

/// A duration in ns, or `–` for nothing measured (NaN).
fn ns(v: f64) -> String {
    if v.is_finite() {
        duration_ns(v as u64)
    } else {
        "–".into()
    }
}

fn columns(with_sut: bool, undelivered: bool) -> Vec<Column> {
    let mut columns: Vec<Column> = vec![
        ("delivered/s", Read::Value(|r| r.delivered_per_sec()), |v| {
            count(v)
        }),
        (
            "success",
            Read::Value(|r| r.counters.success_rate()),
            percent,
        ),
        ("drop", Read::Value(|r| r.counters.drop_rate()), percent),
        (
            "undelivered",
            Read::Value(crate::summary::undelivered_share),
            percent,
        ),
    ];
    let latency = latency_columns::ALL.iter();
    columns.extend(latency.map(|m| (m.name(), Read::Latency(*m), ns as fn(f64) -> String)));
    columns.push(("CPU/msg", Read::Value(cpu_per_message_ns), ns));
    if with_sut {
        columns.push(("server CPU/msg", Read::Value(sut_cpu_per_message_ns), ns));
    }
    // Still in flight at the end: neither success nor drop, shown whenever a run has some.
    if !undelivered {
        columns.retain(|c| c.0 != "undelivered");
    }
    columns
}

fn sut_cpu_per_message_ns(r: &RunResult) -> f64 {
    match r.cpu.sut_cpu_s {
        Some(s) if r.counters.delivered > 0 => s * 1e9 / r.counters.delivered as f64,
        _ => f64::NAN,
    }
}

fn axes_of(points: &BTreeMap<usize, Vec<&RunResult>>) -> Vec<String> {
    points
        .values()
        .next()
        .and_then(|rs| rs.first())
        .map(|r| r.params.iter().map(|p| p.axis.clone()).collect())
        .unwrap_or_default()
}

fn header_row(header: &[String]) -> String {
    format!(
        "| {} |\n|{}|\n",
        header.join(" | "),
        header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    )
}

/// Per class: its share of deliveries and its latency, median over replicates.
fn class_table(points: &BTreeMap<usize, Vec<&RunResult>>) -> String {
    let axes = axes_of(points);
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(axes.iter().map(|a| short_axis(a).to_string()));
    header.extend(["class", "delivered/s"].map(String::from));
    header.extend(latency_columns::CLASS.iter().map(|m| m.name().to_string()));
    let mut out = header_row(&header);
    for (point, runs) in points {
        for (i, class) in runs[0].classes.iter().enumerate() {
            let mut row = vec![point.to_string()];
            row.extend(
                axes.iter()
                    .map(|a| runs[0].param(a).unwrap_or_default().to_string()),
            );
            row.push(class.name.clone());
            let of = |read: fn(&msgbench_model::result::ClassResult, &RunResult) -> f64| {
                runs.iter()
                    .filter_map(|r| r.classes.get(i).map(|c| read(c, r)))
                    .collect::<Vec<_>>()
            };
            row.push(spread(
                of(|c, r| c.latency.count as f64 / r.duration_s.max(1e-9)),
                count,
            ));
            for m in latency_columns::CLASS {
                let values = (runs.iter())
                    .filter_map(|r| r.classes.get(i).map(|c| measured(c, m.of(&c.latency))))
                    .collect();
                row.push(spread(values, ns));
            }
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
    }
    out
}

/// The HTTP runs' responses by status: delivered ones (the accepted statuses, in the measured
/// window) and each failing status line (counted over the whole run, warm-up included);
/// nothing without HTTP runs.
fn status_table(runs: &[RunResult]) -> String {
    let http: Vec<&RunResult> = runs
        .iter()
        .filter(|r| r.system == msgbench_model::scenario::SystemKind::Http)
        .collect();
    if http.is_empty() {
        return String::new();
    }
    let mut statuses: Vec<&str> = Vec::new();
    for e in http.iter().flat_map(|r| r.faults.errors.iter()) {
        let status = e.message.starts_with("HTTP ") || e.message.starts_with("gRPC ");
        if status && !statuses.contains(&e.message.as_str()) {
            statuses.push(&e.message);
        }
    }
    let mut header = vec![
        "run".to_string(),
        "delivered (accepted statuses, measured window)".to_string(),
    ];
    header.extend(statuses.iter().map(|s| format!("{s} (warm-up included)")));
    let mut out = String::from("\n## HTTP statuses\n\n");
    out.push_str(&header_row(&header));
    for r in http {
        let mut row = format!("| {} | {} |", r.run_id, r.counters.delivered);
        for s in &statuses {
            let n = r
                .faults
                .errors
                .iter()
                .find(|e| e.message == *s)
                .map_or(0, |e| e.count);
            row.push_str(&format!(" {n} |"));
        }
        out.push_str(&row);
        out.push('\n');
    }
    out
}

/// Fault counts of the runs that had any.
fn fault_table(runs: &[RunResult]) -> String {
    let header: Vec<String> = [
        "run",
        "failed",
        "timeouts",
        "disconnects",
        "connect failures",
        "protocol errors",
        "server errors",
        "handshake failures",
        "longest unanswered wait",
    ]
    .map(String::from)
    .to_vec();
    let mut out = header_row(&header);
    for r in runs.iter().filter(|r| r.faults.total() > 0) {
        let f = &r.faults;
        let wait = if r.unanswered.count == 0 {
            "–".to_string()
        } else {
            duration_ns(r.unanswered.max_ns)
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {wait} |\n",
            r.run_id,
            r.counters.failed,
            f.timeouts,
            f.disconnects,
            f.connect_failures,
            f.protocol_errors,
            f.server_errors,
            f.handshake_failures
        ));
    }
    out
}

fn cpu_per_message_ns(r: &RunResult) -> f64 {
    if r.counters.delivered == 0 {
        f64::NAN
    } else {
        r.cpu.driver_cpu_s * 1e9 / r.counters.delivered as f64
    }
}

fn table(points: &BTreeMap<usize, Vec<&RunResult>>, with_sut: bool) -> String {
    let axes = axes_of(points);
    let undelivered = points
        .values()
        .flatten()
        .any(|r| r.counters.in_flight_end > 0);
    let columns = columns(with_sut, undelivered);
    let mut header: Vec<String> = vec!["point".into()];
    header.extend(axes.iter().map(|a| short_axis(a).to_string()));
    header.push("runs".into());
    header.extend(columns.iter().map(|c| c.0.to_string()));
    header.push("valid".into());
    let mut out = header_row(&header);
    for (point, runs) in points {
        let mut row = vec![point.to_string()];
        row.extend(
            axes.iter()
                .map(|a| runs[0].param(a).unwrap_or_default().to_string()),
        );
        row.push(runs.len().to_string());
        for (_, read, show) in &columns {
            let cell = match read {
                Read::Value(read) => spread(runs.iter().map(|r| read(r)).collect(), *show),
                Read::Latency(pick) => {
                    // Nothing answered and nothing waited: nothing measured, not 0 ns.
                    let values = runs.iter().map(|r| {
                        if r.latency.count == 0 && r.unanswered.count == 0 {
                            f64::NAN
                        } else {
                            latency_value(r, *pick) as f64
                        }
                    });
                    let cell = spread(values.collect(), *show);
                    if runs.iter().any(|r| latency_raised(r, *pick)) {
                        format!("≥ {cell}")
                    } else {
                        cell
                    }
                }
            };
            row.push(cell);
        }
        let valid = runs.iter().filter(|r| judge(r).is_valid()).count();
        row.push(format!("{valid}/{}", runs.len()));
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// `median` alone for one value, `median (min–max)` for several.
/// A class's latency figure, NaN (shown `–`) when the class delivered nothing.
fn measured(c: &msgbench_model::result::ClassResult, v: u64) -> f64 {
    if c.latency.count == 0 {
        f64::NAN
    } else {
        v as f64
    }
}

fn spread(values: Vec<f64>, show: fn(f64) -> String) -> String {
    // Replicates that measured nothing (NaN) are left out; none measured: `–`.
    let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return "–".into();
    }
    let median = crate::compare::median(&values);
    let (min, max) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if values.len() == 1 {
        show(median)
    } else {
        format!("{} ({}–{})", show(median), show(min), show(max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_shows_median_and_range() {
        assert_eq!(spread(vec![3.0], |v| format!("{v}")), "3");
        assert_eq!(spread(vec![5.0, 1.0, 3.0], |v| format!("{v}")), "3 (1–5)");
        assert_eq!(
            spread(vec![4.0, 1.0, 3.0, 2.0], |v| format!("{v}")),
            "2.5 (1–4)"
        );
    }
}

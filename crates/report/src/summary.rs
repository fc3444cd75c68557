//! The end-of-run summary table, in the style of the reports msgbench grew from: per run its
//! parameters, delivered rate, success and drop rate, latency percentiles (from the intended send
//! time), send lag and CPU, then every warning.
use crate::format::{count, duration_ns, percent, MAX, P50, P95, P99, P9999};
use msgbench_model::result::RunResult;
use msgbench_model::sweep::short_axis;
use msgbench_model::warning::Warning;

/// Renders the summary of `results` as a fixed-width text table.
pub fn table(results: &[RunResult]) -> String {
    let axes: Vec<String> = results
        .first()
        .map(|r| r.params.iter().map(|p| p.axis.clone()).collect())
        .unwrap_or_default();
    let mut header: Vec<String> = vec!["run".into()];
    header.extend(axes.iter().map(|a| short_axis(a).to_string()));
    header.extend(
        [
            "delivered/s",
            "success",
            "drop",
            "failed",
            "p50",
            "p95",
            "p99",
            "p99.99",
            "max",
            "send lag p99",
            "CPU s",
            "msg/CPU-s",
        ]
        .map(String::from),
    );
    let mut rows = vec![header];
    for r in results {
        let mut row = vec![run_label(r, results)];
        row.extend(
            axes.iter()
                .map(|a| r.param(a).unwrap_or_default().to_string()),
        );
        // Nothing measured is not 0 ns.
        let ns = |count: u64, v: u64| {
            if count == 0 {
                "–".to_string()
            } else {
                duration_ns(v)
            }
        };
        let bounds = r.latency_at_least();
        let lat = |q| crate::format::latency(r, bounds.as_ref(), q);
        row.extend([
            count(r.delivered_per_sec()),
            percent(r.counters.success_rate()),
            percent(r.counters.drop_rate()),
            r.counters.failed.to_string(),
            lat(P50),
            lat(P95),
            lat(P99),
            lat(P9999),
            lat(MAX),
            ns(r.send_lag.count, r.send_lag.p99_ns),
            format!("{:.2}", r.cpu.driver_cpu_s),
            count(r.cpu.delivered_per_cpu_s),
        ]);
        rows.push(row);
    }
    let mut out = render(&rows);
    if crate::streams::any(results) {
        out.push_str("\nstream clients (rates per second of the measured window, `written` = handed to the client's socket by the server; dropped, undelivered and backlog are counts):\n");
        out.push_str(&render(&crate::streams::text_rows(results)));
    }
    let failures: Vec<(&str, String)> = results
        .iter()
        .filter_map(|r| crate::faults::line(r).map(|l| (r.run_id.as_str(), l)))
        .collect();
    if !failures.is_empty() {
        out.push_str("\nfailures:\n");
        for (run, line) in failures {
            out.push_str(&format!("  {run}: {line}\n"));
        }
    }
    out.push_str(&grouped_warnings(results));
    out
}

/// Every warning once per kind: a kind seen in one run is printed as it is; one seen in several
/// is one line with the count, the runs and the worst case's sentence.
pub fn grouped_warnings(results: &[RunResult]) -> String {
    let mut groups: Vec<(String, Vec<(&RunResult, &Warning)>)> = Vec::new();
    for r in results {
        for w in &r.warnings {
            let kind = w.kind();
            match groups.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, members)) => members.push((r, w)),
                None => groups.push((kind, vec![(r, w)])),
            }
        }
    }
    if groups.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nwarnings:\n");
    for (kind, members) in &groups {
        let (worst_run, worst) = members
            .iter()
            .max_by(|a, b| a.1.severity().total_cmp(&b.1.severity()))
            .expect("a group has a member");
        if members.len() == 1 {
            out.push_str(&format!("  {}: {worst}\n", worst_run.run_id));
            continue;
        }
        let runs: Vec<String> = members.iter().map(|(r, _)| run_label(r, results)).collect();
        out.push_str(&format!(
            "  {kind} in {} of {} runs ({}); worst, {}: {worst}\n",
            members.len(),
            results.len(),
            runs.join(", "),
            worst_run.run_id
        ));
    }
    out
}

/// The run as the table's first column names it.
fn run_label(r: &RunResult, results: &[RunResult]) -> String {
    if results.iter().any(|o| o.replicate > 1) {
        format!("{}.r{}", r.point, r.replicate)
    } else {
        r.point.to_string()
    }
}

/// Right-aligned columns under a header and a rule.
pub(crate) fn render(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| format!("{:>w$}", cell, w = widths[c]))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(
                &widths
                    .iter()
                    .map(|w| "-".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("  "),
            );
            out.push('\n');
        }
    }
    out
}

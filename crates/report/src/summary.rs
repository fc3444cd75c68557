//! The end-of-run summary table, in the style of the reports msgbench grew from: per run its
//! parameters, delivered rate, success and drop rate, latency percentiles (from the intended send
//! time), send lag and CPU, then every warning.
use crate::format::{count, duration_ns, percent};
use msgbench_model::percentile::latency_columns;
use msgbench_model::result::RunResult;
use msgbench_model::sweep::short_axis;
use msgbench_model::warning::Warning;

/// Renders the summary of `results` as text tables as wide as their content.
pub fn table(results: &[RunResult]) -> String {
    table_for_width(results, None)
}

/// Renders the summary of `results` as text tables at most `width` characters wide (a
/// terminal's), leaving out the least needed columns first.
pub fn table_for_width(results: &[RunResult], width: Option<usize>) -> String {
    let axes: Vec<String> = results
        .first()
        .map(|r| r.params.iter().map(|p| p.axis.clone()).collect())
        .unwrap_or_default();
    let rows = run_rows(results, &axes);
    let mut out = String::new();
    if results.iter().any(|r| r.classes.len() > 1) {
        // Each class's figures first: a mix of a fast and a slow class has a combined p50
        // that describes neither.
        out.push_str("per operation class:\n");
        out.push_str(&render_fit(&class_rows(results, &axes), width));
        out.push_str("\nall classes together:\n");
    }
    out.push_str(&render_fit(&rows, width));
    appendix(&mut out, results, width);
    out.push_str(&grouped_warnings(results));
    out.push_str(&validity(results));
    out
}

/// The run table: a header, then a row per run (its axes, rates, latency, send lag, CPU; an
/// `undelivered` column when a run left messages undelivered).
fn run_rows(results: &[RunResult], axes: &[String]) -> Vec<Vec<String>> {
    let mut header: Vec<String> = vec!["run".into()];
    header.extend(axes.iter().map(|a| short_axis(a).to_string()));
    header.extend(["delivered/s", "success", "drop", "failed"].map(String::from));
    header.extend(
        latency_columns::SUMMARY
            .iter()
            .map(|m| m.name().to_string()),
    );
    header.extend(["send lag p99", "CPU s", "msg/CPU-s"].map(String::from));
    // What was never delivered nor dropped by the end (a backlog given up at the drain's end)
    // is neither success nor drop: a column of its own whenever a run has some.
    let undelivered = results.iter().any(|r| r.counters.in_flight_end > 0);
    if undelivered {
        let at = header
            .iter()
            .position(|h| h == "drop")
            .expect("drop column")
            + 1;
        header.insert(at, "undelivered".into());
    }
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
            share(r, r.counters.success_rate()),
            share(r, r.counters.drop_rate()),
            r.counters.failed.to_string(),
        ]);
        row.extend(latency_columns::SUMMARY.iter().map(|m| lat(*m)));
        row.extend([
            ns(r.send_lag.count, r.send_lag.p99_ns),
            format!("{:.2}", r.cpu.driver_cpu_s),
            count(r.cpu.delivered_per_cpu_s),
        ]);
        if undelivered {
            // After run, the axes, delivered/s, success and drop.
            row.insert(1 + axes.len() + 3, percent(undelivered_share(r)));
        }
        rows.push(row);
    }
    rows
}

/// What follows the run table: the stream clients' (or subscriptions') table, failures,
/// skipped sends, connections and notes.
fn appendix(out: &mut String, results: &[RunResult], width: Option<usize>) {
    if crate::streams::any(results) {
        let pubsub = results
            .iter()
            .all(|r| r.system == msgbench_model::scenario::SystemKind::Pubsub);
        out.push_str(if pubsub {
            "\nsubscriptions (rates per second of the measured window, `generated` = published on its topic; dropped = lost by the broker, undelivered = not there when the run ended; dropped, undelivered and backlog are counts):\n"
        } else {
            "\nstream clients (rates per second of the measured window, `written` = handed to the client's socket by the server; dropped, undelivered and backlog are counts):\n"
        });
        out.push_str(&render_fit(&crate::streams::text_rows(results), width));
    }
    let streamed = crate::streamed::text_rows(results);
    if !streamed.is_empty() {
        out.push_str("\nstreamed responses (first message from the intended send; per message = a stream's time per message after its first; msgs/s = its inverse):\n");
        out.push_str(&render_fit(&streamed, width));
    }
    per_run_lines(out, "failures", results, crate::faults::line);
    per_run_lines(
        out,
        "skipped (attempted, never sent)",
        results,
        crate::faults::skipped_line,
    );
    per_run_lines(out, "connections", results, crate::faults::connections_line);
    per_run_lines(out, "stages", results, crate::stages::line);
    let info = crate::faults::info_lines(results);
    if !info.is_empty() {
        out.push_str("\nnotes:\n");
        for line in info {
            out.push_str(&format!("  {line}\n"));
        }
    }
}

/// Which runs are invalid (the verdict report.md gives), with the reasons no warning above
/// already said (a trend, a backlog that grew, a saturated driver); nothing when all are valid.
/// A table of numbers from invalid runs must not read like one from valid ones.
pub fn validity(results: &[RunResult]) -> String {
    let invalid: Vec<(&RunResult, Vec<String>)> = results
        .iter()
        .map(|r| (r, crate::validity::judge(r).reasons))
        .filter(|(_, reasons)| !reasons.is_empty())
        .collect();
    if invalid.is_empty() {
        return String::new();
    }
    // Reasons a warning already printed are not repeated.
    let unsaid: Vec<(String, String)> = invalid
        .iter()
        .flat_map(|(r, reasons)| {
            let said: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
            let label = run_label(r, results);
            reasons
                .iter()
                .filter(move |reason| !said.contains(reason))
                .map(move |reason| (label.clone(), reason.clone()))
        })
        .collect();
    let labels: Vec<String> = invalid.iter().map(|(r, _)| run_label(r, results)).collect();
    let why = if unsaid.is_empty() {
        "the warnings above say why"
    } else if invalid.iter().all(|(r, _)| r.warnings.is_empty()) {
        "the lines below say why"
    } else {
        "the warnings above and the lines below say why"
    };
    let mut out = format!(
        "\ninvalid: {} of {} runs ({}): their figures cannot be taken as the system's ({why})\n",
        invalid.len(),
        results.len(),
        labels.join(", ")
    );
    for (label, reason) in unsaid {
        out.push_str(&format!("  {label}: {reason}\n"));
    }
    out
}

/// One row per run and operation class: its delivered rate and latency.
fn class_rows(results: &[RunResult], axes: &[String]) -> Vec<Vec<String>> {
    let mut header: Vec<String> = vec!["run".into()];
    header.extend(axes.iter().map(|a| short_axis(a).to_string()));
    header.extend(["class", "delivered/s"].map(String::from));
    header.extend(
        latency_columns::SUMMARY_CLASS
            .iter()
            .map(|m| m.name().to_string()),
    );
    let mut rows = vec![header];
    for r in results {
        for c in &r.classes {
            let mut row = vec![run_label(r, results)];
            row.extend(
                axes.iter()
                    .map(|a| r.param(a).unwrap_or_default().to_string()),
            );
            let lat = |v: u64| {
                if c.latency.count == 0 {
                    "–".to_string()
                } else {
                    duration_ns(v)
                }
            };
            row.extend([
                c.name.clone(),
                count(c.latency.count as f64 / r.duration_s.max(1e-9)),
            ]);
            row.extend(
                latency_columns::SUMMARY_CLASS
                    .iter()
                    .map(|m| lat(m.of(&c.latency))),
            );
            rows.push(row);
        }
    }
    rows
}

/// Messages still in flight when the run ended, as a share of those attempted.
pub fn undelivered_share(r: &RunResult) -> f64 {
    if r.counters.attempted == 0 {
        0.0
    } else {
        r.counters.in_flight_end as f64 / r.counters.attempted as f64
    }
}

/// A titled list of `run: line` for the runs `line` says something about; nothing otherwise.
fn per_run_lines(
    out: &mut String,
    title: &str,
    results: &[RunResult],
    line: fn(&RunResult) -> Option<String>,
) {
    let lines: Vec<(&str, String)> = results
        .iter()
        .filter_map(|r| line(r).map(|l| (r.run_id.as_str(), l)))
        .collect();
    if !lines.is_empty() {
        out.push_str(&format!("\n{title}:\n"));
        for (run, line) in lines {
            out.push_str(&format!("  {run}: {line}\n"));
        }
    }
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

/// Columns left out first when a table is wider than the terminal, in that order: figures the
/// neighbouring columns or report.md already give.
const DROPPABLE: &[&str] = &[
    "msg/CPU-s",
    "p95",
    "p99.99",
    "CPU s",
    "success",
    "send lag p99",
];

/// Right-aligned columns under a header and a rule (comfy-table, no borders), at most `width`
/// characters wide when given: columns of [`DROPPABLE`] are left out until it fits (and said
/// so under the table); what still does not fit wraps inside its cells.
pub(crate) fn render_fit(rows: &[Vec<String>], width: Option<usize>) -> String {
    let mut rows = rows.to_vec();
    let mut hidden = Vec::new();
    if let Some(width) = width {
        for name in DROPPABLE {
            if natural_width(&rows) <= width {
                break;
            }
            if let Some(c) = rows[0].iter().position(|h| h == name) {
                rows.iter_mut().for_each(|r| {
                    r.remove(c);
                });
                hidden.push(*name);
            }
        }
    }
    let mut out = table_text(&rows, width);
    if !hidden.is_empty() {
        out.push_str(&format!(
            "({} left out to fit {} columns; report.md has every column)\n",
            hidden.join(", "),
            width.unwrap_or(0)
        ));
    }
    out
}

/// Width of the table with every cell on one line: columns two spaces apart.
fn natural_width(rows: &[Vec<String>]) -> usize {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: usize = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .sum();
    widths + 2 * columns.saturating_sub(1)
}

fn table_text(rows: &[Vec<String>], width: Option<usize>) -> String {
    use comfy_table::{presets, CellAlignment, ContentArrangement, Table, TableComponent};
    let Some((header, body)) = rows.split_first() else {
        return String::new();
    };
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_style(TableComponent::HeaderLines, '-')
        .set_style(TableComponent::MiddleHeaderIntersections, ' ')
        .set_header(header.clone());
    for row in body {
        t.add_row(row.clone());
    }
    if let Some(w) = width {
        t.set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(w.min(u16::MAX as usize) as u16);
    }
    for c in 0..header.len() {
        if let Some(col) = t.column_mut(c) {
            col.set_cell_alignment(CellAlignment::Right);
            // One space of padding and the (blank) column separator: two spaces apart.
            col.set_padding((0, u16::from(c + 1 < header.len())));
        }
    }
    let mut out = String::new();
    for line in t.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A share of what was attempted; nothing attempted (a stream that received nothing) has no
/// share to show, not 100 %.
fn share(r: &RunResult, v: f64) -> String {
    if r.counters.attempted == 0 {
        "–".to_string()
    } else {
        percent(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        let header = ["run", "delivered/s", "drop", "p50", "p95", "msg/CPU-s"];
        let row = ["0", "1.00k", "0 %", "1.25 µs", "2.47 µs", "935"];
        vec![
            header.iter().map(|s| s.to_string()).collect(),
            row.iter().map(|s| s.to_string()).collect(),
        ]
    }

    fn run(point: usize, warnings: Vec<Warning>, delivered: &[u64]) -> RunResult {
        let intervals = (delivered.iter().enumerate())
            .map(|(i, &d)| msgbench_model::result::IntervalSample {
                start_s: i as f64,
                length_s: 1.0,
                sent: d,
                delivered: d,
                latency_p50_ns: 1000,
                latency_p99_ns: 2000,
                latency_max_ns: 3000,
                ..Default::default()
            })
            .collect();
        RunResult {
            run_id: format!("00{point}"),
            point,
            replicate: 1,
            duration_s: delivered.len() as f64,
            warnings,
            intervals,
            ..Default::default()
        }
    }

    #[test]
    fn the_terminal_says_which_runs_are_invalid_and_why_once() {
        let steady = [1000, 1000, 1000, 1000, 1000];
        let valid = run(0, vec![], &steady);
        assert_eq!(validity(std::slice::from_ref(&valid)), "");
        let warned = run(1, vec![Warning::Interrupted], &steady);
        let falling = run(2, vec![], &[1000, 800, 600, 400, 200]);
        let text = validity(&[valid, warned.clone(), falling]);
        assert!(
            text.starts_with("\ninvalid: 2 of 3 runs (1, 2): their figures cannot be taken as the system's (the warnings above and the lines below say why)\n"),
            "{text}"
        );
        // The warning is printed above it; only the reason no warning gave follows.
        assert!(!text.contains(&Warning::Interrupted.to_string()), "{text}");
        assert!(text.contains("\n  2: not steady"), "{text}");
        assert_eq!(text.lines().count(), 3, "{text}");
        let only_warned = validity(&[warned]);
        assert!(
            only_warned.contains("(the warnings above say why)"),
            "{only_warned}"
        );
    }

    #[test]
    fn tables_fit_the_terminal_by_leaving_out_the_least_needed_columns() {
        let wide = render_fit(&rows(), None);
        assert!(
            wide.lines().next().unwrap().ends_with("msg/CPU-s"),
            "{wide}"
        );
        assert!(
            wide.lines().nth(1).unwrap().starts_with("---"),
            "a rule under the header: {wide}"
        );
        let narrow = render_fit(&rows(), Some(36));
        assert!(
            narrow
                .lines()
                .filter(|l| !l.starts_with('('))
                .all(|l| l.chars().count() <= 36),
            "{narrow}"
        );
        assert!(
            narrow.contains("(msg/CPU-s, p95 left out to fit 36 columns"),
            "{narrow}"
        );
        assert!(narrow.contains("drop"), "drop stays: {narrow}");
    }
}

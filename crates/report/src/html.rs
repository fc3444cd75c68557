//! `report.html`: one self-contained page (inline SVG and CSS, no script, no network fetch)
//! with the sweep table, the advice, every chart with a sentence on how to read it, the
//! validity verdicts and, after `msgbench search`, every step of the search.
use crate::advice::Advice;
use crate::charts::Chart;
use crate::format::{count, duration_ns, percent};
use crate::validity::judge;
use msgbench_model::percentile::latency_columns;
use msgbench_model::result::RunResult;

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A duration, or `–` when nothing was measured (`count` 0): never a made-up `0 ns`.
fn measured(count: u64, ns: u64) -> String {
    if count == 0 {
        "–".into()
    } else {
        duration_ns(ns)
    }
}

/// Renders the page. `extra` is more markdown-free HTML (e.g. the search section).
pub fn render(
    runs: &[RunResult],
    advice: &[Advice],
    charts: &[Chart],
    slo: Option<&str>,
    extra: &str,
    environment: &[(&str, String)],
) -> String {
    let name = runs.first().map(|r| r.experiment.as_str()).unwrap_or("?");
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>msgbench: {n}</title>\n<style>\
         body{{font-family:Helvetica,Arial,sans-serif;margin:24px auto;max-width:1800px;color:#222;padding:0 16px}}\
         table{{border-collapse:collapse;font-size:13px;margin:8px 0 16px}}\
         th,td{{border:1px solid #ccc;padding:3px 7px;text-align:right;white-space:nowrap}}\
         dl.env{{display:grid;grid-template-columns:max-content auto;gap:2px 12px;font-size:13px;color:#444}}\
         dl.env dt{{font-weight:bold}}dl.env dd{{margin:0;font-family:monospace}}th{{background:#f3f3f3}}\
         td.l,th.l{{text-align:left}}td.wrap{{white-space:normal;text-align:left;max-width:60em}}tr.invalid td{{background:#fff1f0}}\
         figure{{margin:18px 0 28px}}figcaption{{color:#444;font-size:13px;max-width:820px}}\
         svg{{max-width:100%;height:auto}}.bad{{color:#b00}}.ok{{color:#070}}\
         </style></head><body>\n<h1>Experiment <code>{n}</code></h1>\n\
         <p>{runs} run(s). Latency is measured from each message's <em>intended</em> send time \
         (coordinated omission corrected). With replicates, cells read median (min–max).{slo}</p>\n",
        n = escape(name),
        runs = runs.len(),
        slo = slo.map(|s| format!(" SLO: <code>{}</code>.", escape(s))).unwrap_or_default()
    );
    out.push_str(&environment_list(environment));
    out.push_str(&table(runs));
    if runs.iter().any(|r| r.classes.len() > 1) {
        out.push_str("<h2>Per operation class</h2>\n");
        out.push_str(&class_table(runs));
    }
    if crate::streams::any(runs) {
        out.push_str(&crate::streams::html(runs, escape));
    }
    out.push_str(&crate::fairness::html(runs, escape));
    out.push_str(&crate::stages::html(runs, escape));
    out.push_str(&crate::streamed::html(runs, escape));
    out.push_str(&crate::lateness::html(runs, escape));
    out.push_str(&crate::shards::html(runs, escape));
    out.push_str(&advice_list(advice));
    out.push_str(&crate::faults::html(runs, escape));
    out.push_str(extra);
    out.push_str(&charts_and_validity(runs, charts));
    out.push_str("</ul>\n</body></html>\n");
    out
}

/// The environment as a definition list (nothing without one).
fn environment_list(environment: &[(&str, String)]) -> String {
    let mut out = String::new();
    if environment.is_empty() {
        return out;
    }
    out.push_str("<dl class=\"env\">\n");
    for (label, value) in environment {
        out.push_str(&format!(
            "<dt>{}</dt><dd>{}</dd>\n",
            escape(label),
            escape(value)
        ));
    }
    out.push_str("</dl>\n");
    out
}

/// The advice, a list per curve (nothing without advice).
fn advice_list(advice: &[Advice]) -> String {
    let mut out = String::new();
    if advice.is_empty() {
        return out;
    }
    out.push_str("<h2>Advice</h2>\n");
    for a in advice {
        if !a.label.is_empty() {
            out.push_str(&format!("<p><strong>{}</strong></p>\n", escape(&a.label)));
        }
        out.push_str("<ul>\n");
        for t in &a.text {
            out.push_str(&format!("<li>{}</li>\n", escape(t)));
        }
        out.push_str("</ul>\n");
    }
    out
}

/// Every chart with its caption and file, then which runs are invalid and why.
fn charts_and_validity(runs: &[RunResult], charts: &[Chart]) -> String {
    let mut out = String::new();
    out.push_str("<h2>Charts</h2>\n");
    for c in charts {
        out.push_str(&format!(
            "<figure id=\"{}\">\n{}<figcaption>{} (<a href=\"{}.svg\">{}.svg</a>)</figcaption></figure>\n",
            c.name,
            c.svg,
            escape(&c.caption),
            c.name,
            c.name
        ));
    }
    out.push_str("<h2>Validity</h2>\n<ul>\n");
    let invalid = crate::validity::invalid_runs(runs);
    for (id, reasons) in &invalid {
        out.push_str(&format!(
            "<li class=\"bad\"><strong>{}</strong> invalid: {}</li>\n",
            escape(id),
            escape(reasons)
        ));
    }
    if invalid.is_empty() {
        out.push_str(&format!(
            "<li class=\"ok\">{}</li>\n",
            escape(&crate::validity::all_valid(runs))
        ));
    }
    out
}

fn table(runs: &[RunResult]) -> String {
    let axes: Vec<&str> = runs
        .first()
        .map(|r| r.params.iter().map(|p| p.axis.as_str()).collect())
        .unwrap_or_default();
    let mut out = String::from("<table>\n<tr><th class=\"l\">run</th>");
    for a in &axes {
        out.push_str(&format!(
            "<th class=\"l\">{}</th>",
            escape(msgbench_model::sweep::short_axis(a))
        ));
    }
    for h in ["delivered/s", "success", "drop", "failed"] {
        out.push_str(&format!("<th>{h}</th>"));
    }
    for m in latency_columns::HTML {
        out.push_str(&format!("<th>{}</th>", m.name()));
    }
    for h in ["send lag p99", "CPU/msg"] {
        out.push_str(&format!("<th>{h}</th>"));
    }
    let with_sut = runs.iter().any(|r| r.cpu.sut_cpu_s.is_some());
    if with_sut {
        out.push_str("<th>server CPU/msg</th>");
    }
    out.push_str("<th>valid</th></tr>\n");
    for r in runs {
        out.push_str(&table_row(r, &axes, with_sut));
    }
    out.push_str("</table>\n");
    out
}

/// One run's row: its id, axes, rates, latency, send lag, CPU per message (and the server's
/// when a run measured it), and whether it is valid.
fn table_row(r: &RunResult, axes: &[&str], with_sut: bool) -> String {
    let valid = judge(r).is_valid();
    let mut out = format!(
        "<tr{}><td class=\"l\">{}</td>",
        if valid { "" } else { " class=\"invalid\"" },
        escape(&r.run_id)
    );
    for a in axes {
        out.push_str(&format!(
            "<td class=\"l\">{}</td>",
            escape(r.param(a).unwrap_or_default())
        ));
    }
    let per_msg = |s: f64| {
        if r.counters.delivered == 0 {
            "–".to_string()
        } else {
            duration_ns((s * 1e9 / r.counters.delivered as f64) as u64)
        }
    };
    let server = if with_sut {
        format!(
            "<td>{}</td>",
            r.cpu.sut_cpu_s.map(per_msg).unwrap_or_else(|| "–".into())
        )
    } else {
        String::new()
    };
    let bounds = r.latency_at_least();
    let lat = |q| crate::format::latency(r, bounds.as_ref(), q);
    // Nothing attempted has no shares.
    let share = |ratio: f64| {
        if r.counters.attempted == 0 {
            "–".to_string()
        } else {
            percent(ratio)
        }
    };
    for cell in [
        count(r.delivered_per_sec()),
        share(r.counters.success_rate()),
        share(r.counters.drop_rate()),
        r.counters.failed.to_string(),
    ] {
        out.push_str(&format!("<td>{cell}</td>"));
    }
    for m in latency_columns::HTML {
        out.push_str(&format!("<td>{}</td>", lat(*m)));
    }
    for cell in [
        measured(r.send_lag.count, r.send_lag.p99_ns),
        per_msg(r.cpu.driver_cpu_s),
    ] {
        out.push_str(&format!("<td>{cell}</td>"));
    }
    out.push_str(&format!(
        "{server}<td>{}</td></tr>\n",
        if valid { "yes" } else { "no" }
    ));
    out
}

/// Latency per operation class and run.
fn class_table(runs: &[RunResult]) -> String {
    let mut out = String::from(
        "<table>\n<tr><th class=\"l\">run</th><th class=\"l\">class</th><th>delivered/s</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n",
    );
    for r in runs {
        for c in &r.classes {
            out.push_str(&format!(
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                escape(&r.run_id),
                escape(&c.name),
                count(c.latency.count as f64 / r.duration_s.max(1e-9)),
                measured(c.latency.count, c.latency.p50_ns),
                measured(c.latency.count, c.latency.p99_ns),
                measured(c.latency.count, c.latency.p999_ns),
                measured(c.latency.count, c.latency.max_ns)
            ));
        }
    }
    out.push_str("</table>\n");
    out
}

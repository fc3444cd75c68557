//! The thresholds of an experiment (`[report] thresholds`, `--threshold`) checked on its runs:
//! one table in report.md and report.html, one line per check in the terminal. The checks
//! themselves are [`msgbench_model::threshold`]'s.
use msgbench_model::threshold::{Outcome, Threshold};
use std::path::Path;

/// The thresholds saved with the experiment (`[report] thresholds` in its `experiment.toml`);
/// they parsed before the runs started, so one that no longer does is left out.
pub fn saved(dir: &Path) -> Vec<Threshold> {
    let Ok(text) = std::fs::read_to_string(dir.join("experiment.toml")) else {
        return Vec::new();
    };
    let Ok(doc) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let Some(list) = doc
        .get("report")
        .and_then(|r| r.get("thresholds"))
        .and_then(|t| t.as_array())
    else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|v| v.as_str())
        .filter_map(|t| Threshold::parse(t).ok())
        .collect()
}

/// `pass`/`FAIL`, the run, the threshold, what was measured and why it failed; `INVALID` and
/// the run's reason for a check not judged.
pub fn line(o: &Outcome) -> String {
    if let Some(why) = &o.invalid {
        return format!(
            "INVALID  {}  {}: the run is not valid ({why}); measured {}, not judged",
            o.run_id, o.threshold, o.measured
        );
    }
    let mark = if o.passed { "pass" } else { "FAIL" };
    let note = o
        .note
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    format!(
        "{mark}  {}  {}: measured {}{note}",
        o.run_id, o.threshold, o.measured
    )
}

/// One summary line: how many checks passed.
pub fn summary(outcomes: &[Outcome]) -> String {
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    let invalid = outcomes.iter().filter(|o| o.invalid.is_some()).count();
    match (failed, invalid) {
        (0, _) => format!("all {} threshold check(s) passed", outcomes.len()),
        (_, 0) => format!("{failed} of {} threshold check(s) failed", outcomes.len()),
        _ => format!(
            "{failed} of {} threshold check(s) failed ({invalid} not judged: their run is invalid)",
            outcomes.len()
        ),
    }
}

/// The `## Thresholds` section of report.md (empty without thresholds).
pub fn markdown(outcomes: &[Outcome]) -> String {
    if outcomes.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n## Thresholds\n\n{}.\n\n| run | threshold | measured | result |\n|---|---|---|---|\n",
        summary(outcomes)
    );
    for o in outcomes {
        let result = match (&o.note, o.passed) {
            _ if o.invalid.is_some() => format!(
                "**INVALID**: the run is not valid ({})",
                o.invalid.as_deref().unwrap_or_default()
            ),
            (_, true) => "pass".to_string(),
            (Some(n), false) => format!("**fail**: {n}"),
            (None, false) => "**fail**".to_string(),
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {result} |\n",
            o.run_id,
            o.threshold.replace('|', "\\|"),
            o.measured
        ));
    }
    out
}

/// The thresholds section of report.html (empty without thresholds); `escape` escapes text.
pub fn html(outcomes: &[Outcome], escape: fn(&str) -> String) -> String {
    if outcomes.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "<h2>Thresholds</h2>\n<p>{}.</p>\n<table><tr><th>run</th><th>threshold</th><th>measured</th><th>result</th></tr>\n",
        escape(&summary(outcomes))
    );
    for o in outcomes {
        let result = match (&o.note, o.passed) {
            _ if o.invalid.is_some() => format!(
                "<strong>INVALID</strong>: the run is not valid ({})",
                escape(o.invalid.as_deref().unwrap_or_default())
            ),
            (_, true) => "pass".to_string(),
            (Some(n), false) => format!("<strong>fail</strong>: {}", escape(n)),
            (None, false) => "<strong>fail</strong>".to_string(),
        };
        out.push_str(&format!(
            // The result may be a long reason: it wraps (cells do not, by default).
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td class=\"wrap\">{result}</td></tr>\n",
            escape(&o.run_id),
            escape(&o.threshold),
            escape(&o.measured)
        ));
    }
    out.push_str("</table>\n");
    out
}

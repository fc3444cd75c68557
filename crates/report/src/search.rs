//! The "Search" section of the reports, from `search.json` (written by `msgbench search`).
use crate::format::{count, duration_ns};
use msgbench_model::search::{SearchRecord, SearchStep};
use std::path::Path;

/// The section in both formats.
pub struct SearchSection {
    /// Markdown.
    pub markdown: String,
    /// HTML.
    pub html: String,
}

/// The one-line answer of a search.
pub fn verdict(s: &SearchRecord) -> String {
    if let Some(rate) = s.host_limited_per_sec {
        let before = s
            .sustainable_per_sec
            .map(|ok| format!(" (it did pass {} at {}/s)", s.slo, count(ok)))
            .unwrap_or_default();
        return format!(
            "No answer: this host could not keep a schedule of {}/s — msgbench's own sends went out late while the system never pushed back, so any rate found below it would be the host's, not the system's{before}. Free the host (another process shares its CPUs) or run the driver on another machine, and search again.",
            count(rate)
        );
    }
    match (s.sustainable_per_sec, s.failed_per_sec) {
        (Some(ok), Some(bad)) => format!(
            "Maximum sustainable rate under {}: {}/s (passed; {}/s failed, so the limit lies between them: ±{:.0} %).",
            s.slo,
            count(ok),
            count(bad),
            50.0 * (bad / ok - 1.0)
        ),
        (Some(ok), None) => format!(
            "Every rate tried passed {}: at least {}/s (the search stopped before finding the ceiling).",
            s.slo,
            count(ok)
        ),
        (None, _) => format!("No rate tried met {}: the lowest one failed.", s.slo),
    }
}

/// A step's outcome in words: `pass`, `fail: why`, or that the host was late.
pub fn step_result(step: &SearchStep) -> String {
    if step.passed {
        "pass".to_string()
    } else if step.host_late {
        format!(
            "host late (msgbench's own sends, not the system): {}",
            step.reasons.join("; ")
        )
    } else {
        format!("fail: {}", step.reasons.join("; "))
    }
}

/// Reads `dir/search.json`, if the directory holds a search.
pub fn section(dir: &Path) -> Option<SearchSection> {
    let text = std::fs::read_to_string(dir.join("search.json")).ok()?;
    let s: SearchRecord = serde_json::from_str(&text).ok()?;
    let mut md = format!(
        "\n## Search\n\n{}{}\n\n| step | rate/s | delivered/s | {} | result |\n|---|---|---|---|---|\n",
        verdict(&s),
        if s.interrupted { " Interrupted by Ctrl-C." } else { "" },
        s.slo.split_whitespace().next().unwrap_or("latency")
    );
    let mut html = format!(
        "<h2>Search</h2>\n<p>{}</p>\n<table><tr><th>step</th><th>rate/s</th><th>delivered/s</th><th>{}</th><th class=\"l\">result</th></tr>\n",
        verdict(&s),
        s.slo.split_whitespace().next().unwrap_or("latency")
    );
    for (i, step) in s.steps.iter().enumerate() {
        let result = step_result(step);
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            i + 1,
            count(step.rate_per_sec),
            count(step.delivered_per_sec),
            duration_ns(step.latency_ns),
            result
        ));
        html.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>\n",
            i + 1,
            count(step.rate_per_sec),
            count(step.delivered_per_sec),
            duration_ns(step.latency_ns),
            result.replace('&', "&amp;").replace('<', "&lt;")
        ));
    }
    html.push_str("</table>\n");
    Some(SearchSection { markdown: md, html })
}

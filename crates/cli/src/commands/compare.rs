//! `msgbench compare`: two result sets side by side, each setting's change judged against
//! the noise, and the gate (`--fail-on regressed`, `--max-regression`).
use crate::setup::fail;
use crate::{EXIT_BAD_INPUT, EXIT_GATE_FAILED};
use msgbench_report::compare_dirs::{compare_dirs, gate, json, markdown};
use std::process::ExitCode;

/// Compares, prints, and applies the gate (`--fail-on`, `--max-regression`).
pub(super) fn compare_command(args: &crate::args::CompareArgs) -> ExitCode {
    let limits = match args
        .max_regression
        .iter()
        .map(|m| max_regression(m))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(l) => l,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let noise = args.noise / 100.0;
    let compared = match compare_dirs(&args.a, &args.b, noise) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let failures = gate(&compared, args.fail_on.is_some(), &limits);
    match args.format {
        crate::args::CompareFormat::Markdown => print!("{}", markdown(&compared, noise)),
        crate::args::CompareFormat::Json => println!("{}", json(&compared, &failures)),
    }
    if failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    fail(
        EXIT_GATE_FAILED,
        format!("the gate failed: {}", failures.join("; ")),
    )
}

/// `p99=10%` → ("p99", 0.10); the metric must be one compare judges.
fn max_regression(text: &str) -> Result<(String, f64), String> {
    let names = msgbench_report::compare::metric_names();
    let usage = format!(
        "--max-regression {text:?}: write METRIC=PERCENT, e.g. p99=10%, with a metric of {}",
        names.join(", ")
    );
    let (metric, percent) = text.split_once('=').ok_or_else(|| usage.clone())?;
    let metric = metric.trim();
    let metric = match metric.to_ascii_lowercase().as_str() {
        "p999" => "p99.9".to_string(),
        "p9999" => "p99.99".to_string(),
        "throughput" | "rate" => "delivered/s".to_string(),
        "cpu/msg" | "cpu" => "CPU/msg".to_string(),
        m => m.to_string(),
    };
    if !names.contains(&metric.as_str()) {
        return Err(format!(
            "{usage} (`{}` is none of them)",
            text.split_once('=').unwrap().0.trim()
        ));
    }
    let value: f64 = percent
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| usage.clone())?;
    Ok((metric, value / 100.0))
}

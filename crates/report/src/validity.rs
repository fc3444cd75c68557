//! Validity verdicts: may a run's numbers be trusted? The judge itself is the model's
//! ([`msgbench_model::verdict::judge`]), shared with the engine's search so that a search step
//! and a report never disagree about a run; this module lists the invalid runs for a report.
use msgbench_model::result::RunResult;
pub use msgbench_model::verdict::{judge, Verdict};

/// What a report says when no run is invalid.
pub const ALL_VALID: &str =
    "Every run is valid: attempts kept to their schedule (targets reached), driver on schedule, no sequence errors, connections served equally, steady (steadiness is judged on runs of at least 4 whole seconds).";

/// [`ALL_VALID`], and — valid is not lossless — the run that delivered the smallest share of
/// what it attempted, when some run delivered less than all of it (skipped by the window
/// policy, dropped, failed or never delivered).
pub fn all_valid(runs: &[RunResult]) -> String {
    // Steadiness needs 4 whole seconds: say when no run had them instead of implying it passed.
    let judged_steady = runs
        .iter()
        .any(|r| r.duration_s >= msgbench_model::verdict::MIN_TREND_SECONDS as f64);
    let base = if judged_steady {
        ALL_VALID.to_string()
    } else {
        ALL_VALID.replace(
            "steady (steadiness is judged on runs of at least 4 whole seconds)",
            "steadiness not judged (it needs runs of at least 4 whole seconds)",
        )
    };
    let lossy = (runs.iter())
        .filter(|r| r.counters.attempted > 0 && r.counters.delivered < r.counters.attempted)
        .min_by(|a, b| {
            a.counters
                .success_rate()
                .total_cmp(&b.counters.success_rate())
        });
    match lossy {
        None => base,
        Some(r) => {
            let n = (runs.iter())
                .filter(|r| r.counters.delivered < r.counters.attempted)
                .count();
            format!(
                "{base} Valid is not lossless: {n} run(s) delivered less than they attempted, the fewest {}: {:.1} % (success, drop and undelivered say where the rest went).",
                r.run_id,
                100.0 * r.counters.success_rate()
            )
        }
    }
}

/// `(run id, reasons)` of every invalid run, in order.
pub fn invalid_runs(runs: &[RunResult]) -> Vec<(&str, String)> {
    runs.iter()
        .filter_map(|r| {
            let v = judge(r);
            (!v.is_valid()).then(|| (r.run_id.as_str(), v.reasons.join("; ")))
        })
        .collect()
}

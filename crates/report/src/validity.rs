//! Validity verdicts: may a run's numbers be trusted? The judge itself is the model's
//! ([`msgbench_model::verdict::judge`]), shared with the engine's search so that a search step
//! and a report never disagree about a run; this module lists the invalid runs for a report.
use msgbench_model::result::RunResult;
pub use msgbench_model::verdict::{judge, Verdict};

/// What a report says when no run is invalid.
pub const ALL_VALID: &str =
    "Every run is valid: targets reached, driver on schedule, no sequence errors, steady (steadiness is judged on runs of at least 4 whole seconds).";

/// `(run id, reasons)` of every invalid run, in order.
pub fn invalid_runs(runs: &[RunResult]) -> Vec<(&str, String)> {
    runs.iter()
        .filter_map(|r| {
            let v = judge(r);
            (!v.is_valid()).then(|| (r.run_id.as_str(), v.reasons.join("; ")))
        })
        .collect()
}

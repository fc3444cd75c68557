//! `msgbench check`: the scenario validated and described, nothing run.
use super::scenario::load;
use crate::args::ScenarioArgs;
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use msgbench_model::duration;
use msgbench_model::sweep::render_params;
use std::process::ExitCode;

pub(super) fn check(args: ScenarioArgs) -> ExitCode {
    let experiment = match load(&args) {
        Ok(e) => e,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    println!(
        "{}: experiment `{}`, {} point(s) × {} replicate(s) = {} run(s), about {} to run",
        experiment.source_name,
        experiment.name,
        experiment.points.len(),
        experiment.replicates,
        experiment.run_count(),
        msgbench_model::sweep::human_seconds(experiment.planned_seconds_from(0))
    );
    for p in &experiment.points {
        let s = &p.scenario;
        let params = if p.params.is_empty() {
            "(no sweep)".to_string()
        } else {
            render_params(&p.params)
        };
        let budget = s
            .run
            .operations
            .map(|n| format!(" or {n} operations"))
            .unwrap_or_default();
        println!("  {:3}  {params}", p.index);
        println!(
            "       pacing {}; {} measured{budget} after {} warm-up",
            s.pacing,
            duration::format(s.run.duration),
            duration::format(s.run.warmup)
        );
        println!("       {}", s.system.describe());
    }
    let first = experiment.points.first().map(|p| &p.scenario);
    if let Some(slo) = first.and_then(|s| s.slo) {
        println!("SLO (advice and search): {slo}");
    }
    let thresholds = first.map(|s| s.thresholds.as_slice()).unwrap_or_default();
    if !thresholds.is_empty() {
        let list: Vec<String> = thresholds.iter().map(|t| t.to_string()).collect();
        println!(
            "thresholds (every run must pass; exit 3 if not): {}",
            list.join("; ")
        );
    }
    ExitCode::SUCCESS
}

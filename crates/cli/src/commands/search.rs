//! `msgbench search`: the highest rate that keeps the SLO.
use super::report::write_report;
use super::run::install_ctrl_c;
use super::scenario::load;
use crate::args::SearchArgs;
use crate::setup::fail;
use crate::terminal::Terminal;
use crate::{EXIT_BAD_INPUT, EXIT_INTERRUPTED};
use msgbench_engine::environment::Environment;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub(super) fn search(args: SearchArgs) -> ExitCode {
    let experiment = match load(&args.scenario) {
        Ok(e) => e,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    if experiment.points.len() != 1 {
        return fail(EXIT_BAD_INPUT, format!(
            "{}: search needs one configuration, but the scenario sweeps {} points; remove its [sweep] or add --set 'sweep={{}}'",
            experiment.source_name,
            experiment.points.len()
        ));
    }
    let Some(slo) = experiment.points[0].scenario.slo else {
        return fail(
            EXIT_BAD_INPUT,
            "search needs an SLO: give --slo \"p99 < 10ms\" or set report.slo in the scenario",
        );
    };
    let bad = |flag: &str, why: &str| fail(EXIT_BAD_INPUT, format!("{flag}: {why}"));
    if !(args.start.is_finite() && args.start >= 0.001) {
        return bad(
            "--start",
            "give a rate of at least 0.001 per second, e.g. 1000",
        );
    }
    if !(args.max.is_finite() && args.max >= args.start) {
        return bad("--max", "give a rate at least as high as --start");
    }
    if !(args.precision > 0.0 && args.precision < 100.0) {
        return bad("--precision", "give a percentage between 0 and 100, e.g. 5");
    }
    if !(args.min_success > 0.0 && args.min_success <= 100.0) {
        return bad(
            "--min-success",
            "give a percentage between 0 and 100, e.g. 99.9",
        );
    }
    let settings = msgbench_engine::search::SearchSettings {
        slo,
        start_per_sec: args.start,
        max_per_sec: args.max,
        precision: args.precision / 100.0,
        min_success: args.min_success / 100.0,
        max_steps: args.max_steps.max(1),
    };
    let stop = Arc::new(AtomicBool::new(false));
    install_ctrl_c(stop.clone());
    let terminal = Arc::new(Terminal::new(args.quiet, false));
    let env = Environment::capture(std::env::args().collect());
    let outcome = msgbench_engine::search::search(
        &experiment,
        &settings,
        &args.out,
        env,
        stop.clone(),
        terminal.clone(),
    );
    terminal.clear_line();
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            if let Some(dir) = e.dir() {
                let _ = write_report(dir, Some(&slo.to_string()));
            }
            return fail(1, e);
        }
    };
    let report_failed = write_report(&outcome.dir, Some(&slo.to_string())).err();
    println!("{}", msgbench_report::search::verdict(&outcome.record));
    println!("results: {}", outcome.dir.display());
    if let Some(e) = report_failed {
        return fail(1, e);
    }
    match &outcome.record {
        r if r.interrupted => ExitCode::from(EXIT_INTERRUPTED),
        // No answer about the system: the host set the limit.
        r if r.host_limited_per_sec.is_some() => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    }
}

//! `msgbench run`: the experiment run, every result written as it ends, the report after.
use super::report::write_report;
use super::scenario::load;
use crate::args::{ProgressFormat, RunArgs, ScenarioArgs};
use crate::setup::{fail, on_ctrl_c};
use crate::terminal::Terminal;
use crate::{EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_NOT_MEASURED, EXIT_THRESHOLD_FAILED};
use msgbench_engine::environment::Environment;
use msgbench_engine::runner::{run_experiment_to, Destination, Outcome};
use msgbench_model::Experiment;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub(super) fn run(args: RunArgs) -> ExitCode {
    let mut hold = None;
    let code = run_with(args, &mut hold);
    // The final figures stay up for the scraper's next visit (Ctrl-C ends the wait).
    if let Some((duration, stop)) = hold.filter(|(d, _)| !d.is_zero()) {
        eprintln!(
            "msgbench: serving the final figures for {} more (--metrics-hold; Ctrl-C to end now)",
            msgbench_model::duration::format(duration)
        );
        let until = std::time::Instant::now() + duration;
        while std::time::Instant::now() < until && !stop.load(std::sync::atomic::Ordering::Relaxed)
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    code
}

/// [`run`]; sets `hold` once live metrics are served: how long to keep serving at the end.
fn run_with(args: RunArgs, hold: &mut Option<(std::time::Duration, Arc<AtomicBool>)>) -> ExitCode {
    let experiment = match load_for_run(&args) {
        Ok(e) => e,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let view = match args.progress {
        Some(ProgressFormat::Live) => true,
        Some(_) => false,
        None => std::io::stdout().is_terminal(),
    };
    let terminal = Arc::new(Terminal::new(args.quiet || args.json, view));
    let observers = match observers(&args, &experiment, &terminal, &stop, hold) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    install_ctrl_c(stop.clone());
    let env = Environment::capture(std::env::args().collect());
    let destination = match &args.resume {
        Some(dir) => Destination::Resume(dir),
        None => Destination::New(&args.out),
    };
    let outcome = run_experiment_to(
        &experiment,
        destination,
        env,
        stop.clone(),
        Arc::new(crate::live::Fanout(observers)),
    );
    terminal.clear_line();
    let outcome = match outcome {
        Ok(o) => o,
        // Nothing ran: an --out that cannot hold results is bad input.
        Err(e @ msgbench_engine::runner::RunError::Destination(_)) => {
            return fail(EXIT_BAD_INPUT, e)
        }
        Err(e) => {
            // What was measured before the failure still gets its report.
            if let Some(dir) = e.dir() {
                let _ = write_report(dir, None);
                if args.archive_to_stdout {
                    let _ = crate::distributed::print_archive(dir, experiment.shard());
                }
            }
            // Ctrl-C that cut a run short before it measured (an opening, a wait for clients
            // or a `[sut]` process) is still Ctrl-C.
            let interrupted = stop.load(std::sync::atomic::Ordering::Relaxed);
            return fail(if interrupted { EXIT_INTERRUPTED } else { 1 }, e);
        }
    };
    let report_failed = if outcome.results.is_empty() {
        None
    } else {
        write_report(&outcome.dir, None).err()
    };
    if args.archive_to_stdout {
        if let Err(e) = crate::distributed::print_archive(&outcome.dir, experiment.shard()) {
            return fail(1, format!("cannot print the result archive: {e}"));
        }
    }
    let thresholds = experiment
        .points
        .first()
        .map(|p| p.scenario.thresholds.clone())
        .unwrap_or_default();
    let checks = msgbench_model::threshold::check_all(&thresholds, &outcome.results);
    print_outcome(&args, &experiment, &outcome, &checks);
    exit_code(&outcome, &checks, report_failed, args.strict)
}

/// The experiment of `msgbench run`: the scenario (or, resuming, the result folder's own),
/// with its shard and start applied.
fn load_for_run(args: &RunArgs) -> Result<Experiment, String> {
    let loaded = match &args.resume {
        None => load(&args.scenario),
        Some(dir) => load(&ScenarioArgs {
            scenario: Some(dir.join("experiment.toml")),
            ..args.scenario.clone()
        })
        .map_err(|e| {
            format!(
                "--resume {}: {e} (is it a result directory written by `msgbench run`?)",
                dir.display()
            )
        }),
    };
    let mut experiment = loaded?;
    crate::distributed::apply(
        &mut experiment,
        args.shard.as_deref(),
        args.start_at.as_deref(),
    )?;
    Ok(experiment)
}

/// Who watches the runs: the terminal, and as asked the metrics exporter (held open after the
/// last run for `--metrics-hold`) and the JSON progress lines.
fn observers(
    args: &RunArgs,
    experiment: &Experiment,
    terminal: &Arc<Terminal>,
    stop: &Arc<AtomicBool>,
    hold: &mut Option<(std::time::Duration, Arc<AtomicBool>)>,
) -> Result<Vec<Arc<dyn msgbench_engine::runner::Observer>>, String> {
    let mut observers: Vec<Arc<dyn msgbench_engine::runner::Observer>> = vec![terminal.clone()];
    if let Some(address) = &args.metrics_listen {
        let held = match msgbench_model::duration::parse(&args.metrics_hold) {
            Ok(d) if d <= std::time::Duration::from_secs(3600) => d,
            _ => {
                return Err(format!(
                    "--metrics-hold {:?}: give a duration up to 1h, e.g. 5s or 0",
                    args.metrics_hold
                ))
            }
        };
        observers.push(crate::live::Exporter::start(address, experiment)?);
        *hold = Some((held, stop.clone()));
    }
    if args.progress == Some(ProgressFormat::Json) {
        observers.push(Arc::new(crate::live::JsonProgress::new(experiment)));
    }
    Ok(observers)
}

/// What the terminal shows of a finished experiment: the JSON document (`--json`), or the
/// table, the advice, the thresholds and where the results are (unless `--quiet`).
fn print_outcome(
    args: &RunArgs,
    experiment: &Experiment,
    outcome: &Outcome,
    checks: &[msgbench_model::threshold::Outcome],
) {
    if args.json {
        let checks_json: Vec<_> = checks
            .iter()
            .map(|o| {
                serde_json::json!({ "run_id": o.run_id, "threshold": o.threshold,
                    "measured": o.measured, "passed": o.passed, "note": o.note,
                    "invalid": o.invalid })
            })
            .collect();
        let doc = serde_json::json!({ "dir": outcome.dir, "interrupted": outcome.interrupted,
            "runs": outcome.results, "thresholds": checks_json });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serializable")
        );
    } else if !args.quiet {
        print!(
            "{}",
            msgbench_report::summary::table_for_width(
                &outcome.results,
                crate::terminal::stdout_width()
            )
        );
        let slo = experiment.points.first().and_then(|p| p.scenario.slo);
        let marked = msgbench_report::advice::marked_load_axes(&outcome.dir);
        let advice = msgbench_report::advice::advise(&outcome.results, slo.as_ref(), &marked);
        if !advice.is_empty() {
            println!("\nadvice:");
            for a in &advice {
                for t in &a.text {
                    if a.label.is_empty() {
                        println!("  {t}");
                    } else {
                        println!("  [{}] {t}", a.label);
                    }
                }
            }
        }
        if !checks.is_empty() {
            println!(
                "\nthresholds: {}",
                msgbench_report::thresholds::summary(checks)
            );
            for o in checks {
                println!("  {}", msgbench_report::thresholds::line(o));
            }
        }
        println!("\nresults: {}", outcome.dir.display());
    }
}

/// The exit code of a finished experiment: 1 for a run the system cut short or a report not
/// written, 130 for Ctrl-C, 5 for results that measured nothing to trust, 3 for a failed
/// threshold, else 0.
fn exit_code(
    outcome: &Outcome,
    checks: &[msgbench_model::threshold::Outcome],
    report_failed: Option<String>,
    strict: bool,
) -> ExitCode {
    // A run the system under test cut short (closed connection, garbage, timeout with
    // on_error = stop) is written, but the experiment did not go as asked.
    let stopped = outcome.results.iter().find_map(|r| {
        let why = r.warnings.iter().find(|w| w.is_stopped_early())?;
        Some((r, why))
    });
    if let Some((r, why)) = stopped {
        return fail(
            1,
            format!(
                "run {} {why}; what it measured is in {}",
                r.run_id,
                outcome.dir.display()
            ),
        );
    }
    if let Some(e) = report_failed {
        // The runs are on disk; their reports are not (a full disk, say).
        return fail(
            1,
            format!(
                "{e}; the runs are in {}: free some space and run `msgbench report {}`",
                outcome.dir.display(),
                outcome.dir.display()
            ),
        );
    }
    if outcome.interrupted {
        eprintln!(
            "msgbench: interrupted; {} finished run(s) are in {}",
            outcome.results.len(),
            outcome.dir.display()
        );
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    if let Some(why) = measured_nothing(&outcome.results, strict) {
        return fail(
            EXIT_NOT_MEASURED,
            format!(
                "{why}; the results and reports are in {}",
                outcome.dir.display()
            ),
        );
    }
    if let Some(o) = checks.iter().find(|o| !o.passed) {
        let failed = checks.iter().filter(|o| !o.passed).count();
        let first = match &o.invalid {
            Some(why) => format!(
                "run {} `{}` not judged: the run is not valid ({why})",
                o.run_id, o.threshold
            ),
            None => format!(
                "run {} `{}` measured {}{}",
                o.run_id,
                o.threshold,
                o.measured,
                (o.note.as_deref())
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default()
            ),
        };
        return fail(
            EXIT_THRESHOLD_FAILED,
            format!(
                "{failed} threshold check(s) failed, first: {first}; the results and reports \
                 are in {}",
                outcome.dir.display()
            ),
        );
    }
    ExitCode::SUCCESS
}

/// Why the results measured nothing to trust, if so: a run that sent and delivered nothing
/// (every request failed, say a 404 for each), or, `strict`, every run invalid.
fn measured_nothing(results: &[msgbench_model::RunResult], strict: bool) -> Option<String> {
    let empty = (results.iter()).find(|r| r.counters.attempted > 0 && r.counters.delivered == 0);
    if let Some(r) = empty {
        let most = (r.faults.errors.iter())
            .max_by_key(|e| e.count)
            .map(|e| format!("; most often: {} × {}", e.count, e.message))
            .unwrap_or_default();
        let c = &r.counters;
        // Only the counts that are not zero beside attempted and sent: the one that decides.
        let rest: String = [
            ("dropped", c.dropped),
            ("skipped", c.skipped),
            ("in flight at the end", c.in_flight_end),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!(", {n} {name}"))
        .collect();
        return Some(format!(
            "run {} delivered nothing: {} attempted, {} sent, {} failed{rest}{most}",
            r.run_id, c.attempted, c.sent, c.failed
        ));
    }
    // A feed's client counts nothing as attempted until it reads: one that read nothing of
    // the window measured nothing.
    let silent = (results.iter()).find(|r| {
        r.system == msgbench_model::scenario::SystemKind::Ticks
            && r.counters.delivered == 0
            && !r.interrupted
    });
    if let Some(r) = silent {
        return Some(format!(
            "run {} received nothing: no client read a message of the measured window (is the feed sending, and do [ticks.feed] and its filters match what it sends?)",
            r.run_id
        ));
    }
    let verdicts: Vec<_> = (results.iter())
        .map(|r| (r, msgbench_model::verdict::judge(r)))
        .collect();
    let (r, first) = verdicts.first()?;
    if !strict || verdicts.iter().any(|(_, v)| v.is_valid()) {
        return None;
    }
    Some(format!(
        "every run is invalid (--strict): {} of {}; run {}: {}",
        verdicts.len(),
        verdicts.len(),
        r.run_id,
        first.reasons.join("; ")
    ))
}

/// First Ctrl-C: finish the current run early, write it, start no other. Second: exit now.
pub(crate) fn install_ctrl_c(stop: Arc<AtomicBool>) {
    on_ctrl_c(
        stop,
        "the current run ends now and is written; no further run starts",
    );
}

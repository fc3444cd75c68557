//! One function per subcommand; each turns flags into a validated experiment first, so bad
//! input fails before anything is measured or written.
use crate::args::{Cli, Command, RunArgs, ScenarioArgs, SearchArgs};
use crate::setup::{fail, machine_limits, on_ctrl_c};
use crate::terminal::Terminal;
use crate::{EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_THRESHOLD_FAILED};
use msgbench_engine::environment::Environment;
use msgbench_engine::runner::{run_experiment_to, Destination};
use msgbench_model::duration;
use msgbench_model::sweep::{render_params, Override, DEFAULT_SCENARIO, FULL_SCENARIO};
use msgbench_model::Experiment;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub fn dispatch(cli: Cli) -> ExitCode {
    // Measuring commands: the HTTP/2 client the environment asks for must be one there is
    // (bad input: nothing runs).
    if matches!(cli.command, Command::Run(_) | Command::Search(_)) {
        if let Err(e) = msgbench_engine::drivers::h2_wire_socket::h2_crate_asked() {
            return fail(EXIT_BAD_INPUT, e);
        }
    }
    match cli.command {
        Command::Run(args) => run(args),
        Command::Check(args) => check(args),
        Command::Report(args) => {
            match msgbench_report::publish::publish(&args.dir, args.slo.as_deref()) {
                Ok(paths) => {
                    for p in paths.iter().take(2) {
                        println!("{}", p.display());
                    }
                    if paths.len() > 2 {
                        println!("{} charts: {}/*.svg", paths.len() - 2, args.dir.display());
                    }
                    ExitCode::SUCCESS
                }
                // A file that cannot be written is not bad input: 1, as for `run`.
                Err(e @ msgbench_report::publish::PublishError::Write { .. }) => fail(1, e),
                Err(e) => fail(EXIT_BAD_INPUT, e),
            }
        }
        Command::Search(args) => search(args),
        Command::Compare(args) => compare_command(&args),
        Command::Serve(command) => crate::serve::serve(command),
        Command::Merge(args) => crate::distributed::merge(args),
        Command::Kube(args) => crate::distributed::kube(args),
        Command::Import(crate::args::ImportCommand::Omb(args)) => import_omb(&args),
        Command::DefaultScenario(args) => {
            print!(
                "{}",
                if args.full {
                    FULL_SCENARIO
                } else {
                    DEFAULT_SCENARIO
                }
            );
            ExitCode::SUCCESS
        }
    }
}

/// The scenario's `report.thresholds` followed by those of `--threshold`, each checked here so
/// a bad one is named by the flag that gave it.
fn thresholds_with(text: &str, flags: &[String]) -> Result<toml::Value, String> {
    let mut all: Vec<toml::Value> = text
        .parse::<toml::Table>()
        .ok()
        .and_then(|doc| doc.get("report")?.get("thresholds")?.as_array().cloned())
        .unwrap_or_default();
    for t in flags {
        msgbench_model::threshold::Threshold::parse(t).map_err(|e| format!("--threshold: {e}"))?;
        all.push(toml::Value::String(t.clone()));
    }
    Ok(toml::Value::Array(all))
}

/// Reads the scenario, applies the flags, expands and validates every run.
pub(crate) fn load(args: &ScenarioArgs) -> Result<Experiment, String> {
    let (text, source) = match &args.scenario {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read scenario {}: {e}", path.display()))?;
            (text, path.display().to_string())
        }
        None => (
            DEFAULT_SCENARIO.to_string(),
            "<embedded default>".to_string(),
        ),
    };
    let mut overrides = Vec::new();
    for set in &args.set {
        overrides.push(Override::parse(set)?);
    }
    let flag = Override::from_flag;
    if let Some(slo) = &args.slo {
        overrides.push(flag(
            "--slo",
            "report.slo",
            toml::Value::String(slo.clone()),
        ));
    }
    if !args.thresholds.is_empty() {
        overrides.push(flag(
            "--threshold",
            "report.thresholds",
            thresholds_with(&text, &args.thresholds)?,
        ));
    }
    if let Some(d) = &args.duration {
        check_duration("--duration", d)?;
        overrides.push(flag(
            "--duration",
            "run.duration",
            toml::Value::String(d.clone()),
        ));
    }
    if let Some(d) = &args.warmup {
        check_duration("--warmup", d)?;
        overrides.push(flag(
            "--warmup",
            "run.warmup",
            toml::Value::String(d.clone()),
        ));
    }
    if let Some(n) = args.operations {
        overrides.push(flag(
            "--operations",
            "run.operations",
            toml::Value::Integer(n.min(i64::MAX as u64) as i64),
        ));
    }
    if let Some(n) = args.replicates {
        overrides.push(flag(
            "--replicates",
            "run.replicates",
            toml::Value::Integer(n as i64),
        ));
    }
    if let Some(n) = args.emit_latencies {
        overrides.push(flag(
            "--emit-latencies",
            "run.emit_latencies",
            toml::Value::Integer(n.min(i64::MAX as u64) as i64),
        ));
    }
    if args.scenario.is_none() {
        drop_the_default_axes_of_another_system(&text, &mut overrides);
    }
    let limits = machine_limits();
    let experiment =
        Experiment::load(&text, &source, &overrides, &limits).map_err(|e| e.to_string())?;
    // An ad-hoc run of another system on the embedded default (`--set system=rpc`) is not the
    // default experiment: its results go under results/<system>/. Loaded again with the name
    // set, so that experiment.toml (and a --resume) say the same.
    let system = experiment.points[0].scenario.system.kind();
    if args.scenario.is_none() && system != msgbench_model::scenario::SystemKind::Queue {
        overrides.push(Override::from_flag(
            "--set name",
            "name",
            toml::Value::String(system.to_string()),
        ));
        return Experiment::load(&text, &source, &overrides, &limits).map_err(|e| e.to_string());
    }
    Ok(experiment)
}

/// The embedded default sweeps the queue lab's own fields (`queue.ring`): on an ad-hoc run of
/// another system (`--set system="rpc"`) those axes are left out, before the user's own
/// overrides, rather than refused as a scenario file's would be (every point would run the
/// same). The user did not write them; an axis they add back is judged like any other.
fn drop_the_default_axes_of_another_system(text: &str, overrides: &mut Vec<Override>) {
    use msgbench_model::scenario::SystemKind;
    let chosen = overrides
        .iter()
        .rev()
        .find(|o| o.path == "system")
        .and_then(|o| o.value.clone())
        .and_then(|v| v.try_into::<SystemKind>().ok());
    let (Some(system), Ok(doc)) = (chosen, text.parse::<toml::Table>()) else {
        return;
    };
    let Some(sweep) = doc.get("sweep").and_then(|s| s.as_table()) else {
        return;
    };
    let removals: Vec<Override> = (sweep.keys())
        .filter(|axis| system.foreign_section(axis).is_some())
        .map(|axis| Override {
            path: format!("sweep.{axis}"),
            value: None,
            flag: "--set system",
        })
        .collect();
    overrides.splice(0..0, removals);
}

fn check_duration(flag: &str, text: &str) -> Result<(), String> {
    msgbench_model::duration::parse(text)
        .map(|_| ())
        .map_err(|e| format!("{flag}: {e}"))
}

fn check(args: ScenarioArgs) -> ExitCode {
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

fn run(args: RunArgs) -> ExitCode {
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
    let mut experiment = match loaded {
        Ok(e) => e,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    if let Err(e) = crate::distributed::apply(
        &mut experiment,
        args.shard.as_deref(),
        args.start_at.as_deref(),
    ) {
        return fail(EXIT_BAD_INPUT, e);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let terminal = Arc::new(Terminal::new(args.quiet || args.json));
    let mut observers: Vec<Arc<dyn msgbench_engine::runner::Observer>> = vec![terminal.clone()];
    if let Some(address) = &args.metrics_listen {
        let held = match msgbench_model::duration::parse(&args.metrics_hold) {
            Ok(d) if d <= std::time::Duration::from_secs(3600) => d,
            _ => {
                return fail(
                    EXIT_BAD_INPUT,
                    format!(
                        "--metrics-hold {:?}: give a duration up to 1h, e.g. 5s or 0",
                        args.metrics_hold
                    ),
                )
            }
        };
        match crate::live::Exporter::start(address, &experiment) {
            Ok(exporter) => observers.push(exporter),
            Err(e) => return fail(EXIT_BAD_INPUT, e),
        }
        *hold = Some((held, stop.clone()));
    }
    if args.progress.is_some() {
        observers.push(Arc::new(crate::live::JsonProgress::new(&experiment)));
    }
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
            return fail(1, e);
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
    if args.json {
        let checks_json: Vec<_> = checks
            .iter()
            .map(|o| {
                serde_json::json!({ "run_id": o.run_id, "threshold": o.threshold,
                    "measured": o.measured, "passed": o.passed, "note": o.note })
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
                msgbench_report::thresholds::summary(&checks)
            );
            for o in &checks {
                println!("  {}", msgbench_report::thresholds::line(o));
            }
        }
        println!("\nresults: {}", outcome.dir.display());
    }
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
    if let Some(o) = checks.iter().find(|o| !o.passed) {
        let failed = checks.iter().filter(|o| !o.passed).count();
        return fail(
            EXIT_THRESHOLD_FAILED,
            format!(
                "{failed} threshold check(s) failed, first: run {} `{}` measured {}{}; the \
                 results and reports are in {}",
                o.run_id,
                o.threshold,
                o.measured,
                o.note
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
                outcome.dir.display()
            ),
        );
    }
    ExitCode::SUCCESS
}

/// Compares, prints, and applies the gate (`--fail-on`, `--max-regression`).
fn compare_command(args: &crate::args::CompareArgs) -> ExitCode {
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
    let compared = match compare(&args.a, &args.b, noise) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let failures = gate(&compared, args.fail_on.is_some(), &limits);
    match args.format {
        crate::args::CompareFormat::Markdown => print!("{}", compare_markdown(&compared, noise)),
        crate::args::CompareFormat::Json => println!("{}", compare_json(&compared, &failures)),
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

/// What fails the gate, one sentence each: a regressed verdict (with `--fail-on regressed`),
/// or a significant regression beyond a metric's allowance.
fn gate(compared: &Compared, fail_on_regressed: bool, limits: &[(String, f64)]) -> Vec<String> {
    use msgbench_report::compare::{worse_by, Verdict};
    let mut failures = Vec::new();
    for point in &compared.points {
        // A gate that cannot judge fails: a CI job that forgot --replicates learns it now,
        // not after the regression it could never catch.
        let unjudged = point.changes.iter().find_map(|c| match c.verdict {
            Verdict::NeedsReplicates(a, b) => Some((a, b)),
            _ => None,
        });
        if let Some((a, b)) = unjudged {
            if fail_on_regressed || !limits.is_empty() {
                failures.push(format!(
                    "{}: no verdict with {a} and {b} replicate(s); the gate needs 3 a side \
                     (run both with --replicates 3)",
                    point.title
                ));
                continue;
            }
        }
        for c in &point.changes {
            if c.verdict != Verdict::Regressed {
                continue;
            }
            let worse = worse_by(c);
            let over_limit = limits
                .iter()
                .find(|(m, _)| m == c.metric)
                .filter(|(_, allowed)| worse > *allowed);
            if fail_on_regressed || over_limit.is_some() {
                let allowance = over_limit
                    .map(|(_, a)| format!(" (allowed {:.1} %)", a * 100.0))
                    .unwrap_or_default();
                failures.push(format!(
                    "{}: {} regressed by {:.1} %{allowance}",
                    point.title,
                    c.metric,
                    worse * 100.0
                ));
            }
        }
    }
    failures
}

/// Two result directories compared point by matching point.
struct Compared {
    a: PathBuf,
    b: PathBuf,
    points: Vec<ComparedPoint>,
    /// How the two sides' runs were measured differently (warm-up, span): a change may be
    /// theirs rather than the system's.
    differences: Vec<String>,
}

/// A setting of a run, read from its result (`None`: not recorded).
type Setting = fn(&msgbench_model::RunResult) -> Option<f64>;

/// The warm-ups, spans and HTTP/2 clients of `a`'s runs against `b`'s, where they differ.
fn measured_differently(
    a: &[msgbench_model::RunResult],
    b: &[msgbench_model::RunResult],
) -> Vec<String> {
    let values = |runs: &[msgbench_model::RunResult], read: Setting| {
        let mut v: Vec<String> = (runs.iter())
            .filter_map(read)
            .map(|s| match (s * 1e9).round() as u64 {
                0 => "0 s".to_string(),
                ns => msgbench_report::format::duration_ns(ns),
            })
            .collect();
        v.sort();
        v.dedup();
        v.join(", ")
    };
    let settings: [(&str, Setting); 2] = [
        ("warm-up", |r| Some(r.warmup_s)),
        ("run.duration", |r| r.schedule_s),
    ];
    let mut differences: Vec<String> = settings
        .iter()
        .filter_map(|(name, read)| {
            let (va, vb) = (values(a, *read), values(b, *read));
            (!va.is_empty() && !vb.is_empty() && va != vb)
                .then(|| format!("{name}: A {va}, B {vb}"))
        })
        .collect();
    // Which HTTP/2 client measured (the environment's choice, said in each run's notes): a
    // server can serve one client's writes more cheaply than another's.
    let clients = |runs: &[msgbench_model::RunResult]| {
        let mut v: Vec<&str> = (runs.iter())
            .filter_map(|r| msgbench_model::http::http2_client(&r.info))
            .collect();
        v.sort_unstable();
        v.dedup();
        v.join(", ")
    };
    let (ca, cb) = (clients(a), clients(b));
    if !ca.is_empty() && !cb.is_empty() && ca != cb {
        differences.push(format!("HTTP/2 client: A {ca}, B {cb}"));
    }
    differences
}

struct ComparedPoint {
    title: String,
    runs_a: usize,
    runs_b: usize,
    changes: Vec<msgbench_report::compare::Change>,
    /// `(run id, reasons)` of the invalid runs on each side: a change they take part in
    /// compares figures that are not the system's.
    invalid_a: Vec<(String, String)>,
    invalid_b: Vec<(String, String)>,
}

/// `(run id, reasons)` of the invalid runs among `runs`.
fn invalid_of(runs: &[msgbench_model::RunResult]) -> Vec<(String, String)> {
    msgbench_report::validity::invalid_runs(runs)
        .into_iter()
        .map(|(id, why)| (id.to_string(), why))
        .collect()
}

fn compare_markdown(c: &Compared, noise: f64) -> String {
    let mut out = format!(
        "# Comparison\n\nA = {}\nB = {}\n",
        c.a.display(),
        c.b.display()
    );
    if !c.differences.is_empty() {
        out.push_str(&format!(
            "\nMeasured differently (a change may be this, not the system): {}.\n",
            c.differences.join("; ")
        ));
    }
    for p in &c.points {
        out.push_str(&format!(
            "\n## {} ({} vs {} run(s))\n\n{}",
            p.title,
            p.runs_a,
            p.runs_b,
            msgbench_report::compare::table(&p.changes, noise)
        ));
        if !(p.invalid_a.is_empty() && p.invalid_b.is_empty()) {
            out.push_str("\nInvalid runs (their figures are not the system's: a change they take part in is no evidence):\n\n");
            for (side, invalid) in [("A", &p.invalid_a), ("B", &p.invalid_b)] {
                for (id, why) in invalid {
                    out.push_str(&format!("- {side} {id}: {why}\n"));
                }
            }
        }
    }
    out
}

fn compare_json(c: &Compared, failures: &[String]) -> String {
    use msgbench_report::compare::{verdict_text, worse_by};
    let points: Vec<_> = c
        .points
        .iter()
        .map(|p| {
            let metrics: Vec<_> = p
                .changes
                .iter()
                .map(|ch| {
                    serde_json::json!({
                        "metric": ch.metric, "a": ch.a, "b": ch.b, "change": ch.change,
                        "worse_by": worse_by(ch),
                        "interval": ch.interval.map(|(low, high)| [low, high]),
                        "verdict": verdict_text(&ch.verdict),
                    })
                })
                .collect();
            let invalid = |runs: &[(String, String)]| -> Vec<serde_json::Value> {
                (runs.iter())
                    .map(|(id, why)| serde_json::json!({ "run_id": id, "reasons": why }))
                    .collect()
            };
            serde_json::json!({ "point": p.title, "runs_a": p.runs_a, "runs_b": p.runs_b,
                "metrics": metrics, "invalid_a": invalid(&p.invalid_a),
                "invalid_b": invalid(&p.invalid_b) })
        })
        .collect();
    let doc = serde_json::json!({ "a": c.a, "b": c.b, "points": points,
        "measured_differently": c.differences, "gate_failures": failures });
    serde_json::to_string_pretty(&doc).expect("serializable")
}

/// The comparison of two result directories, point by matching point.
fn compare(a: &Path, b: &Path, noise: f64) -> Result<Compared, String> {
    use msgbench_model::sweep::render_params;
    use msgbench_report::compare;
    if !(noise.is_finite() && noise >= 0.0) {
        return Err(format!(
            "--noise {}: give a percentage of 0 or more, e.g. 5",
            noise * 100.0
        ));
    }
    let (runs_a, runs_b) = (
        msgbench_report::load::load_dir(a).map_err(|e| e.to_string())?,
        msgbench_report::load::load_dir(b).map_err(|e| e.to_string())?,
    );
    let differences = measured_differently(&runs_a, &runs_b);
    let key = |r: &msgbench_model::RunResult| {
        render_params(
            &r.params
                .iter()
                .map(|p| (p.axis.clone(), p.value.clone()))
                .collect::<Vec<_>>(),
        )
    };
    let group = |runs: Vec<msgbench_model::RunResult>| {
        let mut g: Vec<(String, Vec<msgbench_model::RunResult>)> = Vec::new();
        for r in runs {
            match g.iter_mut().find(|(k, _)| *k == key(&r)) {
                Some((_, v)) => v.push(r),
                None => g.push((key(&r), vec![r])),
            }
        }
        g
    };
    let (ga, gb) = (group(runs_a), group(runs_b));
    let pairs: Vec<(
        String,
        &[msgbench_model::RunResult],
        &[msgbench_model::RunResult],
    )> = if ga.len() == 1 && gb.len() == 1 {
        vec![(
            format!("A: {} vs B: {}", or_none(&ga[0].0), or_none(&gb[0].0)),
            &ga[0].1[..],
            &gb[0].1[..],
        )]
    } else {
        ga.iter()
            .filter_map(|(k, va)| {
                gb.iter()
                    .find(|(kb, _)| kb == k)
                    .map(|(_, vb)| (or_none(k), &va[..], &vb[..]))
            })
            .collect()
    };
    if pairs.is_empty() {
        return Err(format!("no sweep point of {} has the parameters of a point of {}; compare directories of the same experiment, or two single-point directories", a.display(), b.display()));
    }
    let mut points = Vec::with_capacity(pairs.len());
    for (title, va, vb) in pairs {
        let changes = compare::compare(va, vb, noise).map_err(|e| format!("{title}: {e}"))?;
        points.push(ComparedPoint {
            title,
            runs_a: va.len(),
            runs_b: vb.len(),
            changes,
            invalid_a: invalid_of(va),
            invalid_b: invalid_of(vb),
        });
    }
    Ok(Compared {
        a: a.to_path_buf(),
        b: b.to_path_buf(),
        points,
        differences,
    })
}

fn or_none(params: &str) -> String {
    if params.is_empty() {
        "(no sweep)".into()
    } else {
        params.to_string()
    }
}

/// Writes `dir/report.md`, `report.html` and the charts from the results in `dir`.
pub(crate) fn write_report(dir: &Path, slo: Option<&str>) -> Result<Vec<PathBuf>, String> {
    msgbench_report::publish::publish(dir, slo).map_err(|e| e.to_string())
}

/// First Ctrl-C: finish the current run early, write it, start no other. Second: exit now.
pub(crate) fn install_ctrl_c(stop: Arc<AtomicBool>) {
    on_ctrl_c(
        stop,
        "the current run ends now and is written; no further run starts",
    );
}

fn search(args: SearchArgs) -> ExitCode {
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
    let terminal = Arc::new(Terminal::new(args.quiet));
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

/// `msgbench import omb`: the workload read (its `${name:-default}` placeholders resolved from
/// the environment), checked, and written as a scenario that is itself checked before it is
/// printed or saved.
fn import_omb(args: &crate::args::ImportOmbArgs) -> ExitCode {
    use msgbench_model::omb::{OmbWorkload, Target};
    use msgbench_model::pubsub::Broker;
    let source = args.workload.display().to_string();
    let text = match std::fs::read_to_string(&args.workload) {
        Ok(t) => t,
        Err(e) => return fail(EXIT_BAD_INPUT, format!("cannot read {source}: {e}")),
    };
    let text = OmbWorkload::resolve_placeholders(&text, |name| std::env::var(name).ok());
    let workload: OmbWorkload = match serde_saphyr::from_str(&text) {
        Ok(w) => w,
        Err(e) => {
            return fail(
                EXIT_BAD_INPUT,
                format!("{source} is not an OpenMessaging Benchmark workload: {e}"),
            )
        }
    };
    if let Err(e) = workload.check(&source) {
        return fail(EXIT_BAD_INPUT, e);
    }
    // The parser accepts only the registry's names.
    let broker = Broker::from_name(&args.broker).unwrap_or_default();
    let address = args
        .address
        .clone()
        .unwrap_or_else(|| broker.default_address());
    let scenario = workload.to_scenario(&source, &Target { broker, address });
    let limits = msgbench_engine::machine_limits();
    if let Err(e) =
        msgbench_model::Experiment::load(&scenario, "the imported scenario", &[], &limits)
    {
        return fail(EXIT_BAD_INPUT, format!("{source}: {e}"));
    }
    match &args.out {
        None => {
            print!("{scenario}");
            ExitCode::SUCCESS
        }
        Some(path) => {
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, scenario.as_bytes()));
            match written {
                Ok(()) => {
                    println!("{}", path.display());
                    ExitCode::SUCCESS
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => fail(
                    EXIT_BAD_INPUT,
                    format!(
                        "{} exists; msgbench import never overwrites: choose another --out or remove it",
                        path.display()
                    ),
                ),
                Err(e) => fail(1, format!("cannot write {}: {e}", path.display())),
            }
        }
    }
}

//! One function per subcommand; each turns flags into a validated experiment first, so bad
//! input fails before anything is measured or written.
use crate::args::{Cli, Command, RunArgs, ScenarioArgs, ServeCommand, ServeRpcArgs};
use crate::terminal::Terminal;
use crate::{EXIT_BAD_INPUT, EXIT_INTERRUPTED};
use msgbench_engine::affinity::allowed_cpus;
use msgbench_engine::environment::Environment;
use msgbench_engine::runner::run_experiment;
use msgbench_model::duration;
use msgbench_model::rpc::RpcServerSpec;
use msgbench_model::scenario::{MachineLimits, ScenarioError};
use msgbench_model::sweep::{render_params, Override, DEFAULT_SCENARIO};
use msgbench_model::Experiment;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub fn dispatch(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Run(args) => run(args),
        Command::Check(args) => check(args.scenario),
        Command::Report(args) => match write_report(&args.dir) {
            Ok(path) => {
                println!("{}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => fail(EXIT_BAD_INPUT, e),
        },
        Command::Compare(args) => match compare(&args.a, &args.b, args.noise / 100.0) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(EXIT_BAD_INPUT, e),
        },
        Command::Serve(ServeCommand::Rpc(args)) => serve_rpc(args),
        Command::DefaultScenario => {
            print!("{DEFAULT_SCENARIO}");
            ExitCode::SUCCESS
        }
    }
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("msgbench: error: {message}");
    ExitCode::from(code)
}

/// Reads the scenario, applies the flags, expands and validates every run.
fn load(args: &ScenarioArgs) -> Result<Experiment, String> {
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
    let flag = |path: &str, value: toml::Value| Override {
        path: path.into(),
        value,
    };
    if let Some(d) = &args.duration {
        check_duration("--duration", d)?;
        overrides.push(flag("run.duration", toml::Value::String(d.clone())));
    }
    if let Some(d) = &args.warmup {
        check_duration("--warmup", d)?;
        overrides.push(flag("run.warmup", toml::Value::String(d.clone())));
    }
    if let Some(n) = args.operations {
        overrides.push(flag(
            "run.operations",
            toml::Value::Integer(n.min(i64::MAX as u64) as i64),
        ));
    }
    if let Some(n) = args.replicates {
        overrides.push(flag("run.replicates", toml::Value::Integer(n as i64)));
    }
    if let Some(n) = args.emit_latencies {
        overrides.push(flag(
            "run.emit_latencies",
            toml::Value::Integer(n.min(i64::MAX as u64) as i64),
        ));
    }
    let limits = machine_limits();
    Experiment::load(&text, &source, &overrides, &limits).map_err(|e| e.to_string())
}

fn machine_limits() -> MachineLimits {
    MachineLimits {
        cpus: allowed_cpus(),
    }
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
        "{}: experiment `{}`, {} point(s) × {} replicate(s) = {} run(s)",
        experiment.source_name,
        experiment.name,
        experiment.points.len(),
        experiment.replicates,
        experiment.run_count()
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
    ExitCode::SUCCESS
}

fn run(args: RunArgs) -> ExitCode {
    let experiment = match load(&args.scenario) {
        Ok(e) => e,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    install_ctrl_c(stop.clone());
    let terminal = Arc::new(Terminal::new(args.quiet || args.json));
    let env = Environment::capture(std::env::args().collect());
    let outcome = run_experiment(&experiment, &args.out, env, stop.clone(), terminal.clone());
    terminal.clear_line();
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            // What was measured before the failure still gets its report.
            if let Some(dir) = e.dir() {
                let _ = write_report(dir);
            }
            return fail(1, e);
        }
    };
    if !outcome.results.is_empty() {
        if let Err(e) = write_report(&outcome.dir) {
            eprintln!("msgbench: warning: {e}");
        }
    }
    if args.json {
        let doc = serde_json::json!({ "dir": outcome.dir, "interrupted": outcome.interrupted, "runs": outcome.results });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serializable")
        );
    } else if !args.quiet {
        print!("{}", msgbench_report::summary::table(&outcome.results));
        println!("\nresults: {}", outcome.dir.display());
    }
    if outcome.interrupted {
        eprintln!(
            "msgbench: interrupted; {} finished run(s) are in {}",
            outcome.results.len(),
            outcome.dir.display()
        );
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    ExitCode::SUCCESS
}

/// The comparison of two result directories, point by matching point, as Markdown.
fn compare(a: &Path, b: &Path, noise: f64) -> Result<String, String> {
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
    let mut out = format!(
        "# Comparison

A = {}
B = {}
",
        a.display(),
        b.display()
    );
    for (title, va, vb) in pairs {
        let changes = compare::compare(va, vb, noise).map_err(|e| format!("{title}: {e}"))?;
        out.push_str(&format!(
            "
## {title} ({} vs {} run(s))

{}",
            va.len(),
            vb.len(),
            compare::table(&changes, noise)
        ));
    }
    Ok(out)
}

fn or_none(params: &str) -> String {
    if params.is_empty() {
        "(no sweep)".into()
    } else {
        params.to_string()
    }
}

/// Writes `dir/report.md` from the results in `dir`.
fn write_report(dir: &Path) -> Result<PathBuf, String> {
    let runs = msgbench_report::load::load_dir(dir).map_err(|e| e.to_string())?;
    let path = dir.join("report.md");
    std::fs::write(&path, msgbench_report::markdown::render(&runs))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// First Ctrl-C: finish the current run early, write it, start no other. Second: exit now.
fn install_ctrl_c(stop: Arc<AtomicBool>) {
    let _ = ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            std::process::exit(EXIT_INTERRUPTED as i32);
        }
        eprintln!("\nmsgbench: stopping: the current run ends now and is written; no further run starts (Ctrl-C again to quit at once)");
    });
}

fn serve_rpc(args: ServeRpcArgs) -> ExitCode {
    let parse =
        |flag: &str, text: &str| duration::parse(text).map_err(|e| format!("--{flag} {text}: {e}"));
    let spec = RpcServerSpec {
        threads: args.threads,
        max_frame: args.max_frame,
        max_connections: args.max_connections,
        stall_every: match args
            .stall_every
            .as_deref()
            .map(|t| parse("stall-every", t))
            .transpose()
        {
            Ok(v) => v,
            Err(e) => return fail(EXIT_BAD_INPUT, e),
        },
        stall_for: match parse("stall-for", &args.stall_for) {
            Ok(v) => v,
            Err(e) => return fail(EXIT_BAD_INPUT, e),
        },
        pin: args.pin,
    };
    let run_for = match args.run_for.as_deref().map(|t| parse("for", t)).transpose() {
        Ok(v) => v,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let limits = machine_limits();
    let config = match spec.validate(&limits, &|field, problem, fix| ScenarioError::Invalid {
        source_name: "msgbench serve rpc".into(),
        field: format!(
            "--{}",
            field.trim_start_matches("rpc.server.").replace('_', "-")
        ),
        problem,
        fix: fix.into(),
    }) {
        Ok(c) => c,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let listen: std::net::SocketAddr = match std::net::ToSocketAddrs::to_socket_addrs(&args.listen)
        .ok()
        .and_then(|mut a| a.next())
    {
        Some(a) => a,
        None => {
            return fail(
                EXIT_BAD_INPUT,
                format!(
                    "--listen {}: not a host:port address, e.g. 127.0.0.1:7000",
                    args.listen
                ),
            )
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    install_ctrl_c(stop.clone());
    let server = match msgbench_engine::server::rpc::RpcServer::start(&config, listen) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                1,
                format!("cannot listen on {listen}: {e}; pick another port with --listen"),
            )
        }
    };
    println!("msgbench rpc server listening on {}", server.local_addr());
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let started = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && run_for.map_or(true, |d| started.elapsed() < d) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let cpu_s = server.cpu_ns() as f64 / 1e9;
    let st = &server.stats;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "served {} responses on {} connections in {:.1} s, {cpu_s:.2} CPU-s; closed {} for bad frames, {} slow readers; refused {} over the connection limit",
        load(&st.responses),
        load(&st.accepted),
        started.elapsed().as_secs_f64(),
        load(&st.protocol_errors),
        load(&st.slow_readers),
        load(&st.rejected)
    );
    server.stop();
    if stop.load(Ordering::Relaxed) {
        ExitCode::from(EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    }
}

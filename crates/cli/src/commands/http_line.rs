//! `msgbench http URL …`: a one-line run of an HTTP server, the way a wrk2, oha or vegeta user
//! starts. The flags become a scenario file — the one `--print-scenario` prints — which then
//! runs exactly as `msgbench run FILE` would: the same checks, results directory and reports.
//! One point, never the embedded default's sweep.
use crate::args::{Cli, Command, HttpArgs};
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use toml::{Table, Value};

pub(super) fn http(args: HttpArgs) -> ExitCode {
    // Checked before anything is printed or run, in the one-liner's words (not a file's).
    let text = match scenario(&args).and_then(checked) {
        Ok(t) => t,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    if args.print_scenario {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    let file = match ScenarioFile::write(&text) {
        Ok(f) => f,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    if args.rate.is_none() && !args.quiet && !args.json {
        eprintln!(
            "msgbench: no --rate: closed loop, {} connection(s) × {} request(s) in flight each (wrk's model: a latency counts from its request's actual send; give --rate for an open-loop schedule whose latencies count from each intended send, as wrk2)",
            args.connections, args.window
        );
    }
    match Cli::try_parse_from(run_argv(&args, &file.0)) {
        Ok(Cli {
            command: Command::Run(run),
        }) => super::run::run(run),
        Ok(_) => unreachable!("the argv names `run`"),
        Err(e) => fail(EXIT_BAD_INPUT, e),
    }
}

/// `msgbench run FILE` with the flags that are not the scenario's.
fn run_argv(args: &HttpArgs, file: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec!["msgbench".into(), "run".into(), file.into()];
    argv.extend(["--out".into(), args.out.clone().into_os_string()]);
    if args.quiet {
        argv.push("--quiet".into());
    }
    if args.json {
        argv.push("--json".into());
    }
    if args.strict {
        argv.push("--strict".into());
    }
    argv
}

/// `text` once it validates as a scenario, its errors named after the command (the flags made
/// the file: a temporary path would point at nothing the user wrote).
fn checked(text: String) -> Result<String, String> {
    let limits = crate::setup::machine_limits();
    msgbench_model::Experiment::load(&text, "msgbench http", &[], &limits)
        .map(|_| text)
        .map_err(|e| e.to_string())
}

/// The scenario file the flags stand for.
pub(crate) fn scenario(args: &HttpArgs) -> Result<String, String> {
    let duration = |flag: &str, text: &str| {
        msgbench_model::duration::parse(text)
            .map(|_| Value::String(text.to_string()))
            .map_err(|e| format!("{flag} {text}: {e}"))
    };
    let mut doc = Table::new();
    doc.insert("name".into(), "http".into());
    doc.insert("system".into(), "http".into());
    doc.insert(
        "run".into(),
        table([
            ("duration", duration("--duration", &args.duration)?),
            ("warmup", duration("--warmup", &args.warmup)?),
        ]),
    );
    doc.insert("pacing".into(), pacing(args.rate)?);
    doc.insert(
        "client".into(),
        table([
            ("connections", i64::from(args.connections).into()),
            ("window", i64::from(args.window).into()),
        ]),
    );
    doc.insert("http".into(), http_section(args)?);
    let mut report = Table::new();
    if let Some(slo) = &args.slo {
        report.insert("slo".into(), slo.as_str().into());
    }
    if !args.thresholds.is_empty() {
        let checks = args.thresholds.iter().map(|t| t.as_str().into()).collect();
        report.insert("thresholds".into(), Value::Array(checks));
    }
    if !report.is_empty() {
        doc.insert("report".into(), Value::Table(report));
    }
    let body = toml::to_string(&doc).map_err(|e| format!("cannot write the scenario: {e}"))?;
    Ok(format!(
        "# What `msgbench {}` stands for; run it with `msgbench run FILE`.\n{body}",
        command_line()
    ))
}

/// `rate` with `--rate`, else closed loop.
fn pacing(rate: Option<f64>) -> Result<Value, String> {
    Ok(match rate {
        Some(r) if r.is_finite() && r > 0.0 => {
            table([("mode", "rate".into()), ("per_sec", Value::Float(r))])
        }
        Some(r) => {
            return Err(format!(
                "--rate {r}: give requests per second above 0, e.g. --rate 1000 (or leave it out for closed loop)"
            ))
        }
        None => table([("mode", "closed-loop".into())]),
    })
}

/// `[http]`: the URL (its path and query are the request's target), and the request when the
/// method, a header or a body is not GET's default.
fn http_section(args: &HttpArgs) -> Result<Value, String> {
    let mut http = Table::new();
    http.insert("url".into(), args.url.as_str().into());
    let plain = args.method == "GET" && args.headers.is_empty() && args.body.is_none();
    if plain {
        return Ok(Value::Table(http));
    }
    let mut request = Table::new();
    request.insert("method".into(), args.method.as_str().into());
    if let Some(body) = &args.body {
        request.insert("body".into(), body.as_str().into());
    }
    let mut headers = Table::new();
    for h in &args.headers {
        let Some((name, value)) = h.split_once(':') else {
            return Err(format!(
                "-H {h:?}: write a header as \"Name: value\", e.g. -H 'Content-Type: application/json'"
            ));
        };
        headers.insert(name.trim().into(), value.trim().into());
    }
    if !headers.is_empty() {
        request.insert("headers".into(), Value::Table(headers));
    }
    let requests = table([("request", Value::Table(request))]);
    http.insert("requests".into(), requests);
    Ok(Value::Table(http))
}

fn table<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Table(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// The command line as typed (after the program's name, without `--print-scenario`), each
/// word that needs it in single quotes, for the file's first line.
fn command_line() -> String {
    let quoted = |a: String| {
        let plain = (a.chars()).all(|c| c.is_ascii_alphanumeric() || "-_./:=?&@%+,".contains(c));
        if plain && !a.is_empty() {
            a
        } else {
            format!("'{}'", a.replace('\'', "'\\''"))
        }
    };
    (std::env::args().skip(1))
        .filter(|a| a != "--print-scenario")
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ")
        .replace('\n', " ")
}

/// The scenario written where `run` reads it; removed when dropped (the results directory
/// keeps the resolved scenario as `experiment.toml`).
struct ScenarioFile(PathBuf);

impl ScenarioFile {
    fn write(text: &str) -> Result<ScenarioFile, String> {
        let path = std::env::temp_dir().join(format!("msgbench-http-{}.toml", std::process::id()));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(ScenarioFile(path))
    }
}

impl Drop for ScenarioFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

//! One-line runs — `msgbench http URL …`, `msgbench redis ADDR …`, `msgbench grpc URL --call …`,
//! `msgbench ws URL …` — the way a wrk2, oha, redis-benchmark, memtier, ghz or websocat user
//! starts. The flags become a scenario file — the one `--print-scenario` prints — which then
//! runs exactly as `msgbench run FILE` would: the same checks, results directory and reports.
//! One point, never the embedded default's sweep. Each command adds only its system's section
//! ([`System`]); the load, the run's length and the checks are [`LineArgs`], shared.
use crate::args::{Cli, Command, GrpcLineArgs, HttpArgs, LineArgs, RedisLineArgs, WsLineArgs};
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use toml::{Table, Value};

/// What a one-line command contributes: the scenario's `name` and `system`, and its section.
struct System {
    /// The command's name, the scenario's and the results folder's.
    name: &'static str,
    /// The scenario's `system`.
    system: &'static str,
    /// The section's key (`http`, `redis`, `ws_rpc`) and content.
    section: (&'static str, Value),
}

pub(super) fn http(args: HttpArgs) -> ExitCode {
    let system = file_and_path(&args)
        .and_then(|()| http_section(&args))
        .map(|section| System {
            name: "http",
            system: "http",
            section: ("http", section),
        });
    one_line(system, &args.load)
}

/// A request file gives every request's target: a URL with a path of its own beside it would
/// be ignored, so it is refused.
fn file_and_path(args: &HttpArgs) -> Result<(), String> {
    let after_scheme = args.url.split_once("://").map_or("", |(_, rest)| rest);
    let path = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
    if args.requests_file.is_some() && !path.is_empty() && path != "/" {
        return Err(format!(
            "{}: its path {path} is not sent with --requests-file, whose lines give every request's target; give the server alone (e.g. http://host:port) and the paths in the file",
            args.url
        ));
    }
    Ok(())
}

pub(super) fn redis(args: RedisLineArgs) -> ExitCode {
    let system = redis_section(&args).map(|section| System {
        name: "redis",
        system: "redis",
        section: ("redis", section),
    });
    one_line(system, &args.load)
}

pub(super) fn grpc(args: GrpcLineArgs) -> ExitCode {
    let system = grpc_section(&args).map(|section| System {
        name: "grpc",
        system: "http",
        section: ("http", section),
    });
    one_line(system, &args.load)
}

pub(super) fn ws(args: WsLineArgs) -> ExitCode {
    let system = ws_section(&args).map(|section| System {
        name: "ws",
        system: "ws-rpc",
        section: ("ws_rpc", section),
    });
    one_line(system, &args.load)
}

/// Checks the scenario `system` and `load` make, then prints it or runs it as `run` would.
fn one_line(system: Result<System, String>, load: &LineArgs) -> ExitCode {
    // Checked before anything is printed or run, in the one-liner's words (not a file's).
    let made = system.and_then(|s| {
        let text = scenario(&s, load)?;
        checked(text, s.name).map(|text| (text, s.name))
    });
    let (text, name) = match made {
        Ok(t) => t,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    if load.print_scenario {
        print!("{text}");
        return ExitCode::SUCCESS;
    }
    let file = match ScenarioFile::write(&text, name) {
        Ok(f) => f,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    if load.rate.is_none() && !load.quiet && !load.json {
        eprintln!(
            "msgbench: no --rate: closed loop, {} connection(s) × {} request(s) in flight each (wrk's model: a latency counts from its request's actual send; give --rate for an open-loop schedule whose latencies count from each intended send, as wrk2)",
            load.connections, load.window
        );
    }
    match Cli::try_parse_from(run_argv(load, &file.0)) {
        Ok(Cli {
            command: Command::Run(run),
        }) => super::run::run(run),
        Ok(_) => unreachable!("the argv names `run`"),
        Err(e) => fail(EXIT_BAD_INPUT, e),
    }
}

/// `msgbench run FILE` with the flags that are not the scenario's.
fn run_argv(args: &LineArgs, file: &std::path::Path) -> Vec<std::ffi::OsString> {
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
fn checked(text: String, name: &str) -> Result<String, String> {
    let limits = crate::setup::machine_limits();
    msgbench_model::Experiment::load(&text, &format!("msgbench {name}"), &[], &limits)
        .map(|_| text)
        .map_err(|e| e.to_string())
}

/// The scenario file the flags stand for.
fn scenario(system: &System, args: &LineArgs) -> Result<String, String> {
    let duration = |flag: &str, text: &str| {
        msgbench_model::duration::parse(text)
            .map(|_| Value::String(text.to_string()))
            .map_err(|e| format!("{flag} {text}: {e}"))
    };
    let mut doc = Table::new();
    doc.insert("name".into(), system.name.into());
    doc.insert("system".into(), system.system.into());
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
    doc.insert(system.section.0.into(), system.section.1.clone());
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

/// `[http]`: the URL (its path and query are the request's target), `{key}`'s key space when
/// given, and the request when the method, a header, a body or a request file is not GET's
/// default.
fn http_section(args: &HttpArgs) -> Result<Value, String> {
    let mut http = Table::new();
    http.insert("url".into(), args.url.as_str().into());
    if let Some(path) = &args.unix_socket {
        http.insert("unix_socket".into(), path.as_str().into());
    }
    if args.keys > 0 {
        http.insert("keys".into(), (args.keys as i64).into());
        http.insert("key_pattern".into(), args.key_pattern.as_str().into());
    }
    let plain = args.method == "GET"
        && args.headers.is_empty()
        && args.body.is_none()
        && args.requests_file.is_none();
    if plain {
        return Ok(Value::Table(http));
    }
    let mut request = Table::new();
    if let Some(file) = &args.requests_file {
        request.insert("file".into(), file.as_str().into());
        request.insert("order".into(), args.order.as_str().into());
    } else {
        request.insert("method".into(), args.method.as_str().into());
    }
    if let Some(body) = &args.body {
        request.insert("body".into(), body.as_str().into());
    }
    let headers = headers(&args.headers, "Content-Type: application/json")?;
    if !headers.is_empty() {
        request.insert("headers".into(), Value::Table(headers));
    }
    let requests = table([("request", Value::Table(request))]);
    http.insert("requests".into(), requests);
    Ok(Value::Table(http))
}

/// `-H "Name: value"` flags as a table; `example` shows the form when one lacks its colon.
fn headers(flags: &[String], example: &str) -> Result<Table, String> {
    let mut headers = Table::new();
    for h in flags {
        let Some((name, value)) = h.split_once(':') else {
            return Err(format!(
                "-H {h:?}: write it as \"Name: value\", e.g. -H '{example}'"
            ));
        };
        headers.insert(name.trim().into(), value.trim().into());
    }
    Ok(headers)
}

/// `[redis]`: the address, one command class `call`, the key space.
fn redis_section(args: &RedisLineArgs) -> Result<Value, String> {
    let words: Vec<&str> = args.command.split_whitespace().collect();
    let command = match words.as_slice() {
        [] => return Err("--command \"\": give a command, e.g. --command 'GET k:{key}'".into()),
        [one] if ["ping", "get", "set"].contains(&one.to_ascii_lowercase().as_str()) => {
            Value::String(one.to_ascii_lowercase())
        }
        many => Value::Array(many.iter().map(|w| Value::String(w.to_string())).collect()),
    };
    let ops = table([("call", table([("command", command)]))]);
    Ok(table([
        ("address", args.address.as_str().into()),
        (
            "keys",
            Value::Integer(i64::try_from(args.keys).unwrap_or(i64::MAX)),
        ),
        ("key_pattern", args.key_pattern.as_str().into()),
        ("value_bytes", i64::from(args.value_bytes).into()),
        ("ops", ops),
    ]))
}

/// `[http]` for gRPC: the URL, the .proto or reflection, one request class `call`.
fn grpc_section(args: &GrpcLineArgs) -> Result<Value, String> {
    serde_json::from_str::<serde_json::Value>(&args.data)
        .map_err(|e| format!("--data {:?}: not JSON ({e}); give the request message as JSON, e.g. -d '{{\"name\":\"x\"}}'", args.data))?;
    let mut call = Table::new();
    call.insert("grpc".into(), args.call.as_str().into());
    call.insert("message".into(), args.data.as_str().into());
    let metadata = headers(&args.metadata, "x-tenant: bench")?;
    if !metadata.is_empty() {
        call.insert("headers".into(), Value::Table(metadata));
    }
    let mut http = Table::new();
    http.insert("url".into(), args.url.as_str().into());
    match &args.proto {
        Some(p) => {
            http.insert("proto".into(), p.display().to_string().into());
        }
        None => {
            http.insert("reflection".into(), true.into());
        }
    }
    http.insert("requests".into(), table([("call", Value::Table(call))]));
    Ok(Value::Table(http))
}

/// `[ws_rpc]`: the address and one method class `call` with its params.
fn ws_section(args: &WsLineArgs) -> Result<Value, String> {
    let json: serde_json::Value = serde_json::from_str(&args.params).map_err(|e| {
        format!(
            "--params {:?}: not JSON ({e}); give them as JSON, e.g. --params '[\"latest\", false]'",
            args.params
        )
    })?;
    let params = Value::try_from(&json).map_err(|e| {
        format!(
            "--params {:?}: {e} (a JSON null has no TOML form)",
            args.params
        )
    })?;
    let call = table([("method", args.method.as_str().into()), ("params", params)]);
    Ok(table([
        ("address", args.url.as_str().into()),
        ("methods", table([("call", call)])),
    ]))
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
    fn write(text: &str, name: &str) -> Result<ScenarioFile, String> {
        let path =
            std::env::temp_dir().join(format!("msgbench-{name}-{}.toml", std::process::id()));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(ScenarioFile(path))
    }
}

impl Drop for ScenarioFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

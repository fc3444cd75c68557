//! `msgbench serve …`: the built-in servers in the foreground, so that other clients (or
//! another msgbench) can be measured against them. Each runs until Ctrl-C or `--for`, then prints
//! what it counted.
use crate::args::{
    RequestServerArgs, ServeCommand, ServeGrpcArgs, ServeHttpArgs, ServeRpcArgs, ServeSseArgs,
    ServeTicksArgs, ServeWsRpcArgs, ServerLimits, ServiceTimeArgs, REQUEST_SERVER_CONNECTIONS,
    WS_SERVER_CONNECTIONS,
};
use crate::setup::{fail, machine_limits, on_ctrl_c};
use crate::{EXIT_BAD_INPUT, EXIT_INTERRUPTED};
use msgbench_engine::net::endpoint::Endpoint;
use msgbench_engine::net::tick::Schedule;
use msgbench_engine::server::http::HttpServerOptions;
use msgbench_engine::server::rpc::RpcServer;
use msgbench_engine::server::ticks::{TickServer, TickServerOptions};
use msgbench_model::duration;
use msgbench_model::rpc::{RpcServerConfig, RpcServerSpec};
use msgbench_model::ticks::TickServerSpec;
use msgbench_model::{
    check::ScenarioError,
    pacing::{PacingMode, PacingSpec},
};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs one built-in server.
pub fn serve(command: ServeCommand) -> ExitCode {
    match command {
        ServeCommand::Rpc(args) => serve_rpc(args),
        ServeCommand::Ticks(args) => serve_ticks(args),
        ServeCommand::WsRpc(args) => serve_ws_rpc(args),
        ServeCommand::Http(args) => serve_http(args),
        ServeCommand::Grpc(args) => serve_grpc(args),
        ServeCommand::Sse(args) => serve_sse(args),
    }
}

fn serve_sse(args: ServeSseArgs) -> ExitCode {
    let (options, listen, run_for) = match sse_options(&args) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    on_ctrl_c(
        stop.clone(),
        "the server ends its streams and prints what it sent",
    );
    msgbench_engine::clock::calibrate();
    let server = match msgbench_engine::server::sse::SseServer::start(options, listen) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                1,
                format!("cannot listen on {listen}: {e}; pick another port with --listen"),
            )
        }
    };
    let addr = server.local_addr();
    print_now(&format!(
        "msgbench event-stream server: a feed at http://{addr}/events, a stream per request at any other path (Ctrl-C to stop)"
    ));
    serve_until(&stop, run_for);
    let c = &server.counts;
    let line = format!(
        "streamed responses {}, messages {}, feed connections {}, connections refused {}",
        c.streams.load(Ordering::Relaxed),
        c.messages.load(Ordering::Relaxed),
        c.feeds.load(Ordering::Relaxed),
        c.refused.load(Ordering::Relaxed)
    );
    server.stop();
    print_now(&line);
    exit_code(&stop)
}

/// `serve sse`'s model, address and how long to serve, from its flags.
fn sse_options(
    args: &ServeSseArgs,
) -> Result<
    (
        msgbench_engine::server::sse::SseOptions,
        SocketAddr,
        Option<Duration>,
    ),
    String,
> {
    let ns = |flag: &str, text: &str| parse_duration(flag, text).map(|d| d.as_nanos() as u64);
    if !(args.rate > 0.0 && args.rate <= 1e7) {
        return Err(format!(
            "--rate {}: give 1 to 10 000 000 per second",
            args.rate
        ));
    }
    if args.messages == 0 {
        return Err("--messages 0: a stream has at least 1 message".into());
    }
    let options = msgbench_engine::server::sse::SseOptions {
        rate: args.rate,
        messages: args.messages,
        first_ns: ns("first", &args.first)?,
        every_ns: ns("every", &args.every)?,
        stall_every_ns: ns("stall-every", &args.stall_every)?,
        stall_for_ns: ns("stall-for", &args.stall_for)?,
        stall_at_ns: args
            .stall_at
            .as_deref()
            .map(|t| ns("stall-at", t))
            .transpose()?
            .unwrap_or(0),
    };
    if options.stall_every_ns > 0 && options.stall_for_ns >= options.stall_every_ns {
        return Err(format!(
            "--stall-for {} is not shorter than --stall-every {}: the server would never send; make stalls shorter than their period",
            args.stall_for, args.stall_every
        ));
    }
    let run_for = (args.run_for.as_deref())
        .map(|t| parse_duration("for", t))
        .transpose()?;
    Ok((options, listen_address(&args.listen)?, run_for))
}

fn serve_grpc(args: ServeGrpcArgs) -> ExitCode {
    let (options, run_for, listen) = match grpc_options(&args) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    on_ctrl_c(
        stop.clone(),
        "the server closes its connections and prints what it counted",
    );
    let server = match msgbench_engine::server::grpc::start(options, listen) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                1,
                format!("cannot listen on {listen}: {e}; pick another port with --listen"),
            )
        }
    };
    print_now(&format!(
        "msgbench grpc server listening on {}",
        server.local_addr()
    ));
    let started = std::time::Instant::now();
    serve_until(&stop, run_for);
    let cpu_s = server.cpu_ns() as f64 / 1e9;
    let st = server.stop();
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "answered {} calls (and refused {}) on {} connections in {:.1} s, {cpu_s:.2} CPU-s; {} connections ended by HTTP/2 errors, {} refused over the limit; clamped {} service times",
        load(&st.answered),
        load(&st.refused),
        load(&st.accepted),
        started.elapsed().as_secs_f64(),
        load(&st.protocol_errors),
        load(&st.rejected),
        load(&st.clamped)
    );
    if load(&st.streams) > 0 {
        println!(
            "streamed {} tick streams: {} messages due, {} of them left out on purpose (gap_every)",
            load(&st.streams),
            load(&st.streamed),
            load(&st.skipped)
        );
    }
    if stop.load(Ordering::Relaxed) {
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    ExitCode::SUCCESS
}

/// The gRPC server's settings from its flags.
fn grpc_options(
    args: &ServeGrpcArgs,
) -> Result<
    (
        msgbench_engine::server::grpc::GrpcServerOptions,
        Option<Duration>,
        SocketAddr,
    ),
    String,
> {
    let (service, exponential, sleep) = service_time(&args.time)?;
    let stall_every = match &args.stall_every {
        Some(t) => Some(parse_duration("stall-every", t)?),
        None => None,
    };
    let stall_for = parse_duration("stall-for", &args.stall_for)?;
    if stall_every.is_some_and(|every| stall_for >= every || every.is_zero()) {
        return Err(format!(
            "--stall-for {}: must be shorter than --stall-every (the server must serve between stalls)",
            args.stall_for
        ));
    }
    for (flag, value) in [
        ("max-streams", args.max_streams),
        ("max-connections", args.max_connections),
        ("max-message", args.max_message),
    ] {
        if value == 0 {
            return Err(format!("--{flag} 0: give at least 1"));
        }
    }
    if stall_every.is_none() && args.stall_for != "100ms" {
        return Err(format!(
            "--stall-for {}: stalls need --stall-every too (e.g. --stall-every 2s)",
            args.stall_for
        ));
    }
    let require = match &args.require_metadata {
        None => None,
        Some(pair) => {
            // The same rule as a scenario's metadata, and a value to compare with.
            let entry = (pair.split_once('='))
                .filter(|(_, value)| !value.is_empty())
                .and_then(|(name, value)| msgbench_model::grpc::metadata_entry(name.trim(), value));
            match entry {
                Some(entry) => Some(entry),
                None => {
                    return Err(format!(
                        "--require-metadata {pair:?}: give NAME=VALUE, e.g. --require-metadata \"authorization=Bearer t0ken\" ({})",
                        msgbench_model::grpc::METADATA_RULE
                    ))
                }
            }
        }
    };
    let options = msgbench_engine::server::grpc::GrpcServerOptions {
        service,
        exponential,
        sleep,
        max_service: parse_duration("max-service", &args.max_service)?,
        stall_every,
        stall_for,
        max_message: args.max_message as usize,
        max_streams: args.max_streams,
        max_connections: args.max_connections as usize,
        reflection: !args.no_reflection,
        require,
    };
    let run_for = match &args.run_for {
        Some(t) => Some(parse_duration("for", t)?),
        None => None,
    };
    Ok((options, run_for, listen_address(&args.listen)?))
}

/// What a WebSocket server closed or refused, in one clause.
fn connection_summary(c: &msgbench_engine::server::ws::ConnectionCounts) -> String {
    format!(
        "{} refused over the limit, {} unfinished heads dropped for new connections, {} failed accepts, {} failed handshakes, {} closed for bad messages, {} idle, {} slow readers",
        c.refused, c.evicted, c.accept_errors, c.handshake_failures, c.protocol_errors, c.idle_closed, c.slow_readers
    )
}

fn parse_duration(flag: &str, text: &str) -> Result<Duration, String> {
    duration::parse(text).map_err(|e| format!("--{flag} {text}: {e}"))
}

/// A kebab-case value of one of the scenario's enums (`drop-oldest`), as the scenario file
/// spells it.
fn parse_choice<T: serde::de::DeserializeOwned>(
    flag: &str,
    text: &str,
    choices: &str,
) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|_| format!("--{flag} {text}: not one of {choices}"))
}

fn listen_address(text: &str) -> Result<SocketAddr, String> {
    std::net::ToSocketAddrs::to_socket_addrs(text)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("--listen {text}: not a host:port address, e.g. 127.0.0.1:7000"))
}

/// `--listen` of a request server: `host:port` or `unix:///path`.
fn listen_endpoint(text: &str) -> Result<Endpoint, String> {
    if let Some(path) = text.strip_prefix(msgbench_engine::net::endpoint::UNIX_SCHEME) {
        if !path.starts_with('/') {
            return Err(format!(
                "--listen {text}: a Unix socket's path is absolute, e.g. unix:///tmp/msgbench.sock"
            ));
        }
        return Ok(Endpoint::Unix(path.into()));
    }
    listen_address(text).map(Endpoint::Tcp).map_err(|_| {
        format!("--listen {text}: not a host:port address or unix:///path, e.g. 127.0.0.1:7000")
    })
}

/// Turns a scenario field error (`ticks.server.queue`) into one about the flag (`--queue`).
fn flag_error<'a>(
    server: &'a str,
    prefix: &'a str,
) -> impl Fn(&str, String, &str) -> ScenarioError + 'a {
    move |field, problem, fix| {
        let flag = field
            .trim_start_matches(prefix)
            .trim_start_matches("pacing.")
            .replace('_', "-");
        ScenarioError::Invalid {
            source_name: format!("msgbench serve {server}"),
            // `serve ticks` takes the schedule's rate as `--rate`.
            field: match flag.as_str() {
                "per-sec" if server == "ticks" => "--rate".into(),
                _ => format!("--{flag}"),
            },
            problem,
            fix: fix.into(),
        }
    }
}

/// The request server's counters as `serve --metrics-listen` exposes them.
fn request_counts(
    st: &msgbench_engine::server::rpc::ServerStats,
) -> Vec<crate::live::ServerCounter> {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    vec![
        (
            "msgbench_server_responses",
            "Responses written",
            load(&st.responses),
        ),
        (
            "msgbench_server_accepted",
            "Connections accepted",
            load(&st.accepted),
        ),
        (
            "msgbench_server_rejected",
            "Connections refused over the connection limit",
            load(&st.rejected),
        ),
        (
            "msgbench_server_protocol_errors",
            "Connections closed for a bad request",
            load(&st.protocol_errors),
        ),
        (
            "msgbench_server_slow_readers",
            "Connections closed because the client stopped reading",
            load(&st.slow_readers),
        ),
        (
            "msgbench_server_idle_closed",
            "Connections closed after the idle timeout",
            load(&st.idle_closed),
        ),
        (
            "msgbench_server_evicted",
            "Idle connections closed to admit new ones",
            load(&st.evicted),
        ),
        (
            "msgbench_server_accept_errors",
            "Accepts that failed",
            load(&st.accept_errors),
        ),
        (
            "msgbench_server_clamped",
            "Service times clamped to the maximum",
            load(&st.clamped),
        ),
    ]
}

/// A WebSocket server's connection counts as `serve --metrics-listen` exposes them.
fn connection_counts(
    c: &msgbench_engine::server::ws::ConnectionCounts,
) -> Vec<crate::live::ServerCounter> {
    vec![
        (
            "msgbench_server_accepted",
            "WebSocket connections accepted",
            c.accepted,
        ),
        (
            "msgbench_server_rejected",
            "Connections refused over the connection limit",
            c.refused,
        ),
        (
            "msgbench_server_handshake_failures",
            "Peers that sent no valid upgrade",
            c.handshake_failures,
        ),
        (
            "msgbench_server_pages",
            "Plain HTTP requests answered",
            c.pages,
        ),
        (
            "msgbench_server_protocol_errors",
            "Connections closed for a protocol violation",
            c.protocol_errors,
        ),
        (
            "msgbench_server_slow_readers",
            "Connections closed because the client stopped reading",
            c.slow_readers,
        ),
        (
            "msgbench_server_idle_closed",
            "Connections closed after the idle timeout",
            c.idle_closed,
        ),
        (
            "msgbench_server_evicted",
            "Unfinished heads dropped to admit a new connection",
            c.evicted,
        ),
        (
            "msgbench_server_accept_errors",
            "Accepts that failed",
            c.accept_errors,
        ),
    ]
}

/// How long a server serves (`--for`); `None`: until Ctrl-C.
fn serve_for(limits: &ServerLimits) -> Result<Option<Duration>, String> {
    (limits.run_for.as_deref())
        .map(|t| parse_duration("for", t))
        .transpose()
}

fn serve_until(stop: &AtomicBool, run_for: Option<Duration>) {
    let started = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && run_for.is_none_or(|d| started.elapsed() < d) {
        // A clock read keeps the clock's slope corrected while no client makes the server read
        // it: its first stamps after an idle hour are then as close to CLOCK_MONOTONIC as any
        // (docs/concepts.md, "The clock").
        msgbench_engine::clock::now_ns();
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_code(stop: &AtomicBool) -> ExitCode {
    if stop.load(Ordering::Relaxed) {
        ExitCode::from(EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_now(text: &str) {
    use std::io::Write as _;
    println!("{text}");
    let _ = std::io::stdout().flush();
}

/// The request server's configuration and how long to serve, from its flags.
fn request_server(
    args: &RequestServerArgs,
    name: &str,
) -> Result<(RpcServerConfig, Option<Duration>), String> {
    let stall_every = args
        .stall_every
        .as_deref()
        .map(|t| parse_duration("stall-every", t))
        .transpose()?;
    let limits = &args.limits;
    let spec = RpcServerSpec {
        threads: limits.threads,
        max_frame: limits.max_frame,
        max_connections: (limits.max_connections).unwrap_or(REQUEST_SERVER_CONNECTIONS),
        stall_every,
        stall_for: parse_duration("stall-for", &args.stall_for)?,
        pin: limits.pin.clone(),
        max_service: parse_duration("max-service", &args.max_service)?,
        idle_timeout: parse_duration("idle-timeout", &args.idle_timeout)?,
    };
    let run_for = serve_for(limits)?;
    let config = spec
        .validate(&machine_limits(), &flag_error(name, "rpc.server."))
        .map_err(|e| e.to_string())?;
    Ok((config, run_for))
}

fn serve_rpc(args: ServeRpcArgs) -> ExitCode {
    let (config, run_for) = match request_server(&args.server, "rpc") {
        Ok(c) => c,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let listen = match listen_endpoint(&args.listen) {
        Ok(a) => a,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let metrics = args.server.limits.metrics_listen.as_deref();
    run_request_server("rpc", listen, run_for, metrics, |listen| {
        msgbench_engine::server::rpc::RpcServer::start_on(&config, listen)
    })
}

fn serve_http(args: ServeHttpArgs) -> ExitCode {
    let options = match http_options(&args) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let (config, run_for) = match request_server(&args.server, "http") {
        Ok(c) => c,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let listen = match listen_endpoint(&args.listen) {
        Ok(a) => a,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let metrics = args.server.limits.metrics_listen.as_deref();
    run_request_server("http", listen, run_for, metrics, |listen| {
        msgbench_engine::server::http::start_on(&config, options, listen)
    })
}

/// The HTTP server's response model from its flags.
fn http_options(args: &ServeHttpArgs) -> Result<HttpServerOptions, String> {
    let (service, exponential, sleep) = service_time(&args.time)?;
    if args.body_bytes > 64 << 20 {
        return Err(format!(
            "--body-bytes {}: at most 67108864 (64 MiB)",
            args.body_bytes
        ));
    }
    Ok(HttpServerOptions {
        service_ns: service.as_nanos() as u64,
        exponential,
        sleep,
        body_bytes: args.body_bytes,
        body: args.body.as_deref().map(|b| b.as_bytes().into()),
    })
}

/// A server's service time from its flags: the time, exponential (else fixed), sleep (else
/// busy).
fn service_time(args: &ServiceTimeArgs) -> Result<(Duration, bool, bool), String> {
    let service = parse_duration("service", &args.service)?;
    let exponential = match args.distribution.as_str() {
        "fixed" => false,
        "exponential" => true,
        other => {
            return Err(format!(
                "--distribution {other}: not one of fixed, exponential"
            ))
        }
    };
    let sleep = match args.work.as_str() {
        "busy" => false,
        "sleep" => true,
        other => return Err(format!("--work {other}: not one of busy, sleep")),
    };
    Ok((service, exponential, sleep))
}

/// Starts a request server, serves until Ctrl-C or `run_for`, and prints what it counted.
fn run_request_server(
    name: &str,
    listen: Endpoint,
    run_for: Option<Duration>,
    metrics: Option<&str>,
    start: impl FnOnce(&Endpoint) -> std::io::Result<RpcServer>,
) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    on_ctrl_c(
        stop.clone(),
        "the server closes its connections and prints what it counted",
    );
    let server = match start(&listen) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                1,
                if e.to_string().contains("pick another") {
                    format!("cannot listen on {listen}: {e}")
                } else {
                    format!(
                        "cannot listen on {listen}: {e}; pick another port or path with --listen"
                    )
                },
            )
        }
    };
    if let Some(address) = metrics {
        let stats = server.stats.clone();
        let served =
            crate::live::serve_server_counters(address, name, move || request_counts(&stats));
        if let Err(e) = served {
            return fail(EXIT_BAD_INPUT, e);
        }
    }
    print_now(&format!(
        "msgbench {name} server listening on {}",
        server.endpoint()
    ));
    let started = std::time::Instant::now();
    serve_until(&stop, run_for);
    let cpu_s = server.cpu_ns() as f64 / 1e9;
    let st = &server.stats;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "served {} responses on {} connections in {:.1} s, {cpu_s:.2} CPU-s; closed {} for bad requests, {} slow readers, {} idle, {} idle to admit new ones; refused {} over the connection limit, {} failed accepts; clamped {} service times",
        load(&st.responses),
        load(&st.accepted),
        started.elapsed().as_secs_f64(),
        load(&st.protocol_errors),
        load(&st.slow_readers),
        load(&st.idle_closed),
        load(&st.evicted),
        load(&st.rejected),
        load(&st.accept_errors),
        load(&st.clamped)
    );
    server.stop();
    exit_code(&stop)
}

fn serve_ticks(args: ServeTicksArgs) -> ExitCode {
    if !args.udp_to.is_empty() {
        return serve_udp_ticks(&args);
    }
    match ticks_options(&args) {
        Ok((options, listen, run_for)) => run_tick_server(
            options,
            listen,
            run_for,
            args.server.metrics_listen.as_deref(),
        ),
        Err(e) => fail(EXIT_BAD_INPUT, e),
    }
}

/// `serve ticks --udp-to …`: ticks over UDP until `--for` or Ctrl-C, then what was sent.
fn serve_udp_ticks(args: &ServeTicksArgs) -> ExitCode {
    let options = match udp_tick_options(args) {
        Ok(o) => o,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let run_for = match serve_for(&args.server) {
        Ok(d) => d,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    on_ctrl_c(stop.clone(), "the sender stops and prints what it sent");
    msgbench_engine::clock::calibrate();
    let to: Vec<String> = options.to.iter().map(ToString::to_string).collect();
    let sender = match msgbench_engine::server::udp_ticks::UdpTickSender::start(options) {
        Ok(s) => s,
        Err(e) => return fail(1, format!("cannot send UDP: {e}")),
    };
    print_now(&format!(
        "msgbench tick sender: {} ticks/s over UDP to {} (Ctrl-C to stop)",
        args.rate,
        to.join(", ")
    ));
    serve_until(&stop, run_for);
    let c = sender.counts();
    let (made, sent, refused) = (
        c.made.load(Ordering::Relaxed),
        c.sent.load(Ordering::Relaxed),
        c.refused.load(Ordering::Relaxed),
    );
    drop(sender);
    print_now(&format!(
        "ticks made {made}, datagrams sent {sent}, refused by the kernel {refused}"
    ));
    exit_code(&stop)
}

fn udp_tick_options(
    args: &ServeTicksArgs,
) -> Result<msgbench_engine::server::udp_ticks::UdpTickOptions, String> {
    if args.immediate || args.every.is_some() || args.arrivals != "uniform" {
        return Err(
            "--udp-to sends on a uniform --rate schedule: leave out --immediate, --every and --arrivals".into(),
        );
    }
    if args.format != "binary" {
        return Err(format!(
            "--format {}: over UDP every tick is the 36-byte binary form; leave --format out",
            args.format
        ));
    }
    if args.skip_every == 1 {
        return Err("--skip-every 1 would send nothing: give 2 or more (or 0: none)".into());
    }
    let mut to = Vec::new();
    for a in &args.udp_to {
        to.push(a.parse::<SocketAddr>().map_err(|_| {
            format!("--udp-to {a}: not an IP address and port; write it like 127.0.0.1:9500 or 239.1.1.1:9500")
        })?);
    }
    let multicast = to.iter().any(|a| a.ip().is_multicast());
    if multicast && to.len() > 1 {
        return Err("--udp-to: a multicast group is the one destination; its subscribers each get a copy (give it alone)".into());
    }
    let interface = args.multicast_interface.parse().map_err(|_| {
        format!(
            "--multicast-interface {}: not an IPv4 address, e.g. 127.0.0.1",
            args.multicast_interface
        )
    })?;
    if !(args.rate > 0.0 && args.rate <= 1e7) {
        return Err(format!(
            "--rate {}: give 1 to 10 000 000 per second",
            args.rate
        ));
    }
    Ok(msgbench_engine::server::udp_ticks::UdpTickOptions {
        to,
        rate: args.rate,
        symbols: args.symbols.max(1),
        skip_every: args.skip_every,
        duplicate_every: args.duplicate_every,
        reorder_every: args.reorder_every,
        multicast_interface: multicast.then_some(interface),
    })
}

fn ticks_options(
    args: &ServeTicksArgs,
) -> Result<(TickServerOptions, SocketAddr, Option<Duration>), String> {
    let invalid = flag_error("ticks", "ticks.server.");
    let pacing = PacingSpec {
        mode: if args.immediate {
            PacingMode::Immediate
        } else if args.every.is_some() {
            PacingMode::Interval
        } else {
            PacingMode::Rate
        },
        every: args
            .every
            .as_deref()
            .map(|t| parse_duration("every", t))
            .transpose()?,
        batch: args.batch,
        per_sec: Some(args.rate),
        arrivals: parse_choice("arrivals", &args.arrivals, "uniform, poisson")?,
        ..Default::default()
    };
    let spin_ns = pacing.spin_ns();
    let pacing = pacing.validate(&invalid).map_err(|e| e.to_string())?;
    let spec = TickServerSpec {
        threads: args.server.threads,
        pin: args.server.pin.clone(),
        queue: args.queue,
        policy: parse_choice(
            "policy",
            &args.policy,
            "drop-oldest, drop-newest, disconnect, unbounded",
        )?,
        write_batch: args.write_batch,
        send_buffer: args.send_buffer,
        max_frame: args.server.max_frame,
        max_connections: (args.server.max_connections).unwrap_or(WS_SERVER_CONNECTIONS),
        idle_timeout: parse_duration("idle-timeout", &args.idle_timeout)?,
    };
    let config = spec
        .validate(&machine_limits(), &invalid)
        .map_err(|e| e.to_string())?;
    if args.symbols == 0 {
        return Err("--symbols 0: cycle through at least 1 symbol, e.g. 100".into());
    }
    let options = TickServerOptions {
        config,
        format: parse_choice("format", &args.format, "binary, json")?,
        symbols: args.symbols,
        pacing,
        spin_ns,
        seed: 1,
        per_second: false,
    };
    let run_for = serve_for(&args.server)?;
    Ok((options, listen_address(&args.listen)?, run_for))
}

fn run_tick_server(
    options: TickServerOptions,
    listen: SocketAddr,
    run_for: Option<Duration>,
    metrics: Option<&str>,
) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    on_ctrl_c(
        stop.clone(),
        "the server closes its connections and prints what it counted",
    );
    msgbench_engine::clock::calibrate();
    let server = match TickServer::start(options, listen) {
        Ok(s) => s,
        Err(e) => {
            return fail(
                1,
                format!("cannot listen on {listen}: {e}; pick another port with --listen"),
            )
        }
    };
    if let Some(address) = metrics {
        let counts = server.counts.clone();
        let served = crate::live::serve_server_counters(address, "ticks", move || {
            connection_counts(&counts.snapshot())
        });
        if let Err(e) = served {
            return fail(EXIT_BAD_INPUT, e);
        }
    }
    let addr = server.local_addr();
    // Standalone, the whole stream is measured: it starts now and ends with the server.
    let now = msgbench_engine::clock::now_ns();
    let end_ns = run_for.map_or(u64::MAX, |d| now + d.as_nanos() as u64);
    server.begin(Schedule {
        t0_ns: now,
        measure_start_ns: now,
        end_ns,
    });
    print_now(&format!(
        "msgbench tick server streaming on ws://{addr}/ticks (browser client: http://{addr}/)"
    ));
    let started = std::time::Instant::now();
    serve_until(&stop, run_for);
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_s = server.cpu_ns() as f64 / 1e9;
    // Let the clients take what was generated and the end message.
    server.end_at(msgbench_engine::clock::now_ns());
    std::thread::sleep(Duration::from_millis(200));
    let report = server.stop();
    let c = report.counts;
    println!(
        "generated {} ticks in {elapsed:.1} s, {cpu_s:.2} CPU-s; {} connections ({})",
        report.generated,
        c.accepted,
        connection_summary(&c)
    );
    println!(
        "{:<16} {:>12} {:>12} {:>12} {:>12} {:>12}  closed",
        "client", "generated", "queued", "dropped", "written", "acked"
    );
    for conn in &report.connections {
        let k = conn.counts;
        println!(
            "{:<16} {:>12} {:>12} {:>12} {:>12} {:>12}  {}",
            conn.name,
            k.generated,
            k.queued,
            k.dropped,
            k.written,
            k.acked,
            conn.closed
                .as_ref()
                .map(|(why, _)| why.as_str())
                .unwrap_or("-")
        );
    }
    exit_code(&stop)
}

/// What `serve ws-rpc`'s flags ask for: the server's settings, its one method's answer, where
/// it listens and for how long.
#[allow(clippy::type_complexity)]
fn ws_rpc_settings(
    args: &ServeWsRpcArgs,
) -> Result<
    (
        msgbench_model::ws_rpc::WsRpcServerConfig,
        msgbench_engine::server::ws_rpc::MethodAnswer,
        std::net::SocketAddr,
        Option<std::time::Duration>,
    ),
    String,
> {
    let spec = msgbench_model::ws_rpc::WsRpcServerSpec {
        threads: args.server.threads,
        pin: args.server.pin.clone(),
        max_frame: args.server.max_frame,
        max_connections: (args.server.max_connections).unwrap_or(WS_SERVER_CONNECTIONS),
        idle_timeout: parse_duration("idle-timeout", &args.idle_timeout)?,
    };
    let config = spec
        .validate(&machine_limits(), &flag_error("ws-rpc", "ws_rpc.server."))
        .map_err(|e| e.to_string())?;
    if serde_json::from_str::<serde_json::Value>(&args.result).is_err() {
        return Err(format!(
            "--result {}: not JSON; a string needs its quotes, e.g. --result '\"0x1\"'",
            args.result
        ));
    }
    if args.method.is_empty() || args.method.contains(['"', '\\']) {
        return Err(format!(
            "--method {:?}: name a JSON-RPC method such as eth_chainId",
            args.method
        ));
    }
    let answer = msgbench_engine::server::ws_rpc::MethodAnswer {
        method: args.method.clone(),
        result_json: args.result.clone(),
        service_ns: parse_duration("service", &args.service)?.as_nanos() as u64,
        work: parse_choice("work", &args.work, "busy, sleep")?,
        stream: stream_answer(args)?,
    };
    let run_for = serve_for(&args.server)?;
    Ok((config, answer, listen_address(&args.listen)?, run_for))
}

/// `--stream N`: each call answered by a stream of N messages, then `--done`.
fn stream_answer(
    args: &ServeWsRpcArgs,
) -> Result<Option<msgbench_engine::server::ws_rpc::StreamAnswer>, String> {
    use msgbench_model::ws_rpc::MAX_STREAM_MESSAGES;
    if args.stream == 0 {
        return Ok(None);
    }
    if args.stream > MAX_STREAM_MESSAGES {
        return Err(format!(
            "--stream {}: at most {MAX_STREAM_MESSAGES} messages a call",
            args.stream
        ));
    }
    let every = parse_duration("every", &args.every)?;
    if every > std::time::Duration::from_secs(60) {
        return Err(format!("--every {}: at most 60s", args.every));
    }
    if serde_json::from_str::<serde_json::Value>(&args.done).is_err() {
        return Err(format!(
            "--done {:?}: not JSON (a string needs its quotes: '\"[DONE]\"')",
            args.done
        ));
    }
    if args.done == args.result {
        return Err("--done is --result too: every message would end its stream".into());
    }
    Ok(Some(msgbench_engine::server::ws_rpc::StreamAnswer {
        messages: args.stream,
        every_ns: every.as_nanos() as u64,
        done_json: args.done.clone(),
    }))
}

fn serve_ws_rpc(args: ServeWsRpcArgs) -> ExitCode {
    let prepared = ws_rpc_settings(&args);
    let (config, answer, listen, run_for) = match prepared {
        Ok(p) => p,
        Err(e) => return fail(EXIT_BAD_INPUT, e),
    };
    let stop = Arc::new(AtomicBool::new(false));
    on_ctrl_c(
        stop.clone(),
        "the server closes its connections and prints what it counted",
    );
    msgbench_engine::clock::calibrate();
    let method = match &answer.stream {
        Some(s) => format!(
            "`{}` with a stream of {} messages {} ms apart, then {}",
            answer.method,
            s.messages,
            s.every_ns as f64 / 1e6,
            s.done_json
        ),
        None => format!("`{}`", answer.method),
    };
    let server =
        match msgbench_engine::server::ws_rpc::WsRpcServer::start(&config, vec![answer], listen) {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    1,
                    format!("cannot listen on {listen}: {e}; pick another port with --listen"),
                )
            }
        };
    if let Some(address) = args.server.metrics_listen.as_deref() {
        let counts = server.counts.clone();
        let served = crate::live::serve_server_counters(address, "ws-rpc", move || {
            connection_counts(&counts.snapshot())
        });
        if let Err(e) = served {
            return fail(EXIT_BAD_INPUT, e);
        }
    }
    print_now(&format!(
        "msgbench JSON-RPC server answering {method} on ws://{}/",
        server.local_addr()
    ));
    let started = std::time::Instant::now();
    serve_until(&stop, run_for);
    let cpu_s = server.cpu_ns() as f64 / 1e9;
    let r = server.stop();
    println!(
        "answered {} calls ({} with an error) on {} connections in {:.1} s, {cpu_s:.2} CPU-s; {}",
        r.results + r.errors,
        r.errors,
        r.counts.accepted,
        started.elapsed().as_secs_f64(),
        connection_summary(&r.counts)
    );
    exit_code(&stop)
}

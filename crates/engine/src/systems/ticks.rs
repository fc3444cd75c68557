//! The `ticks` system: a WebSocket server broadcasts market ticks on a schedule to groups of
//! clients — msgbench's native clients and headless browsers — and every client measures every
//! tick it processes. This file starts the tick server (built in, through `[sut]`, or at
//! `ticks.address`) and says how clients reach it (TLS, a feed's decoder, a gRPC stream, an
//! event stream); the
//! run is the stream family's ([`crate::drivers::streams::run`]).
use crate::cpu::CpuSnapshot;
use crate::drivers::streams;
use crate::drivers::streams::grpc_feed::GrpcPlan;
use crate::drivers::streams::run::StreamRun;
use crate::drivers::streams::sse_feed::SsePlan;
use crate::drivers::streams::tick_client::Shared;
use crate::error::EngineError;
use crate::harness::{BuiltinServer, Measured, RunContext, SystemUnderTest};
use crate::net::feed::FeedDecoder;
use crate::server::ticks::{TickServer, TickServerOptions};
use msgbench_model::scenario::Scenario;
use msgbench_model::sut::SutConfig;
use msgbench_model::ticks::TicksConfig;
use std::sync::Arc;

/// Where to start msgbench's gRPC stream server, for error messages.
const GRPC_HINT: &str = "(start msgbench's own with `msgbench serve grpc --listen HOST:PORT`: its msgbench.Feed/Ticks streams ticks, or let `[sut] command` start one)";
/// What to check when an event stream cannot be reached, for error messages.
const SSE_HINT: &str = "(ticks.address is the event stream's URL; `msgbench serve sse` serves one at /events for a trial)";
/// Why a UDP feed's socket may not bind, for error messages.
const UDP_HINT: &str = "(another program receives on that port: pick another in ticks.address; a unicast feed's client k takes port + k)";
/// Where to start msgbench's own server, for error messages.
const HINT: &str = "(start msgbench's own with `msgbench serve ticks --listen HOST:PORT`, let `[sut] command` start one, or omit `ticks.address` to run the built-in server in-process)";

impl BuiltinServer for TickServer {
    fn cpu_ns(&self) -> u64 {
        TickServer::cpu_ns(self)
    }
    fn endpoint(&self) -> crate::net::endpoint::Endpoint {
        TickServer::local_addr(self).into()
    }
}

/// Runs one `ticks` scenario.
pub fn run(
    scenario: &Scenario,
    ticks: &TicksConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let options = TickServerOptions {
        config: ticks.server.clone(),
        format: ticks.format,
        symbols: ticks.symbols,
        pacing: scenario.pacing,
        spin_ns: ticks.spin_ns,
        seed: scenario.run.seed,
        per_second: true,
    };
    let sut = SystemUnderTest::start(ticks.address.as_deref(), sut, &ctx.stop, || {
        TickServer::start(options, ([127, 0, 0, 1], 0).into())
    })?;
    let base = sut.address(ticks.address.as_deref(), |a| format!("ws://{a}/ticks"));
    let mut shared = Shared::new(ticks.ack_every_ns, ticks.on_close, ticks.receive_buffer);
    shared.feed = ticks.feed.clone().map(FeedDecoder::new);
    if ticks.ca_file.is_some() || ticks.insecure {
        let (config, _) =
            crate::drivers::tls::client_config(ticks.ca_file.as_deref(), ticks.insecure).map_err(
                |problem| EngineError::Handshake {
                    address: ticks.address.clone().unwrap_or_default(),
                    problem,
                },
            )?;
        shared.tls = Some(config);
    }
    if let Some(stream) = &ticks.grpc {
        let plan = GrpcPlan::new((**stream).clone(), shared.tls.clone())
            .map_err(|e| e.into_engine(&base, GRPC_HINT))?;
        shared.grpc = Some(Arc::new(plan));
    }
    shared.udp = ticks.udp.clone();
    if let Some(stream) = &ticks.sse {
        let plan = SsePlan::new(stream.clone(), shared.tls.clone())
            .map_err(|e| e.into_engine(&base, SSE_HINT))?;
        shared.sse = Some(Arc::new(plan));
    }
    let hint = match (&shared.grpc, &shared.sse, &shared.udp) {
        (Some(_), ..) => GRPC_HINT,
        (_, Some(_), _) => SSE_HINT,
        (.., Some(_)) => UDP_HINT,
        _ => HINT,
    };
    streams::run::drive(StreamRun {
        scenario,
        ticks,
        ctx,
        shared: Arc::new(shared),
        sut,
        base,
        hint,
        process_before,
    })
}

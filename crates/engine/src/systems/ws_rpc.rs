//! The `ws-rpc` system: JSON-RPC 2.0 over WebSocket against the built-in server (started
//! in-process when the scenario names no address: busy methods answer in order, sleeping ones
//! out of order), an external server started by `[sut]`, or any `ws://` address. The load is
//! offered by [`crate::drivers::request_response::caller`].
use crate::cpu::CpuSnapshot;
use crate::drivers::request_response::caller::{self, Callers};
use crate::drivers::request_response::ws_socket::WsRpcSockets;
use crate::error::EngineError;
use crate::harness::{BuiltinServer, Measured, RunContext, SystemUnderTest};
use crate::server::ws_rpc::{MethodAnswer, StreamAnswer, WsRpcServer};
use msgbench_model::client::{ClientConfig, OnError};
use msgbench_model::scenario::Scenario;
use msgbench_model::sut::SutConfig;
use msgbench_model::ws_rpc::WsRpcConfig;

/// How to get a server where the scenario points.
const HINT: &str = "(start msgbench's own with `msgbench serve ws-rpc --listen HOST:PORT`, let `[sut] command` start one, or omit `ws_rpc.address` to run the built-in server in-process)";

impl BuiltinServer for WsRpcServer {
    fn cpu_ns(&self) -> u64 {
        WsRpcServer::cpu_ns(self)
    }
    fn endpoint(&self) -> crate::net::endpoint::Endpoint {
        WsRpcServer::local_addr(self).into()
    }
}

/// Runs one `ws-rpc` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    ws_rpc: &WsRpcConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = SystemUnderTest::start(ws_rpc.address.as_deref(), sut, &ctx.stop, || {
        WsRpcServer::start(&ws_rpc.server, answers(ws_rpc), ([127, 0, 0, 1], 0).into())
    })?;
    let url = server.address(ws_rpc.address.as_deref(), |a| format!("ws://{a}/"));
    let sockets = WsRpcSockets {
        url: url.clone(),
        prefixes: ws_rpc
            .methods
            .iter()
            .map(|m| {
                format!(
                    r#"{{"jsonrpc":"2.0","method":"{}","params":{},"id":"#,
                    m.method, m.params_json
                )
            })
            .collect(),
        streams: ws_rpc
            .methods
            .iter()
            .map(|m| m.stream_done.clone())
            .collect(),
        reconnect: client.on_error == OnError::Reconnect,
        hint: HINT.to_string(),
        pins: ws_rpc.socket_pin.clone(),
    };
    let callers = Callers {
        name: "ws-rpc caller",
        shares: ws_rpc.methods.iter().map(|m| m.share).collect(),
        wait: ws_rpc.wait,
        socket_pin: &ws_rpc.socket_pin,
        sockets: &sockets,
    };
    let out = caller::drive(scenario, client, callers, &url, ctx, &|| server.cpu_ns())?;
    let mut notes = server.process_notes();
    if let Some(s) = server.builtin.take() {
        notes.extend(server_notes(s));
    }
    Ok(Measured::from_driver(
        out,
        scenario.system.class_names(),
        process_before,
        scenario.system.describe(),
        notes,
    ))
}

/// What the built-in server answers to each method.
fn answers(ws_rpc: &WsRpcConfig) -> Vec<MethodAnswer> {
    ws_rpc
        .methods
        .iter()
        .map(|m| MethodAnswer {
            method: m.method.clone(),
            result_json: m.result_json.clone(),
            service_ns: m.service_ns,
            work: m.work,
            stream: m.stream_done.as_ref().map(|done| StreamAnswer {
                messages: m.messages,
                every_ns: m.every_ns,
                done_json: done.clone(),
            }),
        })
        .collect()
}

/// Stops the built-in server; what it counted that the reader must know.
fn server_notes(server: WsRpcServer) -> Vec<String> {
    let report = server.stop();
    let mut notes = Vec::new();
    if report.errors > 0 {
        notes.push(format!(
            "the built-in server answered {} requests with a JSON-RPC error",
            report.errors
        ));
    }
    if report.counts.protocol_errors > 0 {
        notes.push(format!(
            "the built-in server closed {} connections for bad frames",
            report.counts.protocol_errors
        ));
    }
    notes
}

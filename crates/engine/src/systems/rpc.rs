//! The `rpc` system: msgbench's framed request/response protocol over TCP
//! ([`crate::net::frame`]), against the built-in server (started in-process when the scenario
//! names no address), an external server started by `[sut]`, or any address.
use crate::cpu::CpuSnapshot;
use crate::drivers::request_response::byte_stream::{self, Plan, Response, Wire};
use crate::drivers::request_response::launcher::Launch;
use crate::error::EngineError;
use crate::harness::sut::resolve_endpoint;
use crate::harness::{BuiltinServer, Measured, RunContext, SystemUnderTest};
use crate::net::endpoint::Stream;
use crate::net::frame::{self, Header, FLAG_SLEEP, KIND_REQUEST, KIND_RESPONSE};
use crate::server::rpc::RpcServer;
use msgbench_model::client::ClientConfig;
use msgbench_model::scenario::Scenario;
use msgbench_model::{
    rpc::{RpcConfig, RpcOp, ServiceDistribution, ServiceWork, MAX_FRAME_LIMIT},
    sut::SutConfig,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::Ordering;

/// How to get a server where the scenario points.
const HINT: &str = "(start msgbench's own with `msgbench serve rpc --listen HOST:PORT`, let `[sut] command` start one, or omit `rpc.address` to run the built-in server in-process)";

impl BuiltinServer for RpcServer {
    fn cpu_ns(&self) -> u64 {
        RpcServer::cpu_ns(self)
    }
    fn endpoint(&self) -> crate::net::endpoint::Endpoint {
        RpcServer::endpoint(self).clone()
    }
}

/// Runs one `rpc` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    rpc: &RpcConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = SystemUnderTest::start(rpc.address.as_deref(), sut, &ctx.stop, || {
        RpcServer::start(&rpc.server, ([127, 0, 0, 1], 0).into())
    })?;
    let address = resolve_endpoint(&server.address(rpc.address.as_deref(), |a| a.to_string()))?;
    let plan = Plan {
        scenario,
        client,
        address,
        shares: rpc.ops.iter().map(|o| o.share).collect(),
        make_wire: |i| RpcWire::new(rpc, scenario.run.seed, i),
        hint: HINT,
        connector: (),
    };
    let out = byte_stream::drive::<_, Stream>(plan, ctx, &|| server.cpu_ns())?;
    let mut notes = server.process_notes();
    if let Some(s) = &server.builtin {
        let bad = s.stats.protocol_errors.load(Ordering::Relaxed);
        if bad > 0 {
            notes.push(format!(
                "the built-in server closed {bad} connections for bad frames"
            ));
        }
    }
    Ok(Measured::from_driver(
        out,
        scenario.system.class_names(),
        process_before,
        scenario.system.describe(),
        notes,
    ))
}

/// Encodes requests of the scenario's mix; draws exponential service times (seeded).
pub struct RpcWire {
    ops: Vec<RpcOp>,
    request_bytes: usize,
    response_bytes: u32,
    rng: SmallRng,
}

impl RpcWire {
    /// The wire of connection `index`.
    pub fn new(rpc: &RpcConfig, seed: u64, index: usize) -> Self {
        RpcWire {
            ops: rpc.ops.clone(),
            request_bytes: rpc.request_bytes as usize,
            response_bytes: rpc.response_bytes,
            rng: SmallRng::seed_from_u64(seed ^ 0x5EED ^ (index as u64) << 20),
        }
    }
}

impl Wire for RpcWire {
    #[inline]
    fn encode(&mut self, launch: &Launch, out: &mut Vec<u8>) {
        let &Launch {
            class,
            id,
            sent_ns: now_ns,
            ..
        } = launch;
        let op = &self.ops[class];
        let service_ns = match op.distribution {
            ServiceDistribution::Fixed => op.service_ns,
            ServiceDistribution::Exponential => {
                let u: f64 = self.rng.gen_range(f64::MIN_POSITIVE..1.0);
                (-u.ln() * op.service_ns as f64) as u64
            }
        };
        frame::encode(
            &Header {
                kind: KIND_REQUEST,
                flags: if op.work == ServiceWork::Sleep {
                    FLAG_SLEEP
                } else {
                    0
                },
                class: class as u16,
                id,
                client_ns: now_ns,
                service_ns,
                reply_bytes: self.response_bytes,
            },
            self.request_bytes,
            out,
        );
    }

    #[inline]
    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String> {
        match frame::decode(buf, MAX_FRAME_LIMIT, KIND_RESPONSE) {
            Ok(Some((h, size))) => Ok(Some(Response {
                id: Some(h.id),
                size,
                ok: true,
                closes: false,
            })),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

//! The `rpc` system: msgbench's framed request/response protocol over TCP
//! ([`crate::net::frame`]), against the built-in server (started in-process when the scenario
//! names no address), an external server started by `[sut]`, or any address.
use super::client::{self, Response, Wire};
use super::{EngineError, Measured, RunContext};
use crate::cpu::CpuSnapshot;
use crate::net::frame::{self, Header, FLAG_SLEEP, KIND_REQUEST, KIND_RESPONSE};
use crate::server::rpc::RpcServer;
use crate::sut::SutProcess;
use msgbench_model::client::ClientConfig;
use msgbench_model::rpc::{
    RpcConfig, RpcOp, ServiceDistribution, ServiceWork, SutConfig, MAX_FRAME_LIMIT,
};
use msgbench_model::scenario::Scenario;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Runs one `rpc` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    rpc: &RpcConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = None;
    let mut external = None;
    let address = match &rpc.address {
        None => {
            let s = RpcServer::start(&rpc.server, ([127, 0, 0, 1], 0).into())
                .map_err(EngineError::Server)?;
            let a = s.local_addr();
            server = Some(s);
            a
        }
        Some(a) => {
            if let Some(cfg) = sut {
                external = Some(SutProcess::start(cfg, &ctx.stop)?);
            }
            client::resolve(a)?
        }
    };
    let sut_cpu = || {
        server
            .as_ref()
            .map(|s| s.cpu_ns())
            .or_else(|| external.as_ref().map(|p| p.cpu_ns()))
    };
    let out = client::drive(
        scenario,
        client,
        address,
        rpc.ops.len(),
        rpc.ops.iter().map(|o| o.share).collect(),
        |i| RpcWire::new(rpc, scenario.run.seed, i),
        ctx,
        &sut_cpu,
        "(start msgbench's own with `msgbench serve rpc --listen HOST:PORT`, let `[sut] command` start one, or omit `rpc.address` to run the built-in server in-process)",
    )?;
    let mut notes = Vec::new();
    if let Some(p) = external.as_mut() {
        notes.extend(p.exited());
    }
    if let Some(s) = &server {
        let bad = s
            .stats
            .protocol_errors
            .load(std::sync::atomic::Ordering::Relaxed);
        if bad > 0 {
            notes.push(format!(
                "the built-in server closed {bad} connections for bad frames"
            ));
        }
    }
    Ok(client::measured(
        out,
        rpc.ops.iter().map(|o| o.name.clone()).collect(),
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
    fn encode(&mut self, class: usize, id: u64, now_ns: u64, out: &mut Vec<u8>) {
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
            })),
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

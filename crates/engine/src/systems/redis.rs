//! The `redis` system: PING / GET / SET over RESP against a Redis server (any address, or one
//! started by `[sut]`), with the shared driver's pacing, window and accounting. Replies come in
//! request order, so they are matched by position.
use crate::cpu::CpuSnapshot;
use crate::drivers::byte_stream::{self, Plan, Response, Wire};
use crate::error::EngineError;
use crate::harness::sut::resolve;
use crate::harness::{Measured, NoServer, RunContext, SystemUnderTest};
use crate::net::resp::{self, CommandEncoder, Reply};
use mio::net::TcpStream;
use msgbench_model::client::ClientConfig;
use msgbench_model::result::ErrorCount;
use msgbench_model::scenario::Scenario;
use msgbench_model::{
    redis::{RedisCommand, RedisConfig},
    sut::SutConfig,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// How to get a server where the scenario points.
const HINT: &str = "(start one with `redis-server --port PORT`, or let the scenario start it: `[sut] command = \"exec redis-server --port PORT\"`)";

/// Runs one `redis` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    redis: &RedisConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = SystemUnderTest::<NoServer>::external(sut, &ctx.stop)?;
    let plan = Plan {
        scenario,
        client,
        address: resolve(&redis.address)?,
        shares: redis.ops.iter().map(|o| o.1).collect(),
        make_wire: |i| RedisWire::new(redis, scenario.run.seed, i),
        hint: HINT,
    };
    let out = byte_stream::drive::<_, TcpStream>(plan, ctx, &|| server.cpu_ns())?;
    let mut notes = server.process_notes();
    if out.faults.server_errors > 0 {
        notes.push(format!(
            "Redis answered {} requests with an error reply (counted as failed)",
            out.faults.server_errors
        ));
    }
    Ok(Measured::from_driver(
        out,
        redis.ops.iter().map(|o| o.0.clone()).collect(),
        process_before,
        scenario.system.describe(),
        notes,
    ))
}

/// Encodes the mix's commands on random keys; parses replies.
pub struct RedisWire {
    commands: Vec<RedisCommand>,
    encoder: CommandEncoder,
    keys: u64,
    rng: SmallRng,
    errors: Vec<ErrorCount>,
}

impl RedisWire {
    /// The wire of connection `index`.
    pub fn new(redis: &RedisConfig, seed: u64, index: usize) -> Self {
        RedisWire {
            commands: redis.ops.iter().map(|o| o.2).collect(),
            encoder: CommandEncoder::new(redis.value_bytes as usize, redis.keys),
            keys: redis.keys,
            rng: SmallRng::seed_from_u64(seed ^ 0x4ED1 ^ (index as u64) << 20),
            errors: Vec::new(),
        }
    }
}

impl Wire for RedisWire {
    #[inline]
    fn encode(&mut self, class: usize, _id: u64, _now_ns: u64, out: &mut Vec<u8>) {
        let key = if self.keys > 0 {
            self.rng.gen_range(0..self.keys)
        } else {
            0
        };
        self.encoder.encode(self.commands[class], key, out);
    }

    #[inline]
    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String> {
        match resp::decode(buf) {
            Ok(Some((reply, size))) => {
                if reply == Reply::Error {
                    // `-MESSAGE\r\n`: the text between the sign and the line end.
                    let text = String::from_utf8_lossy(&buf[1..size - 2]);
                    ErrorCount::add(&mut self.errors, &text, 1);
                }
                Ok(Some(Response {
                    id: None,
                    size,
                    ok: reply == Reply::Ok,
                }))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn take_errors(&mut self) -> Vec<ErrorCount> {
        std::mem::take(&mut self.errors)
    }
}

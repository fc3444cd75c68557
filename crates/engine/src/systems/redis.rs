//! The `redis` system: any command over RESP (PING, GET, SET, or `["HSET", "user:{key}", …]`)
//! against a Redis server (any address, or one started by `[sut]`), with the shared driver's
//! pacing, window and accounting, and keys drawn uniformly, in sequence or Zipf-distributed.
//! Replies come in request order, so they are matched by position.
use crate::cpu::CpuSnapshot;
use crate::drivers::request_response::byte_stream::{self, Plan, Response, Transport, Wire};
use crate::drivers::request_response::keys::Keys;
use crate::drivers::request_response::launcher::Launch;
use crate::drivers::request_response::login::{LoggedIn, Login};
use crate::drivers::tls::{TlsConnector, TlsStream};
use crate::error::EngineError;
use crate::harness::sut::resolve_endpoint;
use crate::harness::DriverOutput;
use crate::harness::{Measured, NoServer, RunContext, SystemUnderTest};
use crate::net::endpoint::{Endpoint, Stream};
use crate::net::resp::{self, CommandTemplate, Reply};
use msgbench_model::client::ClientConfig;
use msgbench_model::result::ErrorCount;
use msgbench_model::scenario::Scenario;
use msgbench_model::{redis::RedisConfig, sut::SutConfig};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// How to get a server where the scenario points.
const HINT: &str = "(start one with `redis-server --port PORT`, or let the scenario start it: `[sut] command = \"exec redis-server --port PORT\"`; a server that hangs up at once may be a TLS port: then give [redis.tls])";

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
    let address = resolve_endpoint(&redis.address)?;
    let cpu = || server.cpu_ns();
    let run = (scenario, client, redis, address);
    let out = match &redis.tls {
        None => drive::<Stream>(run, (), ctx, &cpu)?,
        Some(tls) => {
            let connector = TlsConnector::for_broker(tls).map_err(|problem| EngineError::Tls {
                address: redis.address.clone(),
                problem,
            })?;
            drive::<TlsStream>(run, connector, ctx, &cpu)?
        }
    };
    let mut notes = server.process_notes();
    if redis.auth.is_none()
        && out
            .faults
            .errors
            .iter()
            .any(|e| e.message.contains("NOAUTH"))
    {
        notes.push(
            "Redis refused the commands of a client that had not logged in (NOAUTH): give [redis.auth] password_file = \"…\" (docs/pubsub.md)".into(),
        );
    }
    if out.faults.server_errors > 0 {
        notes.push(format!(
            "Redis answered {} requests with an error reply (counted as failed)",
            out.faults.server_errors
        ));
    }
    let mut measured = Measured::from_driver(
        out,
        scenario.system.class_names(),
        process_before,
        scenario.system.describe(),
        notes,
    );
    if redis.tls.as_ref().is_some_and(|t| t.insecure) {
        measured.info.push(
            "TLS certificate not verified (redis.tls.insecure = true): the server was not authenticated".into(),
        );
    }
    Ok(measured)
}

/// The run over connections of transport `T` (TCP or TLS), each logged in first.
fn drive<T: Transport>(
    (scenario, client, redis, address): (&Scenario, &ClientConfig, &RedisConfig, Endpoint),
    under: T::Connector,
    ctx: &RunContext,
    sut_cpu_ns: &dyn Fn() -> Option<u64>,
) -> Result<DriverOutput, EngineError> {
    let plan = Plan {
        scenario,
        client,
        address,
        shares: redis.ops.iter().map(|o| o.1).collect(),
        make_wire: |i| RedisWire::new(redis, scenario.run.seed, i),
        hint: HINT,
        connector: login(redis, under),
    };
    byte_stream::drive::<_, LoggedIn<T>>(plan, ctx, sut_cpu_ns)
}

/// Every connection's `AUTH`, when the scenario gives a password (before its first command,
/// outside any latency: [`LoggedIn`]).
fn login<C>(redis: &RedisConfig, under: C) -> Login<C> {
    let mut request = Vec::new();
    if let Some(password) = redis.auth.as_ref().and_then(|a| a.password.as_ref()) {
        let user = redis.auth.as_ref().and_then(|a| a.user.as_deref());
        resp::auth_command(user, password.expose(), &mut request);
    }
    Login {
        under,
        request,
        answered: resp::login_answer,
    }
}

/// Encodes the mix's commands on keys from the key space; parses replies.
pub struct RedisWire {
    templates: Vec<CommandTemplate>,
    keys: Keys,
    errors: Vec<ErrorCount>,
    /// The scan of the reply being read, kept between reads (nothing is scanned twice).
    scan: resp::Scanner,
    max_reply: usize,
}

impl RedisWire {
    /// The wire of connection `index`.
    pub fn new(redis: &RedisConfig, seed: u64, index: usize) -> Self {
        let rng = SmallRng::seed_from_u64(seed ^ 0x4ED1 ^ (index as u64) << 20);
        RedisWire {
            templates: redis
                .ops
                .iter()
                .map(|o| CommandTemplate::new(&o.2, redis.value_bytes as usize, redis.keys == 0))
                .collect(),
            keys: Keys::new(
                (redis.keys, redis.key_pattern, redis.zipf_exponent),
                rng,
                index,
            ),
            errors: Vec::new(),
            scan: resp::Scanner::default(),
            max_reply: redis.max_reply,
        }
    }
}

impl Wire for RedisWire {
    #[inline]
    fn encode(&mut self, launch: &Launch, out: &mut Vec<u8>) {
        let key = self.keys.draw();
        self.templates[launch.class].encode(key, out);
    }

    #[inline]
    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String> {
        match self.scan.decode(buf, self.max_reply) {
            Ok(Some((reply, size))) => {
                if reply == Reply::Error {
                    let text = String::from_utf8_lossy(resp::error_text(buf, size));
                    ErrorCount::add(&mut self.errors, &text, 1);
                }
                Ok(Some(Response {
                    id: None,
                    size,
                    ok: reply == Reply::Ok,
                    closes: false,
                }))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    fn reset(&mut self) {
        self.scan.reset();
    }

    fn take_errors(&mut self) -> Vec<ErrorCount> {
        std::mem::take(&mut self.errors)
    }
}

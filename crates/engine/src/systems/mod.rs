//! The systems under test, one file each: what a system is (its wire format, its built-in
//! server or address, its notes) and which driver offers it load. The drivers are in
//! [`crate::drivers`], the run's timing and lifecycle in [`crate::harness`].
use crate::error::EngineError;
use crate::harness::{Measured, RunContext};
use msgbench_model::scenario::{Scenario, System};

pub mod http;
pub mod pubsub;
pub mod queue;
pub mod redis;
pub mod rpc;
pub mod ticks;
pub mod wire;
pub mod ws_rpc;

/// Runs one scenario on its system under test.
pub fn run(scenario: &Scenario, ctx: &RunContext) -> Result<Measured, EngineError> {
    match &scenario.system {
        System::Queue(q) => queue::run(scenario, q, ctx),
        System::Rpc { client, rpc, sut } => rpc::run(scenario, client, rpc, sut.as_ref(), ctx),
        System::Redis { client, redis, sut } => {
            redis::run(scenario, client, redis, sut.as_ref(), ctx)
        }
        System::Ticks { ticks, sut } => ticks::run(scenario, ticks, sut.as_ref(), ctx),
        System::WsRpc {
            client,
            ws_rpc,
            sut,
        } => ws_rpc::run(scenario, client, ws_rpc, sut.as_ref(), ctx),
        System::Http { client, http, sut } => http::run(scenario, client, http, sut.as_ref(), ctx),
        System::Pubsub { pubsub, sut } => pubsub::run(scenario, pubsub, sut.as_ref(), ctx),
        System::Wire { client, wire, sut } => wire::run(scenario, client, wire, sut.as_ref(), ctx),
    }
}

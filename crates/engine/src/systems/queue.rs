//! The `queue` system under test: an in-process bounded SPSC ring — msgbench's own, the `rtrb`
//! crate's, or the user's from a shared library ([`crate::ring_library`]) — driven by
//! [`crate::drivers::producer_consumer`].
use crate::drivers::producer_consumer::{self, Item};
use crate::error::EngineError;
use crate::harness::{Measured, RunContext};
use crate::ring;
use msgbench_model::{
    queue::{QueueConfig, RingKind},
    scenario::Scenario,
};

/// Runs the queue lab once.
pub fn run(
    scenario: &Scenario,
    q: &QueueConfig,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    match q.ring {
        RingKind::Msgbench => {
            let (p, c) = ring::channel::<Item>(q.capacity);
            producer_consumer::drive(scenario, q, ctx, p, c)
        }
        RingKind::Rtrb => {
            let (p, c) = rtrb::RingBuffer::<Item>::new(q.capacity);
            producer_consumer::drive(scenario, q, ctx, p, c)
        }
        RingKind::Library => {
            let path = q.library.as_deref().ok_or_else(|| {
                EngineError::QueueLibrary("ring = \"library\" needs queue.library".into())
            })?;
            let (p, c) = crate::ring_library::channel::<Item>(path, q.capacity)
                .map_err(EngineError::QueueLibrary)?;
            producer_consumer::drive(scenario, q, ctx, p, c)
        }
    }
}

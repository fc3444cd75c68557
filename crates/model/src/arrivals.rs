//! How an open-loop schedule's messages arrive, and the highest rate one may ask for: shared
//! by `rate` pacing ([`crate::pacing`]) and `stages` ([`crate::stages`]), below both.
use serde::{Deserialize, Serialize};

/// Highest pacing rate accepted, messages per second: one message every 10 ns is already
/// beyond what a clock read and a send can do per message; above it a schedule cannot be kept
/// and its catch-up would never end.
pub const MAX_RATE_PER_SEC: f64 = 1e8;

/// Arrival processes for `rate` and `stages` pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Arrivals {
    /// Evenly spaced.
    Uniform,
    /// Exponentially distributed gaps (seeded).
    Poisson,
}

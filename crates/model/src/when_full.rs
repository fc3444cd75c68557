//! `when_full`: what a message does when there is no room for it — in the system under test
//! (the queue's ring) or in the driver (a connection's window of requests in flight). One
//! vocabulary for every section that has the key; each section takes the policies that mean
//! something there and refuses the others with the ones it takes.
use serde::{Deserialize, Serialize};

/// What a message does when there is no room for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WhenFull {
    /// Wait for room; the wait counts as latency (measured from the intended send time).
    Block,
    /// The driver does not send it; counted as skipped (request/response drivers).
    Skip,
    /// As `skip`, and the connection's rate halves; 5 % of the target comes back every 100 ms
    /// without a full window (additive increase, multiplicative decrease; request/response
    /// drivers).
    Adapt,
    /// The system refuses it; counted as dropped (the queue).
    Drop,
}

impl WhenFull {
    /// How a scenario file writes it.
    pub fn name(self) -> &'static str {
        match self {
            WhenFull::Block => "block",
            WhenFull::Skip => "skip",
            WhenFull::Adapt => "adapt",
            WhenFull::Drop => "drop",
        }
    }
}

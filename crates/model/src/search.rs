//! What `msgbench search` found: `search.json` in its result directory, next to the runs of
//! every step.
use serde::{Deserialize, Serialize};

/// The whole search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchRecord {
    /// The SLO every step was held to, e.g. `p99 < 10ms`.
    pub slo: String,
    /// Smallest share of attempted messages that must be delivered.
    pub min_success: f64,
    /// Relative precision the bisection stopped at.
    pub precision: f64,
    /// Every step, in the order run.
    pub steps: Vec<SearchStep>,
    /// Highest rate that passed (None: not even the lowest tried).
    pub sustainable_per_sec: Option<f64>,
    /// Lowest rate that failed above it (None: the ceiling was never hit).
    pub failed_per_sec: Option<f64>,
    /// True when Ctrl-C ended the search early.
    pub interrupted: bool,
    /// The rate at which the search stopped because this host, not the system, could not keep
    /// the schedule: a step failed twice with msgbench's own sends late while the system never
    /// pushed back. Whatever bisecting below it found would be the host's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_limited_per_sec: Option<f64>,
}

/// One rate tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchStep {
    /// Target rate, messages per second.
    pub rate_per_sec: f64,
    /// Whether every replicate passed.
    pub passed: bool,
    /// Why it failed (empty when it passed).
    pub reasons: Vec<String>,
    /// Runs of this step.
    pub run_ids: Vec<String>,
    /// Median over replicates of the SLO's percentile, ns.
    pub latency_ns: u64,
    /// Median over replicates of delivered per second.
    pub delivered_per_sec: f64,
    /// It failed with the driver late and the system never pushing back (fewer than 1 % of
    /// sends waited for a full window; see `Counters::held_by_window`): the host's lateness,
    /// not the system's. Such a step is tried once more before it counts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_late: bool,
}

//! When a run starts, warms up, measures, ends and drains: one [`Timeline`] for every system.
use crate::recorder::Collector;
use msgbench_model::check::MAX_RAW_LATENCIES;
use msgbench_model::scenario::RunSettings;

/// Lead time between fixing the timeline and its first send: every worker is ready and waiting
/// (pinned, connected) before the schedule starts.
pub const START_LEAD_NS: u64 = 20_000_000;
/// Longest a worker sleeps without looking at the stop flag.
pub const STOP_CHECK_NS: u64 = 20_000_000;
/// Longest drain once Ctrl-C was pressed, whatever `run.drain_timeout` says: the run is written
/// within a second of the Ctrl-C (what is still in flight then is counted as in flight).
pub const CTRL_C_DRAIN_NS: u64 = 250_000_000;

/// The run's timeline, in clock ns (see the [timing model](super)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// The schedule starts (warm-up begins).
    pub t0_ns: u64,
    /// The measured span begins.
    pub measure_start_ns: u64,
    /// The schedule ends: nothing due at or after it is sent (`u64::MAX` when only an
    /// operation budget ends the span).
    pub end_ns: u64,
    /// How long to wait for what is in flight once sending stopped.
    pub drain_ns: u64,
}

impl Timeline {
    /// A timeline starting [`START_LEAD_NS`] from now, or at `run.start_unix_ns` (a sharded
    /// run's agreed start) when that is later: the wall-clock instant becomes a clock instant
    /// once, here, and the schedule then runs on the monotonic clock like any other.
    pub fn from_now(run: &RunSettings) -> Timeline {
        let now = crate::clock::now_ns();
        let ahead = run
            .start_unix_ns
            .map_or(0, |at| at.saturating_sub(crate::clock::unix_ns()));
        Timeline::starting_at(now + ahead.max(START_LEAD_NS), run)
    }

    /// A timeline whose schedule starts at `t0_ns`.
    pub fn starting_at(t0_ns: u64, run: &RunSettings) -> Timeline {
        let measure_start_ns = t0_ns + run.warmup.as_nanos() as u64;
        Timeline {
            t0_ns,
            measure_start_ns,
            // No duration but an operation budget: the budget alone ends the span.
            end_ns: match (run.duration.is_zero(), run.operations) {
                (true, Some(_)) => u64::MAX,
                _ => measure_start_ns.saturating_add(run.duration.as_nanos() as u64),
            },
            drain_ns: run.drain_timeout.as_nanos() as u64,
        }
    }

    /// The end of the drain after sending stopped at `send_end_ns`: `run.drain_timeout` after
    /// it, at most [`CTRL_C_DRAIN_NS`] once Ctrl-C was pressed (`ctrl_c`).
    pub fn drain_deadline(&self, send_end_ns: u64, ctrl_c: bool) -> u64 {
        let drain = if ctrl_c {
            self.drain_ns.min(CTRL_C_DRAIN_NS)
        } else {
            self.drain_ns
        };
        send_end_ns.saturating_add(drain)
    }

    /// The collector of a run with `classes` operation classes and `recorders` recorders that
    /// keep raw latencies: `run.emit_latencies` are shared evenly among them.
    pub fn collector(&self, run: &RunSettings, classes: usize, recorders: usize) -> Collector {
        let raw = run.emit_latencies.unwrap_or(0).min(MAX_RAW_LATENCIES) as usize;
        Collector::new(classes, self.measure_start_ns, raw / recorders.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(duration_ms: u64, operations: Option<u64>) -> RunSettings {
        RunSettings {
            duration: Duration::from_millis(duration_ms),
            warmup: Duration::from_millis(100),
            operations,
            drain_timeout: Duration::from_millis(50),
            emit_latencies: None,
            send_lag_limit_ns: 1_000_000,
            seed: 1,
            start_unix_ns: None,
        }
    }

    #[test]
    fn ctrl_c_caps_the_drain() {
        let mut settings = run(2_000, None);
        settings.drain_timeout = Duration::from_secs(30);
        let t = Timeline::starting_at(1_000, &settings);
        assert_eq!(t.drain_deadline(5, false), 5 + 30_000_000_000);
        assert_eq!(t.drain_deadline(5, true), 5 + CTRL_C_DRAIN_NS);
        settings.drain_timeout = Duration::from_millis(50);
        let short = Timeline::starting_at(1_000, &settings);
        assert_eq!(short.drain_deadline(5, true), 5 + 50_000_000);
    }

    #[test]
    fn warm_up_then_duration_then_drain() {
        let t = Timeline::starting_at(1_000, &run(2_000, None));
        assert_eq!(t.measure_start_ns, 1_000 + 100_000_000);
        assert_eq!(t.end_ns, t.measure_start_ns + 2_000_000_000);
        assert_eq!(t.drain_deadline(5, false), 5 + 50_000_000);
    }

    #[test]
    fn an_operation_budget_without_duration_has_no_scheduled_end() {
        assert_eq!(Timeline::starting_at(0, &run(0, Some(10))).end_ns, u64::MAX);
        assert_ne!(Timeline::starting_at(0, &run(5, Some(10))).end_ns, u64::MAX);
    }
}

//! How a run's workers learn to stop and tell where they stopped: Ctrl-C, the first error
//! that stops the run (`on_error = "stop"`), and the end of the measured span over every
//! worker; and the driver's output once they all ended.
use super::{DriverOutput, SpanEnd, Timeline};
use crate::recorder::Recording;
use msgbench_model::result::{Faults, ThreadCpu};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Shared by a driver's workers for one run.
pub struct RunStop<'a> {
    ctrl_c: &'a AtomicBool,
    stopped_by: OnceLock<String>,
    span_end: SpanEnd,
}

impl<'a> RunStop<'a> {
    /// Heeds `ctrl_c` (the run context's stop flag).
    pub fn new(ctrl_c: &'a AtomicBool) -> RunStop<'a> {
        RunStop {
            ctrl_c,
            stopped_by: OnceLock::new(),
            span_end: SpanEnd::default(),
        }
    }

    /// Ctrl-C, or an error stopped the run: stop sending.
    #[inline]
    pub fn stopping(&self) -> bool {
        self.ctrl_c.load(Ordering::Relaxed) || self.stopped_by.get().is_some()
    }

    /// Ctrl-C was pressed.
    #[inline]
    pub fn ctrl_c(&self) -> bool {
        self.ctrl_c.load(Ordering::Relaxed)
    }

    /// The end of the drain after sending stopped at `send_end_ns` (shortened by Ctrl-C, also
    /// one pressed during the drain).
    #[inline]
    pub fn drain_deadline(&self, timeline: &Timeline, send_end_ns: u64) -> u64 {
        timeline.drain_deadline(send_end_ns, self.ctrl_c())
    }

    /// An error stops the run; only the first one is kept (it is what the result says).
    pub fn stop_because(&self, why: String) {
        let _ = self.stopped_by.set(why);
    }

    /// A worker stopped sending at `now` (its schedule over when `ran_its_course`): marks the
    /// span's end and returns this worker's send end, from which its drain counts.
    pub fn stopped_sending(&self, timeline: &Timeline, now: u64, ran_its_course: bool) -> u64 {
        let send_end_ns = timeline.send_end(now, ran_its_course);
        self.span_end.stopped_at(timeline, send_end_ns);
        send_end_ns
    }

    /// What the driver measured, once every worker ended.
    pub fn output(
        self,
        timeline: &Timeline,
        recording: Recording,
        (threads, faults): (Vec<ThreadCpu>, Faults),
        sut_cpu_s: Option<f64>,
    ) -> DriverOutput {
        let stopped_by = self.stopped_by.into_inner();
        DriverOutput {
            recording,
            span_ns: self.span_end.measured_ns(timeline),
            measure_start_ns: timeline.measure_start_ns,
            threads,
            faults,
            interrupted: self.ctrl_c.load(Ordering::Relaxed) || stopped_by.is_some(),
            stopped_by,
            sut_cpu_s,
        }
    }
}

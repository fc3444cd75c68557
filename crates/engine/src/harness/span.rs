//! The measured span's edges as the workers and the supervising thread see them: where it ended
//! ([`SpanEnd`]) and what the system under test's CPU read at its start and end ([`SpanCpu`]).
use super::Timeline;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

impl Timeline {
    /// When a worker that stopped sending at `now` stopped: a schedule that ran its course
    /// lasts to its end even if the last send was earlier (a late worker stretches it to its
    /// last send); a budget, Ctrl-C or an error end it now.
    pub fn send_end(&self, now: u64, ran_its_course: bool) -> u64 {
        if ran_its_course {
            now.max(self.end_ns)
        } else {
            now
        }
    }
}

/// The end of the measured span over every worker: the latest moment one stopped sending.
#[derive(Debug, Default)]
pub struct SpanEnd(AtomicU64);

impl SpanEnd {
    /// A worker stopped sending at `send_end_ns` (see [`Timeline::send_end`]).
    pub fn stopped_at(&self, timeline: &Timeline, send_end_ns: u64) {
        self.0.fetch_max(
            send_end_ns.max(timeline.measure_start_ns),
            Ordering::Relaxed,
        );
    }

    /// Length of the measured span, ns (0 when no worker got to it).
    pub fn measured_ns(&self, timeline: &Timeline) -> u64 {
        self.0
            .load(Ordering::Relaxed)
            .saturating_sub(timeline.measure_start_ns)
    }
}

/// The system under test's CPU over the measured span, read once at each edge.
pub struct SpanCpu<'a> {
    read: &'a dyn Fn() -> Option<u64>,
    start: Option<Option<u64>>,
    end: Option<Option<u64>>,
}

impl<'a> SpanCpu<'a> {
    /// Reads the CPU (ns) with `read`; `None` from it: not measured (an address nobody started).
    pub fn new(read: &'a dyn Fn() -> Option<u64>) -> SpanCpu<'a> {
        SpanCpu {
            read,
            start: None,
            end: None,
        }
    }

    /// The span began (the first call counts).
    pub fn started(&mut self) {
        if self.start.is_none() {
            self.start = Some((self.read)());
        }
    }

    /// True once the span's start was read.
    pub fn has_started(&self) -> bool {
        self.start.is_some()
    }

    /// The span ended (the first call counts).
    pub fn ended(&mut self) {
        if self.end.is_none() {
            self.end = Some((self.read)());
        }
    }

    /// CPU seconds between the edges; `None` when not measured or the span never began. An end
    /// never read is read now.
    pub fn seconds(mut self) -> Option<f64> {
        self.ended();
        match (self.start.flatten(), self.end.flatten()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e9),
            _ => None,
        }
    }

    /// For drivers whose `workers` threads each send `()` on `done` when they stop sending:
    /// reads the start at `timeline.measure_start_ns` (or earlier, if every worker already
    /// stopped) and the end once every worker stopped; returns the CPU seconds between.
    pub fn over_workers(
        mut self,
        timeline: &Timeline,
        done: &Receiver<()>,
        workers: usize,
    ) -> Option<f64> {
        let mut stopped = 0;
        let mut gone = false;
        while !gone && stopped < workers {
            let left = timeline
                .measure_start_ns
                .saturating_sub(crate::clock::now_ns());
            if left == 0 {
                break;
            }
            match done.recv_timeout(Duration::from_nanos(left.min(super::STOP_CHECK_NS))) {
                Ok(()) => stopped += 1,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => gone = true,
            }
        }
        self.started();
        while !gone && stopped < workers {
            match done.recv() {
                Ok(()) => stopped += 1,
                Err(_) => gone = true,
            }
        }
        self.ended();
        self.seconds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_span_lasts_to_its_end_when_the_schedule_ran_its_course() {
        let t = Timeline {
            t0_ns: 0,
            measure_start_ns: 100,
            end_ns: 1_000,
            drain_ns: 10,
        };
        assert_eq!(t.send_end(900, true), 1_000);
        assert_eq!(t.send_end(1_200, true), 1_200);
        assert_eq!(t.send_end(500, false), 500);
        let span = SpanEnd::default();
        span.stopped_at(&t, 50);
        assert_eq!(span.measured_ns(&t), 0, "stopped in the warm-up");
        span.stopped_at(&t, 700);
        span.stopped_at(&t, 600);
        assert_eq!(span.measured_ns(&t), 600, "the latest worker counts");
    }

    #[test]
    fn cpu_is_read_once_at_each_edge() {
        let reads = Cell::new(0u64);
        let read = || {
            reads.set(reads.get() + 1);
            Some(reads.get() * 1_000_000_000)
        };
        let mut cpu = SpanCpu::new(&read);
        cpu.started();
        cpu.started();
        cpu.ended();
        assert_eq!(cpu.seconds(), Some(1.0));
        assert_eq!(reads.get(), 2);
        assert_eq!(SpanCpu::new(&|| None).seconds(), None);
        let mut never_began = SpanCpu::new(&read);
        never_began.ended();
        assert_eq!(never_began.seconds(), None, "stopped during the warm-up");
    }
}

//! The TSC, read as CLOCK_MONOTONIC nanoseconds, kept on CLOCK_MONOTONIC for the life of the
//! process.
//!
//! Why not scale the TSC once: a calibration taken once is off by a few ppm, and
//! CLOCK_MONOTONIC itself is slewed by NTP, so a once-calibrated clock walks away from every
//! other process's CLOCK_MONOTONIC stamps. Measured: a `serve ticks` process's stamps drifted
//! 11 → 339 µs from CLOCK_MONOTONIC over ~50 s (~6 ppm), so a client in another process read a
//! tick latency of 0 (clamped negative) or 374 µs where the in-process one was 15 µs.
//!
//! So time is a continuous, increasing, piecewise-linear function of the TSC, one segment per
//! ~100 ms. At the end of a segment one reader pairs a TSC read with a CLOCK_MONOTONIC read and
//! starts the next segment where the current one ends (no step), with a slope that is the
//! TSC's measured rate since the process started, corrected so the current error is gone by the
//! next check. The correction is bounded at ±500 ppm of that rate, so a duration measured across
//! it is distorted by at most 0.05 %; in steady state the error to CLOCK_MONOTONIC stays around
//! the rate error times the period (≤ 1 µs for 10 ppm) plus the pair's read jitter.
//!
//! The segments live in two slots behind a generation counter (a seqlock whose writer writes the
//! slot readers are not using), so a reader never waits for the writer; all threads compute the
//! same function of the TSC, so stamps taken on different threads compare as before.
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

/// How often the slope is corrected.
pub(super) const PERIOD_NS: u64 = 100_000_000;
/// The largest slope correction, as a fraction of the measured rate.
const MAX_SLEW: f64 = 500e-6;
/// The measured rate replaces the calibrated one once the baseline is this long.
const MIN_BASELINE_NS: f64 = 1e9;

/// One piece of the time function: `ns + (raw - raw0) * mult / 2^32`, valid until `next_check`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Segment {
    pub raw0: u64,
    pub ns0: u64,
    /// Nanoseconds per 2^32 ticks.
    pub mult: u64,
    /// The raw reading at which the slope is next corrected.
    pub next_check: u64,
}

impl Segment {
    /// The time at raw reading `raw` (also before `raw0`: another core's TSC may lag a little).
    #[inline]
    pub fn at(&self, raw: u64) -> u64 {
        if raw >= self.raw0 {
            self.ns0 + scale(raw - self.raw0, self.mult)
        } else {
            self.ns0.saturating_sub(scale(self.raw0 - raw, self.mult))
        }
    }
}

#[inline]
fn scale(ticks: u64, mult: u64) -> u64 {
    ((ticks as u128 * mult as u128) >> 32) as u64
}

/// What the next segment is computed from: where the process's first pair of readings was, and
/// the rate the calibration gave (ns per tick), used until the baseline is long enough.
#[derive(Debug, Clone, Copy)]
pub(super) struct Baseline {
    pub raw: u64,
    pub mono: u64,
    pub calibrated_rate: f64,
}

impl Baseline {
    /// The TSC's rate in ns per tick, measured from the first pair to this one.
    fn rate(&self, raw: u64, mono: u64) -> f64 {
        let (ticks, ns) = (raw.saturating_sub(self.raw), mono.saturating_sub(self.mono));
        if (ns as f64) < MIN_BASELINE_NS || ticks == 0 {
            self.calibrated_rate
        } else {
            ns as f64 / ticks as f64
        }
    }

    /// The segment that starts where `current` is at `raw` and meets CLOCK_MONOTONIC (`mono`,
    /// read with `raw`) one period later, as far as the slew bound allows.
    pub fn next(&self, current: &Segment, raw: u64, mono: u64) -> Segment {
        let ns0 = current.at(raw);
        let rate = self.rate(raw, mono);
        let error = ns0 as f64 - mono as f64;
        let correction = (-error / PERIOD_NS as f64).clamp(-MAX_SLEW, MAX_SLEW);
        let slope = rate * (1.0 + correction);
        Segment {
            raw0: raw,
            ns0,
            mult: (slope * 4_294_967_296.0).round() as u64,
            next_check: raw + (PERIOD_NS as f64 / rate) as u64,
        }
    }

    /// The first segment: the calibrated rate from the first pair.
    pub fn first(&self) -> Segment {
        Segment {
            raw0: self.raw,
            ns0: self.mono,
            mult: (self.calibrated_rate * 4_294_967_296.0).round() as u64,
            next_check: self.raw + (PERIOD_NS as f64 / self.calibrated_rate) as u64,
        }
    }
}

/// One slot of the published segment.
#[derive(Default)]
struct Slot {
    raw0: AtomicU64,
    ns0: AtomicU64,
    mult: AtomicU64,
    next_check: AtomicU64,
}

impl Slot {
    fn load(&self) -> Segment {
        Segment {
            raw0: self.raw0.load(Ordering::Relaxed),
            ns0: self.ns0.load(Ordering::Relaxed),
            mult: self.mult.load(Ordering::Relaxed),
            next_check: self.next_check.load(Ordering::Relaxed),
        }
    }
    fn store(&self, s: &Segment) {
        self.raw0.store(s.raw0, Ordering::Relaxed);
        self.ns0.store(s.ns0, Ordering::Relaxed);
        self.mult.store(s.mult, Ordering::Relaxed);
        self.next_check.store(s.next_check, Ordering::Relaxed);
    }
}

/// The published time function, shared by all threads.
pub(super) struct Published {
    /// Even: slot `(generation / 2) % 2` is current. Odd: the other slot is being written.
    generation: AtomicU64,
    slots: [Slot; 2],
    updating: AtomicBool,
}

impl Published {
    pub fn new(first: &Segment) -> Self {
        let p = Published {
            generation: AtomicU64::new(0),
            slots: Default::default(),
            updating: AtomicBool::new(false),
        };
        p.slots[0].store(first);
        p
    }

    /// The current segment, and `raw()` read while it was current (no segment was published
    /// between the two: a reader preempted in between would otherwise extend an old slope past
    /// the new segment's start, and its next reading could be lower). Never waits for a writer:
    /// while one writes, readers use the other slot; a read overlapped by an update is retried.
    #[inline]
    pub fn read(&self, raw: impl Fn() -> u64) -> (Segment, u64) {
        loop {
            let generation = self.generation.load(Ordering::Acquire);
            let segment = self.slots[((generation >> 1) & 1) as usize].load();
            let now = raw();
            fence(Ordering::Acquire);
            if self.generation.load(Ordering::Relaxed) == generation {
                return (segment, now);
            }
        }
    }

    /// Publishes the segment that follows `current` if no other thread is doing it already
    /// (losers keep using the live segment, which stays valid, only less exact). `plan` makes
    /// it (the slow part: a paired clock reading) before anything is published; the segment
    /// then starts where the live one is at `raw()` read *after* the update is announced, so
    /// a reader of the live segment never reads a TSC value past the new segment's start
    /// without retrying — except in the few instructions between that read and the publish.
    pub fn advance(
        &self,
        current: &Segment,
        plan: impl FnOnce(&Segment) -> Segment,
        raw: impl Fn() -> u64,
    ) {
        if self
            .updating
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let generation = self.generation.load(Ordering::Relaxed);
        let live = self.slots[((generation >> 1) & 1) as usize].load();
        if live == *current {
            let planned = plan(&live);
            self.generation.store(generation + 1, Ordering::Relaxed);
            fence(Ordering::Release);
            let start = raw().max(planned.raw0);
            let next = Segment {
                raw0: start,
                ns0: live.at(start),
                mult: planned.mult,
                next_check: planned.next_check + (start - planned.raw0),
            };
            self.slots[(((generation >> 1) + 1) & 1) as usize].store(&next);
            self.generation.store(generation + 2, Ordering::Release);
        }
        self.updating.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TSC at 3 GHz whose true rate differs from the calibration by `calibration_ppm`, against
    /// a CLOCK_MONOTONIC that runs `slew_ppm` off the TSC (NTP) from `mono_anchor` on.
    struct Sim {
        baseline: Baseline,
        segment: Segment,
        mono_anchor: (u64, f64),
        slew_ppm: f64,
        last: u64,
    }

    impl Sim {
        fn new(calibration_ppm: f64, slew_ppm: f64) -> Self {
            let baseline = Baseline {
                raw: 1_000_000,
                mono: 5_000_000_000,
                calibrated_rate: (1.0 / 3.0) * (1.0 + calibration_ppm * 1e-6),
            };
            Sim {
                segment: baseline.first(),
                mono_anchor: (baseline.raw, baseline.mono as f64),
                baseline,
                slew_ppm,
                last: 0,
            }
        }
        fn mono_at(&self, raw: u64) -> u64 {
            let (raw0, mono0) = self.mono_anchor;
            (mono0 + (raw - raw0) as f64 / 3.0 * (1.0 + self.slew_ppm * 1e-6)) as u64
        }
        /// NTP changes CLOCK_MONOTONIC's rate at `raw`.
        fn set_slew(&mut self, raw: u64, slew_ppm: f64) {
            self.mono_anchor = (raw, self.mono_at(raw) as f64);
            self.slew_ppm = slew_ppm;
        }
        /// Reads the clock at `raw`, advancing the segment as `now_ns` does; checks monotony.
        fn read(&mut self, raw: u64) -> u64 {
            if raw >= self.segment.next_check {
                self.segment = self.baseline.next(&self.segment, raw, self.mono_at(raw));
            }
            let t = self.segment.at(raw);
            assert!(t >= self.last, "time went back: {} then {t}", self.last);
            self.last = t;
            t
        }
        fn error_at(&mut self, raw: u64) -> i64 {
            self.read(raw) as i64 - self.mono_at(raw) as i64
        }
    }

    const MS: u64 = 3_000_000; // ticks per ms at 3 GHz

    #[test]
    fn a_miscalibrated_tsc_stays_on_clock_monotonic() {
        for (calibration_ppm, slew_ppm) in [(6.0, 0.0), (-6.0, 0.0), (3.0, 40.0), (0.0, -80.0)] {
            let mut sim = Sim::new(calibration_ppm, slew_ppm);
            let start = sim.baseline.raw;
            let mut worst_late = 0i64;
            for ms in 1..=600_000u64 {
                let error = sim.error_at(start + ms * MS);
                if ms > 5_000 {
                    worst_late = worst_late.max(error.abs());
                }
            }
            assert!(
                worst_late < 2_000,
                "{calibration_ppm} ppm calibration, {slew_ppm} ppm slew: off by {worst_late} ns"
            );
        }
    }

    #[test]
    fn after_a_long_idle_time_is_slewed_back_not_stepped() {
        let mut sim = Sim::new(6.0, 20.0);
        let start = sim.baseline.raw;
        for ms in 1..=3_000u64 {
            sim.read(start + ms * MS);
        }
        // An hour without a read, during which NTP moved CLOCK_MONOTONIC's rate by 5 ppm: the
        // next read extrapolates the old slope (18 ms off), then the error is slewed away.
        sim.set_slew(start + 3_001 * MS, 25.0);
        let after_idle = start + 3_600_000 * MS;
        let off = sim.error_at(after_idle);
        assert!(off.abs() > 10_000_000, "the idle hour left {off} ns");
        let t1 = sim.read(after_idle + MS);
        let t0 = sim.segment.at(after_idle);
        let one_ms = (t1 - t0) as f64;
        assert!(
            (one_ms / 1e6 - 1.0).abs() < 600e-6,
            "while slewing, one ms reads as {one_ms} ns"
        );
        let converged_at = (2..=120_000u64)
            .find(|ms| sim.error_at(after_idle + ms * MS).abs() < 2_000)
            .expect("never back on CLOCK_MONOTONIC");
        assert!(
            converged_at > 30_000,
            "slewed faster than 500 ppm: {converged_at} ms"
        );
        for ms in converged_at..converged_at + 10_000 {
            let error = sim.error_at(after_idle + ms * MS);
            assert!(error.abs() < 2_000, "off again by {error} ns at {ms} ms");
        }
    }

    #[test]
    fn a_reading_from_a_lagging_core_is_before_the_segment_start() {
        let s = Segment {
            raw0: 3_000,
            ns0: 1_000_000,
            mult: 1 << 32,
            next_check: 10_000,
        };
        assert_eq!(s.at(3_500), 1_000_500);
        assert_eq!(s.at(2_900), 999_900);
    }

    #[test]
    fn a_new_segment_starts_where_the_live_one_is_when_it_is_published() {
        let live = Segment {
            raw0: 0,
            ns0: 1_000,
            mult: 2 << 32,
            next_check: 100,
        };
        let published = Published::new(&live);
        let plan = |l: &Segment| Segment {
            raw0: 100,
            ns0: l.at(100),
            mult: 3 << 32,
            next_check: 300,
        };
        published.advance(&live, plan, || 150);
        let (next, _) = published.read(|| 0);
        assert_eq!(next.raw0, 150);
        assert_eq!(next.ns0, live.at(150)); // continuous: 1_000 + 2 × 150
        assert_eq!((next.mult, next.next_check), (3 << 32, 350));
        // A thread holding an outdated segment does not advance again.
        published.advance(&live, |_| unreachable!("already advanced"), || 0);
    }

    #[test]
    fn readers_see_whole_segments_while_one_thread_advances() {
        let first = Segment {
            raw0: 0,
            ns0: 0,
            mult: 1 << 32,
            next_check: 0,
        };
        let published = std::sync::Arc::new(Published::new(&first));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let reader = {
            let (published, stop) = (published.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (s, _) = published.read(|| 0);
                    // Every published segment has raw0 = ns0 = next_check (the plan's raw0
                    // and `raw()` agree below) and the same slope.
                    assert!(s.raw0 == s.ns0 && s.ns0 == s.next_check && s.mult == 1 << 32);
                }
            })
        };
        for i in 1..=100_000u64 {
            let (current, _) = published.read(|| 0);
            let plan = |_: &Segment| Segment {
                raw0: i,
                ns0: i,
                mult: 1 << 32,
                next_check: i,
            };
            published.advance(&current, plan, || i);
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        assert_eq!(published.read(|| 0).0.raw0, 100_000);
    }
}

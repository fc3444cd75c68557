//! Time: integer nanoseconds on the CLOCK_MONOTONIC time base, precise sleeping, and a manual
//! clock that tests advance by hand.
//!
//! Reading the clock is the largest per-message cost of the recorder (one read per completion):
//! `clock_gettime` costs ~35 ns here, the TSC read ~23 ns (`cargo bench -p msgbench-engine
//! --bench recorder -- clock`; the `clock_cost` floor gave 21 and 9 ns on a quieter day). So [`now_ns`]
//! reads the TSC through `quanta` (which falls back to CLOCK_MONOTONIC itself where the CPU has
//! no invariant TSC) and turns it into CLOCK_MONOTONIC nanoseconds with a slope that is
//! corrected every 100 ms ([`timebase`]), so values stay comparable with other processes'
//! CLOCK_MONOTONIC stamps (a separate `serve ticks`, a Node.js feed) for as long as they run.
//! Sleeps are relative (`remaining - spin`), so a correction never shifts a deadline.
mod timebase;

use std::cell::Cell;
use std::sync::OnceLock;

/// A source of time the pacer can read and sleep on.
pub trait Clock {
    /// Current time in ns.
    fn now_ns(&self) -> u64;
    /// Sleeps until `deadline_ns` (absolute) and returns the time observed on waking (≥ deadline).
    fn sleep_until(&self, deadline_ns: u64) -> u64;
    /// Sleeps for `ns` relative to now, as `usleep` does (no spin, no catch-up); returns the time
    /// observed on waking.
    fn sleep_relative(&self, ns: u64) -> u64;
}

struct Timebase {
    clock: quanta::Clock,
    baseline: timebase::Baseline,
    published: timebase::Published,
}

static TIMEBASE: OnceLock<Timebase> = OnceLock::new();

fn timebase() -> &'static Timebase {
    TIMEBASE.get_or_init(|| {
        let clock = quanta::Clock::new();
        let (raw, mono) = paired_reading(&clock);
        // The calibration's rate, ns per tick: what quanta scales 2^32 ticks to, over 2^32.
        let calibrated_rate = clock.delta_as_nanos(0, 1 << 32) as f64 / 4_294_967_296.0;
        let baseline = timebase::Baseline {
            raw,
            mono,
            calibrated_rate,
        };
        Timebase {
            published: timebase::Published::new(&baseline.first()),
            baseline,
            clock,
        }
    })
}

/// A TSC reading and the CLOCK_MONOTONIC reading taken with it: the TSC read on both sides,
/// the tightest of a few tries (an interrupt between the reads would skew the pair; a try
/// whose second TSC reading is the lower, from a thread moved between cores, is not taken).
fn paired_reading(clock: &quanta::Clock) -> (u64, u64) {
    let mut best = None;
    for _ in 0..5 {
        let before = clock.raw();
        let mono = monotonic_ns();
        let after = clock.raw();
        let Some(width) = after.checked_sub(before) else {
            continue;
        };
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, before + width / 2, mono));
        }
    }
    best.map_or_else(
        || (clock.raw(), monotonic_ns()),
        |(_, raw, mono)| (raw, mono),
    )
}

/// Current time in ns on the CLOCK_MONOTONIC time base (TSC-backed: 23–27 ns here, against
/// ~35 ns for `clock_gettime`; `cargo bench -p msgbench-engine --bench recorder -- clock`).
#[inline]
pub fn now_ns() -> u64 {
    let t = timebase();
    let (segment, raw) = t.published.read(|| t.clock.raw());
    if raw < segment.next_check {
        return segment.at(raw);
    }
    correct_slope(t, &segment);
    let (segment, raw) = t.published.read(|| t.clock.raw());
    segment.at(raw)
}

/// Starts the next segment of the time function (once per period, by whichever thread reads
/// the clock first after it ends).
#[cold]
#[inline(never)]
fn correct_slope(t: &Timebase, current: &timebase::Segment) {
    let plan = |live: &timebase::Segment| {
        let (raw, mono) = paired_reading(&t.clock);
        t.baseline.next(live, raw, mono)
    };
    t.published.advance(current, plan, || t.clock.raw());
}

/// The wall clock, Unix ns (for agreeing on a start with other hosts; never for latency).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Unix ns − this clock's ns, for moving a wall-clock stamp onto this clock. Each sample
/// brackets one wall-clock read between two of this clock's and takes their midpoint; the
/// tightest of 16 is kept. Read once as "wall, then this clock", a preemption between the two
/// reads made every converted stamp that much later: a feed's ms stamps then counted
/// deliveries "before their intended send time" (123 of 494k, by up to 5 µs, seen on the
/// project's own Node feed).
pub fn wall_minus_now_ns() -> i128 {
    let mut best = (u64::MAX, 0i128);
    for _ in 0..16 {
        let before = now_ns();
        let wall = unix_ns();
        let after = now_ns();
        let width = after.saturating_sub(before);
        if width < best.0 {
            let middle = before as i128 + (width / 2) as i128;
            best = (width, wall as i128 - middle);
        }
    }
    best.1
}

/// Calibrates the clock now rather than inside the first measured run.
pub fn calibrate() {
    timebase();
}

/// Reads CLOCK_MONOTONIC itself (vDSO, ~20 ns).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The real clock. Sleeps (relative `clock_nanosleep`) until `spin_ns` before the deadline,
/// then spins: kernel wake-ups are late by tens of µs (see the `timer_accuracy` floor),
/// so sleeping alone cannot hold a sub-millisecond schedule.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    /// How long before a deadline to stop sleeping and spin.
    pub spin_ns: u64,
}

impl MonotonicClock {
    /// A clock that spins the last `spin_ns` before each deadline.
    pub fn new(spin_ns: u64) -> Self {
        MonotonicClock { spin_ns }
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        now_ns()
    }

    #[inline]
    fn sleep_until(&self, deadline_ns: u64) -> u64 {
        let mut now = now_ns();
        if now >= deadline_ns {
            return now;
        }
        if deadline_ns - now > self.spin_ns {
            sleep_relative_ns(deadline_ns - now - self.spin_ns);
        }
        loop {
            now = now_ns();
            if now >= deadline_ns {
                return now;
            }
            std::hint::spin_loop();
        }
    }

    fn sleep_relative(&self, ns: u64) -> u64 {
        std::thread::sleep(std::time::Duration::from_nanos(ns));
        now_ns()
    }
}

fn sleep_relative_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec; a null remainder is allowed. EINTR just returns early, and the
    // caller spins to the deadline anyway.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
}

/// Lowers this thread's timer slack to 1 ns, so sleeps are not rounded up by the default 50 µs.
pub fn lower_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer; it only affects the calling thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// A clock that only moves when told to, or when something sleeps on it.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Cell<u64>,
    /// Extra lateness added to every relative sleep (to model wake-up latency).
    pub relative_oversleep_ns: u64,
}

impl ManualClock {
    /// A clock starting at `start_ns`.
    pub fn starting_at(start_ns: u64) -> Self {
        ManualClock {
            now: Cell::new(start_ns),
            relative_oversleep_ns: 0,
        }
    }
    /// Moves time forward.
    pub fn advance(&self, ns: u64) {
        self.now.set(self.now.get() + ns);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn sleep_until(&self, deadline_ns: u64) -> u64 {
        if deadline_ns > self.now.get() {
            self.now.set(deadline_ns);
        }
        self.now.get()
    }
    fn sleep_relative(&self, ns: u64) -> u64 {
        self.advance(ns + self.relative_oversleep_ns);
        self.now.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_clock_offset_moves_a_wall_stamp_onto_this_clock() {
        // Two readings agree, and a wall-clock stamp taken now lands now (within a
        // millisecond: the bound is loose on purpose, the host may be busy).
        let offset = wall_minus_now_ns();
        assert!((offset - wall_minus_now_ns()).abs() < 1_000_000);
        let stamp = unix_ns() as i128 - offset;
        assert!((stamp - now_ns() as i128).abs() < 1_000_000);
    }

    #[test]
    fn monotonic_clock_never_wakes_early() {
        let clock = MonotonicClock::new(50_000);
        for step in [0u64, 10_000, 200_000] {
            let deadline = now_ns() + step;
            assert!(clock.sleep_until(deadline) >= deadline);
        }
    }

    #[test]
    fn tsc_clock_follows_clock_monotonic() {
        let (a, m0) = (now_ns(), monotonic_ns());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, m1) = (now_ns(), monotonic_ns());
        let (tsc, mono) = ((b - a) as f64, (m1 - m0) as f64);
        assert!(
            (tsc - mono).abs() < 0.01 * mono + 200_000.0,
            "tsc {tsc} vs monotonic {mono}"
        );
        assert!(
            a.abs_diff(m0) < 50_000_000,
            "time bases differ: {a} vs {m0}"
        );
    }

    #[test]
    fn manual_clock_sleeps_by_jumping() {
        let c = ManualClock::starting_at(100);
        assert_eq!(c.sleep_until(50), 100);
        assert_eq!(c.sleep_until(500), 500);
        assert_eq!(c.sleep_relative(10), 510);
    }
}

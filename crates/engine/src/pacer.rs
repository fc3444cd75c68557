//! The pacer decides *when* each message is meant to be sent and waits until then.
//!
//! Absolute schedules (`interval`, `rate`) compute the n-th send time from the start
//! (`start + n/rate`), never from the previous send, so a late wake-up does not shift every later
//! message: the lag is visible (send lag = actual − scheduled) and the latency of a late message
//! still counts from its scheduled time (coordinated-omission correction). `relative` sleeping
//! (`usleep(every)` after each batch) is there to reproduce the drift trap on purpose: its
//! latency counts from the wake-up, as the naive benchmark did, but its send lag is measured
//! against the nominal schedule, so the drift shows.
use crate::clock::Clock;
use msgbench_model::pacing::{Arrivals, Pacing};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// When one message was meant to go and when it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Time latency is measured from.
    pub intended_ns: u64,
    /// Time the schedule called for (send lag = actual − scheduled).
    pub scheduled_ns: u64,
    /// Time the pacer let the message go.
    pub actual_ns: u64,
}

/// Generates send slots for one sender.
#[derive(Debug)]
pub struct Pacer {
    pacing: Pacing,
    start_ns: u64,
    sent: u64,
    tick: u64,
    batch_left: u32,
    tick_ns: u64,
    poisson_offset_ns: f64,
    /// `stages`: the whole schedule's count (Λ) at which this sender's next message is due.
    stage_count: f64,
    /// `stages`: the due time of the message at `stage_count`, once computed (Λ⁻¹ walks the
    /// stages, and the driver asks for it several times per send).
    stage_due_ns: Option<u64>,
    rng: SmallRng,
}

impl Pacer {
    /// A pacer whose schedule starts at `start_ns`; `seed` fixes Poisson arrivals.
    pub fn new(pacing: Pacing, start_ns: u64, seed: u64) -> Pacer {
        let stage_count = match pacing {
            // Uniform: messages index, index + of, …; Poisson: from the start.
            Pacing::Stages(p) if p.arrivals == Arrivals::Uniform => p.part.0 as f64,
            _ => 0.0,
        };
        Pacer {
            stage_count,
            stage_due_ns: None,
            pacing,
            start_ns,
            sent: 0,
            tick: 0,
            batch_left: 0,
            tick_ns: start_ns,
            poisson_offset_ns: 0.0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The scheduled time of the next message when the schedule fixes it in advance (`None` for
    /// `immediate`, which depends on when the sender gets there; for `relative`, the earliest
    /// time the next batch can go, since its sleep starts after the previous batch).
    pub fn upcoming_ns(&mut self) -> Option<u64> {
        match self.pacing {
            Pacing::Immediate | Pacing::ClosedLoop => None,
            Pacing::Relative { .. } if self.batch_left > 0 => Some(self.tick_ns),
            Pacing::Relative { .. } if self.tick == 0 => Some(self.start_ns),
            Pacing::Relative { every_ns, .. } => Some(self.tick_ns.saturating_add(every_ns)),
            Pacing::Interval { every_ns, .. } => Some(if self.batch_left > 0 {
                self.tick_ns
            } else {
                self.start_ns + self.tick * every_ns
            }),
            Pacing::Rate { per_sec, arrivals } => {
                Some(self.start_ns + self.rate_offset_ns(per_sec, arrivals) as u64)
            }
            Pacing::Stages(_) => Some(self.stage_due()),
        }
    }

    /// Waits until the next message is due and returns its slot.
    #[inline]
    pub fn next<C: Clock>(&mut self, clock: &C) -> Slot {
        let slot = match self.pacing {
            Pacing::Immediate | Pacing::ClosedLoop => {
                let now = clock.now_ns();
                Slot {
                    intended_ns: now,
                    scheduled_ns: now,
                    actual_ns: now,
                }
            }
            Pacing::Interval { every_ns, batch } => {
                if self.batch_left == 0 {
                    self.tick_ns = self.start_ns + self.tick * every_ns;
                    self.tick += 1;
                    self.batch_left = batch;
                }
                self.batch_left -= 1;
                let actual = clock.sleep_until(self.tick_ns);
                Slot {
                    intended_ns: self.tick_ns,
                    scheduled_ns: self.tick_ns,
                    actual_ns: actual,
                }
            }
            Pacing::Rate { per_sec, arrivals } => {
                let scheduled = self.start_ns + self.rate_offset_ns(per_sec, arrivals) as u64;
                if arrivals == Arrivals::Poisson {
                    self.poisson_offset_ns += self.exponential_gap_ns(per_sec);
                }
                let actual = clock.sleep_until(scheduled);
                Slot {
                    intended_ns: scheduled,
                    scheduled_ns: scheduled,
                    actual_ns: actual,
                }
            }
            Pacing::Stages(_) => {
                let scheduled = self.stage_due();
                self.stage_due_ns = None;
                let Pacing::Stages(p) = &self.pacing else {
                    unreachable!("a stages pacing")
                };
                self.stage_count += match p.arrivals {
                    Arrivals::Uniform => p.part.1 as f64,
                    // Its part of the arrivals: an `of`-th of the rate, so gaps `of` times
                    // longer in the whole schedule's count.
                    Arrivals::Poisson => p.part.1 as f64 * -(1.0 - self.rng.gen::<f64>()).ln(),
                };
                let actual = clock.sleep_until(scheduled);
                Slot {
                    intended_ns: scheduled,
                    scheduled_ns: scheduled,
                    actual_ns: actual,
                }
            }
            Pacing::Relative { every_ns, batch } => {
                if self.batch_left == 0 {
                    self.tick_ns = if self.tick == 0 {
                        clock.sleep_until(self.start_ns)
                    } else {
                        clock.sleep_relative(every_ns)
                    };
                    self.tick += 1;
                    self.batch_left = batch;
                }
                self.batch_left -= 1;
                let nominal = self.start_ns + (self.tick - 1) * every_ns;
                let actual = clock.now_ns();
                Slot {
                    intended_ns: self.tick_ns,
                    scheduled_ns: nominal,
                    actual_ns: actual,
                }
            }
        };
        self.sent += 1;
        slot
    }

    /// `stages`: when the message at `stage_count` is due (`u64::MAX` once the rate has
    /// fallen to 0 for good: nothing more, ever).
    fn stage_due(&mut self) -> u64 {
        if let Some(due) = self.stage_due_ns {
            return due;
        }
        let Pacing::Stages(p) = &self.pacing else {
            unreachable!("a stages pacing")
        };
        let due =
            (p.time_of(self.stage_count)).map_or(u64::MAX, |t| self.start_ns.saturating_add(t));
        self.stage_due_ns = Some(due);
        due
    }

    fn rate_offset_ns(&mut self, per_sec: f64, arrivals: Arrivals) -> f64 {
        match arrivals {
            Arrivals::Uniform => self.sent as f64 * 1e9 / per_sec,
            Arrivals::Poisson => self.poisson_offset_ns,
        }
    }

    fn exponential_gap_ns(&mut self, per_sec: f64) -> f64 {
        let u: f64 = self.rng.gen::<f64>();
        -(1.0 - u).ln() * 1e9 / per_sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn slots(pacing: Pacing, clock: &ManualClock, n: usize) -> Vec<Slot> {
        let mut p = Pacer::new(pacing, 1_000, 7);
        (0..n).map(|_| p.next(clock)).collect()
    }

    #[test]
    fn interval_sends_batches_on_an_absolute_grid() {
        let clock = ManualClock::starting_at(1_000);
        let s = slots(
            Pacing::Interval {
                every_ns: 100,
                batch: 2,
            },
            &clock,
            6,
        );
        let intended: Vec<u64> = s.iter().map(|s| s.intended_ns).collect();
        assert_eq!(intended, [1_000, 1_000, 1_100, 1_100, 1_200, 1_200]);
        assert!(s.iter().all(|s| s.actual_ns == s.intended_ns));
    }

    #[test]
    fn a_late_sender_keeps_the_schedule_and_shows_the_lag() {
        let clock = ManualClock::starting_at(1_000);
        let mut p = Pacer::new(
            Pacing::Rate {
                per_sec: 1e7,
                arrivals: Arrivals::Uniform,
            },
            1_000,
            1,
        );
        assert_eq!(p.next(&clock).intended_ns, 1_000);
        clock.advance(1_000); // the sender stalls for 1 µs: ten slots are due
        let late = p.next(&clock);
        assert_eq!((late.intended_ns, late.actual_ns), (1_100, 2_000));
        let slots: Vec<Slot> = (0..9).map(|_| p.next(&clock)).collect();
        assert_eq!(slots.last().unwrap().intended_ns, 2_000);
        assert_eq!(p.next(&clock).actual_ns, 2_100);
    }

    #[test]
    fn rate_counts_are_exact() {
        let clock = ManualClock::starting_at(0);
        let mut p = Pacer::new(
            Pacing::Rate {
                per_sec: 1_000.0,
                arrivals: Arrivals::Uniform,
            },
            0,
            1,
        );
        let mut count = 0;
        while p.upcoming_ns().unwrap() < 1_000_000_000 {
            p.next(&clock);
            count += 1;
        }
        assert_eq!(count, 1_000);
        assert_eq!(clock.now_ns(), 999_000_000);
    }

    #[test]
    fn poisson_has_the_right_mean_and_is_seeded() {
        let clock = ManualClock::starting_at(0);
        let a = slots(
            Pacing::Rate {
                per_sec: 1e6,
                arrivals: Arrivals::Poisson,
            },
            &clock,
            20_000,
        );
        let clock = ManualClock::starting_at(0);
        let b = slots(
            Pacing::Rate {
                per_sec: 1e6,
                arrivals: Arrivals::Poisson,
            },
            &clock,
            20_000,
        );
        assert_eq!(a, b);
        let mean_gap = (a.last().unwrap().intended_ns - a[0].intended_ns) as f64 / 19_999.0;
        assert!((mean_gap - 1_000.0).abs() < 30.0, "mean gap {mean_gap}");
    }

    #[test]
    fn relative_sleeping_drifts_and_the_lag_shows_it() {
        let mut clock = ManualClock::starting_at(0);
        clock.relative_oversleep_ns = 50; // every wake-up is 50 ns late
        let s = slots(
            Pacing::Relative {
                every_ns: 1_000,
                batch: 1,
            },
            &clock,
            11,
        );
        assert_eq!(s[10].scheduled_ns, 11_000);
        assert_eq!(s[10].actual_ns - s[10].scheduled_ns, 10 * 50);
        assert_eq!(
            s[10].intended_ns, s[10].actual_ns,
            "latency counts from the wake-up, as the naive loop did"
        );
    }
}

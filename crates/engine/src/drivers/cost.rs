//! A subscriber's simulated per-message cost, shared by the tick clients and the pubsub
//! subscribers: spun (`busy`) or accounted in virtual time and slept off (`sleep`).
use crate::clock::now_ns;
use msgbench_model::ticks::CostWork;
use std::time::Duration;

/// What one message costs a subscriber, and when its simulated processing ends.
#[derive(Debug, Clone)]
pub struct Cost {
    cost_ns: u64,
    work: CostWork,
    /// Sleep-work: when the simulated processing of the last message ends.
    virtual_ns: u64,
}

impl Cost {
    /// `cost_ns` per message, spent as `work`.
    pub fn new(cost_ns: u64, work: CostWork) -> Cost {
        Cost {
            cost_ns,
            work,
            virtual_ns: 0,
        }
    }

    /// Spends the cost of one message; returns when it counts as processed.
    #[inline]
    pub fn spend(&mut self) -> u64 {
        let now = now_ns();
        if self.cost_ns == 0 {
            return now;
        }
        match self.work {
            CostWork::Busy => {
                let until = now + self.cost_ns;
                let mut t = now;
                while t < until {
                    std::hint::spin_loop();
                    t = now_ns();
                }
                t
            }
            CostWork::Sleep => {
                // A processor that takes `cost` per message, without burning the CPU: the
                // message is done when its predecessors and its own cost are; the thread
                // sleeps once that time runs more than a millisecond ahead of the clock.
                self.virtual_ns = self.virtual_ns.max(now) + self.cost_ns;
                if self.virtual_ns > now + 1_000_000 {
                    std::thread::sleep(Duration::from_nanos(self.virtual_ns - now));
                }
                self.virtual_ns
            }
        }
    }
}

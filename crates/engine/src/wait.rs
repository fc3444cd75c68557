//! How a thread waits for the other side of a ring: spin, yield, park, or a backoff through
//! all three.
//!
//! Parking needs a wake-up from the other side. The sleeper raises its `sleeping` flag, checks the
//! ring once more, then parks; the waker, after changing the ring, issues a SeqCst fence and
//! unparks only if the flag is up. Without the fence the waker's flag load could be ordered
//! before its ring store and a wake-up would be lost (then `PARK_TIMEOUT` bounds the damage). The
//! fence is paid only when the other side may park.
use msgbench_model::queue::WaitStrategy;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::Duration;

/// Upper bound of one park, in case a wake-up is lost anyway.
pub const PARK_TIMEOUT: Duration = Duration::from_millis(1);
const BACKOFF_SPINS: u32 = 128;
const BACKOFF_YIELDS: u32 = 64;

/// A thread that may park, and the flag that says it does.
#[derive(Debug)]
pub struct Sleeper {
    sleeping: AtomicBool,
    thread: Thread,
}

impl Sleeper {
    /// The calling thread as a sleeper.
    pub fn current() -> Arc<Sleeper> {
        Arc::new(Sleeper {
            sleeping: AtomicBool::new(false),
            thread: std::thread::current(),
        })
    }

    /// Wakes the sleeper if it sleeps. Call after making progress it may wait for.
    #[inline]
    pub fn wake(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.thread.unpark();
        }
    }
}

/// The waiting state of one thread.
#[derive(Debug)]
pub struct Waiter {
    strategy: WaitStrategy,
    idle_rounds: u32,
    me: Arc<Sleeper>,
}

impl Waiter {
    /// A waiter for the calling thread.
    pub fn new(strategy: WaitStrategy) -> Waiter {
        Waiter {
            strategy,
            idle_rounds: 0,
            me: Sleeper::current(),
        }
    }

    /// The handle the other side uses to wake this thread.
    pub fn sleeper(&self) -> Arc<Sleeper> {
        self.me.clone()
    }

    /// True when this strategy may park (so the other side must call [`Sleeper::wake`]).
    pub fn may_park(strategy: WaitStrategy) -> bool {
        matches!(strategy, WaitStrategy::Park | WaitStrategy::Backoff)
    }

    /// Call after progress: the next idle round starts the backoff from the beginning.
    #[inline]
    pub fn progressed(&mut self) {
        self.idle_rounds = 0;
    }

    /// Waits a little; `ready` re-checks the condition before parking.
    #[inline]
    pub fn idle(&mut self, ready: impl FnOnce() -> bool) {
        self.idle_at_most(ready, PARK_TIMEOUT);
    }

    /// Waits a little, parking for at most `limit` (a deadline of the caller's own, such as
    /// its next send, must not be overslept).
    #[inline]
    pub fn idle_at_most(&mut self, ready: impl FnOnce() -> bool, limit: Duration) {
        self.idle_rounds = self.idle_rounds.saturating_add(1);
        match self.strategy {
            WaitStrategy::BusySpin => std::hint::spin_loop(),
            WaitStrategy::Yield => std::thread::yield_now(),
            WaitStrategy::Park => self.park(ready, limit),
            WaitStrategy::Backoff if self.idle_rounds <= BACKOFF_SPINS => std::hint::spin_loop(),
            WaitStrategy::Backoff if self.idle_rounds <= BACKOFF_SPINS + BACKOFF_YIELDS => {
                std::thread::yield_now()
            }
            WaitStrategy::Backoff => self.park(ready, limit),
        }
    }

    #[cold]
    fn park(&mut self, ready: impl FnOnce() -> bool, limit: Duration) {
        self.me.sleeping.store(true, Ordering::SeqCst);
        // Pairs with the waker's fence: either it sees our flag or we see its progress.
        fence(Ordering::SeqCst);
        if !ready() {
            std::thread::park_timeout(limit.min(PARK_TIMEOUT));
        }
        self.me.sleeping.store(false, Ordering::Relaxed);
    }
}

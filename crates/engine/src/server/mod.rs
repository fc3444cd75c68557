//! Built-in servers: systems under test msgbench ships, started in-process by a scenario or
//! standalone with `msgbench serve`.
pub mod rpc;
pub mod ticks;
pub mod ws;
pub mod ws_rpc;

/// CPU time of a thread of this process, readable from any other thread (through
/// `pthread_getcpuclockid`), in ns. Lets a run measure a server thread's CPU over its own window.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpuClock(libc::clockid_t);

impl ThreadCpuClock {
    /// The calling thread's CPU clock.
    pub fn current() -> Option<ThreadCpuClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_self is always valid; `id` is writable.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        (rc == 0).then_some(ThreadCpuClock(id))
    }

    /// CPU time so far, ns (0 once the thread has exited).
    pub fn read_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec; an invalid clock id just returns an error.
        if unsafe { libc::clock_gettime(self.0, &mut ts) } != 0 {
            return 0;
        }
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

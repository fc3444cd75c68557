//! CPU accounting from the kernel: `getrusage` for user/sys time and context switches (per
//! thread with `RUSAGE_THREAD`), `/proc/thread-self/sched` for migrations,
//! `/proc/thread-self/schedstat` for the time spent waiting for a CPU. Read at the edges of the
//! measured window only, never per message.
use msgbench_model::result::CpuTimes;

/// A reading of CPU counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuSnapshot {
    user_us: i64,
    sys_us: i64,
    voluntary: i64,
    involuntary: i64,
    migrations: Option<u64>,
    /// ns runnable but not running (schedstat's second field).
    run_delay_ns: Option<u64>,
}

impl CpuSnapshot {
    /// The calling thread's counters.
    pub fn thread() -> CpuSnapshot {
        let mut s = read(libc::RUSAGE_THREAD);
        s.migrations = read_migrations("/proc/thread-self/sched");
        s.run_delay_ns = read_run_delay("/proc/thread-self/schedstat");
        s
    }

    /// The whole process's counters.
    pub fn process() -> CpuSnapshot {
        read(libc::RUSAGE_SELF)
    }

    /// What was used from `earlier` to `self`.
    pub fn since(&self, earlier: &CpuSnapshot) -> CpuTimes {
        CpuTimes {
            user_s: (self.user_us - earlier.user_us) as f64 / 1e6,
            sys_s: (self.sys_us - earlier.sys_us) as f64 / 1e6,
            ctx_switches_voluntary: (self.voluntary - earlier.voluntary).max(0) as u64,
            ctx_switches_involuntary: (self.involuntary - earlier.involuntary).max(0) as u64,
            migrations: match (self.migrations, earlier.migrations) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
            cpu_wait_s: match (self.run_delay_ns, earlier.run_delay_ns) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b) as f64 / 1e9),
                _ => None,
            },
        }
    }
}

fn read(who: libc::c_int) -> CpuSnapshot {
    // SAFETY: an all-zero rusage is a valid value, and getrusage only writes into it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage; `who` is RUSAGE_SELF or RUSAGE_THREAD.
    unsafe { libc::getrusage(who, &mut u) };
    CpuSnapshot {
        user_us: u.ru_utime.tv_sec * 1_000_000 + u.ru_utime.tv_usec,
        sys_us: u.ru_stime.tv_sec * 1_000_000 + u.ru_stime.tv_usec,
        voluntary: u.ru_nvcsw,
        involuntary: u.ru_nivcsw,
        migrations: None,
        run_delay_ns: None,
    }
}

/// The run delay (ns waiting on a run queue) from a `/proc/.../schedstat` file: its second
/// field (absent on kernels without CONFIG_SCHED_INFO).
fn read_run_delay(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// `se.nr_migrations` from a `/proc/.../sched` file (absent on kernels without CONFIG_SCHED_DEBUG).
fn read_migrations(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with("se.nr_migrations"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_shows_up_as_user_time() {
        let before = CpuSnapshot::thread();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 50 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let used = CpuSnapshot::thread().since(&before);
        assert!(x > 0);
        assert!(used.total_s() > 0.02, "{used:?}");
    }
}

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

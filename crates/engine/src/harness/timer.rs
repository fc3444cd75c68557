//! A `timerfd` registered with a `mio::Poll`, so an event loop can sleep until a deadline with
//! nanosecond resolution. (`epoll_wait`'s own timeout, which mio
//! uses, is rounded up to whole milliseconds: far too coarse for pacing at microsecond gaps.)
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A non-blocking CLOCK_MONOTONIC timerfd.
fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the returned fd is checked and then owned.
    let fd = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh, valid descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Arms timerfd `fd` to fire once, `wait_ns` (> 0) from now.
fn arm_in(fd: std::os::fd::RawFd, wait_ns: u64) {
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (wait_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (wait_ns % 1_000_000_000) as libc::c_long,
        },
    };
    // SAFETY: a valid timerfd and spec; the old value is not requested.
    unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) };
}

/// Consumes timerfd `fd`'s expiration, if it fired: true when it had.
fn take_expiration(fd: std::os::fd::RawFd) -> bool {
    let mut buf = [0u8; 8];
    // SAFETY: reading 8 bytes into an 8-byte buffer from our own non-blocking fd.
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) == 8 }
}

/// Whether a timer armed for `armed_ns` (0: not armed) fires in time for `deadline_ns`: from
/// `now_ns` up to it (early is fine: the loop looks again and arms it anew).
fn armed_in_time(armed_ns: u64, now_ns: u64, deadline_ns: u64) -> bool {
    armed_ns != 0 && (now_ns..=deadline_ns).contains(&armed_ns)
}

/// A one-shot absolute timer.
pub struct Timer {
    fd: OwnedFd,
    armed_ns: u64,
}

impl Timer {
    /// A disarmed timer registered with `registry` under `token`.
    pub fn new(registry: &Registry, token: Token) -> io::Result<Timer> {
        let fd = timerfd()?;
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(Timer { fd, armed_ns: 0 })
    }

    /// Fires at `deadline_ns` on [`crate::clock::now_ns`]'s timeline. Armed relative to now:
    /// the TSC-derived clock and CLOCK_MONOTONIC may drift apart by many µs over a run, so an
    /// absolute kernel deadline could fire late. Re-arming for the same deadline is free.
    pub fn arm(&mut self, deadline_ns: u64) {
        if deadline_ns == self.armed_ns {
            return;
        }
        self.armed_ns = deadline_ns;
        // A zero it_value would disarm: wait at least 1 ns.
        let wait = deadline_ns.saturating_sub(crate::clock::now_ns()).max(1);
        arm_in(self.fd.as_raw_fd(), wait);
    }

    /// Fires at `deadline_ns` or before: a timer already armed for a time from `now_ns` up to
    /// the deadline is left as it is (it wakes the loop early, and the loop arms it again).
    /// A loop whose next wake is "now + the stop check" moves its deadline every turn; arming
    /// each turn cost one `timerfd_settime` per request in a closed loop (187k of 850k
    /// syscalls in a 3 s run against nginx), now one per stop check.
    pub fn arm_by(&mut self, deadline_ns: u64, now_ns: u64) {
        if armed_in_time(self.armed_ns, now_ns, deadline_ns) {
            return;
        }
        self.arm(deadline_ns);
    }

    /// Call when its token was readable: consumes the expiration so the fd stops being readable.
    pub fn fired(&mut self) {
        take_expiration(self.fd.as_raw_fd());
        self.armed_ns = 0;
    }
}

/// The same timerfd for a tokio event loop: `sleep_until` resolves at a nanosecond deadline
/// (tokio's own timer wheel has millisecond granularity, too coarse to pace a tick stream).
pub struct AsyncTimer {
    fd: tokio::io::unix::AsyncFd<OwnedFd>,
    /// The deadline [`AsyncTimer::poll_by`] armed it for (0: none; `sleep_until` does not
    /// use it: one timer serves one of the two).
    armed_ns: u64,
}

impl AsyncTimer {
    /// A disarmed timer; call inside a tokio runtime with I/O enabled.
    pub fn new() -> io::Result<AsyncTimer> {
        let fd = timerfd()?;
        // SAFETY: an OwnedFd keeps its descriptor open and unchanged for as long as the
        // AsyncFd owns it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)?;
        Ok(AsyncTimer { fd, armed_ns: 0 })
    }

    /// Waits until `deadline_ns` on [`crate::clock::now_ns`]'s timeline (armed relative to now,
    /// for the reason given on [`Timer::arm`]). Returns at once for a deadline in the past.
    pub async fn sleep_until(&self, deadline_ns: u64) {
        let wait = deadline_ns.saturating_sub(crate::clock::now_ns());
        if wait == 0 {
            return;
        }
        arm_in(self.fd.as_raw_fd(), wait);
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                return;
            };
            if take_expiration(self.fd.as_raw_fd()) {
                return;
            }
            guard.clear_ready();
        }
    }

    /// For an event loop's own future: ready once `deadline_ns` came (or the timer fired for
    /// an earlier deadline: look again); else registers `cx` to be woken then. As
    /// [`Timer::arm_by`], a timer armed for a time from now up to the deadline is left as it
    /// is, so a deadline that moves with every turn costs no `timerfd_settime` per turn.
    pub fn poll_by(
        &mut self,
        cx: &mut std::task::Context<'_>,
        deadline_ns: u64,
    ) -> std::task::Poll<()> {
        use std::task::Poll;
        let now = crate::clock::now_ns();
        if deadline_ns <= now {
            return Poll::Ready(());
        }
        if !armed_in_time(self.armed_ns, now, deadline_ns) {
            arm_in(self.fd.as_raw_fd(), deadline_ns - now);
            self.armed_ns = deadline_ns;
        }
        loop {
            match self.fd.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(mut guard)) => {
                    if take_expiration(self.fd.as_raw_fd()) {
                        self.armed_ns = 0;
                        return Poll::Ready(());
                    }
                    guard.clear_ready();
                }
            }
        }
    }
}

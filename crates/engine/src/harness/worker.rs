//! A measuring thread's preamble, the same for every driver and built-in server: exact sleeps
//! (lowered timer slack), pinning, and the current-thread tokio runtime of WebSocket workers.
use crate::error::EngineError;

/// Prepares the calling thread: lowers its timer slack when `exact_sleeps` (everything but
/// `relative` pacing, which reproduces a plain sleep loop, default slack included), then pins
/// it to `pin`. `role` names the thread in the error.
pub fn prepare(
    role: &'static str,
    pin: Option<usize>,
    exact_sleeps: bool,
) -> Result<(), EngineError> {
    if exact_sleeps {
        crate::clock::lower_timer_slack();
    }
    if let Some(cpu) = pin {
        crate::affinity::pin_current_thread(cpu).map_err(|source| EngineError::Pin {
            role,
            cpu,
            source,
        })?;
    }
    Ok(())
}

/// A single-threaded tokio runtime with I/O and timers, for a thread that owns its sockets.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// The preamble of a built-in server's thread `index`: as [`prepare`], but a server whose
/// pinning is refused says so on stderr and serves unpinned (it may be serving other runs).
pub fn prepare_server(index: usize, pin: Option<usize>) {
    crate::clock::lower_timer_slack();
    if let Some(cpu) = pin {
        if let Err(e) = crate::affinity::pin_current_thread(cpu) {
            eprintln!("msgbench serve: cannot pin server thread {index} to CPU {cpu}: {e}");
        }
    }
}

/// Raises this process's open-file limit to its hard limit and returns the limit now in force.
/// Every connection is a descriptor: under the common soft limit of 1024 a server (or a client
/// with many connections) runs out at ~500 connections and must drop the rest.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct of the right type.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

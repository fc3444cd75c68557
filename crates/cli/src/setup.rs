//! What every command shares before it runs: the machine's limits, Ctrl-C handling, and how a
//! failure is reported (one line on stderr and the exit code).
use crate::EXIT_INTERRUPTED;
use msgbench_model::check::MachineLimits;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Says what failed on stderr and returns the exit code.
pub(crate) fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("msgbench: error: {message}");
    ExitCode::from(code)
}

/// The CPUs this process may run on, for validating pins.
pub(crate) fn machine_limits() -> MachineLimits {
    msgbench_engine::machine_limits()
}

/// Raises `stop` on the first Ctrl-C (saying what happens now), quits on the second.
pub(crate) fn on_ctrl_c(stop: Arc<AtomicBool>, what_happens: &'static str) {
    let _ = ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            std::process::exit(EXIT_INTERRUPTED as i32);
        }
        eprintln!("\nmsgbench: stopping: {what_happens} (Ctrl-C again to quit at once)");
    });
}

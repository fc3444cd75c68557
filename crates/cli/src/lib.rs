//! The `msgbench` command line: parse flags, load the scenario, hand it to the engine, show the
//! results. Exit codes: 0 success, 1 a run or a write failed, 2 bad input, 3 a threshold
//! failed, 4 compare's gate failed, 5 nothing measured to trust, 130 Ctrl-C.
mod args;
mod commands;
mod distributed;
mod live;
mod live_view;
mod serve;
mod setup;
mod slurm;
mod terminal;

pub use args::Cli;
use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;

/// Exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells expect.
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit code of bad input (flags, scenario files).
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code of a run that failed one of its thresholds (`--threshold`, `[report] thresholds`),
/// after every result and report is written.
pub const EXIT_THRESHOLD_FAILED: u8 = 3;
/// Exit code of `compare` when its gate fails (`--fail-on regressed`, `--max-regression`),
/// after the comparison is printed.
pub const EXIT_GATE_FAILED: u8 = 4;
/// Exit code of a run whose results measured nothing to trust — a run that delivered nothing,
/// or (`--strict`) every run invalid — after every result and report is written.
pub const EXIT_NOT_MEASURED: u8 = 5;

/// Runs msgbench with `args` (the first is the program name).
pub fn main_with_args(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_BAD_INPUT } else { 0 });
        }
    };
    msgbench_engine::harness::worker::raise_fd_limit();
    commands::dispatch(cli)
}

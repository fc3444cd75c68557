//! What a person sees while an experiment runs: one line per run start and, on a terminal, a
//! live progress line (elapsed, delivered rate, p99 of the last second, drops), all on stderr so
//! stdout stays clean for the table or `--json`.
use msgbench_engine::runner::{LiveStatus, Observer};
use msgbench_model::result::RunResult;
use msgbench_model::Experiment;
use msgbench_report::format::{count, duration_ns, percent};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;

pub struct Terminal {
    quiet: bool,
    live_line: bool,
    current: Mutex<String>,
}

impl Terminal {
    pub fn new(quiet: bool) -> Terminal {
        Terminal {
            quiet,
            live_line: !quiet && std::io::stderr().is_terminal(),
            current: Mutex::new(String::new()),
        }
    }

    pub fn clear_line(&self) {
        if self.live_line {
            eprint!("\r\x1b[2K");
        }
    }
}

impl Observer for Terminal {
    fn experiment_started(&self, e: &Experiment, dir: &Path) {
        if !self.quiet {
            // A search has no points up front: it decides each step from the last.
            let runs = if e.points.is_empty() {
                "search".to_string()
            } else {
                format!("{} run(s)", e.run_count())
            };
            eprintln!(
                "msgbench: experiment `{}`: {runs}, results in {}",
                e.name,
                dir.display()
            );
        }
    }

    fn run_started(&self, run_id: &str, number: usize, total: usize) {
        let label = if total == 0 {
            format!("[{number}] {run_id}")
        } else {
            format!("[{number}/{total}] {run_id}")
        };
        if !self.quiet && !self.live_line {
            eprintln!("{label}");
        }
        *self.current.lock().unwrap() = label;
    }

    fn live(&self, s: LiveStatus) {
        if self.live_line {
            let head = self.current.lock().unwrap().clone();
            eprint!(
                "\r\x1b[2K{head}  {:.1}s  {}/s  p99 {}  dropped {}",
                s.elapsed_s,
                count(s.delivered_per_sec),
                duration_ns(s.p99_ns),
                count(s.dropped as f64)
            );
            let _ = std::io::stderr().flush();
        }
    }

    fn run_finished(&self, r: &RunResult) {
        if self.live_line {
            let head = self.current.lock().unwrap().clone();
            eprintln!(
                "\r\x1b[2K{head}  {}/s  p99 {}  success {}",
                count(r.delivered_per_sec()),
                duration_ns(r.latency.p99_ns),
                percent(r.counters.success_rate())
            );
        }
    }
}

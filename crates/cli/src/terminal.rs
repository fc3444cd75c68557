//! What a person sees while an experiment runs: one line per run start and, on a terminal, a
//! live progress line (elapsed, delivered rate, p99 of the last second, drops), all on stderr so
//! stdout stays clean for the table or `--json`.
use msgbench_engine::runner::{LiveStatus, Observer};
use msgbench_model::result::RunResult;
use msgbench_model::search::SearchStep;
use msgbench_model::sweep::human_seconds;
use msgbench_model::Experiment;
use msgbench_report::format::{count, duration_ns, percent};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;

/// Columns of the terminal stdout writes to (`None` when it is a file or a pipe: tables keep
/// their natural width for whoever reads them). `COLUMNS` wins when set.
pub fn stdout_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return Some(c);
    }
    // SAFETY: TIOCGWINSZ fills a winsize; a failed call leaves it zeroed.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

pub struct Terminal {
    quiet: bool,
    /// Draw the live view (else the one-line progress).
    view_wanted: bool,
    /// The live view of the run being measured.
    view: Mutex<Option<crate::live_view::LiveView>>,
    live_line: bool,
    current: Mutex<String>,
    /// The experiment, for the time left (none for a search: its steps are not known ahead).
    plan: Mutex<Option<Experiment>>,
}

impl Terminal {
    /// What stderr shows; `view`: the live view instead of the progress line, when it is a
    /// terminal (see [`crate::live_view`]).
    pub fn new(quiet: bool, view: bool) -> Terminal {
        let live_line = !quiet && std::io::stderr().is_terminal();
        Terminal {
            quiet,
            view_wanted: live_line && view,
            view: Mutex::new(None),
            live_line,
            current: Mutex::new(String::new()),
            plan: Mutex::new(None),
        }
    }

    /// The scenario of run `number` (1-based; `None` for a search, whose steps are not planned).
    fn scenario_of(&self, number: usize) -> Option<msgbench_model::Scenario> {
        let plan = self.plan.lock().unwrap();
        let e = plan.as_ref()?;
        let point = (number.checked_sub(1)?) / e.replicates.max(1) as usize;
        e.points.get(point).map(|p| p.scenario.clone())
    }

    /// `, about 1 min 20 s left` from run `number` (1-based) on; empty without a plan.
    fn time_left(&self, number: usize) -> String {
        match &*self.plan.lock().unwrap() {
            Some(e) => format!(
                ", about {} left",
                human_seconds(e.planned_seconds_from(number - 1))
            ),
            None => String::new(),
        }
    }

    /// Clears the progress line, or the live view a run left when it failed.
    pub fn clear_line(&self) {
        if let Some(view) = self.view.lock().unwrap().take() {
            view.finish();
        }
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
                format!(
                    "{} run(s), about {}",
                    e.run_count(),
                    human_seconds(e.planned_seconds_from(0))
                )
            };
            if !e.points.is_empty() {
                *self.plan.lock().unwrap() = Some(e.clone());
            }
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
            format!("[{number}/{total}{}] {run_id}", self.time_left(number))
        };
        if !self.quiet && !self.live_line {
            eprintln!("{label}");
        }
        if self.view_wanted {
            let scenario = self.scenario_of(number);
            // The panel counts its own seconds: no time left fixed at the run's start.
            let head = format!("[{number}/{total}] {run_id}");
            *self.view.lock().unwrap() =
                scenario.and_then(|s| crate::live_view::LiveView::start(head, &s));
        }
        *self.current.lock().unwrap() = label;
    }

    fn live(&self, s: LiveStatus) {
        if let Some(view) = self.view.lock().unwrap().as_mut() {
            view.show(s);
            return;
        }
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

    fn step_judged(&self, number: usize, step: &SearchStep) {
        if self.quiet {
            return;
        }
        self.clear_line();
        // Not `println!`: a reader that left (`search … | head -1`) must not end the search
        // before its steps and reports are written.
        let _ = writeln!(
            std::io::stdout(),
            "step {number:2}: {:>10}/s  {}",
            count(step.rate_per_sec),
            msgbench_report::search::step_result(step)
        );
    }

    fn run_finished(&self, r: &RunResult) {
        if let Some(view) = self.view.lock().unwrap().take() {
            view.finish();
        }
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

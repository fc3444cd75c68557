//! The live view: while a run measures, a panel of a few lines on stderr redrawn once a second
//! in place, under what was printed before: delivered against the target rate with its last minute as a sparkline,
//! p50/p99/max and the send lag of the last second with p99's last minute, the backlog and
//! the failed, dropped and skipped counts, and each class when there are several.
//!
//! ratatui lays out and renders the widgets into a buffer; the buffer is written with plain
//! ANSI (cursor up, clear line), so nothing asks the terminal anything (ratatui's inline
//! viewport asks for the cursor's position, which a pseudo-terminal without an emulator
//! never answers: 2 s lost per run) and nothing touches raw mode (Ctrl-C stays the shell's).
//! It is drawn by the observer the runner calls from its collector thread once per interval,
//! never by a measuring thread; a draw is a few hundred bytes written once a second
//! (`bench/live-view.sh` measures the driver's send lag with and without it). It is on when
//! stdout and stderr are both terminals (`--progress live` forces it, `--progress line` keeps
//! the one-line progress), so a pipe or a CI log never gets escape sequences.
use msgbench_engine::runner::LiveStatus;
use msgbench_model::scenario::Scenario;
use msgbench_report::format::{count, duration_ns};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Sparkline, Widget};
use std::collections::VecDeque;
use std::io::Write;

/// Seconds of history the sparklines show.
const HISTORY: usize = 60;
/// Classes shown, at most (the rest are in the report).
const MOST_CLASSES: usize = 4;

/// The view of the run being measured.
pub struct LiveView {
    height: u16,
    /// Lines of the panel on screen (0 before the first draw).
    drawn: u16,
    head: String,
    scenario: Scenario,
    classes: Vec<String>,
    rates: VecDeque<u64>,
    p99s: VecDeque<u64>,
    last: Option<LiveStatus>,
}

impl LiveView {
    /// A view for the run headed `head` of `scenario` (its classes named), drawn inline below
    /// the cursor; `None` when the terminal cannot hold one.
    pub fn start(head: String, scenario: &Scenario) -> Option<LiveView> {
        let classes = scenario.system.class_names();
        let shown = classes.len().min(MOST_CLASSES);
        let height = 6 + if shown > 1 { shown as u16 } else { 0 };
        Some(LiveView {
            height,
            drawn: 0,
            head,
            scenario: scenario.clone(),
            classes,
            rates: VecDeque::with_capacity(HISTORY),
            p99s: VecDeque::with_capacity(HISTORY),
            last: None,
        })
    }

    /// Draws `status`, the run's figures of the last second.
    pub fn show(&mut self, status: LiveStatus) {
        push(&mut self.rates, status.delivered_per_sec as u64);
        // Log scale, in tenths of a doubling: a p99 that jumps from 1 ms to 1 s must not
        // flatten the rest.
        push(
            &mut self.p99s,
            ((status.p99_ns.max(1) as f64).log2() * 10.0) as u64,
        );
        let lines = self.lines(&status);
        let rates = Vec::from(self.rates.clone());
        // From a step below the lowest (which then shows as the lowest bar), so that the bars'
        // heights are the differences.
        let (low, high) = (self.p99s.iter().min(), self.p99s.iter().max());
        let floor = match (low, high) {
            (Some(&low), Some(&high)) => low.saturating_sub((high - low) / 7 + 1),
            _ => 0,
        };
        let p99s: Vec<u64> = self.p99s.iter().map(|v| v - floor).collect();
        let area = Rect::new(0, 0, columns(), self.height);
        let mut buffer = Buffer::empty(area);
        let rows = Layout::vertical([
            Constraint::Length(2),
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Min(1),
        ])
        .split(area);
        Paragraph::new(lines[..2].to_vec()).render(rows[0], &mut buffer);
        let green = Style::default().fg(Color::Green);
        Sparkline::default()
            .data(&rates)
            .style(green)
            .render(rows[1], &mut buffer);
        Paragraph::new(lines[2].clone()).render(rows[2], &mut buffer);
        let yellow = Style::default().fg(Color::Yellow);
        Sparkline::default()
            .data(&p99s)
            .style(yellow)
            .render(rows[3], &mut buffer);
        Paragraph::new(lines[3..].to_vec()).render(rows[4], &mut buffer);
        let mut out = self.back_to_top();
        out.push_str(&ansi(&buffer));
        self.drawn = self.height;
        let mut stderr = std::io::stderr().lock();
        let _ = stderr.write_all(out.as_bytes());
        let _ = stderr.flush();
        self.last = Some(status);
    }

    /// The escape sequence back to the panel's first line (nothing before the first draw).
    fn back_to_top(&self) -> String {
        match self.drawn {
            0 => "\r".to_string(),
            n => format!("\r\x1b[{n}A"),
        }
    }

    /// The panel's text lines: the head, the rate, the latency, the counts, the classes.
    fn lines(&self, s: &LiveStatus) -> Vec<Line<'static>> {
        let c = &s.counters;
        let target = self.scenario.target_per_sec_at(s.elapsed_s);
        let of_target = match target {
            Some(t) if t > 0.0 => format!(
                " of {}/s target ({:.0} %)",
                count(t),
                100.0 * s.delivered_per_sec / t
            ),
            Some(_) => " of a target of 0/s".to_string(),
            None => " (no target: closed loop)".to_string(),
        };
        let sent_per_sec = match &self.last {
            Some(l) => (c.sent.saturating_sub(l.counters.sent) as f64
                / (s.elapsed_s - l.elapsed_s).max(1e-3))
            .max(0.0),
            None => c.sent as f64 / s.elapsed_s.max(1e-3),
        };
        let backlog = c.sent as i64 - (c.delivered + c.dropped + c.failed) as i64;
        let mut lines = vec![
            Line::from(format!(
                "{}  {:.0} s of {}",
                self.head,
                s.elapsed_s,
                self.span()
            )),
            Line::from(format!(
                "delivered {}/s{of_target}, sent {}/s  (last {} s below)",
                count(s.delivered_per_sec),
                count(sent_per_sec),
                self.rates.len()
            )),
            Line::from(format!(
                "p50 {}  p99 {}  max {}  send lag p99 {}  (p99, log scale, below)",
                duration_ns(s.p50_ns),
                duration_ns(s.p99_ns),
                duration_ns(s.max_ns),
                duration_ns(s.send_lag_p99_ns)
            )),
            Line::from(format!(
                "backlog {backlog}  failed {}  dropped {}  skipped {}",
                c.failed, c.dropped, c.skipped
            )),
        ];
        if self.classes.len() > 1 {
            for (name, class) in self.classes.iter().zip(&s.classes).take(MOST_CLASSES) {
                lines.push(Line::from(format!(
                    "  {name}: delivered {}  p99 {}",
                    class.delivered,
                    duration_ns(class.p99_ns)
                )));
            }
        }
        lines
    }

    /// The measured window's length, as the scenario plans it.
    fn span(&self) -> String {
        msgbench_model::duration::format(self.scenario.run.duration)
    }

    /// Clears the panel and leaves the cursor where it began, for the run's closing line.
    pub fn finish(self) {
        if self.drawn > 0 {
            // Up to its first line, then clear to the end of the screen.
            eprint!("{}\x1b[J", self.back_to_top());
        }
    }
}

/// The buffer as lines of text, each cleared first and ended by a newline, its colours as SGR
/// sequences.
fn ansi(buffer: &Buffer) -> String {
    let area = buffer.area;
    let mut out = String::with_capacity((area.width as usize + 16) * area.height as usize);
    for y in 0..area.height {
        out.push_str("\x1b[2K");
        let mut colour = Color::Reset;
        for x in 0..area.width {
            let cell = &buffer[(x, y)];
            if cell.fg != colour {
                colour = cell.fg;
                out.push_str(match colour {
                    Color::Green => "\x1b[32m",
                    Color::Yellow => "\x1b[33m",
                    _ => "\x1b[39m",
                });
            }
            out.push_str(cell.symbol());
        }
        // No trailing blanks: a narrower window does not wrap them onto the next line.
        let kept = out.trim_end_matches(' ').len();
        out.truncate(kept);
        out.push_str("\x1b[39m\n");
    }
    out
}

/// Columns of the terminal on stderr (80 when it does not say), one left free so that a full
/// line never wraps.
fn columns() -> u16 {
    // SAFETY: TIOCGWINSZ fills a winsize; a failed call leaves it zeroed.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    let width = if ok && size.ws_col > 0 {
        size.ws_col
    } else {
        80
    };
    width.saturating_sub(1).clamp(20, 400)
}

/// Appends `v` to a history of at most [`HISTORY`] values.
fn push(history: &mut VecDeque<u64>, v: u64) {
    if history.len() == HISTORY {
        history.pop_front();
    }
    history.push_back(v);
}

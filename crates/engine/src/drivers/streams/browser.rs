//! Browser clients: headless Chromium (Debian's `chromium`, installed by `scripts/setup.sh`)
//! running the page the built-in tick server serves (`server/page/`). The page measures every
//! tick itself and sends a report per second over its socket; the server hands those reports to
//! [`bridge`], which records them like a native client's, on the same interval grid.
use super::stream_stats::StreamStats;
use super::tick_client::Shared;
use crate::error::EngineError;
use crate::harness::process::SutProcess;
use crate::net::tick::{PageReport, Schedule};
use crate::recorder::Recorder;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// Latest interval a page may report (a year of seconds: far beyond any run).
const MAX_REPORT_SECONDS: u64 = 366 * 24 * 3600;
/// Most numbers in a report's histogram (HdrHistogram has ~43k buckets; pairs double it).
const MAX_REPORT_PAIRS: usize = 100_000;

/// A running headless Chromium with the tick page open.
pub struct Browser {
    /// Client name.
    pub name: String,
    process: Option<SutProcess>,
    profile: PathBuf,
}

/// The Chromium binary on `PATH`.
pub fn chromium() -> Result<PathBuf, EngineError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(EngineError::Browser(
        "headless Chromium is needed for `kind = \"browser\"` clients and none is on PATH; \
         run `bash scripts/setup.sh` (installs Debian's chromium) or remove the browser group"
            .into(),
    ))
}

impl Browser {
    /// Starts Chromium on `url` (the page, with the client's settings in its query).
    pub fn launch(binary: &std::path::Path, name: &str, url: &str) -> Result<Browser, EngineError> {
        let profile = std::env::temp_dir().join(format!(
            "msgbench-browser-{}-{}-{name}",
            std::process::id(),
            crate::clock::now_ns()
        ));
        std::fs::create_dir_all(&profile).map_err(|e| {
            EngineError::Browser(format!("cannot create {}: {e}", profile.display()))
        })?;
        // The flags of a quiet headless browser on a closed network: no background
        // connections (they are refused here, many at a time), no throttling of a page that no
        // one looks at (it would slow the page's timers and so its acks and reports).
        let command = format!(
            "exec '{}' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
             --no-default-browser-check --disable-background-networking --disable-component-update \
             --disable-sync --disable-extensions --mute-audio \
             --disable-background-timer-throttling --disable-renderer-backgrounding \
             --disable-backgrounding-occluded-windows --user-data-dir='{}' '{url}'",
            binary.display(),
            profile.display()
        );
        let process = SutProcess::spawn(&command)
            .map_err(|e| EngineError::Browser(format!("cannot start Chromium: {e}")))?;
        Ok(Browser {
            name: name.to_string(),
            process: Some(process),
            profile,
        })
    }

    /// CPU used by the browser's processes so far, ns.
    pub fn cpu_ns(&self) -> u64 {
        self.process.as_ref().map(|p| p.cpu_ns()).unwrap_or(0)
    }

    /// What Chromium printed last (for an error message).
    pub fn output_tail(&mut self) -> String {
        self.process
            .as_mut()
            .map(|p| p.output_tail())
            .unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        drop(self.process.take()); // TERM, then KILL, the whole process group
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// One browser client's recording side.
pub struct PageClient {
    /// Client name.
    pub name: String,
    /// Group index.
    pub group: usize,
    /// Its own recorder (a worker of the run's collector).
    pub recorder: Recorder,
}

/// Records the pages' reports until every page sent its last one or the run's deadline passed.
pub fn bridge(
    reports: Receiver<(String, PageReport)>,
    clients: Vec<PageClient>,
    schedule: Schedule,
    shared: &Shared,
) -> Vec<StreamStats> {
    let mut stats: Vec<StreamStats> = clients
        .iter()
        .map(|c| StreamStats::new(c.name.clone(), c.group, "browser"))
        .collect();
    let mut recorders: Vec<Recorder> = Vec::with_capacity(clients.len());
    let mut groups = Vec::with_capacity(clients.len());
    for c in clients {
        recorders.push(c.recorder);
        groups.push(c.group);
    }
    while !stats.iter().all(|s| s.end_seen) && !shared.over(crate::clock::now_ns()) {
        let Ok((name, report)) = reports.recv_timeout(Duration::from_millis(20)) else {
            continue;
        };
        let Some(i) = stats.iter().position(|s| s.name == name) else {
            continue;
        };
        // Anything may connect to the loopback server under a browser's name: a report from
        // beyond the run, or absurdly long, is not one of the page's.
        let seconds_in_run = shared
            .deadline_ns
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(schedule.measure_start_ns)
            / 1_000_000_000
            + 2;
        if report.k > seconds_in_run.min(MAX_REPORT_SECONDS)
            || report.latency.len() > MAX_REPORT_PAIRS
            || report.service.len() > MAX_REPORT_PAIRS
        {
            continue;
        }
        stats[i].on_page_report(&report);
        let second_ns = schedule.measure_start_ns + report.k * 1_000_000_000;
        recorders[i].delivered_pairs(
            groups[i],
            second_ns,
            report.delivered,
            &report.latency,
            &report.service,
        );
    }
    let now = crate::clock::now_ns();
    for (s, r) in stats.iter_mut().zip(recorders) {
        s.finish();
        r.finish(now);
    }
    stats
}

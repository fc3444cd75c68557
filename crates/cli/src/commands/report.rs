//! `msgbench report`: the report of a result folder, written again from its results.
use crate::setup::fail;
use crate::EXIT_BAD_INPUT;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `msgbench report DIR`: writes the report and names what it wrote.
pub(super) fn report(dir: &Path, slo: Option<&str>) -> ExitCode {
    match msgbench_report::publish::publish(dir, slo) {
        Ok(paths) => {
            for p in paths.iter().take(2) {
                println!("{}", p.display());
            }
            if paths.len() > 2 {
                println!("{} charts: {}/*.svg", paths.len() - 2, dir.display());
            }
            ExitCode::SUCCESS
        }
        // A file that cannot be written is not bad input: 1, as for `run`.
        Err(e @ msgbench_report::publish::PublishError::Write { .. }) => fail(1, e),
        Err(e) => fail(EXIT_BAD_INPUT, e),
    }
}

/// Writes `dir/report.md`, `report.html` and the charts from the results in `dir`.
pub(crate) fn write_report(dir: &Path, slo: Option<&str>) -> Result<Vec<PathBuf>, String> {
    msgbench_report::publish::publish(dir, slo).map_err(|e| e.to_string())
}

//! `environment.json`: what machine a result was measured on, so numbers are never quoted
//! without it.
use serde::Serialize;

/// The machine and tool a result set was measured with.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// msgbench version.
    pub msgbench_version: String,
    /// Host name.
    pub hostname: String,
    /// `uname -sr`.
    pub kernel: String,
    /// CPU model name.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus_online: usize,
    /// CPUs this process may run on.
    pub cpus_allowed: Vec<usize>,
    /// Kernel clocksource (`tsc` is cheap to read; `hpet` or `acpi_pm` are not).
    pub clocksource: String,
    /// Command line that produced the results.
    pub command_line: Vec<String>,
    /// Creation time, Unix ms.
    pub created_unix_ms: u64,
}

impl Environment {
    /// Reads the environment of this process.
    pub fn capture(command_line: Vec<String>) -> Environment {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        Environment {
            msgbench_version: env!("CARGO_PKG_VERSION").into(),
            hostname: hostname(),
            kernel: format!(
                "{} {}",
                read("/proc/sys/kernel/ostype"),
                read("/proc/sys/kernel/osrelease")
            ),
            cpu_model,
            cpus_online: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpus_allowed: crate::affinity::allowed_cpus(),
            clocksource: read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            command_line,
            created_unix_ms: unix_ms(),
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `YYYYmmdd-HHMMSS` (UTC) of a Unix time in seconds, for result directory names.
pub fn stamp(unix_s: u64) -> String {
    let (days, rest) = (unix_s / 86_400, unix_s % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    format!(
        "{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// This host's name (`/proc/sys/kernel/hostname`; `unknown` when unreadable).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// What the kernel's clock discipline says of the wall clock (`adjtimex` without changing
/// anything): whether an NTP/PTP daemon keeps it synchronized, and its error bounds.
pub fn wall_clock_status() -> msgbench_model::result::WallClockStatus {
    // SAFETY: `timex` is plain data; modes = 0 only reads the kernel's state into it.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    let state = unsafe { libc::adjtimex(&mut t) };
    if state < 0 {
        return Default::default();
    }
    msgbench_model::result::WallClockStatus {
        synchronized: state != libc::TIME_ERROR && t.status & libc::STA_UNSYNC == 0,
        estimated_error_us: t.esterror.max(0) as u64,
        max_error_us: t.maxerror.max(0) as u64,
        // In ns when the kernel runs in nanosecond mode.
        offset_us: if t.status & libc::STA_NANO != 0 {
            t.offset / 1000
        } else {
            t.offset
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_times() {
        assert_eq!(stamp(0), "19700101-000000");
        assert_eq!(stamp(1_795_393_139), "20261123-001859");
        assert_eq!(stamp(951_782_400), "20000229-000000");
    }
}

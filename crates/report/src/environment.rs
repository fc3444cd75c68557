//! Where and how the results were taken, read back from the result directory's
//! `environment.json` for the head of both reports: a figure without its host is half a figure.
use std::path::Path;

/// `(label, value)` lines: host, date, CPU, kernel and clock source, msgbench version, command
/// line. Empty when `environment.json` is missing or unreadable (a report still renders).
pub fn read(dir: &Path) -> Vec<(&'static str, String)> {
    let Ok(text) = std::fs::read_to_string(dir.join("environment.json")) else {
        return Vec::new();
    };
    let Ok(env) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    let s = |key: &str| env.get(key).and_then(|v| v.as_str()).unwrap_or("unknown");
    let mut lines = vec![
        ("host", s("hostname").to_string()),
        (
            "taken",
            env.get("created_unix_ms")
                .and_then(|v| v.as_u64())
                .map(utc)
                .unwrap_or_else(|| "unknown".into()),
        ),
        (
            "CPU",
            format!(
                "{} × {}",
                env.get("cpus_online").and_then(|v| v.as_u64()).unwrap_or(0),
                s("cpu_model")
            ),
        ),
        (
            "kernel",
            format!("{}, clocksource {}", s("kernel"), s("clocksource")),
        ),
        ("msgbench", s("msgbench_version").to_string()),
    ];
    if let Some(args) = env.get("command_line").and_then(|v| v.as_array()) {
        let words: Vec<String> = args.iter().filter_map(|a| a.as_str()).map(quote).collect();
        lines.push(("command", words.join(" ")));
    }
    lines
}

/// `2026-11-25 08:13:55 UTC` from Unix ms (civil-from-days, no time-zone database needed).
fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// A word as a shell would need it: quoted when it holds anything but plain characters.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_command_lines_read_as_a_user_typed_them() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_594_435_871), "2026-11-25 08:13:55 UTC");
        assert_eq!(utc(951_825_600_000), "2000-02-29 12:00:00 UTC");
        assert_eq!(quote("--duration"), "--duration");
        assert_eq!(quote("system=\"rpc\""), "'system=\"rpc\"'");
        assert_eq!(quote("p99 < 1ms"), "'p99 < 1ms'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}

//! What failed in a run, in one line: `5000 failed; faults, warm-up included: 5000 JSON-RPC
//! error -32601 "method not found"`, `12 failed; faults, warm-up included: 10 timeouts, 2
//! disconnects`. Shared by the terminal summary and the
//! reports, so a failure reads the same everywhere.
use msgbench_model::result::Faults;
use msgbench_model::RunResult;

/// Error messages named in the line before "and N more".
const MESSAGES_SHOWN: usize = 3;

/// The run's failures in one line; `None` when nothing failed and no fault was counted.
pub fn line(r: &RunResult) -> Option<String> {
    let parts = causes(&r.faults);
    if r.counters.failed == 0 && parts.is_empty() {
        return None;
    }
    let what = if parts.is_empty() {
        "no fault recorded".to_string()
    } else {
        parts.join(", ")
    };
    // Faults count the warm-up's requests too: say so, or 991 errors behind 903 failures reads
    // as a miscount.
    Some(format!(
        "{} failed; faults, warm-up included: {what}",
        r.counters.failed
    ))
}

/// Why the run's skipped requests were never sent, in one line, when some were: the `drop`
/// column counts them with the system's drops, and a request skipped while no connection was
/// up says something else about the system than one the window had no room for.
pub fn skipped_line(r: &RunResult) -> Option<String> {
    let c = &r.counters;
    if c.skipped == 0 {
        return None;
    }
    let by = &c.skipped_by;
    let causes = [
        (by.no_connection, "while no connection was up"),
        (by.window_full, "with the window full"),
        (by.run_ended, "still waiting when the run ended"),
    ];
    let parts: Vec<String> = (causes.iter())
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
    let why = if parts.is_empty() {
        String::new() // a file written before the causes were counted
    } else {
        format!(": {}", parts.join(", "))
    };
    Some(format!(
        "{} of {} attempted never sent{why}",
        c.skipped, c.attempted
    ))
}

/// How the run's connections were used, in one line, when there is something to say: the
/// reopenings the server asked for and the TLS handshakes (timed apart from every latency).
pub fn connections_line(r: &RunResult) -> Option<String> {
    let c = &r.faults.connections;
    let mut parts = Vec::new();
    if c.closed_by_server > 0 {
        // A server that announces its close and then goes away (a graceful shutdown) cannot be
        // reopened: say so rather than "reopened".
        let reopened = match r.faults.connect_failures {
            0 => " and reopened".to_string(),
            n => format!("; opening new ones failed {n} times"),
        };
        parts.push(format!(
            "{} closed by the server as announced (HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY){reopened}",
            c.closed_by_server
        ));
    }
    if c.down_ns_total > 0 {
        parts.push(format!(
            "down {} in all (summed over connections, each from its failure until reopened or the run's end)",
            crate::format::duration_ns(c.down_ns_total)
        ));
    }
    if c.tls_handshakes > 0 {
        parts.push(format!(
            "{} TLS handshakes, mean {}, longest {} (apart from request latency)",
            c.tls_handshakes,
            crate::format::duration_ns(c.tls_handshake_ns_total / c.tls_handshakes),
            crate::format::duration_ns(c.tls_handshake_ns_max)
        ));
    }
    if c.leaders_followed > 0 {
        parts.push(format!(
            "Kafka partition leaders followed to another broker {} times, {} Produce requests sent again to the new leader",
            c.leaders_followed, c.produce_resent
        ));
    }
    if c.flow_control_waits > 0 {
        parts.push(format!(
            "{} HTTP/2 request bodies waited for the server's flow-control window, mean {}, longest {} (part of their latency)",
            c.flow_control_waits,
            crate::format::duration_ns(c.flow_control_wait_ns_total / c.flow_control_waits),
            crate::format::duration_ns(c.flow_control_wait_ns_max)
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// report.html's sections on what failed, how connections were used and how to read the
/// figures: the same lines as report.md's, as lists; nothing for a section without any.
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    let list = |title: &str, lines: Vec<(String, String)>| -> String {
        if lines.is_empty() {
            return String::new();
        }
        let items: String = lines
            .iter()
            .map(|(id, line)| match id.is_empty() {
                true => format!("<li>{}</li>\n", escape(line)),
                false => format!(
                    "<li><strong>{}</strong>: {}</li>\n",
                    escape(id),
                    escape(line)
                ),
            })
            .collect();
        format!("<h2>{title}</h2>\n<ul>\n{items}</ul>\n")
    };
    let per_run = |f: fn(&RunResult) -> Option<String>| -> Vec<(String, String)> {
        (runs.iter())
            .filter_map(|r| f(r).map(|l| (r.run_id.clone(), l)))
            .collect()
    };
    let info = info_lines(runs)
        .into_iter()
        .map(|l| (String::new(), l))
        .collect();
    list("Faults", per_run(line))
        + &list("Skipped", per_run(skipped_line))
        + &list("Connections", per_run(connections_line))
        + &list("How to read these figures", info)
}

/// The runs' notes on how to read them (`RunResult::info`), each distinct sentence once.
pub fn info_lines(results: &[RunResult]) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for line in results.iter().flat_map(|r| r.info.iter()) {
        if !lines.contains(line) {
            lines.push(line.clone());
        }
    }
    lines
}

/// The faults behind failed messages, largest count first within each kind: error replies by
/// message, then the connection-level kinds.
fn causes(f: &Faults) -> Vec<String> {
    let mut parts: Vec<String> = f
        .errors
        .iter()
        .take(MESSAGES_SHOWN)
        .map(|e| format!("{} {}", e.count, e.message))
        .collect();
    if f.errors.len() > MESSAGES_SHOWN {
        let rest: u64 = f.errors[MESSAGES_SHOWN..].iter().map(|e| e.count).sum();
        parts.push(format!(
            "{rest} with {} other messages",
            f.errors.len() - MESSAGES_SHOWN
        ));
    }
    let with_message: u64 = f.errors.iter().map(|e| e.count).sum();
    // (count, one, several)
    let kinds = [
        (
            f.server_errors.saturating_sub(with_message),
            "error reply",
            "error replies",
        ),
        (f.timeouts, "timeout", "timeouts"),
        (f.disconnects, "disconnect", "disconnects"),
        (f.connect_failures, "connect failure", "connect failures"),
        (f.protocol_errors, "protocol error", "protocol errors"),
        (
            f.unmatched_replies,
            "reply to no request",
            "replies to no request",
        ),
        (
            f.handshake_failures,
            "handshake failure",
            "handshake failures",
        ),
        (
            f.receive_buffer_drops,
            "datagram dropped by the kernel (receive buffer full)",
            "datagrams dropped by the kernel (receive buffer full)",
        ),
    ];
    parts.extend(
        kinds
            .iter()
            .filter(|(n, ..)| *n > 0)
            .map(|(n, one, several)| format!("{n} {}", if *n == 1 { one } else { several })),
    );
    if let Some(words) = &f.first_protocol_error {
        parts.push(format!("the first protocol error: {words}"));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_model::result::ErrorCount;

    #[test]
    fn the_line_names_each_message_and_kind_with_its_count() {
        let mut f = Faults {
            server_errors: 5000,
            timeouts: 3,
            ..Default::default()
        };
        ErrorCount::add(
            &mut f.errors,
            r#"JSON-RPC error -32601 "method not found""#,
            5000,
        );
        let parts = causes(&f);
        assert_eq!(
            parts,
            vec![
                r#"5000 JSON-RPC error -32601 "method not found""#.to_string(),
                "3 timeouts".into()
            ]
        );
        for i in 0..6 {
            ErrorCount::add(&mut f.errors, &format!("ERR {i}"), 1);
        }
        let parts = causes(&f);
        assert_eq!(parts[3], "4 with 4 other messages", "{parts:?}");
        // Error replies without a message (the rpc wire has none) are counted as such.
        let plain = Faults {
            server_errors: 7,
            ..Default::default()
        };
        assert_eq!(causes(&plain), vec!["7 error replies".to_string()]);
        let one = Faults {
            disconnects: 1,
            timeouts: 2,
            ..Default::default()
        };
        assert_eq!(causes(&one), ["2 timeouts", "1 disconnect"]);
    }

    #[test]
    fn the_skipped_line_names_each_cause() {
        let mut r = RunResult::default();
        assert_eq!(skipped_line(&r), None);
        r.counters.attempted = 10_000;
        r.counters.skipped = 6054;
        r.counters.skipped_by.no_connection = 6040;
        r.counters.skipped_by.run_ended = 14;
        assert_eq!(
            skipped_line(&r).unwrap(),
            "6054 of 10000 attempted never sent: 6040 while no connection was up, 14 still waiting when the run ended"
        );
        r.counters.skipped_by = Default::default();
        assert_eq!(
            skipped_line(&r).unwrap(),
            "6054 of 10000 attempted never sent"
        );
    }

    #[test]
    fn a_close_as_announced_is_reopened_only_when_no_reopening_failed() {
        let mut r = RunResult::default();
        r.faults.connections.closed_by_server = 2;
        assert!(connections_line(&r)
            .unwrap()
            .ends_with("GOAWAY) and reopened"));
        r.faults.connect_failures = 58;
        let line = connections_line(&r).unwrap();
        assert!(
            line.ends_with("GOAWAY); opening new ones failed 58 times"),
            "{line}"
        );
    }
}

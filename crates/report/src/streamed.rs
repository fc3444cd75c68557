//! The "Streamed responses" section of both reports: for runs whose requests were answered by
//! a stream of messages (`[http.requests.NAME] stream = "sse"`, an LLM's streamed completion),
//! the figures their users ask — time to the first message (TTFT) from the request's intended
//! send, the gaps between messages (inter-token latency), the time per message of each stream
//! and its inverse, messages (tokens) per second per stream — beside what was cut short.
use crate::format::duration_ns;
use msgbench_model::result::{RunResult, StreamedResponses};

const HEADER: [&str; 11] = [
    "run",
    "streams",
    "messages/stream",
    "first message p50",
    "first message p99",
    "gap p50",
    "gap p99",
    "per message p50",
    "msgs/s per stream p50",
    "slowest 1 % msgs/s",
    "cut short",
];

const EXPLAINED: &str = "Requests answered by a stream of messages, over the measured window. \
    `first message`: from the request's intended send to its stream's first message (time to \
    first token; coordinated omission corrected: a stall makes the streams queued behind it wait, \
    and that counts). `gap`: every gap between two consecutive messages of a stream \
    (inter-token latency). `per message`: per stream, (last − first message) / (messages − 1) — \
    its inverse is that stream's messages (tokens) per second; `slowest 1 %` is the rate the \
    slowest streams fell to (from per message's p99). `cut short`: streams that failed after \
    their first message (failed requests), with the messages they had delivered — over \
    HTTP/1.1 a connection that failed or timed out mid-stream; over HTTP/2 and ws-rpc the \
    stream's own failure (a timed-out one is a failed request, not counted here). A message's \
    time is the read that brought it: messages in one read share it.";

fn per_second(per_message_ns: u64) -> String {
    if per_message_ns == 0 {
        return "–".into();
    }
    crate::format::count(1e9 / per_message_ns as f64)
}

fn cells(r: &RunResult, s: &StreamedResponses) -> Vec<String> {
    let ns = |count: u64, v: u64| {
        if count == 0 {
            "–".to_string()
        } else {
            duration_ns(v)
        }
    };
    vec![
        r.run_id.clone(),
        s.streams.to_string(),
        if s.streams == 0 {
            "–".into()
        } else {
            format!("{:.1}", s.messages as f64 / s.streams as f64)
        },
        ns(s.first_message.count, s.first_message.p50_ns),
        ns(s.first_message.count, s.first_message.p99_ns),
        ns(s.gap.count, s.gap.p50_ns),
        ns(s.gap.count, s.gap.p99_ns),
        ns(s.per_message.count, s.per_message.p50_ns),
        per_second(s.per_message.p50_ns),
        per_second(s.per_message.p99_ns),
        if s.cut == 0 {
            "0".into()
        } else {
            format!("{} ({} messages)", s.cut, s.cut_messages)
        },
    ]
}

fn rows(runs: &[RunResult]) -> Vec<Vec<String>> {
    (runs.iter())
        .filter_map(|r| Some(cells(r, r.streamed.as_ref()?)))
        .collect()
}

/// The section of report.md (empty when no response streamed).
pub fn markdown(runs: &[RunResult]) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    crate::format::markdown_section("Streamed responses", EXPLAINED, &HEADER, &rows)
}

/// The section of report.html (empty when no response streamed).
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    let rows = rows(runs);
    if rows.is_empty() {
        return String::new();
    }
    crate::format::html_section(
        // Quoted where report.md has code spans: the names stay apart from the words.
        ("Streamed responses", &EXPLAINED.replace('`', "\"")),
        &HEADER,
        &rows,
        escape,
        |_| false,
    )
}

/// The terminal's table, its header first (nothing when no response streamed).
pub fn text_rows(runs: &[RunResult]) -> Vec<Vec<String>> {
    let rows = rows(runs);
    if rows.is_empty() {
        return rows;
    }
    let header = HEADER.iter().map(|h| h.to_string()).collect();
    std::iter::once(header).chain(rows).collect()
}

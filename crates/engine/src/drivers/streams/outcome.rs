//! What a `ticks` run comes to: each client's statistics joined with the server's reports of
//! its connections ([`super::stream_stats`]), the run's sums and intervals from them, the
//! notes, and the clients each thread holds ([`plans`]).
use super::browser;
use super::stream_stats::{self as stats, FeedSide, Join, ServerSide, StreamStats};
use super::tick_client::{ConnPlan, ThreadOut, ThreadPlan};
use crate::net::tick::Schedule;
use crate::server::ticks::{ConnReport, ServerReport};
use msgbench_model::result::StreamClient;
use msgbench_model::ticks::{ClientKind, TicksConfig};

/// What one run's clients measured.
pub struct Measurement {
    /// What the native threads returned, then each browser as a thread.
    pub threads: Vec<ThreadOut>,
    /// What the browser pages reported.
    pub pages: Vec<StreamStats>,
    /// The run's schedule.
    pub schedule: Schedule,
    /// Length of the measured span, ns.
    pub span_ns: u64,
    /// The system under test's CPU over it, seconds.
    pub sut_cpu_s: Option<f64>,
    /// The merged recording.
    pub recording: crate::recorder::Recording,
}

/// How to read the run's figures: a feed's timestamps, an unverified certificate.
pub fn info(ticks: &TicksConfig) -> Vec<String> {
    let mut info = ticks.feed.as_ref().map(|f| f.notes()).unwrap_or_default();
    if ticks.insecure {
        info.push(
            "TLS certificate not verified (ticks.insecure = true): the server was not authenticated"
                .into(),
        );
    }
    info
}

/// Each browser as a "thread" of the run, with its CPU over the measured span.
pub fn browser_threads(browsers: &[browser::Browser], cpu_ns: &[u64]) -> Vec<ThreadOut> {
    browsers
        .iter()
        .zip(cpu_ns)
        .map(|(b, cpu_ns)| ThreadOut {
            stats: Vec::new(),
            // /proc gives user + system together; it is reported as user time.
            cpu: msgbench_model::result::ThreadCpu {
                role: format!("{} (Chromium, all its processes)", b.name),
                pinned_cpu: None,
                cpu: msgbench_model::result::CpuTimes {
                    user_s: *cpu_ns as f64 / 1e9,
                    ..Default::default()
                },
            },
        })
        .collect()
}

/// Sorts `fast-2` before `fast-10`.
pub fn natural(name: &str) -> (String, u64) {
    let (head, tail) = name.rsplit_once('-').unwrap_or((name, ""));
    (head.to_string(), tail.parse().unwrap_or(0))
}

/// Client threads of the native groups (connections dealt round-robin over a group's threads)
/// and `(name, group, page query)` of each browser.
pub fn plans(ticks: &TicksConfig, base: &str) -> (Vec<ThreadPlan>, Vec<(String, usize, String)>) {
    let mut threads = Vec::new();
    let mut browsers = Vec::new();
    let separator = if base.contains('?') { '&' } else { '?' };
    // Each group's threads, holding this process's clients of the group (a shard's slice).
    let mut group_threads: Vec<Vec<ThreadPlan>> = (ticks.groups.iter())
        .map(|g| {
            (0..g.threads)
                .map(|t| ThreadPlan {
                    role: format!("client-{}-{t}", g.name),
                    pin: g.pin.get(t).copied(),
                    conns: Vec::new(),
                })
                .collect()
        })
        .collect();
    // A shard's clients of a group are every Nth: deal them over the threads by their place
    // among this process's clients of the group, or they would pile onto a few threads.
    let mut dealt = vec![0usize; ticks.groups.len()];
    // Where each group's clients start among the run's (a unicast UDP feed's ports).
    let firsts: Vec<usize> = ticks
        .groups
        .iter()
        .scan(0, |first, g| {
            let here = *first;
            *first += g.connections;
            Some(here)
        })
        .collect();
    for (gi, i) in ticks.local_clients() {
        let g = &ticks.groups[gi];
        let ordinal = dealt[gi];
        dealt[gi] += 1;
        let name = g.connection_name(i);
        match g.kind {
            ClientKind::Native => {
                // A feed's URL is the feed's: msgbench's query is for its own servers.
                let url = if ticks.feed.is_some() {
                    base.to_string()
                } else {
                    format!(
                        "{base}{separator}client={name}&format={}",
                        ticks.format.name()
                    )
                };
                group_threads[gi][ordinal % g.threads].conns.push(ConnPlan {
                    url,
                    name,
                    group: gi,
                    ordinal: firsts[gi] + i,
                    cost_ns: g.cost_ns,
                    work: g.work,
                });
            }
            ClientKind::Browser => {
                let query = format!(
                    "?client={name}&format={}&page={}&cost_ns={}&ack_ms={}",
                    ticks.format.name(),
                    g.page.name(),
                    g.cost_ns,
                    (ticks.ack_every_ns as f64 / 1e6).max(1.0)
                );
                browsers.push((name, gi, query));
            }
        }
    }
    // A thread with no client of this shard's is not started.
    threads.extend(
        group_threads
            .into_iter()
            .flatten()
            .filter(|t| !t.conns.is_empty()),
    );
    (threads, browsers)
}

/// Every client's connection ended before the measured window did, none having delivered a
/// message of it: the run measured nothing, as against a server that cannot be reached, and
/// fails as that does. (`clients` and `streams` are the same clients, in the same order.)
pub fn every_client_gone(
    clients: &[StreamStats],
    streams: &[StreamClient],
    schedule: Schedule,
) -> Option<String> {
    let gone = |(c, s): (&StreamStats, &StreamClient)| {
        c.closed
            .as_ref()
            .is_some_and(|(_, at)| *at < schedule.end_ns)
            && s.counters.delivered == 0
    };
    let first = streams.first()?;
    if clients.len() != streams.len() || !clients.iter().zip(streams).all(gone) {
        return None;
    }
    Some(format!(
        "every client's connection ended before the measured window did, with nothing of it delivered (client {}: {}): nothing was measured",
        first.name,
        first.closed.as_deref().unwrap_or_default()
    ))
}

/// The first client's first message that did not decode, as a note (one for the run: a
/// thousand clients of one feed share their fault), with how many clients met one.
pub fn first_protocol_error(clients: &[StreamStats]) -> Option<String> {
    let mut with = clients.iter().filter(|c| c.first_protocol_error.is_some());
    let first = with.next()?;
    let others = with.count();
    Some(format!(
        "client {}: {} protocol error(s); the first: {}{}",
        first.name,
        first.faults.protocol_errors,
        first.first_protocol_error.as_deref().unwrap_or_default(),
        match others {
            0 => String::new(),
            n => format!(" ({n} other client(s) met protocol errors too)"),
        }
    ))
}

/// Joins each client's statistics with the server's reports of its connections.
pub fn join_streams(
    clients: &[StreamStats],
    server: Option<&ServerReport>,
    ticks: &TicksConfig,
    schedule: Schedule,
    deadline_ns: u64,
) -> Vec<StreamClient> {
    // Each UDP sender is a feed of its own; every other feed is one.
    let feeds = FeedSide::by_source(clients);
    clients
        .iter()
        .map(|c| {
            let feed = &(feeds.iter().find(|(s, _)| *s == c.source))
                .expect("every client's source has its feed")
                .1;
            let reports: Vec<&ConnReport> = server
                .map(|r| {
                    r.connections
                        .iter()
                        .filter(|conn| {
                            conn.name == c.name
                                || conn
                                    .name
                                    .strip_prefix(&c.name)
                                    .is_some_and(|rest| rest.starts_with('.'))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let side = server.map(|_| ServerSide::of(&reports));
            let join = Join {
                server: side.as_ref(),
                feed: server.is_none().then_some(feed),
                gaps: ticks.gaps,
                schedule,
            };
            let mut result = c.to_result(&ticks.groups[c.group].name, &join);
            result.behind_ns = feed.behind_ns(c, &schedule);
            if lossy_datagrams(ticks) {
                // The network duplicates and reorders datagrams as it loses them: counted
                // (`*_seen`), not the feed's errors.
                result.sequence.duplicates = 0;
                result.sequence.reordered = 0;
            }
            // A browser's connection is the server's to watch: its page clock, and why it
            // ended early if it did.
            if c.kind == "browser" {
                if let Some(r) = reports.last() {
                    result.page_clock = r.page_clock;
                    // Closed at the deadline: the run was over, not the page.
                    match (&result.closed, &r.closed) {
                        (None, Some((why, at))) if *at < deadline_ns => {
                            result.closed = Some(stats::closed_when(why, *at, &schedule));
                        }
                        _ => {}
                    }
                }
            }
            result
        })
        .collect()
}

/// A UDP feed declared lossy (`ticks.gaps = "drops"`).
fn lossy_datagrams(ticks: &TicksConfig) -> bool {
    ticks.udp.is_some() && ticks.gaps == msgbench_model::ticks::GapPolicy::Drops
}

/// What a lossy UDP feed's clients saw of the network's duplicates and reordering, and what the
/// kernel dropped for them, in a line (none when nothing was seen).
pub fn datagram_note(ticks: &TicksConfig, streams: &[StreamClient]) -> Option<String> {
    ticks.udp.as_ref()?;
    let sum = |f: fn(&StreamClient) -> u64| streams.iter().map(f).sum::<u64>();
    let (dup, late, kernel) = (
        sum(|s| s.duplicates_seen),
        sum(|s| s.reordered_seen),
        sum(|s| s.faults.receive_buffer_drops),
    );
    (dup + late + kernel > 0).then(|| {
        format!(
            "UDP, over all clients and the whole run (warm-up included): {dup} datagrams read twice, {late} read after a later one{}, {kernel} dropped by the kernel because a client's receive buffer was full (they are gaps too; a larger ticks.receive_buffer or a faster client keeps them)",
            if lossy_datagrams(ticks) { " (counted, not errors: ticks.gaps = \"drops\")" } else { "" }
        )
    })
}

/// A client further behind the feed than `limit_ns` by the window's end, whatever the run's
/// length (a short run is not judged for a growing backlog, and a drain can let a client catch
/// up): the stamps it was behind by, and what of the window it never read.
pub fn behind_notes(streams: &[StreamClient], limit_ns: u64) -> Vec<String> {
    (streams.iter())
        .filter(|s| s.closed.is_none() && s.behind_ns.is_some_and(|b| b > limit_ns))
        .map(|s| {
            let behind = s.behind_ns.unwrap_or_default() as f64 / 1e9;
            let unread = match s.counters.in_flight_end {
                0 => "it read all of the window by the end of the drain".to_string(),
                n => format!("{n} messages of the window were never read (undelivered)"),
            };
            format!(
                "client {} was {behind:.2} s behind the feed at the window's end (the freshest client had read messages stamped that much later; ticks.behind_limit is {}): {unread} — the client is too slow for the feed, its latencies are its own backlog",
                s.name,
                msgbench_model::duration::format(std::time::Duration::from_nanos(limit_ns))
            )
        })
        .collect()
}

/// The generators' lateness is the stream's send lag.
pub fn recording_send_lag(recording: &mut crate::recorder::Recording, report: &ServerReport) {
    report.send_lag.add_to(&mut recording.send_lag);
}

/// What the built-in server refused or closed, as notes.
pub fn server_notes(report: &ServerReport) -> Vec<String> {
    let mut notes = Vec::new();
    let c = &report.counts;
    if c.handshake_failures > 0 {
        notes.push(format!(
            "the tick server refused {} connections that were not WebSocket upgrades",
            c.handshake_failures
        ));
    }
    if c.protocol_errors > 0 {
        notes.push(format!(
            "the tick server closed {} connections for bad messages",
            c.protocol_errors
        ));
    }
    if c.refused > 0 {
        notes.push(format!(
            "the tick server refused {} connections over its max_connections",
            c.refused
        ));
    }
    notes
}

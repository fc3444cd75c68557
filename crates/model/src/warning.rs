//! What the engine noticed about a run, as a value ([`Warning`]). Its `Display` is the
//! sentence written into `warnings` of the result file; files hold those sentences, and
//! [`Warning::parse`] turns them back into values (a sentence this version does not know is a
//! [`Warning::Note`], kept verbatim), so older result files still load. `StoppedEarly` and
//! `Note` come from the engine (the runner's `assemble`); the checks that produce the others,
//! and the verdict on a run, are in [`crate::verdict`].
use std::fmt;

/// Something a reader must know before trusting a run's numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// An error of the system under test stopped the run (`on_error = "stop"`): why.
    StoppedEarly(String),
    /// What the system reported about the run (a server's own counts, a client that left
    /// early, a process that exited), or a sentence from a result file this version does not
    /// know.
    Note(String),
    /// `attempted = sent + skipped` or `sent = delivered + dropped + failed + in flight` broke:
    /// a bug in msgbench. Which one, with the figures.
    AccountingBroken(String),
    /// The receiver saw sequence errors: the system lost, repeated or reordered messages.
    SequenceErrors {
        /// Sequence numbers skipped.
        gaps: u64,
        /// Sequence numbers seen twice.
        duplicates: u64,
        /// Sequence numbers that arrived after a later one.
        reordered: u64,
    },
    /// Deliveries completed before their intended send time on this host's clock (each was
    /// recorded as latency 0): the clock that stamped them runs ahead of this one.
    Early {
        /// How many.
        deliveries: u64,
        /// Of how many delivered.
        delivered: u64,
        /// By how much the earliest was early, ms (three decimals).
        most_ms: f64,
    },
    /// Nothing completed (and the run was not interrupted).
    NothingDelivered {
        /// Messages attempted.
        attempted: u64,
        /// Messages sent (0: every one waited for a window or a connection to the end).
        sent: u64,
    },
    /// A stream's clients received nothing in the measured window (and the run was not
    /// interrupted).
    NothingReceived,
    /// Some attempts failed (errors, timeouts, closed connections).
    Failed {
        /// Failed messages.
        failed: u64,
        /// Attempted messages.
        attempted: u64,
        /// failed / attempted, percent (as written: one decimal).
        percent: f64,
    },
    /// The schedule's rate was not reached.
    TargetMissed {
        /// Attempted (or generated) per second, as written (no decimals).
        achieved_per_sec: f64,
        /// The target, as written (no decimals).
        target_per_sec: f64,
        /// achieved / target, percent (one decimal).
        percent: f64,
        /// A broadcast stream: the target is the rate × clients.
        stream: bool,
    },
    /// Messages went out late: send lag p99 above its bound (`run.send_lag_limit`, 1 ms).
    SendLag {
        /// p99 of the send lag, ms (two decimals).
        p99_ms: f64,
        /// Whose lateness it was: they need opposite fixes.
        cause: LagCause,
    },
    /// Messages were still in flight when the drain timeout ended.
    InFlightAtEnd {
        /// How many.
        messages: u64,
    },
    /// Requests got no answer, and the longest of them waited longer than any answered one took:
    /// the true max latency is at least that wait.
    Unanswered {
        /// Measured requests that got no answer.
        requests: u64,
        /// The longest wait, ms (three decimals).
        longest_wait_ms: f64,
    },
    /// Connections (or stream clients of one group) were served unequally: the least-served
    /// one got under half the median's deliveries, Jain's index is under 0.8, the slowest one's
    /// p99 is over ten times the median's, or the median's over ten times the fastest's. Which
    /// one, with its figures ([`crate::fairness::unequal_service`]). A server that favours some
    /// connections is the usual cause; a client thread short of CPU is another.
    Unequal(String),
    /// Ctrl-C (or a stop) cut the measured window short.
    Interrupted,
}

const STOPPED_EARLY: &str = "stopped early: ";
const ACCOUNTING: (&str, &str) = (
    "accounting invariant broken (",
    "): a bug in msgbench, please report it",
);
const NONE_SENT: &str = "every request due in the measured span still waited for room in a full window (or for a connection) when it ended: the system is far slower than the schedule, or not there";
const UNEQUAL: (&str, &str) = (
    "unequal service: ",
    ": the connections were not served equally (a server that favours some, or a client thread short of CPU)",
);
const EARLY: &str = "completed before their intended send time and count as latency 0: the clock that stamped them runs ahead of this host's (a wall-clock stamp from another host, or a server whose clock is not CLOCK_MONOTONIC), so the latency percentiles are too low";
const NOTHING_RECEIVED: &str = "nothing was delivered: no stream client received a message in the measured window (a server that sends nothing, or nothing these clients subscribed to; see the clients' notes)";
const INTERRUPTED: &str = "interrupted: the measured window was cut short";
const UNANSWERED: &str = "before it was given up (timed out, its connection failed, or the run ended): the max latency is at least that, though the answered requests' max is lower";
const STREAM_TARGET: &str = "generated for all clients (the target is the rate × clients: a client that left early was fed less)";
const STREAM_LAG: &str = "the tick server's generator could not keep its schedule (a busy CPU)";
const PACER_LAG: &str = "msgbench's pacer woke or ran late: the host's lateness, not the system's — a busy host or a driver thread short of CPU; see cpu_wait_ms, and run where nothing else takes its CPUs";
const HELD_LAG: &str = "sends waited for room in a full window, queue or socket, or for their connection to reopen: the system pushed back, it is slower than this schedule (or failing) — lower the rate, or give it more connections or a deeper pipeline";
const BOTH_LAG: &str = "msgbench's pacer ran late and sends waited for room in a full window, queue or socket, or for their connection: the host's lateness and the system's both — see send_lag_split";
/// Files written before the send lag was split.
const EITHER_LAG: &str =
    "the driver could not keep its schedule, or the system pushed back under `block`";

/// Whose lateness a send lag is ([`Warning::SendLag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LagCause {
    /// A broadcast stream: the built-in server's generator was late.
    Stream,
    /// The driver's pacer woke or ran late: the host's (or msgbench's) lateness.
    Pacer,
    /// Sends waited for room in a full window, queue or socket: the system pushed back.
    Held,
    /// Both, each enough to matter.
    Both,
    /// Not known: a file written before the send lag was split.
    Either,
}

impl LagCause {
    fn sentence(self) -> &'static str {
        match self {
            LagCause::Stream => STREAM_LAG,
            LagCause::Pacer => PACER_LAG,
            LagCause::Held => HELD_LAG,
            LagCause::Both => BOTH_LAG,
            LagCause::Either => EITHER_LAG,
        }
    }

    fn of_sentence(text: &str) -> LagCause {
        [
            LagCause::Stream,
            LagCause::Pacer,
            LagCause::Held,
            LagCause::Both,
        ]
        .into_iter()
        .find(|c| text.contains(c.sentence()))
        .unwrap_or(LagCause::Either)
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::StoppedEarly(why) => write!(f, "{STOPPED_EARLY}{why}"),
            Warning::Note(text) => f.write_str(text),
            Warning::AccountingBroken(what) => write!(f, "{}{what}{}", ACCOUNTING.0, ACCOUNTING.1),
            Warning::SequenceErrors {
                gaps,
                duplicates,
                reordered,
            } => write!(
                f,
                "sequence errors: {gaps} gaps, {duplicates} duplicates, {reordered} reordered: the system under test lost or reordered messages"
            ),
            Warning::Early { deliveries, delivered, most_ms } => write!(
                f,
                "{deliveries} of {delivered} deliveries (by up to {most_ms:.3} ms) {EARLY}"
            ),
            Warning::NothingDelivered { attempted, sent: 0 } => write!(
                f,
                "nothing was delivered ({attempted} attempted, none sent): {NONE_SENT}"
            ),
            Warning::NothingDelivered { attempted, sent } => write!(
                f,
                "nothing was delivered ({attempted} attempted, {sent} sent): is the system under test what the scenario says it is?"
            ),
            Warning::NothingReceived => f.write_str(NOTHING_RECEIVED),
            Warning::Failed { failed, attempted, percent } => write!(
                f,
                "{failed} of {attempted} attempted messages failed ({percent:.1} %): latency describes only the others; see the faults"
            ),
            Warning::TargetMissed { achieved_per_sec, target_per_sec, percent, stream } => write!(
                f,
                "target rate not reached: {achieved_per_sec:.0}/s {} of {target_per_sec:.0}/s ({percent:.1} %)",
                if *stream { STREAM_TARGET } else { "attempted" }
            ),
            Warning::SendLag { p99_ms, cause } => write!(
                f,
                "send lag p99 is {p99_ms:.2} ms: messages went out late ({})",
                cause.sentence()
            ),
            Warning::InFlightAtEnd { messages } => write!(
                f,
                "{messages} messages still in flight when the drain timeout ended"
            ),
            Warning::Unanswered { requests, longest_wait_ms } => write!(
                f,
                "{requests} requests got no answer and one waited {longest_wait_ms:.3} ms {UNANSWERED}"
            ),
            Warning::Unequal(what) => write!(f, "{}{what}{}", UNEQUAL.0, UNEQUAL.1),
            Warning::Interrupted => f.write_str(INTERRUPTED),
        }
    }
}

impl Warning {
    /// The warning a result file's sentence stands for. A sentence is only taken for a typed
    /// warning when that warning writes it back exactly; anything else is a [`Warning::Note`].
    pub fn parse(text: &str) -> Warning {
        let typed = Self::recognise(text).filter(|w| w.to_string() == text);
        typed.unwrap_or_else(|| Warning::Note(text.to_string()))
    }

    fn recognise(text: &str) -> Option<Warning> {
        if let Some(why) = text.strip_prefix(STOPPED_EARLY) {
            return Some(Warning::StoppedEarly(why.to_string()));
        }
        if text == NOTHING_RECEIVED {
            return Some(Warning::NothingReceived);
        }
        if text == INTERRUPTED {
            return Some(Warning::Interrupted);
        }
        if let Some(rest) = text.strip_prefix(UNEQUAL.0) {
            return Some(Warning::Unequal(rest.strip_suffix(UNEQUAL.1)?.to_string()));
        }
        if let Some(rest) = text.strip_prefix(ACCOUNTING.0) {
            return Some(Warning::AccountingBroken(
                rest.strip_suffix(ACCOUNTING.1)?.to_string(),
            ));
        }
        let n = numbers(text);
        let int = |i: usize| n.get(i).map(|v| *v as u64);
        if text.starts_with("sequence errors: ") {
            return Some(Warning::SequenceErrors {
                gaps: int(0)?,
                duplicates: int(1)?,
                reordered: int(2)?,
            });
        }
        if text.ends_with(EARLY) {
            return Some(Warning::Early {
                deliveries: int(0)?,
                delivered: int(1)?,
                most_ms: *n.get(2)?,
            });
        }
        if text.starts_with("nothing was delivered (") {
            return Some(Warning::NothingDelivered {
                attempted: int(0)?,
                sent: if text.contains(NONE_SENT) { 0 } else { int(1)? },
            });
        }
        if text.contains(" attempted messages failed (") {
            return Some(Warning::Failed {
                failed: int(0)?,
                attempted: int(1)?,
                percent: *n.get(2)?,
            });
        }
        if text.starts_with("target rate not reached: ") {
            return Some(Warning::TargetMissed {
                achieved_per_sec: *n.first()?,
                target_per_sec: *n.get(1)?,
                percent: *n.last()?,
                stream: text.contains(STREAM_TARGET),
            });
        }
        if text.starts_with("send lag p99 is ") {
            return Some(Warning::SendLag {
                p99_ms: *n.get(1)?,
                cause: LagCause::of_sentence(text),
            });
        }
        if text.ends_with(UNANSWERED) {
            return Some(Warning::Unanswered {
                requests: int(0)?,
                longest_wait_ms: *n.get(1)?,
            });
        }
        if text.ends_with(" messages still in flight when the drain timeout ended") {
            return Some(Warning::InFlightAtEnd { messages: int(0)? });
        }
        None
    }

    /// What kind of warning this is, in a few words, for grouping the same warning over many
    /// runs ("send lag p99 above its bound in 4 of 6 runs"). Notes group by their text.
    pub fn kind(&self) -> String {
        match self {
            Warning::StoppedEarly(_) => "stopped early by an error".into(),
            Warning::Note(text) => text.clone(),
            Warning::AccountingBroken(_) => "accounting invariant broken".into(),
            Warning::SequenceErrors { .. } => "sequence errors".into(),
            Warning::Early { .. } => "deliveries before their send time".into(),
            Warning::NothingDelivered { .. } | Warning::NothingReceived => {
                "nothing delivered".into()
            }
            Warning::Failed { .. } => "failed messages".into(),
            Warning::TargetMissed { .. } => "target rate not reached".into(),
            Warning::SendLag { .. } => "send lag p99 above its bound".into(),
            Warning::InFlightAtEnd { .. } => "messages in flight when the drain ended".into(),
            Warning::Unanswered { .. } => "requests that got no answer".into(),
            Warning::Unequal(_) => "connections served unequally".into(),
            Warning::Interrupted => "interrupted".into(),
        }
    }

    /// How bad it is, to pick the worst of a group (larger is worse; 0 when it has no size).
    pub fn severity(&self) -> f64 {
        match self {
            Warning::SequenceErrors {
                gaps,
                duplicates,
                reordered,
            } => (gaps + duplicates + reordered) as f64,
            Warning::Early { most_ms, .. } => *most_ms,
            Warning::NothingDelivered { attempted, .. } => *attempted as f64,
            Warning::Failed { percent, .. } => *percent,
            Warning::TargetMissed { percent, .. } => 100.0 - percent,
            Warning::SendLag { p99_ms, .. } => *p99_ms,
            Warning::InFlightAtEnd { messages } => *messages as f64,
            Warning::Unanswered {
                longest_wait_ms, ..
            } => *longest_wait_ms,
            _ => 0.0,
        }
    }

    /// The run did not go as asked: the system under test's error stopped it.
    pub fn is_stopped_early(&self) -> bool {
        matches!(self, Warning::StoppedEarly(_))
    }

    /// The schedule's rate was not reached.
    pub fn is_target_missed(&self) -> bool {
        matches!(self, Warning::TargetMissed { .. })
    }
}

/// The decimal numbers in `text`, in order (`p99` gives 99: callers index past such words).
fn numbers(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || (c == '.' && !current.is_empty()) {
            current.push(c);
        } else if !current.is_empty() {
            if let Ok(v) = current.trim_end_matches('.').parse() {
                out.push(v);
            }
            current.clear();
        }
    }
    out
}

impl serde::Serialize for Warning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Warning {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Warning::parse(&text))
    }
}

impl schemars::JsonSchema for Warning {
    fn schema_name() -> String {
        "Warning".into()
    }

    fn is_referenceable() -> bool {
        false
    }

    fn json_schema(gen: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        String::json_schema(gen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Warning> {
        vec![
            Warning::StoppedEarly("the connection was closed or reset on connection 0".into()),
            Warning::Note("the built-in server closed 3 connections for bad frames".into()),
            Warning::AccountingBroken("attempted 3 != sent 2 + skipped 0".into()),
            Warning::SequenceErrors {
                gaps: 4,
                duplicates: 0,
                reordered: 2,
            },
            Warning::Early {
                deliveries: 29_950,
                delivered: 30_000,
                most_ms: 0.412,
            },
            Warning::NothingDelivered {
                attempted: 1000,
                sent: 1000,
            },
            Warning::NothingDelivered {
                attempted: 1000,
                sent: 0,
            },
            Warning::NothingReceived,
            Warning::Failed {
                failed: 5,
                attempted: 1000,
                percent: 0.5,
            },
            Warning::TargetMissed {
                achieved_per_sec: 91234.0,
                target_per_sec: 100000.0,
                percent: 91.2,
                stream: false,
            },
            Warning::TargetMissed {
                achieved_per_sec: 4000.0,
                target_per_sec: 5000.0,
                percent: 80.0,
                stream: true,
            },
            Warning::SendLag {
                p99_ms: 2.57,
                cause: LagCause::Pacer,
            },
            Warning::SendLag {
                p99_ms: 2.5,
                cause: LagCause::Held,
            },
            Warning::SendLag {
                p99_ms: 3.0,
                cause: LagCause::Both,
            },
            Warning::SendLag {
                p99_ms: 3.25,
                cause: LagCause::Either,
            },
            Warning::SendLag {
                p99_ms: 12.0,
                cause: LagCause::Stream,
            },
            Warning::InFlightAtEnd { messages: 17 },
            Warning::Unanswered {
                requests: 3,
                longest_wait_ms: 1000.125,
            },
            Warning::Unequal("connection 3 of 4 got 2.0 % of the deliveries".into()),
            Warning::Interrupted,
        ]
    }

    #[test]
    fn every_warning_reads_back_as_itself() {
        for w in every_kind() {
            assert_eq!(Warning::parse(&w.to_string()), w, "{w}");
            let json = serde_json::to_string(&w).unwrap();
            assert_eq!(json, serde_json::to_string(&w.to_string()).unwrap());
            assert_eq!(serde_json::from_str::<Warning>(&json).unwrap(), w);
        }
    }

    #[test]
    fn sentences_of_older_files_keep_their_text() {
        for text in [
            "target rate not reached: 12346/s attempted of 20000/s (61.7 %)",
            "send lag p99 is 1.30 ms: messages went out late (the driver could not keep its schedule, or the system pushed back under `block`)",
            "client slow-0 ended early: the server closed the connection",
            "sequence errors: 1 gaps, 2 duplicates",
        ] {
            assert_eq!(Warning::parse(text).to_string(), text);
        }
        assert!(
            Warning::parse("target rate not reached: 12346/s attempted of 20000/s (61.7 %)")
                .is_target_missed()
        );
        assert!(matches!(
            Warning::parse("sequence errors: 1 gaps, 2 duplicates"),
            Warning::Note(_)
        ));
        assert!(Warning::parse("stopped early: why").is_stopped_early());
    }
}

//! What ends the requests of a connection early (a timeout, a closed connection, a protocol
//! error), how each is counted, and the sentence a run stopped by one (`on_error = "stop"`)
//! carries.
use crate::error::EngineError;
use msgbench_model::result::Faults;

/// Why a connection's requests failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The oldest request got no response within `client.timeout`; with what the connection
    /// held of a reply not yet whole, in the wire's words, when it held some.
    Timeout(Option<String>),
    /// The connection was closed or reset.
    Closed,
    /// The server sent this (not a valid response).
    Protocol(&'static str),
    /// The server sent bytes its wire's decoder refused, and why (a bound, a bad length).
    Malformed(String),
}

impl Failure {
    /// Counts the failure in `faults`; returns what happened, in words.
    pub fn count(self, faults: &mut Faults, timeout_ns: u64) -> String {
        match self {
            Failure::Timeout(held) => {
                faults.timeouts += 1;
                let within =
                    msgbench_model::duration::format(std::time::Duration::from_nanos(timeout_ns));
                match held {
                    None => format!("a request got no response within {within}"),
                    Some(held) => format!(
                        "a request got no response within {within} while the connection held {held}"
                    ),
                }
            }
            Failure::Closed => {
                faults.disconnects += 1;
                "the connection was closed or reset".to_string()
            }
            Failure::Protocol(what) => {
                faults.protocol_errors += 1;
                first_words(faults, format!("the server sent {what}"))
            }
            Failure::Malformed(why) => {
                faults.protocol_errors += 1;
                first_words(
                    faults,
                    format!("the server sent bytes that are not a valid response ({why})"),
                )
            }
        }
    }
}

/// `words`, kept as the run's first protocol error when it is one.
fn first_words(faults: &mut Faults, words: String) -> String {
    if faults.first_protocol_error.is_none() {
        faults.first_protocol_error = Some(words.clone());
    }
    words
}

/// Why a run stopped under `client.on_error = "stop"`: what happened, on which connection,
/// and when.
pub fn stop_message(
    what: &str,
    connection: usize,
    address: &str,
    now_ns: u64,
    measure_start_ns: u64,
) -> String {
    let when = if now_ns < measure_start_ns {
        "during the warm-up".to_string()
    } else {
        format!(
            "{:.2} s into the measured window",
            (now_ns - measure_start_ns) as f64 / 1e9
        )
    };
    // A server that speaks another protocol is not cured by reconnecting: its own fix is named.
    let go_on = if what.contains("http.version") {
        ""
    } else {
        " (set `client.on_error = \"reconnect\"` to go on)"
    };
    format!("{what} on connection {connection} to {address} {when}; the run stopped{go_on}")
}

/// Why a run that only `run.operations` ends stopped: connection `connection` to `address`
/// stayed down `down_ns`, past `client.timeout` (with no scheduled end, it would hold its share
/// of the budget, and the run, forever).
pub fn endless_stop_message(connection: usize, address: &str, down_ns: u64) -> String {
    format!(
        "connection {connection} to {address} stayed down for {:.1} s (client.timeout) in a run \
         that only run.operations ends, so the run stopped rather than wait for it forever \
         (give run.duration too, and the connections reconnect until its end)",
        down_ns as f64 / 1e9
    )
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The TCP connection failed.
    Connect(std::io::Error),
    /// The peer is not a WebSocket server, or refused the upgrade.
    Handshake(String),
    /// The peer answered an event stream's request with no event stream (or its TLS failed).
    Stream(String),
    /// A local socket could not be bound (a UDP feed's port taken): where, and why.
    Bind(String),
}

impl OpenError {
    /// The engine error for a run that cannot start.
    pub fn into_engine(self, url: &str, hint: &str) -> EngineError {
        match self {
            OpenError::Connect(source) => EngineError::Connect {
                address: url.to_string(),
                source,
                hint: hint.to_string(),
            },
            // A gRPC stream's server (http:// or https://) is no WebSocket.
            OpenError::Handshake(problem) if url.starts_with("http") => EngineError::Http2 {
                address: url.to_string(),
                problem,
            },
            OpenError::Handshake(problem) => EngineError::Handshake {
                address: url.to_string(),
                problem,
            },
            OpenError::Stream(problem) => EngineError::EventStream {
                address: url.to_string(),
                problem,
            },
            OpenError::Bind(problem) => EngineError::Bind {
                problem,
                hint: hint.to_string(),
            },
        }
    }
}

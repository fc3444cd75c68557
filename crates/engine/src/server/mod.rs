//! Built-in servers: systems under test msgbench ships, started in-process by a scenario or
//! standalone with `msgbench serve`.
pub mod grpc;
pub mod grpc_reflection;
pub mod grpc_stream;
pub mod http;
pub mod rpc;
pub mod sse;
pub mod ticks;
pub mod udp_ticks;
pub mod ws;
pub mod ws_rpc;

/// One line on stderr per kind of trouble at most every 10 s: a server refusing thousands of
/// connections a second must say so, not flood the terminal.
#[derive(Default)]
pub(crate) struct RateLimitedLog {
    last: Option<std::time::Instant>,
}

impl RateLimitedLog {
    /// Prints `line()` unless a line was printed in the last 10 s.
    pub(crate) fn say(&mut self, line: impl FnOnce() -> String) {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(10))
        {
            return;
        }
        self.last = Some(now);
        eprintln!("{}", line());
    }
}

//! The `[client]` section: settings of the request/response drivers (`rpc`, `redis`, `ws-rpc`):
//! how many connections, how many requests each keeps in flight (its window), and what a due
//! request does when that window is full.
use crate::check::{check_pins, Invalid, MachineLimits, ScenarioError};
use crate::duration::serde_text;
use crate::when_full::WhenFull;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The `[client]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ClientSpec {
    /// Driver threads, each running its own event loop.
    pub threads: u32,
    /// Connections per thread.
    pub connections: u32,
    /// Requests in flight per connection (pipeline depth).
    pub window: u32,
    /// When a request is due and the window is full: `block`, `skip` or `adapt`.
    pub when_full: WhenFull,
    /// A request unanswered this long fails (kind `timeout`) with every other request in
    /// flight on its connection; then `on_error` applies.
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// After a timeout, a closed connection or a protocol error: `stop` the run (what was
    /// measured is kept) or `reconnect` and go on.
    pub on_error: OnError,
    /// CPUs of the driver threads, one per thread (empty: not pinned).
    pub pin: Vec<usize>,
}

impl Default for ClientSpec {
    fn default() -> Self {
        ClientSpec {
            threads: 1,
            connections: 1,
            window: 1,
            when_full: WhenFull::Block,
            timeout: Duration::from_secs(5),
            on_error: OnError::Stop,
            pin: Vec::new(),
        }
    }
}

/// What a connection does after the server closed it or broke the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// End the run; everything measured so far is kept and the result says why it ended.
    Stop,
    /// Reopen the connection (every 100 ms until it works) and go on; requests due meanwhile are
    /// skipped.
    Reconnect,
}

/// Validated client settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// Driver threads.
    pub threads: usize,
    /// Connections per thread.
    pub connections: usize,
    /// Requests in flight per connection.
    pub window: usize,
    /// Full-window policy.
    pub when_full: WhenFull,
    /// Request timeout, ns.
    pub timeout_ns: u64,
    /// Error policy.
    pub on_error: OnError,
    /// CPU of each thread.
    pub pin: Vec<usize>,
    /// Requests a connection attempts per turn of its loop under `immediate` pacing
    /// (`pacing.batch`): with `skip`, what does not fit the window is skipped.
    pub turn_batch: usize,
    /// Spin margin of precise waits, ns (`pacing.spin`).
    pub spin_ns: u64,
    /// Which of the run's connections this process opens (all of them unless `--shard`).
    pub shard: crate::shard::Shard,
}

/// Most connections one run opens.
pub const MAX_CONNECTIONS: u64 = 10_000;

/// Largest window per connection.
pub const MAX_WINDOW: u32 = 65_536;

impl ClientSpec {
    pub(crate) fn validate(
        &self,
        pacing: &crate::pacing::PacingSpec,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<ClientConfig, ScenarioError> {
        self.check_sizes(invalid)?;
        self.check_pacing(pacing, invalid)?;
        check_pins(
            "client.pin",
            "driver",
            &self.pin,
            self.threads,
            limits,
            invalid,
        )?;
        Ok(ClientConfig {
            threads: self.threads as usize,
            connections: self.connections as usize,
            window: self.window as usize,
            when_full: self.when_full,
            timeout_ns: self.timeout.as_nanos() as u64,
            on_error: self.on_error,
            pin: self.pin.clone(),
            turn_batch: pacing.batch as usize,
            spin_ns: pacing.spin_ns(),
            shard: crate::shard::Shard::WHOLE,
        })
    }
}

impl ClientSpec {
    /// Threads, connections, window and timeout within their bounds.
    fn check_sizes(&self, invalid: &Invalid) -> Result<(), ScenarioError> {
        if self.threads == 0 || self.threads > 256 {
            return Err(invalid(
                "client.threads",
                format!("is {}", self.threads),
                "use 1 to 256 driver threads",
            ));
        }
        if self.connections == 0 {
            return Err(invalid(
                "client.connections",
                "is 0".into(),
                "open at least 1 connection per thread",
            ));
        }
        if self.threads as u64 * self.connections as u64 > MAX_CONNECTIONS {
            return Err(invalid(
                "client.connections",
                format!(
                    "makes {} connections in total",
                    self.threads as u64 * self.connections as u64
                ),
                &format!("open at most {MAX_CONNECTIONS} (threads × connections)"),
            ));
        }
        if self.window == 0 || self.window > MAX_WINDOW {
            return Err(invalid(
                "client.window",
                format!("is {}", self.window),
                &format!("keep 1 to {MAX_WINDOW} requests in flight per connection"),
            ));
        }
        if self.timeout.is_zero() || self.timeout > crate::check::MAX_DURATION {
            return Err(invalid(
                "client.timeout",
                format!("is {}", crate::duration::format(self.timeout)),
                "give a timeout between 1ns and 365 days, e.g. \"5s\"",
            ));
        }
        Ok(())
    }

    /// What the pacing allows a request/response driver: an absolute schedule, and `adapt`
    /// only with a target rate.
    fn check_pacing(
        &self,
        pacing: &crate::pacing::PacingSpec,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if pacing.mode == crate::pacing::PacingMode::Relative {
            return Err(invalid(
                "pacing.mode",
                "is `relative`, which only the queue lab supports".into(),
                "use `interval` (an absolute schedule) for request/response systems",
            ));
        }
        if self.when_full == WhenFull::Drop {
            return Err(invalid(
                "client.when_full",
                "is `drop`, the queue's policy (a system that refuses messages)".into(),
                "a request/response driver takes `block`, `skip` or `adapt`",
            ));
        }
        if self.when_full == WhenFull::Adapt
            && !matches!(
                pacing.mode,
                crate::pacing::PacingMode::Rate | crate::pacing::PacingMode::Interval
            )
        {
            return Err(invalid(
                "client.when_full",
                "is `adapt`, which adapts a target rate, but the pacing has none".into(),
                "use pacing mode `rate` or `interval` with `adapt`, or `skip`/`block`",
            ));
        }
        Ok(())
    }
}

impl ClientConfig {
    /// Connections of the whole run (every shard's).
    pub fn total_connections(&self) -> usize {
        self.threads * self.connections
    }

    /// Connections this process opens: its shard's share of [`Self::total_connections`].
    pub fn local_connections(&self) -> usize {
        self.shard.share_of(self.total_connections())
    }

    /// Driver threads this process runs: `threads`, fewer when its shard has fewer
    /// connections than that.
    pub fn local_threads(&self) -> usize {
        self.threads.min(self.local_connections()).max(1)
    }

    /// The local connection indices driver thread `t` owns: `connections` each when unsharded,
    /// a shard's connections spread evenly over its threads otherwise.
    pub fn thread_connections(&self, t: usize) -> std::ops::Range<usize> {
        let (total, threads) = (self.local_connections(), self.local_threads());
        let (each, extra) = (total / threads, total % threads);
        let start = t * each + t.min(extra);
        start..start + each + usize::from(t < extra)
    }

    /// The run-wide index of local connection `local`: what its schedule and budget follow.
    pub fn global_index(&self, local: usize) -> usize {
        self.shard.global(local)
    }

    /// One line in scenario-file spelling.
    pub fn describe(&self) -> String {
        format!(
            "threads={} connections={} window={} when_full={} timeout={}",
            self.threads,
            self.connections,
            self.window,
            self.when_full.name(),
            crate::duration::format(Duration::from_nanos(self.timeout_ns))
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn the_client_refuses_what_it_cannot_run() {
        for (text, field) in [
            ("threads = 0\n", "client.threads"),
            ("connections = 0\n", "client.connections"),
            ("threads = 2\nconnections = 6000\n", "client.connections"),
            ("window = 0\n", "client.window"),
            ("window = 70000\n", "client.window"),
            ("timeout = \"0s\"\n", "client.timeout"),
            ("when_full = \"drop\"\n", "client.when_full"),
            ("when_full = \"adapt\"\n", "client.when_full"),
        ] {
            let text = format!("system = \"redis\"\n[client]\n{text}");
            assert_eq!(refused(&text).0, field, "{text}");
        }
    }

    #[test]
    fn relative_pacing_is_for_the_queue_only() {
        let text = "system = \"redis\"\n[pacing]\nmode = \"relative\"\nevery = \"1ms\"\n";
        assert_eq!(refused(text).0, "pacing.mode");
        assert!(
            valid("system = \"redis\"\n[pacing]\nmode = \"closed-loop\"\n")
                .target_per_sec()
                .is_none()
        );
    }
}

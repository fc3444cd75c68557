//! The `[queue]` section: the in-process ring, its policies and wait strategies
//! ([`QueueSpec`] → [`QueueConfig`]).
use crate::check::{Invalid, MachineLimits, ScenarioError, MAX_DURATION};
use crate::duration::serde_text;
use crate::pacing::{PacingMode, PacingSpec};
use crate::when_full::WhenFull;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Settings of the in-process queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct QueueSpec {
    /// Slots in the ring (any positive number).
    pub capacity: u64,
    /// Ring implementation: `msgbench` (ours), `rtrb` (the crate), or `library`: the user's
    /// own queue from the shared library `queue.library` (docs/own-queue.md).
    pub ring: RingKind,
    /// With `ring = "library"`: the shared library (`.so`) that exports msgbench's queue ABI
    /// (`examples/queues/msgbench_queue.h`), as a path from where msgbench runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<std::path::PathBuf>,
    /// What the producer does when the ring is full: `drop` or `block`.
    pub when_full: WhenFull,
    /// How the producer waits for space (`block` only).
    pub producer_wait: WaitStrategy,
    /// How the consumer waits for items.
    pub consumer_wait: WaitStrategy,
    /// CPU pinning of producer and consumer threads.
    pub pin: PinSpec,
    /// Bytes of a per-consumer buffer touched per item (simulated work).
    pub work_bytes: u64,
    /// Nanoseconds of busy work per item (simulated work).
    #[serde(with = "serde_text")]
    #[schemars(with = "String")]
    pub work: Duration,
}

impl Default for QueueSpec {
    fn default() -> Self {
        QueueSpec {
            capacity: 1024,
            ring: RingKind::Msgbench,
            library: None,
            when_full: WhenFull::Block,
            producer_wait: WaitStrategy::BusySpin,
            consumer_wait: WaitStrategy::BusySpin,
            pin: PinSpec::default(),
            work_bytes: 0,
            work: Duration::ZERO,
        }
    }
}

/// CPU pinning of a two-thread system.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PinSpec {
    /// CPU of the producer thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<usize>,
    /// CPU of the consumer thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<usize>,
}

/// SPSC ring implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RingKind {
    /// msgbench's own ring (cache-padded, cached indices).
    Msgbench,
    /// The `rtrb` crate.
    Rtrb,
    /// The user's queue, loaded from `queue.library` through msgbench's queue ABI.
    Library,
}

/// How a thread waits for something to happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Spin on the CPU (lowest latency, burns a core).
    BusySpin,
    /// `sched_yield` between checks.
    Yield,
    /// Sleep (futex) until woken by the other side.
    Park,
    /// Spin, then yield, then park.
    Backoff,
}

/// Validated queue settings.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueConfig {
    /// Slots (> 0).
    pub capacity: usize,
    /// Ring implementation.
    pub ring: RingKind,
    /// The shared library of `RingKind::Library`.
    pub library: Option<std::path::PathBuf>,
    /// Full policy.
    pub when_full: WhenFull,
    /// Producer wait strategy.
    pub producer_wait: WaitStrategy,
    /// Consumer wait strategy.
    pub consumer_wait: WaitStrategy,
    /// Producer CPU.
    pub pin_producer: Option<usize>,
    /// Consumer CPU.
    pub pin_consumer: Option<usize>,
    /// Bytes touched per item.
    pub work_bytes: usize,
    /// Busy ns per item.
    pub work_ns: u64,
    /// Spin margin of precise sleeps, in ns.
    pub spin_ns: u64,
}

impl QueueConfig {
    /// One line with every setting, in scenario-file spelling.
    pub fn describe(&self) -> String {
        let name = |v: &dyn erased::Spelled| v.spelled();
        let pin = |cpu: Option<usize>| cpu.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
        format!(
            "queue capacity={} ring={}{} when_full={} producer_wait={} consumer_wait={} pin={}/{} work_bytes={} work={}",
            self.capacity,
            name(&self.ring),
            (self.library.as_ref())
                .filter(|_| self.ring == RingKind::Library)
                .map(|l| format!("({})", l.display()))
                .unwrap_or_default(),
            name(&self.when_full),
            name(&self.producer_wait),
            name(&self.consumer_wait),
            pin(self.pin_producer),
            pin(self.pin_consumer),
            self.work_bytes,
            crate::duration::format(Duration::from_nanos(self.work_ns))
        )
    }
}

/// The spelling of enum values in scenario files (`busy-spin`), for descriptions.
mod erased {
    /// A value with a scenario-file spelling.
    pub trait Spelled {
        /// How a scenario file writes it.
        fn spelled(&self) -> String;
    }
    impl<T: serde::Serialize> Spelled for T {
        fn spelled(&self) -> String {
            match serde_json::to_value(self) {
                Ok(serde_json::Value::String(s)) => s,
                other => format!("{other:?}"),
            }
        }
    }
}

impl QueueSpec {
    /// `ring = "library"` names a library that is a file. Another ring ignores it (so that a
    /// sweep of `queue.ring` over `["msgbench", "library"]` compares the two).
    fn check_library(&self, invalid: &Invalid) -> Result<(), ScenarioError> {
        match (self.ring, &self.library) {
            (RingKind::Library, None) => Err(invalid(
                "queue.library",
                "is not set, and `ring = \"library\"` loads the queue from it".into(),
                "give the shared library that exports msgbench's queue ABI, e.g. library = \"target/queues/libspsc_ring.so\" (docs/own-queue.md)",
            )),
            (RingKind::Library, Some(path)) if !path.is_file() => Err(invalid(
                "queue.library",
                format!("is {}, which is not a file here", path.display()),
                "build it first (docs/own-queue.md), and give its path from where msgbench runs",
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn validate(
        &self,
        pacing: &PacingSpec,
        limits: &MachineLimits,
        invalid: &Invalid,
    ) -> Result<QueueConfig, ScenarioError> {
        if pacing.mode == PacingMode::ClosedLoop {
            return Err(invalid(
                "pacing.mode",
                "is `closed-loop`, which needs a request/response system".into(),
                "for the queue use `immediate` with `queue.when_full = \"block\"`",
            ));
        }
        if matches!(self.when_full, WhenFull::Skip | WhenFull::Adapt) {
            return Err(invalid(
                "queue.when_full",
                format!("is `{}`, a request/response driver's policy", self.when_full.name()),
                "the queue takes `block` (wait for room in the ring) or `drop` (the ring refuses it)",
            ));
        }
        if self.work > MAX_DURATION {
            return Err(invalid(
                "queue.work",
                format!("is {}", crate::duration::format(self.work)),
                "use at most 365 days",
            ));
        }
        if self.capacity == 0 {
            return Err(invalid(
                "queue.capacity",
                "is 0".into(),
                "a ring needs at least 1 slot, e.g. 64",
            ));
        }
        if self.capacity > (1 << 26) {
            return Err(invalid(
                "queue.capacity",
                format!("is {}", self.capacity),
                "use at most 67108864 slots (each holds a 24-byte item)",
            ));
        }
        self.check_library(invalid)?;
        if self.work_bytes > (1 << 30) {
            return Err(invalid(
                "queue.work_bytes",
                format!("is {}", self.work_bytes),
                "touch at most 1 GiB per item",
            ));
        }
        for (field, cpu) in [
            ("queue.pin.producer", self.pin.producer),
            ("queue.pin.consumer", self.pin.consumer),
        ] {
            if let Some(cpu) = cpu {
                if !limits.cpus.contains(&cpu) {
                    return Err(invalid(
                        field,
                        format!("is CPU {cpu}, which this process cannot run on"),
                        &format!("pick one of the CPUs {:?}", limits.cpus),
                    ));
                }
            }
        }
        Ok(QueueConfig {
            capacity: self.capacity as usize,
            ring: self.ring,
            // Absolute: a bare `libq.so` would be searched for on the loader's path, not here.
            library: (self.library.as_ref())
                .map(|l| std::fs::canonicalize(l).unwrap_or_else(|_| l.clone())),
            when_full: self.when_full,
            producer_wait: self.producer_wait,
            consumer_wait: self.consumer_wait,
            pin_producer: self.pin.producer,
            pin_consumer: self.pin.consumer,
            work_bytes: self.work_bytes as usize,
            work_ns: self.work.as_nanos() as u64,
            spin_ns: pacing.spin_ns(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    #[test]
    fn the_queue_refuses_what_it_cannot_run() {
        for (text, field) in [
            ("[queue]\ncapacity = 0\n", "queue.capacity"),
            ("[queue]\nwork = \"400d\"\n", "queue.work"),
            ("[queue]\nwhen_full = \"skip\"\n", "queue.when_full"),
            ("[queue.pin]\nproducer = 9\n", "queue.pin.producer"),
            ("[queue.pin]\nconsumer = 9\n", "queue.pin.consumer"),
            ("[pacing]\nmode = \"closed-loop\"\n", "pacing.mode"),
            ("[queue]\nring = \"library\"\n", "queue.library"),
            (
                "[queue]\nring = \"library\"\nlibrary = \"/nonexistent/libq.so\"\n",
                "queue.library",
            ),
        ] {
            assert_eq!(refused(text).0, field, "{text}");
        }
    }

    #[test]
    fn a_valid_queue_keeps_its_settings() {
        let s = valid("[queue]\ncapacity = 8\nwhen_full = \"block\"\n[queue.pin]\nproducer = 0\nconsumer = 1\n");
        let crate::scenario::System::Queue(q) = s.system else {
            panic!("a queue")
        };
        assert_eq!(
            (q.capacity, q.pin_producer, q.pin_consumer),
            (8, Some(0), Some(1))
        );
    }
}

//! The run's lifecycle and timing model, written once for every system.
//!
//! # Timing model
//!
//! A run is laid on one timeline ([`Timeline`]), fixed once every connection is open (for
//! `ws-rpc` and `ticks` also once every worker is pinned and every client subscribed; the
//! others pin within the start lead):
//!
//! ```text
//!   now ──START_LEAD──▶ t0 ──warm-up──▶ measure_start ──duration──▶ end ──drain──▶ deadline
//!                       │ schedule starts                            │ nothing is sent at or
//!                       │ (messages due before measure_start         │ after `end`; messages in
//!                       │  are sent but never counted)               │ flight may still arrive
//! ```
//!
//! * **Latency counts from the intended send time**: the slot the pacer's absolute schedule
//!   gave a message, never the moment the driver got round to sending it. A message due while
//!   the driver or the system is stuck is late, and its lateness is latency (no coordinated
//!   omission). Send lag (actual − scheduled) is recorded beside it.
//! * **What is measured is what was due in the measured span**: a message belongs to the
//!   measured span by its *intended* time (`measure_start ≤ intended < end`), whenever it went.
//! * **The span ends** at `end` when the schedule ran its course — even if the last send was
//!   earlier or later — and at the moment sending stopped otherwise (Ctrl-C, an operation
//!   budget, an error that stops the run) ([`SpanEnd`]).
//! * **The drain** waits at most `run.drain_timeout` after the span's end for what is in flight;
//!   what is still in flight then is `in_flight_end`, never silently dropped.
//! * **CPU** is read at the span's edges: each worker thread its own, the system under test's
//!   from its threads' or process group's clocks ([`SpanCpu`]).
//!
//! A worker thread is prepared the same way everywhere ([`worker`]): lower timer slack (exact
//! sleeps), pin if asked, a current-thread tokio runtime when it speaks WebSocket. The system
//! under test is the built-in server, a `[sut]` process or an address ([`SystemUnderTest`]).
pub mod measured;
pub mod process;
pub mod span;
pub mod stop;
pub mod sut;
pub mod threads;
pub mod timeline;
pub mod timer;
pub mod worker;

pub use measured::{gather, DriverOutput, Measured, RunContext, ThreadOutput};
pub use span::{SpanCpu, SpanEnd};
pub use stop::RunStop;
pub use sut::{BuiltinServer, NoServer, SystemUnderTest};
pub use timeline::{Timeline, START_LEAD_NS, STOP_CHECK_NS};

//! The measuring side of msgbench. Data flows one way:
//! scenario → [`runner`] → [`systems`] → [`drivers`] → system under test → [`recorder`] →
//! results ([`store`]).
//!
//! * [`harness`]: the run's lifecycle and timing model, written once: the timeline (t0,
//!   warm-up, measured span, drain), the worker thread's preamble, the system under test
//!   (built-in server, `[sut]` process or address) and its CPU over the measured span.
//! * [`systems`]: one thin file per system under test (`queue`, `rpc`, `redis`, `ticks`,
//!   `ws-rpc`): its wire format, its server, which driver offers it load.
//! * [`drivers`]: how load is offered, one file per transport pattern: request/response over a
//!   byte stream (generic over the wire format and the transport), over a WebSocket socket
//!   thread, a stream subscriber, browsers, the in-process producer/consumer; the launcher that
//!   applies pacing and `when_full` to every connection.
//! * [`server`]: built-in servers (rpc, ticks, ws-rpc); [`net`]: wire formats.
//! * [`clock`], [`pacer`], [`ring`], [`wait`], [`cpu`], [`affinity`]: primitives.
//! * [`recorder`]: per-worker histograms and counters, one-second intervals, no per-message cost
//!   beyond a clock read and a few histogram increments.
//! * [`runner`]: runs an experiment's sweep, hands each finished run to [`store`] at once;
//!   [`search`]: the maximum sustainable rate under an SLO.
#![deny(missing_docs)]

pub mod affinity;
pub mod clock;
pub mod connection_tally;
pub mod cpu;
pub mod drivers;
pub mod environment;
pub mod error;
pub mod harness;
pub mod hot_histogram;
pub mod merge;
pub mod net;
pub mod pacer;
pub mod recorder;
pub mod ring;
pub mod ring_library;
pub mod runner;
pub mod search;
pub mod server;
pub mod store;
pub mod streamed;
pub mod systems;
pub mod wait;

pub use drivers::http2::reflection::machine_limits;
pub use error::EngineError;

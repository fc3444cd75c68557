//! The measuring side of msgbench: pacer → driver → system under test → recorder → results.
//!
//! * [`clock`]: one monotonic nanosecond clock, precise sleeping, and a manual clock for tests.
//! * [`pacer`]: *when* to send, from an absolute schedule (or relative sleeps, to show the trap).
//! * [`ring`], [`wait`]: the SPSC ring and the ways threads wait on it.
//! * [`recorder`]: per-worker histograms and counters, one-second intervals, no per-message cost
//!   beyond a clock read and a few histogram increments.
//! * [`systems`]: the systems under test (`queue`, `rpc`, `redis`) and their drivers.
//! * [`server`]: built-in servers (the RPC server); [`net`]: wire formats; [`sut`]: external
//!   server processes started for a run.
//! * [`runner`]: runs an experiment's sweep, hands each finished run to [`store`] at once.
#![deny(missing_docs)]

pub mod affinity;
pub mod clock;
pub mod cpu;
pub mod environment;
pub mod hot_histogram;
pub mod net;
pub mod pacer;
pub mod recorder;
pub mod ring;
pub mod runner;
pub mod search;
pub mod server;
pub mod store;
pub mod sut;
pub mod systems;
pub mod wait;

//! Networking shared by the built-in servers and the client drivers: wire formats and the
//! event-loop timer.
pub mod frame;
pub mod resp;
pub mod tick;
pub mod timer;

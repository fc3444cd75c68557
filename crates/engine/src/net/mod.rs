//! Wire formats shared by the built-in servers and the drivers.
pub mod frame;
pub mod resp;
pub mod tick;

//! The system under test of one run: msgbench's built-in server started in-process, an external
//! server started by `[sut]` ([`super::process`]), or just an address. When msgbench started
//! it, the run reads its CPU over the measured span and hears what happened to it; a server at
//! just an address is not measured.
use super::process::SutProcess;
use crate::error::EngineError;
use crate::net::endpoint::Endpoint;
use msgbench_model::sut::SutConfig;
use std::sync::atomic::AtomicBool;

/// A built-in server, as a run needs it.
pub trait BuiltinServer {
    /// CPU used so far by its threads, ns.
    fn cpu_ns(&self) -> u64;
    /// Where it listens.
    fn endpoint(&self) -> Endpoint;
}

/// The server of systems that have no built-in one (Redis).
pub enum NoServer {}

impl BuiltinServer for NoServer {
    fn cpu_ns(&self) -> u64 {
        match *self {}
    }
    fn endpoint(&self) -> Endpoint {
        match *self {}
    }
}

/// Where the system under test runs, for the length of a run (a `[sut]` process is stopped
/// when this is dropped, also on errors and panics).
pub struct SystemUnderTest<S> {
    /// The built-in server, when the scenario names no address.
    pub builtin: Option<S>,
    process: Option<SutProcess>,
}

impl<S: BuiltinServer> SystemUnderTest<S> {
    /// With no `address`, starts the built-in server with `start_builtin`; with one, starts the
    /// `[sut]` process when there is one and waits until it accepts connections.
    pub fn start(
        address: Option<&str>,
        sut: Option<&SutConfig>,
        stop: &AtomicBool,
        start_builtin: impl FnOnce() -> std::io::Result<S>,
    ) -> Result<SystemUnderTest<S>, EngineError> {
        let mut started = SystemUnderTest {
            builtin: None,
            process: None,
        };
        match (address, sut) {
            (None, _) => started.builtin = Some(start_builtin().map_err(EngineError::Server)?),
            (Some(_), Some(cfg)) => started.process = Some(SutProcess::start(cfg, stop)?),
            (Some(_), None) => {}
        }
        Ok(started)
    }

    /// Where the clients connect: `url(the built-in server's address)`, or the `configured`
    /// address (validated: there is one when there is no built-in server).
    pub fn address(
        &self,
        configured: Option<&str>,
        url: impl FnOnce(Endpoint) -> String,
    ) -> String {
        match &self.builtin {
            Some(s) => url(s.endpoint()),
            None => configured
                .expect("validated: an address when there is no built-in server")
                .to_string(),
        }
    }

    /// For systems without a built-in server: starts the `[sut]` process when there is one.
    pub fn external(
        sut: Option<&SutConfig>,
        stop: &AtomicBool,
    ) -> Result<SystemUnderTest<S>, EngineError> {
        Ok(SystemUnderTest {
            builtin: None,
            process: sut.map(|cfg| SutProcess::start(cfg, stop)).transpose()?,
        })
    }

    /// CPU used so far by the built-in server or the `[sut]` process group, ns; `None` for a
    /// server msgbench did not start.
    pub fn cpu_ns(&self) -> Option<u64> {
        self.builtin
            .as_ref()
            .map(|s| s.cpu_ns())
            .or_else(|| self.process.as_ref().map(|p| p.cpu_ns()))
    }

    /// What the reader must know about the `[sut]` process (it exited during the run).
    pub fn process_notes(&mut self) -> Vec<String> {
        self.process
            .as_mut()
            .and_then(|p| p.exited())
            .into_iter()
            .collect()
    }
}

/// Resolves `host:port` (the first address it names).
pub fn resolve(address: &str) -> Result<std::net::SocketAddr, EngineError> {
    resolve_endpoint(address)?
        .tcp()
        .ok_or_else(|| EngineError::Resolve(address.to_string()))
}

/// Resolves `host:port` (the first address it names) or `unix:///path`.
pub fn resolve_endpoint(address: &str) -> Result<Endpoint, EngineError> {
    Endpoint::resolve(address).ok_or_else(|| EngineError::Resolve(address.to_string()))
}

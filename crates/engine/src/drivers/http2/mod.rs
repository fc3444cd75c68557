//! HTTP/2 and gRPC calls under a caller ([`crate::drivers::request_response::caller`]): a single-threaded tokio
//! runtime per caller owns its HTTP/2 connections, on the caller's thread or a socket thread
//! of its own. This is the family's one dispatch: [`run`] hands the connections to one of two
//! clients, as the validated scenario chose (`http.client`, [`Http2Client`]):
//!
//! * [`own`] — msgbench's own client ([`wire`], [`hpack`]): cleartext unary requests and gRPC
//!   calls, the default there, at about half the `h2` crate's user-space CPU per request
//!   (docs/http2-grpc.md, `bench/http2-vs-h2load.sh`);
//! * [`h2_crate`] — the `h2` crate's: https, streaming calls ([`grpc_bidi`],
//!   [`grpc_client_stream`]), or any run that asks for it.
//!
//! Why two remain: msgbench's own speaks neither TLS nor streaming calls, and the `h2` crate's
//! costs 1.5–1.7× the client CPU per request where both serve. What they share — how a response is judged,
//! what a connection does when the server retires it, goes down or comes back, the loops a
//! turn runs in — is [`rules`], written once; neither client imports the other. [`connect`]
//! opens an `h2` connection for the `h2` crate's client and for the gRPC stream and
//! reflection clients ([`reflection`], `drivers::streams`).
pub mod connect;
pub mod grpc_bidi;
pub mod grpc_client_stream;
mod h2_crate;
pub mod hpack;
mod own;
pub mod reflection;
mod rules;
mod streamed;
pub mod wire;

use crate::drivers::request_response::caller::{Ends, InlineSockets, SocketBody, Sockets, Turns};
use crate::error::EngineError;
use crate::harness::worker;
use bytes::Bytes;
use msgbench_model::http::{Http2Client, HttpConfig};
use msgbench_model::result::ErrorCount;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// `http` over HTTP/2: every caller's connections go to the same server.
pub struct H2Sockets {
    /// What every thread shares.
    pub shared: Arc<H2Plan>,
    /// CPUs of the socket threads (empty: not pinned).
    pub pins: Vec<usize>,
}

/// How requests are sent and responses judged.
pub struct H2Plan {
    /// The server's address.
    pub address: SocketAddr,
    /// The URL as given (for messages).
    pub url: String,
    /// `Some` for https: the rustls configuration (ALPN `h2`) and the name to verify.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// Per class: the request's head (method, URI with scheme and authority, headers) and body
    /// (the `h2` crate's client).
    pub requests: Vec<(http::Request<()>, Bytes)>,
    /// How a response is judged.
    pub config: HttpConfig,
    /// Reconnect after a failure (else connections stay down).
    pub reconnect: bool,
    /// Hint for a failed first connection.
    pub hint: String,
    /// The lowest `SETTINGS_MAX_CONCURRENT_STREAMS` any connection was given (`usize::MAX`:
    /// none).
    pub max_streams: AtomicUsize,
    /// `Some`: the requests go over msgbench's own client, so encoded.
    own: Option<own::WirePlan>,
    /// Raised by Ctrl-C: openings give up at once.
    pub stop: Arc<std::sync::atomic::AtomicBool>,
}

/// What a plan is made of, besides the scenario's `[http]`.
pub struct PlanOf {
    /// The server's address.
    pub address: SocketAddr,
    /// See [`H2Plan::tls`].
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// See [`H2Plan::reconnect`].
    pub reconnect: bool,
    /// See [`H2Plan::hint`].
    pub hint: String,
    /// Streams per connection (the caller's window).
    pub window: usize,
    /// The run has no schedule (closed loop, `immediate`).
    pub unpaced: bool,
    /// See [`H2Plan::stop`].
    pub stop: Arc<std::sync::atomic::AtomicBool>,
}

impl H2Plan {
    /// The plan for `config`'s requests, on the client it chose.
    pub fn new(config: &HttpConfig, of: PlanOf) -> Result<H2Plan, String> {
        let own = (config.client == Http2Client::Own)
            .then(|| own::WirePlan::new(config, of.window, of.unpaced));
        Ok(H2Plan {
            address: of.address,
            url: config.url.clone(),
            tls: of.tls,
            requests: H2Plan::requests(config)?,
            config: config.clone(),
            reconnect: of.reconnect,
            hint: of.hint,
            max_streams: AtomicUsize::new(usize::MAX),
            own,
            stop: of.stop,
        })
    }

    /// What a run on this plan says of how it measured (its result's notes): which client,
    /// and how it wrote and read. `awaited_most`: the most answers a caller thread could await.
    pub fn how_it_measures(&self, awaited_most: usize) -> Vec<String> {
        let note = msgbench_model::http::HTTP2_CLIENT_NOTE;
        match (&self.own, self.config.client) {
            (Some(own), _) => own::how_it_measures(own, awaited_most),
            (None, Http2Client::H2Crate { why }) => {
                vec![format!(
                    "{note}the h2 crate's client ({why}), not msgbench's own"
                )]
            }
            (None, Http2Client::Own) => unreachable!("msgbench's own client has its plan"),
        }
    }

    /// The per-class requests of `config`, ready to send on the `h2` crate's client.
    pub fn requests(config: &HttpConfig) -> Result<Vec<(http::Request<()>, Bytes)>, String> {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        config
            .requests
            .iter()
            .map(|r| {
                let p = &r.parts;
                let uri = format!("{scheme}://{}{}", config.authority, p.target);
                let mut builder = http::Request::builder()
                    .method(p.method.as_str())
                    .uri(uri.as_str())
                    .version(http::Version::HTTP_2);
                for (k, v) in &p.headers {
                    builder = builder.header(k.as_str(), v.as_str());
                }
                let head = builder
                    .body(())
                    .map_err(|e| format!("request `{}` cannot be sent as HTTP/2: {e}", r.name))?;
                Ok((head, Bytes::from(p.body.clone())))
            })
            .collect()
    }
}

impl Sockets for H2Sockets {
    fn thread(
        &self,
        t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
    ) -> SocketBody {
        let plan = self.shared.clone();
        let pin = self.pins.get(t).copied();
        Box::new(move || run(plan, connections, Some(pin), ends, ready, None))
    }

    fn inline(&self) -> Option<&dyn InlineSockets> {
        Some(self)
    }
}

impl InlineSockets for H2Sockets {
    fn run_here(
        &self,
        _t: usize,
        connections: usize,
        ends: Ends,
        ready: Sender<Result<(), EngineError>>,
        turns: &mut dyn Turns,
    ) -> Vec<ErrorCount> {
        run(
            self.shared.clone(),
            connections,
            None,
            ends,
            ready,
            Some(turns),
        )
    }
}

/// Runs a caller's connections on the plan's client: connects, reports on `ready`, serves
/// until `stop` (or, with `turns`, runs the caller's turns until it is done); returns the
/// failed answers it read, by message. `pin`: `Some` on a socket thread of its own (then
/// pinned as given, and its CPU clock published); `None` on the caller's thread, already
/// prepared.
fn run(
    plan: Arc<H2Plan>,
    connections: usize,
    pin: Option<Option<usize>>,
    ends: Ends,
    ready: Sender<Result<(), EngineError>>,
    turns: Option<&mut dyn Turns>,
) -> Vec<ErrorCount> {
    let prepared = match pin {
        Some(pin) => {
            if let Some(clock) = crate::cpu::ThreadCpuClock::current() {
                let _ = ends.cpu_clock.set(clock);
            }
            worker::prepare("http/2 socket", pin, true)
        }
        None => Ok(()),
    }
    .and_then(|()| worker::runtime().map_err(EngineError::Io));
    let runtime = match prepared {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(e));
            return Vec::new();
        }
    };
    if plan.own.is_some() {
        own::run(runtime, plan, connections, ends, ready, turns)
    } else {
        h2_crate::run(runtime, plan, connections, ends, ready, turns)
    }
}

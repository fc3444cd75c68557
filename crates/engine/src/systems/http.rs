//! The `http` system: any HTTP/1.1 server, keep-alive connections, a window per connection
//! (above 1: pipelining, answered in order), the scenario's named requests, with the shared
//! driver's pacing, accounting, timeouts and `on_error`. A status outside `http.accept` (2xx by
//! default) or a body without `expect` is a failed request, counted by status line.
use crate::cpu::CpuSnapshot;
use crate::drivers::http2::{H2Plan, H2Sockets, PlanOf};
use crate::drivers::request_response::byte_stream::{self, Plan, Response, Transport, Wire};
use crate::drivers::request_response::caller::{self, Callers};
use crate::drivers::request_response::launcher::Launch;
use crate::drivers::tls::{TlsConnector, TlsStream};
use crate::error::EngineError;
use crate::harness::sut::resolve_endpoint;
use crate::harness::{DriverOutput, Measured, NoServer, RunContext, SystemUnderTest};
use crate::net::endpoint::{Endpoint, Stream};
use crate::net::http_fill::{Counters, Filler};
use crate::net::sse_response::SseResponse;
use crate::net::{http, json_rpc};
use crate::streamed::StreamFigures;
use msgbench_model::client::{ClientConfig, OnError};
use msgbench_model::http::{HttpConfig, HttpVersion};
use msgbench_model::pacing::Pacing;
use msgbench_model::queue::WaitStrategy;
use msgbench_model::result::ErrorCount;
use msgbench_model::scenario::Scenario;
use msgbench_model::sut::SutConfig;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How to get a server where the scenario points.
const HINT: &str = "(start it, or let the scenario start it: `[sut] command = \"exec nginx -c /path/nginx.conf\"`)";

/// How to get a gRPC server where the scenario points.
const GRPC_HINT: &str = "(start it, or msgbench's own: `msgbench serve grpc --listen HOST:PORT`, which echoes any unary call)";

/// What a run without certificate verification says of itself.
const INSECURE: &str =
    "TLS certificate not verified (http.insecure = true): the server was not authenticated";

/// Runs one `http` scenario.
pub fn run(
    scenario: &Scenario,
    client: &ClientConfig,
    config: &HttpConfig,
    sut: Option<&SutConfig>,
    ctx: &RunContext,
) -> Result<Measured, EngineError> {
    let process_before = CpuSnapshot::process();
    let mut server = SystemUnderTest::<NoServer>::external(sut, &ctx.stop)?;
    let address = resolve_endpoint(&config.address)?;
    let on = Target {
        scenario,
        client,
        config,
        address,
    };
    let cpu = || server.cpu_ns();
    let mut h2_notes = Vec::new();
    let out = match &config.tls {
        _ if config.version == HttpVersion::Http2 => on.drive_h2(ctx, &cpu, &mut h2_notes)?,
        None => on.drive::<Stream>((), ctx, &cpu)?,
        Some(tls) => {
            let connector =
                TlsConnector::new(&tls.server_name, tls.ca_file.as_deref(), tls.insecure).map_err(
                    |problem| EngineError::Tls {
                        address: config.address.clone(),
                        problem,
                    },
                )?;
            on.drive::<TlsStream>(connector, ctx, &cpu)?
        }
    };
    let notes = server.process_notes();
    let mut measured = Measured::from_driver(
        out,
        scenario.system.class_names(),
        process_before,
        scenario.system.describe(),
        notes,
    );
    // What the server's settings changed is how it is, not a flaw of the run.
    measured.info.extend(h2_notes);
    if config.tls.as_ref().is_some_and(|t| t.insecure) {
        measured.info.push(INSECURE.to_string());
    }
    Ok(measured)
}

/// Where the requests go.
struct Target<'a> {
    scenario: &'a Scenario,
    client: &'a ClientConfig,
    config: &'a HttpConfig,
    address: Endpoint,
}

impl Target<'_> {
    /// Drives the run over HTTP/2: a caller per client thread, its connections' streams in a
    /// socket thread. What the server's settings changed goes to `notes`.
    fn drive_h2(
        &self,
        ctx: &RunContext,
        cpu: &dyn Fn() -> Option<u64>,
        notes: &mut Vec<String>,
    ) -> Result<DriverOutput, EngineError> {
        let config = self.config;
        let problem = |problem: String| EngineError::Http2 {
            address: config.url.clone(),
            problem,
        };
        let tls = match &config.tls {
            None => None,
            Some(tls) => {
                let (base, _) =
                    crate::drivers::tls::client_config(tls.ca_file.as_deref(), tls.insecure)
                        .map_err(problem)?;
                let mut alpn = (*base).clone();
                // http/1.1 too: a server without HTTP/2 then picks it (and is told why it
                // cannot be measured so) rather than ending the handshake with an alert.
                alpn.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                let name = rustls_pki_types::ServerName::try_from(tls.server_name.clone())
                    .map_err(|e| {
                        problem(format!("{} is not a server name ({e})", tls.server_name))
                    })?;
                Some((Arc::new(alpn), name))
            }
        };
        // The model refuses HTTP/2 on a Unix socket.
        let Some(address) = self.address.tcp() else {
            return Err(problem("HTTP/2 runs over TCP only".into()));
        };
        let of = PlanOf {
            address,
            tls,
            reconnect: self.client.on_error == OnError::Reconnect,
            hint: if config.requests.iter().any(|r| r.grpc) {
                GRPC_HINT
            } else {
                HINT
            }
            .to_string(),
            window: self.client.window,
            unpaced: matches!(self.scenario.pacing, Pacing::Immediate | Pacing::ClosedLoop),
            stop: ctx.stop.clone(),
        };
        let plan = Arc::new(H2Plan::new(config, of).map_err(problem)?);
        let sockets = H2Sockets {
            shared: plan.clone(),
            pins: Vec::new(),
        };
        let callers = Callers {
            name: "http/2 caller",
            shares: config.requests.iter().map(|r| r.share).collect(),
            wait: WaitStrategy::Park,
            socket_pin: &[],
            sockets: &sockets,
        };
        let out = caller::drive(self.scenario, self.client, callers, &config.url, ctx, cpu)?;
        let max = plan.max_streams.load(Ordering::Relaxed);
        if max < self.client.window {
            notes.push(format!(
                "the server allows {max} concurrent streams per connection ({}), fewer than client.window = {}: the others waited for a stream, and that wait is in their latency",
                msgbench_model::http::STREAM_LIMIT,
                self.client.window
            ));
        }
        // Results say which client measured, and how it wrote and read.
        let awaited_most = self.client.window.min(max) * self.client.connections;
        notes.extend(plan.how_it_measures(awaited_most));
        Ok(out)
    }

    /// Drives the run over transport `T` (TCP or TLS).
    fn drive<T: Transport>(
        &self,
        connector: T::Connector,
        ctx: &RunContext,
        cpu: &dyn Fn() -> Option<u64>,
    ) -> Result<DriverOutput, EngineError> {
        let counters = Counters::new(
            self.config.requests.len(),
            crate::clock::wall_minus_now_ns(),
            self.scenario.run.seed,
        );
        let plan = Plan {
            scenario: self.scenario,
            client: self.client,
            address: self.address.clone(),
            shares: self.config.requests.iter().map(|r| r.share).collect(),
            make_wire: |index| HttpWire::new(self.config, &counters, index),
            hint: HINT,
            connector,
        };
        byte_stream::drive::<_, T>(plan, ctx, cpu)
    }
}

/// Sends the mix's prepared requests; finds each response and judges it.
pub struct HttpWire<'a> {
    config: &'a HttpConfig,
    /// Classes of the requests sent and not yet answered, oldest first (HTTP/1.1 answers in
    /// order): a HEAD's response has no body, and `expect` is per class.
    pending: VecDeque<u16>,
    errors: Vec<ErrorCount>,
    /// Where a failed response's words are written (reused: no allocation per failure).
    scratch: String,
    /// A chunked body's data, for `expect` (reused).
    body: Vec<u8>,
    /// How far the scan of the response being read got (its chunks are walked once).
    resume: http::Resume,
    /// Writes the requests that vary.
    filler: Filler<'a>,
    /// The streamed response being read (`stream = "sse"`).
    sse: SseResponse,
    /// The last response decoded was streamed: `sse` holds its figures until the next.
    streamed_done: bool,
    /// When the bytes being decoded arrived.
    now: u64,
}

impl<'a> HttpWire<'a> {
    /// Connection `index`'s wire; `counters` number the run's varying requests.
    pub fn new(config: &'a HttpConfig, counters: &'a Counters, index: usize) -> HttpWire<'a> {
        HttpWire {
            config,
            pending: VecDeque::with_capacity(64),
            errors: Vec::new(),
            scratch: String::with_capacity(128),
            body: Vec::new(),
            resume: http::Resume::default(),
            filler: Filler::new(counters, config.keys, index),
            sse: SseResponse::default(),
            streamed_done: false,
            now: 0,
        }
    }

    /// Whether the response `found` at the start of `buf` answers class `class` as asked.
    fn judge(&mut self, buf: &[u8], found: &http::Found, class: usize) -> bool {
        if !self.config.accepts(found.status) {
            http::status_text(buf, found, &mut self.scratch);
            ErrorCount::add(&mut self.errors, &self.scratch, 1);
            return false;
        }
        let expect = self.config.requests[class].expect.as_deref();
        if expect.is_none() && !self.config.json_rpc {
            return true;
        }
        let mut body = &buf[found.body.0..found.body.1];
        if found.chunked {
            // A string may span chunks: search the data, not the framing.
            http::dechunk(body, &mut self.body);
            body = &self.body;
        }
        if self.config.json_rpc {
            match json_rpc::parse_reply(body) {
                Some((_, true)) => {}
                Some((_, false)) => {
                    json_rpc::error_message(body, &mut self.scratch);
                    ErrorCount::add(&mut self.errors, &self.scratch, 1);
                    return false;
                }
                None => {
                    ErrorCount::add(&mut self.errors, "not a JSON-RPC response", 1);
                    return false;
                }
            }
        }
        let Some(expect) = expect else {
            return true;
        };
        let holds = expect.is_empty() || body.windows(expect.len()).any(|w| w == expect);
        if !holds {
            self.scratch.clear();
            self.scratch.push_str("body check failed (");
            self.scratch.push_str(&self.config.requests[class].name);
            self.scratch.push(')');
            ErrorCount::add(&mut self.errors, &self.scratch, 1);
        }
        holds
    }
}

impl Wire for HttpWire<'_> {
    #[inline]
    fn encode(&mut self, launch: &Launch, out: &mut Vec<u8>) {
        let class = launch.class;
        let request = &self.config.requests[class];
        match &request.vary {
            None => out.extend_from_slice(&request.bytes),
            Some(vary) => self.filler.write(class, vary, launch.intended_ns, out),
        }
        self.pending.push_back(class as u16);
    }

    fn decode(&mut self, buf: &[u8]) -> Result<Option<Response>, String> {
        // A response with nothing asked is still framed (as a GET's) so that the driver can
        // say "a reply with no request in flight".
        let class = self.pending.front().map(|&c| c as usize);
        let head = class.is_some_and(|c| self.config.requests[c].head);
        if std::mem::take(&mut self.streamed_done) {
            self.sse.start();
        }
        let config = self.config;
        let streamed = class.and_then(|c| config.requests[c].stream.as_ref());
        if let Some(s) = streamed {
            self.sse.advance(buf, self.now, &s.done)?;
        }
        let found = match http::decode_from(buf, head, self.config.max_response, &mut self.resume) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        self.pending.pop_front();
        self.streamed_done = streamed.is_some();
        let mut ok = class.is_some_and(|c| self.judge(buf, &found, c));
        if let (true, Some(kind)) = (ok && streamed.is_some(), self.sse.not_a_stream()) {
            // A success that is no stream (a request without `"stream": true`, say) measures
            // nothing of what was asked: it fails, said once per kind.
            self.scratch.clear();
            self.scratch.push_str("not an event stream (content-type ");
            // At most 60 characters of the server's text (a char boundary: it may be anything).
            self.scratch.extend(kind.chars().take(60));
            self.scratch
                .push_str("): does the request ask for a stream?");
            ErrorCount::add(&mut self.errors, &self.scratch, 1);
            ok = false;
        }
        Ok(Some(Response {
            id: None,
            size: found.size,
            ok,
            closes: found.closes,
        }))
    }

    fn reset(&mut self) {
        self.pending.clear();
        self.resume = http::Resume::default();
        self.sse.start();
        self.streamed_done = false;
    }

    fn arrived(&mut self, now: u64) {
        self.now = now;
    }

    fn streamed(&self) -> Option<&StreamFigures> {
        self.streamed_done.then_some(&self.sse.figures)
    }

    fn cut_short(&self) -> Option<u64> {
        (!self.streamed_done && self.sse.in_progress()).then_some(self.sse.figures.messages)
    }

    fn take_errors(&mut self) -> Vec<ErrorCount> {
        std::mem::take(&mut self.errors)
    }
}

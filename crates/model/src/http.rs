//! The `[http]` section: the server's URL, the named requests of the mix (method, path,
//! headers, body), which statuses count as delivered and how large a response may be
//! ([`HttpSpec`] → [`HttpConfig`]). Each request is rendered to its bytes once, here.
use crate::check::{shares, Invalid, ScenarioError};
use crate::http_vary::{read_request_file, FileOrder, Template, Vary, Varying};
pub use crate::redis::KeyPattern;
use crate::url::{parse_url, Url};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The `[http]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSpec {
    /// The server: `http://host[:port]` or `https://host[:port]` (over TLS for https; the
    /// port defaults to 80 or 443).
    pub url: String,
    /// `"1.1"` (the default): HTTP/1.1, a window above 1 pipelines. `"2"`: HTTP/2, a window is
    /// that many concurrent streams per connection (cleartext `http://` with prior knowledge,
    /// `https://` through ALPN). gRPC calls are HTTP/2 whatever is not said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// https: a PEM file of CA certificates the server's certificate may chain to, besides the
    /// Mozilla roots compiled in (for a private or test CA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// https: take any certificate, unverified (the report says so). Off by default.
    pub insecure: bool,
    /// Responses are JSON-RPC 2.0: a 2xx response with an `error` member (or that is not a
    /// JSON-RPC response) is a failed request, counted by code and message. On by itself when
    /// a request has `rpc_method`.
    pub json_rpc: bool,
    /// Statuses that count as delivered; empty: every 2xx. Any other status is a failed
    /// request, counted by status line.
    pub accept: Vec<u16>,
    /// Largest response (head and body) accepted, bytes: a larger one (a 10 GB
    /// `Content-Length`) is a protocol fault, never memory.
    pub max_response: u64,
    /// The requests of the mix by name, each its own operation class. Default: `GET /`.
    pub requests: BTreeMap<String, HttpRequestSpec>,
    /// gRPC: the `.proto` file that describes the calls (`grpc` requests), compiled when the
    /// scenario is checked; or a `.protoset`/`.pb` file of compiled descriptors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<String>,
    /// gRPC: folders the `.proto`'s imports are looked up in (its own folder is searched last).
    pub include: Vec<String>,
    /// gRPC: ask the server for its descriptors (server reflection, `grpc.reflection.v1` or
    /// `v1alpha`) when the scenario is checked, instead of reading a `.proto`.
    pub reflection: bool,
    /// HTTP/2: the client that measures. `"msgbench"`: msgbench's own (cleartext `http://`,
    /// unary requests and gRPC calls; the default there, about half the `h2` crate's CPU per
    /// request). `"h2"`: the `h2` crate's (every HTTP/2 run; the one for https and streaming
    /// calls). Left out: msgbench's own where it serves, else `h2`. A run's notes say which
    /// measured, and `compare` says when two sides differ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// A Unix domain socket to connect to instead of the URL's host and port (curl's and
    /// oha's `--unix-socket`): the URL still gives the `Host` header and the requests' targets.
    /// HTTP/1.1 over `http://` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unix_socket: Option<String>,
    /// The key space of `{key}` in a request's path, headers or body: key numbers 0 …
    /// `keys`−1 (0: `{key}` is refused).
    pub keys: u64,
    /// How `{key}` is picked: `uniform`, `sequential` (0, 1, 2, … per connection, wrapping) or
    /// `zipf` (key k with probability ∝ 1/(k+1)^zipf_exponent: a few hot keys).
    pub key_pattern: KeyPattern,
    /// The exponent of `zipf` (> 0; 0.99 is YCSB's).
    pub zipf_exponent: f64,
}

impl Default for HttpSpec {
    fn default() -> Self {
        HttpSpec {
            url: String::new(),
            version: None,
            ca_file: None,
            insecure: false,
            json_rpc: false,
            accept: Vec::new(),
            max_response: 64 << 20,
            requests: BTreeMap::new(),
            proto: None,
            include: Vec::new(),
            reflection: false,
            client: None,
            unix_socket: None,
            keys: 0,
            key_pattern: KeyPattern::Uniform,
            zipf_exponent: 0.99,
        }
    }
}

/// One request of the mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpRequestSpec {
    /// Relative weight in the mix.
    pub weight: f64,
    /// `GET`, `POST`, … (any token).
    pub method: String,
    /// The request target, from `/`.
    pub path: String,
    /// Extra header lines, name → value (`Host` and `Content-Length` are written for you).
    pub headers: BTreeMap<String, String>,
    /// The body, inline.
    pub body: String,
    /// The body, from a file (instead of `body`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_file: Option<String>,
    /// A delivered response must contain this in its body (else it is a failed request,
    /// counted as `body check failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// A JSON-RPC 2.0 call instead of a body: POST `{"jsonrpc":"2.0","id":1,"method":…,
    /// "params":…}` with `Content-Type: application/json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc_method: Option<String>,
    /// Its params (any TOML value, sent as JSON; usually an array).
    #[schemars(with = "serde_json::Value")]
    pub rpc_params: toml::Value,
    /// A gRPC unary call instead: `package.Service/Method` of `http.proto` (sent over HTTP/2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grpc: Option<String>,
    /// The gRPC call's request message as JSON (protobuf's JSON mapping); default `{}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A bidirectional gRPC call: the field (in both the request and the reply message, a
    /// 64-bit integer or a string) that pairs each reply with its request. Each connection
    /// keeps one stream of the call open; every request is one message on it, this field set
    /// to the request's id.
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub match_field: Option<String>,
    /// A client-streaming gRPC call: how many messages (each the `message`) every call sends,
    /// back to back on its stream; its latency runs to the call's one response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<u32>,
    /// A client-streaming call whose messages are paced: each message is a request of its own,
    /// sent on its schedule on the class's open call of its connection; after `messages` of
    /// them the call ends, and its one response confirms them all (each message's latency runs
    /// from its intended send to that response). Off: a call's messages go back to back.
    pub paced: bool,
    /// Requests from a file instead, read once: vegeta's targets (`GET http://host/path`,
    /// header lines, `@body-file`, a blank line) or JSON lines (`{"method": …, "url": …,
    /// "header": {…}, "body": "<base64>"}`); sent as written, this request's `headers` added
    /// where a request lacks them. At most 256 MiB and 10 million requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The order of `file`'s requests: `cycle` (first to last, again, over every connection
    /// together) or `random`.
    pub order: FileOrder,
    /// The response is a stream of messages: `"sse"` (Server-Sent Events, as an LLM's
    /// `"stream": true` completion answers). Besides the request's latency (to the stream's
    /// end), each stream's time to its first message, the gaps between its messages and its
    /// time per message are measured. HTTP/1.1 or HTTP/2. (A gRPC server-streaming call is
    /// measured so without it: its method says it streams.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<ResponseStream>,
    /// A stream's event whose data is exactly this ends it without being counted as a message
    /// (OpenAI's `[DONE]`).
    pub stream_done: String,
}

/// What a streamed response is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ResponseStream {
    /// Server-Sent Events (`text/event-stream`): each event with data is a message.
    Sse,
}

/// A validated streamed response: what its messages are, and what ends it besides its
/// body's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamedResponse {
    /// The data of the event that ends the stream uncounted (`[DONE]`; empty: none).
    pub done: Vec<u8>,
    /// The messages are a gRPC server stream's (length-prefixed), not Server-Sent Events.
    pub grpc: bool,
}

impl Default for HttpRequestSpec {
    fn default() -> Self {
        HttpRequestSpec {
            weight: 1.0,
            method: "GET".into(),
            path: "/".into(),
            headers: BTreeMap::new(),
            body: String::new(),
            body_file: None,
            expect: None,
            rpc_method: None,
            rpc_params: toml::Value::Array(Vec::new()),
            grpc: None,
            message: None,
            match_field: None,
            messages: None,
            paced: false,
            file: None,
            order: FileOrder::Cycle,
            stream: None,
            stream_done: "[DONE]".into(),
        }
    }
}

/// Most bytes a client-streaming call sends (its messages together).
const MAX_STREAMED_BODY: u64 = 64 << 20;

/// One validated request: its bytes on the wire, ready to copy.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Class name.
    pub name: String,
    /// Share of the mix.
    pub share: f64,
    /// The whole request: line, headers, body.
    pub bytes: Vec<u8>,
    /// A `HEAD` request: its response has no body whatever its headers say.
    pub head: bool,
    /// What the body must contain.
    pub expect: Option<Vec<u8>>,
    /// The same request in parts, for HTTP/2: method, target, extra headers (besides the
    /// authority), body.
    pub parts: RequestParts,
    /// A gRPC call: its response is judged by `grpc-status`.
    pub grpc: bool,
    /// The response is a stream of messages (`stream = "sse"`, or a gRPC server-streaming
    /// call).
    pub stream: Option<StreamedResponse>,
    /// A bidirectional gRPC call: requests are messages on one stream per connection (their
    /// bodies unframed in `parts.body`), paired with replies by this field.
    pub bidi: Option<crate::grpc::BidiMatch>,
    /// A paced client-streaming call: requests are messages (their frame in `parts.body`) on
    /// one open call per connection, this many to a call, confirmed by its response.
    pub paced: Option<u32>,
    /// HTTP/1.1 requests that vary (fields filled in, or a file's): `bytes` is then only the
    /// first request, for what reads one (`check`'s listing).
    pub vary: Option<Arc<Vary>>,
}

/// A request's parts, for a transport that frames them itself (HTTP/2).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestParts {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target, from `/`.
    pub target: String,
    /// Header fields, name → value (no `Host`: it is the authority).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Which HTTP the requests are sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/1.1 (a window above 1 pipelines).
    Http1,
    /// HTTP/2 (a window is concurrent streams).
    Http2,
}

/// Which HTTP/2 client measures (`http.client`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Http2Client {
    /// msgbench's own: cleartext, unary requests and gRPC calls.
    Own,
    /// The `h2` crate's, and why (`https`, `streaming calls`, `http.client = "h2"`).
    H2Crate {
        /// Why this client and not msgbench's own.
        why: &'static str,
    },
}

/// How an https server is reached.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    /// The name its certificate must carry (the URL's host, without port).
    pub server_name: String,
    /// Extra CA certificates (PEM).
    pub ca_file: Option<String>,
    /// No verification at all.
    pub insecure: bool,
}

/// Validated `[http]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// `host:port` to connect to, or `unix:///path` (`http.unix_socket`).
    pub address: String,
    /// HTTP/1.1 or HTTP/2.
    pub version: HttpVersion,
    /// HTTP/2: the client that measures (unused by HTTP/1.1).
    pub client: Http2Client,
    /// The request's authority (`Host`, `:authority`): the URL's host and port as written.
    pub authority: String,
    /// https: how; `None` for plain http.
    pub tls: Option<TlsConfig>,
    /// Responses are JSON-RPC 2.0 (their `error` member fails a request).
    pub json_rpc: bool,
    /// The URL as given.
    pub url: String,
    /// Delivered statuses (empty: 2xx).
    pub accept: Vec<u16>,
    /// Largest response, bytes.
    pub max_response: usize,
    /// The mix.
    pub requests: Vec<HttpRequest>,
    /// `{key}`'s key space, pattern and Zipf exponent.
    pub keys: (u64, KeyPattern, f64),
}

impl HttpConfig {
    /// Whether `status` counts as delivered.
    pub fn accepts(&self, status: u16) -> bool {
        if self.accept.is_empty() {
            (200..300).contains(&status)
        } else {
            self.accept.contains(&status)
        }
    }
}

impl HttpRequestSpec {
    /// This request with the URL's path and query as its target when it gives none of its own
    /// (`path` left at `/`): `url = "http://host/slow"` sends `GET /slow` (it once sent
    /// `GET /`, silently).
    fn aimed(&self, url_target: &str) -> std::borrow::Cow<'_, HttpRequestSpec> {
        if self.path == "/" && url_target != "/" {
            std::borrow::Cow::Owned(HttpRequestSpec {
                path: url_target.to_string(),
                ..self.clone()
            })
        } else {
            std::borrow::Cow::Borrowed(self)
        }
    }
}

/// An HTTP token (method, header name): visible ASCII without separators.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl HttpSpec {
    pub(crate) fn validate(
        &self,
        limits: &crate::check::MachineLimits,
        invalid: &Invalid,
    ) -> Result<HttpConfig, ScenarioError> {
        if self.url.is_empty() {
            return Err(invalid(
                "http.url",
                "is missing".into(),
                "give the server, e.g. url = \"http://127.0.0.1:8080\"",
            ));
        }
        let url = parse_url(&self.url)
            .map_err(|(why, fix)| invalid("http.url", format!("\"{}\" {why}", self.url), fix))?;
        let tls = self.tls(&url, invalid)?;
        let protos = self.protos(&url, limits, invalid)?;
        let version = self.checked_version(protos.is_some(), invalid)?;
        let host = url.authority;
        if let Some(bad) = self.accept.iter().find(|s| !(100..=999).contains(*s)) {
            return Err(invalid(
                "http.accept",
                format!("has the status {bad}"),
                "statuses are 100 to 999, e.g. accept = [200, 204]",
            ));
        }
        if !(1024..=(1u64 << 32)).contains(&self.max_response) {
            return Err(invalid(
                "http.max_response",
                format!("is {}", self.max_response),
                "give 1024 bytes to 4 GiB",
            ));
        }
        let default: BTreeMap<String, HttpRequestSpec> =
            [("get".to_string(), HttpRequestSpec::default())].into();
        let specs = if self.requests.is_empty() {
            &default
        } else {
            &self.requests
        };
        let target = (host.as_str(), url.target.as_str(), url.tls);
        let requests = requests_of(specs, target, version, protos.as_ref(), invalid)?;
        let json_rpc = self.json_rpc || specs.values().any(|r| r.rpc_method.is_some());
        if let Some(r) = requests.iter().find(|r| json_rpc && r.stream.is_some()) {
            return Err(invalid(
                &format!("http.requests.{}.stream", r.name),
                "is given in a JSON-RPC run".into(),
                "a streamed response is judged by its status and messages, not as one JSON-RPC reply: measure it in a run without json_rpc or rpc_method",
            ));
        }
        let client = self.checked_client(version, tls.is_some(), &requests, invalid)?;
        Ok(HttpConfig {
            address: self
                .checked_unix_socket(version, tls.is_some(), invalid)?
                .unwrap_or(url.address),
            version,
            client,
            authority: host,
            tls,
            json_rpc,
            url: self.url.clone(),
            accept: self.accept.clone(),
            max_response: self.max_response as usize,
            keys: self.checked_keys(&requests, invalid)?,
            requests,
        })
    }

    /// `{key}`'s key space: some keys when a request has `{key}`, a positive Zipf exponent.
    fn checked_keys(
        &self,
        requests: &[HttpRequest],
        invalid: &Invalid,
    ) -> Result<(u64, KeyPattern, f64), ScenarioError> {
        let uses_key = requests.iter().any(|r| {
            matches!(r.vary.as_deref(), Some(Vary::Template(t)) if t.uses(crate::http_vary::Field::Key))
        });
        if uses_key && self.keys == 0 {
            return Err(invalid(
                "http.keys",
                "is 0, and a request has {key}".into(),
                "give the key space, e.g. keys = 100000 (and key_pattern = \"zipf\" for a few hot keys)",
            ));
        }
        if !(self.zipf_exponent > 0.0 && self.zipf_exponent.is_finite()) {
            return Err(invalid(
                "http.zipf_exponent",
                format!("is {}", self.zipf_exponent),
                "give a positive exponent, e.g. 0.99 (YCSB's)",
            ));
        }
        Ok((self.keys, self.key_pattern, self.zipf_exponent))
    }
}

impl HttpSpec {
    /// The HTTP version: `1.1` by default, `2` for a gRPC call (`grpc`), where 1.1 is refused.
    fn checked_version(&self, grpc: bool, invalid: &Invalid) -> Result<HttpVersion, ScenarioError> {
        Ok(match self.version.as_deref() {
            Some("1.1") if grpc => {
                return Err(invalid(
                    "http.version",
                    "is \"1.1\", and a request is a gRPC call".into(),
                    "gRPC is HTTP/2: leave version out, or give \"2\"",
                ))
            }
            // gRPC is HTTP/2.
            None if grpc => HttpVersion::Http2,
            None | Some("1.1") => HttpVersion::Http1,
            Some("2") => HttpVersion::Http2,
            Some(other) => {
                return Err(invalid(
                    "http.version",
                    format!("is \"{other}\""),
                    "give \"1.1\" (HTTP/1.1, the default) or \"2\" (HTTP/2)",
                ))
            }
        })
    }
}

impl HttpSpec {
    /// `unix:///path` when the run goes to a Unix socket: HTTP/1.1 in clear.
    fn checked_unix_socket(
        &self,
        version: HttpVersion,
        tls: bool,
        invalid: &Invalid,
    ) -> Result<Option<String>, ScenarioError> {
        let Some(path) = &self.unix_socket else {
            return Ok(None);
        };
        // The address form is taken too (`unix:///run/app.sock`), as a path is meant.
        let path = path.strip_prefix(crate::check::UNIX_SCHEME).unwrap_or(path);
        crate::check::check_unix_path("http.unix_socket", path, invalid)?;
        if tls || version == HttpVersion::Http2 {
            return Err(invalid(
                "http.unix_socket",
                format!("is given for {}", if tls { "https" } else { "HTTP/2" }),
                "a Unix socket carries HTTP/1.1 in clear here: give an http:// URL and leave version out, or leave unix_socket out",
            ));
        }
        Ok(Some(format!("{}{path}", crate::check::UNIX_SCHEME)))
    }

    /// The HTTP/2 client (`http.client`): msgbench's own for cleartext unary requests unless
    /// `"h2"` is asked; the `h2` crate's for https and streaming calls, where `"msgbench"` is
    /// refused rather than quietly measured with the other.
    fn checked_client(
        &self,
        version: HttpVersion,
        tls: bool,
        requests: &[HttpRequest],
        invalid: &Invalid,
    ) -> Result<Http2Client, ScenarioError> {
        let streaming = requests
            .iter()
            .any(|r| r.bidi.is_some() || r.paced.is_some() || r.stream.is_some());
        let needs_h2 = if tls {
            Some("https")
        } else if streaming {
            Some("streaming calls")
        } else {
            None
        };
        match (self.client.as_deref(), version, needs_h2) {
            (Some("h2"), HttpVersion::Http1, _) => Err(invalid(
                "http.client",
                "is \"h2\", an HTTP/2 client, and the run is HTTP/1.1".into(),
                "give version = \"2\", or leave client out",
            )),
            (Some("msgbench"), HttpVersion::Http2, Some(what)) => Err(invalid(
                "http.client",
                format!("is \"msgbench\", and msgbench's own HTTP/2 client does not speak {what}"),
                "give \"h2\" (the h2 crate's client), or leave client out",
            )),
            (Some("h2"), _, None) => Ok(Http2Client::H2Crate {
                why: "http.client = \"h2\"",
            }),
            (Some("h2") | Some("msgbench") | None, _, Some(why)) => Ok(Http2Client::H2Crate { why }),
            (Some("msgbench") | None, _, None) => Ok(Http2Client::Own),
            (Some(other), _, _) => Err(invalid(
                "http.client",
                format!("is \"{other}\""),
                "give \"msgbench\" (msgbench's own HTTP/2 client, the default for cleartext unary requests) or \"h2\" (the h2 crate's)",
            )),
        }
    }
}

/// Every request of `specs` rendered for `(host, url_target)` (its `paced` and `match` only
/// with a gRPC call; HTTP/2's forbidden headers refused).
fn requests_of(
    specs: &BTreeMap<String, HttpRequestSpec>,
    (host, url_target, tls): (&str, &str, bool),
    version: HttpVersion,
    protos: Option<&prost_reflect::DescriptorPool>,
    invalid: &Invalid,
) -> Result<Vec<HttpRequest>, ScenarioError> {
    let shares = shares("http.requests", specs, |r| r.weight, invalid)?;
    let server = (host, tls);
    let mut requests = Vec::new();
    for ((name, r), share) in specs.iter().zip(shares) {
        let field = |key: &str| format!("http.requests.{name}.{key}");
        let request = match &r.grpc {
            Some(call) => r.grpc_call(call, protos, (name, share), &field, invalid)?,
            None if r.paced => {
                return Err(invalid(
                    &field("paced"),
                    "is given without a gRPC call".into(),
                    "`paced` sends a client-streaming gRPC call's messages on their schedule: give grpc = \"package.Service/Method\" and messages = N too",
                ))
            }
            None if r.match_field.is_some() => {
                return Err(invalid(
                    &field("match"),
                    "is given without a gRPC call".into(),
                    "`match` pairs the replies of a bidirectional gRPC call: give grpc = \"package.Service/Method\" too",
                ))
            }
            None if r.file.is_some() => r.file_request(server, (name, share), &field, invalid)?,
            None => (r.aimed(url_target)).render((host, version), name, share, &field, invalid)?,
        };
        let mut request = request;
        if let Some(stream) = r.response_stream(&request, &field, invalid)? {
            request.stream = Some(stream);
        }
        if request.stream.is_some() && request.expect.is_some() && version == HttpVersion::Http2 {
            return Err(invalid(
                &field("expect"),
                "is given for a streamed response over HTTP/2".into(),
                "a stream's body is read message by message, not kept: leave expect out (an event stream over HTTP/1.1 keeps its body and checks it)",
            ));
        }
        if version == HttpVersion::Http2 {
            check_h2_headers(&request.parts, &field, invalid)?;
            if request.vary.is_some() {
                return Err(invalid(
                    &field("file"),
                    "varies per request, and the run is HTTP/2".into(),
                    "requests that vary (fields, a request file) are HTTP/1.1 for now: give http.version = \"1.1\" (docs/concepts.md \"Requests that vary\")",
                ));
            }
        }
        requests.push(request);
    }
    Ok(requests)
}

/// HTTP/2 forbids the connection-specific header fields of HTTP/1.1 (RFC 9113 §8.2.2): a
/// request with one is malformed, and a server resets its stream.
fn check_h2_headers(
    parts: &RequestParts,
    field: &dyn Fn(&str) -> String,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    const CONNECTION_SPECIFIC: [&str; 5] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ];
    for (k, v) in &parts.headers {
        if CONNECTION_SPECIFIC.contains(&k.as_str()) || (k == "te" && v != "trailers") {
            return Err(invalid(
                &field("headers"),
                format!("has \"{k}: {v}\", which HTTP/2 forbids"),
                "leave connection-specific headers out of HTTP/2 requests (gRPC calls, version = \"2\"): HTTP/2 keeps connections open by itself, and `te` may only be \"trailers\"",
            ));
        }
    }
    if parts.target == "*" {
        return Err(invalid(
            &field("path"),
            "is \"*\"".into(),
            "HTTP/2 requests need a path from /",
        ));
    }
    Ok(())
}

impl HttpSpec {
    /// The descriptors of the calls when a request is a gRPC call (`None` when none is): the
    /// compiled `.proto`, or what the server's reflection offers.
    fn protos(
        &self,
        url: &Url,
        limits: &crate::check::MachineLimits,
        invalid: &Invalid,
    ) -> Result<Option<prost_reflect::DescriptorPool>, ScenarioError> {
        let given = if self.reflection {
            Some("http.reflection")
        } else {
            self.proto.as_ref().map(|_| "http.proto")
        };
        if !self.requests.values().any(|r| r.grpc.is_some()) {
            if let Some(field) = given {
                return Err(invalid(
                    field,
                    "is given, but no request is a gRPC call".into(),
                    "name a call in a request, e.g. grpc = \"helloworld.Greeter/SayHello\"",
                ));
            }
            return Ok(None);
        }
        if self.reflection {
            if self.proto.is_some() {
                return Err(invalid(
                    "http.reflection",
                    "is given with http.proto".into(),
                    "give one: the .proto (read here), or reflection = true (asked of the server)",
                ));
            }
            let tls = (self.ca_file.as_deref(), self.insecure);
            // The first call's headers (in the mix's order): `authorization` and the like,
            // which a server may want for reflection as for its calls.
            // Headers that are no valid metadata are left out here; the request's own check
            // names them once reflection has described the calls.
            let metadata = (self.requests.values())
                .find(|r| r.grpc.is_some())
                .map(|r| {
                    (r.headers.iter())
                        .filter(|(k, v)| is_token(k) && !v.bytes().any(|b| b < 0x20 && b != b'\t'))
                        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                        .filter(|(k, _)| {
                            !["connection", "transfer-encoding", "host"].contains(&k.as_str())
                        })
                        .collect()
                })
                .unwrap_or_default();
            let target = crate::grpc::ReflectionTarget::of(&self.url, url, tls, metadata);
            return crate::grpc::reflected(limits, &target)
                .map(Some)
                .map_err(|e| {
                    invalid(
                        "http.reflection",
                        e,
                        "the server must run and offer server reflection when the scenario is checked (with the metadata it wants, e.g. authorization, in the first gRPC request's headers); or give its .proto with http.proto = \"service.proto\"",
                    )
                });
        }
        let Some(proto) = &self.proto else {
            return Err(invalid(
                "http.proto",
                "is missing, and a request is a gRPC call".into(),
                "give the .proto that describes it, e.g. proto = \"protos/helloworld.proto\", or ask the server: reflection = true",
            ));
        };
        crate::grpc::load(proto, &self.include).map(Some).map_err(|e| {
            invalid(
                "http.proto",
                e,
                "give a .proto file that protoc would compile, and `include` folders for its imports",
            )
        })
    }

    /// The TLS settings of an https URL; a TLS option with a plain URL is refused.
    fn tls(&self, url: &Url, invalid: &Invalid) -> Result<Option<TlsConfig>, ScenarioError> {
        crate::check::check_tls_options(
            "http",
            url.tls,
            (self.ca_file.as_deref(), self.insecure),
            invalid,
        )?;
        if !url.tls {
            return Ok(None);
        }
        Ok(Some(TlsConfig {
            server_name: url.host.clone(),
            ca_file: self.ca_file.clone(),
            insecure: self.insecure,
        }))
    }
}

impl HttpRequestSpec {
    /// Requests read from `file`, refused beside what the file's lines say for themselves
    /// (method, path, body, a call).
    fn file_request(
        &self,
        server: (&str, bool),
        (name, share): (&str, f64),
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<HttpRequest, ScenarioError> {
        let path = self.file.as_deref().expect("a request file");
        let defaults = HttpRequestSpec::default();
        let own = self.method != defaults.method
            || self.path != defaults.path
            || !self.body.is_empty()
            || self.body_file.is_some()
            || self.rpc_method.is_some();
        if own {
            return Err(invalid(
                &field("file"),
                "is given with a method, path or body".into(),
                "each line of a request file gives its own method, URL and body: leave them out here (headers given here are added to every request)",
            ));
        }
        let file = read_request_file(
            path,
            server,
            &self.headers,
            self.order,
            &field("file"),
            invalid,
        )?;
        Ok(HttpRequest {
            name: name.to_string(),
            share,
            bytes: file.request(0).to_vec(),
            head: false,
            expect: self.expect.clone().map(String::into_bytes),
            parts: RequestParts::default(),
            grpc: false,
            bidi: None,
            stream: None,
            paced: None,
            vary: Some(Arc::new(Vary::File(file))),
        })
    }

    /// `stream`: a response that is a stream of Server-Sent Events, for a plain request.
    fn response_stream(
        &self,
        request: &HttpRequest,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Option<StreamedResponse>, ScenarioError> {
        let Some(ResponseStream::Sse) = self.stream else {
            return Ok(None);
        };
        if request.grpc || request.head {
            return Err(invalid(
                &field("stream"),
                "is given for a gRPC call or a HEAD request".into(),
                "stream = \"sse\" is for a request whose response is Server-Sent Events; a gRPC server-streaming call is measured as a stream without it",
            ));
        }
        if self.stream_done.contains(['\r', '\n']) {
            return Err(invalid(
                &field("stream_done"),
                format!("is {:?}", self.stream_done),
                "an event's data on one line, e.g. \"[DONE]\" (or \"\" for none)",
            ));
        }
        Ok(Some(StreamedResponse {
            done: self.stream_done.clone().into_bytes(),
            grpc: false,
        }))
    }

    /// A gRPC unary call: POST to `/package.Service/Method`, `content-type: application/grpc`,
    /// `te: trailers`, your headers as metadata, the request message framed once.
    fn grpc_call(
        &self,
        call: &str,
        protos: Option<&prost_reflect::DescriptorPool>,
        (name, share): (&str, f64),
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<HttpRequest, ScenarioError> {
        let fix =
            "see the methods and fields of your .proto (or of what the server's reflection lists)";
        let pool = protos.expect("a gRPC call has its .proto");
        if self.rpc_method.is_some() || !self.body.is_empty() || self.body_file.is_some() {
            return Err(invalid(
                &field("grpc"),
                "is given with a body or rpc_method".into(),
                "a gRPC call's body is its `message` (JSON)",
            ));
        }
        if self.method != "GET" || self.path != "/" {
            return Err(invalid(
                &field("grpc"),
                "is given with a method or path".into(),
                "a gRPC call is a POST to /package.Service/Method: leave method and path out",
            ));
        }
        let shape = match self.grpc_shape(field, invalid)? {
            // Neither `match` nor `messages`: a unary call, or a server-streaming one, whose
            // every call is measured as a stream (its first message, its gaps).
            crate::grpc::Shape::Unary
                if crate::grpc::shape_of(pool, call)
                    == Some(crate::grpc::Shape::ServerStreaming) =>
            {
                crate::grpc::Shape::ServerStreaming
            }
            shape => shape,
        };
        let method =
            crate::grpc::method(pool, call, shape).map_err(|e| invalid(&field("grpc"), e, fix))?;
        let json = self.message.as_deref().unwrap_or("{}");
        let mut frame = crate::grpc::request_frame(&method, json)
            .map_err(|e| invalid(&field("message"), e, fix))?;
        let bidi = match &self.match_field {
            Some(path) => {
                let pair = crate::grpc::BidiMatch::new(&method, path)
                    .map_err(|e| invalid(&field("match"), e, fix))?;
                frame.drain(..5); // each message is framed as it is sent, with its id
                Some(pair)
            }
            None => None,
        };
        let frame = self.streamed_body(frame, call, field, invalid)?;
        let headers = self.grpc_headers(field, invalid)?;
        Ok(HttpRequest {
            name: name.to_string(),
            share,
            bytes: Vec::new(),
            head: false,
            expect: self.expect.clone().map(String::into_bytes),
            parts: RequestParts {
                method: "POST".into(),
                target: format!("/{call}"),
                headers,
                body: frame,
            },
            grpc: true,
            bidi,
            stream: (shape == crate::grpc::Shape::ServerStreaming).then(|| StreamedResponse {
                done: Vec::new(),
                grpc: true,
            }),
            paced: self.messages.filter(|_| self.paced),
            vary: None,
        })
    }

    /// How a gRPC call streams: `match` makes it bidirectional, `messages` client-streaming.
    fn grpc_shape(
        &self,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<crate::grpc::Shape, ScenarioError> {
        Ok(match (&self.match_field, self.messages) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    &field("messages"),
                    "is given with `match`".into(),
                    "`match` is for bidirectional calls (a message per request), `messages` for client-streaming ones (many per request): give the one the method needs",
                ))
            }
            (Some(_), None) => crate::grpc::Shape::Bidi,
            (None, Some(_)) => crate::grpc::Shape::ClientStreaming,
            (None, None) => crate::grpc::Shape::Unary,
        })
    }

    /// A client-streaming call's body: its `messages` copies of `frame` (one, sent on the
    /// schedule, when `paced`), within [`MAX_STREAMED_BODY`].
    fn streamed_body(
        &self,
        mut frame: Vec<u8>,
        call: &str,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Vec<u8>, ScenarioError> {
        if let Some(n) = self.messages {
            let total = frame.len() as u64 * n as u64;
            if n == 0 || total > MAX_STREAMED_BODY {
                return Err(invalid(
                    &field("messages"),
                    format!("is {n}: {total} bytes a call"),
                    &format!(
                        "send 1 or more messages, at most {} MiB a call",
                        MAX_STREAMED_BODY >> 20
                    ),
                ));
            }
            if !self.paced {
                frame = frame.repeat(n as usize);
            }
        } else if self.paced {
            return Err(invalid(
                &field("paced"),
                format!("is given for {call}, which is no client-streaming call with `messages`"),
                "`paced` sends a client-streaming method's messages on their schedule: name one, with messages = N (its call ends after N), or leave `paced` out",
            ));
        }
        Ok(frame)
    }

    /// A gRPC call's headers: its content type, `te: trailers`, and the scenario's metadata.
    fn grpc_headers(
        &self,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Vec<(String, String)>, ScenarioError> {
        let mut headers = vec![
            ("content-type".to_string(), "application/grpc".to_string()),
            ("te".to_string(), "trailers".to_string()),
        ];
        for (k, v) in &self.headers {
            if !is_token(k) || v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid(
                    &field("headers"),
                    format!("has the header {k:?}: {v:?}"),
                    "metadata names are tokens and values have no line breaks",
                ));
            }
            headers.push((k.to_ascii_lowercase(), v.clone()));
        }
        Ok(headers)
    }

    /// The body of a JSON-RPC call: `{"jsonrpc":"2.0","id":1,"method":…,"params":…}`.
    fn rpc_body(
        &self,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Vec<u8>, ScenarioError> {
        if !self.body.is_empty() || self.body_file.is_some() {
            return Err(invalid(
                &field("rpc_method"),
                "is given with a body".into(),
                "a JSON-RPC call writes its own body: give rpc_method (and rpc_params) or body, not both",
            ));
        }
        let method = self.rpc_method.as_deref().unwrap_or_default();
        if method.is_empty() {
            return Err(invalid(
                &field("rpc_method"),
                "is empty".into(),
                "give the method's name, e.g. rpc_method = \"eth_blockNumber\"",
            ));
        }
        let call = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": self.rpc_params,
        });
        serde_json::to_vec(&call).map_err(|e| {
            invalid(
                &field("rpc_params"),
                format!("cannot be written as JSON: {e}"),
                "use strings, numbers, booleans, arrays and tables",
            )
        })
    }

    /// The request's bytes, after checking every part that goes on the wire (no CR or LF can
    /// smuggle a header in).
    fn render(
        &self,
        (host, version): (&str, HttpVersion),
        name: &str,
        share: f64,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<HttpRequest, ScenarioError> {
        self.check_method_path_headers(field, invalid)?;
        let body = self.body_bytes(field, invalid)?;
        self.check_given_length(&body, field, invalid)?;
        let has = |h: &str| self.headers.keys().any(|k| k.eq_ignore_ascii_case(h));
        // A call is a POST unless a method was chosen.
        let method = if self.rpc_method.is_some() && self.method == "GET" {
            "POST"
        } else {
            self.method.as_str()
        };
        let bytes = self.http1_bytes(method, host, &body);
        let vary = match version {
            HttpVersion::Http1 => self.varying(method, host, &body, field, invalid)?,
            // Sent as written: only a field, which HTTP/2 cannot fill in yet, is refused.
            HttpVersion::Http2 => match self.varying(method, host, &body, field, invalid) {
                Ok(Some(v)) if v.head.varies() || v.body.varies() => {
                    return Err(invalid(
                        &field("path"),
                        "has a field, and the run is HTTP/2".into(),
                        "requests that vary (fields, a request file) are HTTP/1.1 for now: give http.version = \"1.1\" (docs/concepts.md \"Requests that vary\")",
                    ))
                }
                _ => None,
            },
        };
        let mut headers: Vec<(String, String)> = (self.headers.iter())
            .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        if self.rpc_method.is_some() && !has("content-type") {
            headers.push(("content-type".into(), "application/json".into()));
        }
        let parts = RequestParts {
            method: method.to_string(),
            target: self.path.clone(),
            headers,
            body: body.clone(),
        };
        Ok(HttpRequest {
            name: name.to_string(),
            share,
            bytes,
            head: method.eq_ignore_ascii_case("HEAD"),
            expect: self.expect.clone().map(String::into_bytes),
            parts,
            grpc: false,
            bidi: None,
            stream: None,
            paced: None,
            vary: vary.map(|v| Arc::new(Vary::Template(v))),
        })
    }
}

impl HttpRequestSpec {
    /// The method a token, the target from `/` (or `*`) without spaces, the headers tokens
    /// with values on one line.
    fn check_method_path_headers(
        &self,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        if !is_token(&self.method) {
            return Err(invalid(
                &field("method"),
                format!("is {:?}", self.method),
                "give a method such as GET, POST, PUT, DELETE or HEAD",
            ));
        }
        let path_ok = (self.path.starts_with('/') || self.path == "*")
            && !self.path.bytes().any(|b| b <= b' ' || b == 0x7f);
        if !path_ok {
            return Err(invalid(
                &field("path"),
                format!("is {:?}", self.path),
                "give a target from / without spaces, e.g. \"/api/v1/items?id=7\"",
            ));
        }
        for (k, v) in &self.headers {
            if !is_token(k) || v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(invalid(
                    &field("headers"),
                    format!("has the header {k:?}: {v:?}"),
                    "header names are tokens (Content-Type) and values have no line breaks",
                ));
            }
        }
        Ok(())
    }

    /// The body: a JSON-RPC call's, the file's, or the inline text.
    fn body_bytes(
        &self,
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Vec<u8>, ScenarioError> {
        Ok(match &self.body_file {
            _ if self.rpc_method.is_some() => self.rpc_body(field, invalid)?,
            Some(_) if !self.body.is_empty() => {
                return Err(invalid(
                    &field("body_file"),
                    "is given with body".into(),
                    "give the body inline or from a file, not both",
                ))
            }
            Some(path) => std::fs::read(path).map_err(|e| {
                invalid(
                    &field("body_file"),
                    format!("is \"{path}\", which cannot be read ({e})"),
                    "give a file that exists (relative paths start where msgbench runs)",
                )
            })?,
            None => self.body.clone().into_bytes(),
        })
    }

    /// The request as HTTP/1.1 bytes: its head, the length of a body, then the body.
    fn http1_bytes(&self, method: &str, host: &str, body: &[u8]) -> Vec<u8> {
        let mut bytes = self.http1_head(method, host);
        if self.sends_length(method, body) {
            bytes.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(body);
        bytes
    }

    /// Request line, `Host` unless given, the headers and the content type of a JSON-RPC call,
    /// each line with its CRLF; not `Content-Length`, not the blank line.
    fn http1_head(&self, method: &str, host: &str) -> Vec<u8> {
        let has = |h: &str| self.headers.keys().any(|k| k.eq_ignore_ascii_case(h));
        let mut bytes = format!("{method} {} HTTP/1.1\r\n", self.path).into_bytes();
        if !has("host") {
            bytes.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
        }
        for (k, v) in &self.headers {
            bytes.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
        }
        if self.rpc_method.is_some() && !has("content-type") {
            bytes.extend_from_slice(b"Content-Type: application/json\r\n");
        }
        bytes
    }

    /// A `Content-Length` given in `headers` must be the body's: a wrong one leaves the server
    /// waiting for bytes that never come, or reading the next request as this one's body.
    /// (A body with fields is refused its given length in [`Self::varying`].)
    fn check_given_length(
        &self,
        body: &[u8],
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<(), ScenarioError> {
        let given = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"));
        let Some((name, value)) = given else {
            return Ok(());
        };
        let fields = Template::parse(body).is_ok_and(|t| t.varies());
        if fields || value.trim().parse::<usize>() == Ok(body.len()) {
            return Ok(());
        }
        Err(invalid(
            &field("headers"),
            format!("has {name}: {value}, and the body is {} bytes", body.len()),
            "leave Content-Length out: it is written for you",
        ))
    }

    /// Whether msgbench writes a `Content-Length` (a body, or a method that has one, and no
    /// length given).
    fn sends_length(&self, method: &str, body: &[u8]) -> bool {
        let given = (self.headers.keys()).any(|k| k.eq_ignore_ascii_case("content-length"));
        let sends_body = !body.is_empty() || ["POST", "PUT", "PATCH"].contains(&method);
        sends_body && !given
    }

    /// The request as a template when its path, a header or its body has a field (or a `{{`,
    /// a `{` of the text); refused: a misspelt field, named where it is, and a `Content-Length`
    /// given for a body whose length varies.
    fn varying(
        &self,
        method: &str,
        host: &str,
        body: &[u8],
        field: &dyn Fn(&str) -> String,
        invalid: &Invalid,
    ) -> Result<Option<Varying>, ScenarioError> {
        let misspelt = |word: String, at: &str| {
            invalid(
                &field(at),
                format!("has {word}, which is no field"),
                "the fields are {seq}, {key}, {random} and {intended_ns}; write {{ for a { of the text (docs/concepts.md \"Requests that vary\")",
            )
        };
        Template::parse(self.path.as_bytes()).map_err(|w| misspelt(w, "path"))?;
        for value in self.headers.values() {
            Template::parse(value.as_bytes()).map_err(|w| misspelt(w, "headers"))?;
        }
        let head_text = self.http1_head(method, host);
        let head = Template::parse(&head_text).map_err(|w| misspelt(w, "headers"))?;
        let at = if self.body_file.is_some() {
            "body_file"
        } else {
            "body"
        };
        let body_template = Template::parse(body).map_err(|w| misspelt(w, at))?;
        let escaped = |text: &[u8]| text.windows(2).any(|w| w == b"{{");
        let template = head.varies() || body_template.varies();
        if !template && !escaped(&head_text) && !escaped(body) {
            return Ok(None);
        }
        let given = (self.headers.keys()).any(|k| k.eq_ignore_ascii_case("content-length"));
        if given && body_template.varies() {
            return Err(invalid(
                &field("headers"),
                "has a Content-Length, and the body's length varies with its fields".into(),
                "leave Content-Length out: it is written for each request, the body's as filled in",
            ));
        }
        Ok(Some(Varying {
            length: self.sends_length(method, body),
            head,
            body: body_template,
        }))
    }
}

/// A paced client-streaming call holds each of its messages in flight until the call's one
/// response: the window must take a whole call, or the call could never end.
pub(crate) fn check_paced_calls(
    http: &HttpConfig,
    client: &crate::client::ClientConfig,
    pacing: &crate::pacing::Pacing,
    invalid: &Invalid,
) -> Result<(), ScenarioError> {
    use crate::pacing::Pacing;
    for r in &http.requests {
        if let Some(n) = r.paced {
            // Its first message waits for the call's response, as long as the call takes to
            // fill on the schedule: longer than client.timeout, every call would time out.
            let per_connection = match pacing {
                Pacing::Interval { .. } | Pacing::Relative { .. } => pacing.target_per_sec(),
                _ => pacing
                    .target_per_sec()
                    .map(|rate| rate / client.total_connections().max(1) as f64),
            };
            if let Some(rate) = per_connection.map(|p| p * r.share).filter(|p| *p > 0.0) {
                let call_ns = n as f64 / rate * 1e9;
                if call_ns >= client.timeout_ns as f64 {
                    return Err(invalid(
                        "client.timeout",
                        format!(
                            "is {:.3} s, and a call of http.requests.{} takes {:.3} s to send its {n} paced messages ({rate:.0} a second on each connection): each would time out",
                            client.timeout_ns as f64 / 1e9,
                            r.name,
                            call_ns / 1e9
                        ),
                        "give client.timeout longer than a call plus the server's answer, fewer messages a call, or a higher rate",
                    ));
                }
            }
            if client.window < n as usize {
                return Err(invalid(
                    "client.window",
                    format!(
                        "is {}, and a call of http.requests.{} holds its {n} paced messages in flight until its response",
                        client.window, r.name
                    ),
                    &format!("give window = {n} or more, or fewer messages a call"),
                ));
            }
        }
    }
    Ok(())
}

/// What the note of an HTTP/2 run whose server allowed fewer streams than the window names
/// (`info` in its result): "the server allows 128 concurrent streams per connection
/// (SETTINGS_MAX_CONCURRENT_STREAMS), fewer than client.window = 256: …".
pub const STREAM_LIMIT: &str = "SETTINGS_MAX_CONCURRENT_STREAMS";

/// The run's notes say the server allowed fewer streams than its window.
pub fn stream_limited(info: &[String]) -> bool {
    info.iter().any(|i| i.contains(STREAM_LIMIT))
}

/// How the note that names an HTTP/2 run's client begins (`info` in its result): "HTTP/2
/// through msgbench's own client (…)", "HTTP/2 through the h2 crate's client (…)".
pub const HTTP2_CLIENT_NOTE: &str = "HTTP/2 through ";

/// The HTTP/2 client a run's notes name (`msgbench's own client`, `the h2 crate's client`),
/// if it has one.
pub fn http2_client(info: &[String]) -> Option<&str> {
    let note = info
        .iter()
        .find_map(|i| i.strip_prefix(HTTP2_CLIENT_NOTE))?;
    note.split(" (").next()
}

#[cfg(test)]
mod tests {
    use crate::check::testing::{refused, valid};

    fn http(s: &crate::scenario::Scenario) -> &super::HttpConfig {
        match &s.system {
            crate::scenario::System::Http { http, .. } => http,
            _ => panic!("http"),
        }
    }

    #[test]
    fn requests_are_rendered_once_with_host_and_length() {
        let s = valid("system = \"http\"\n[http]\nurl = \"http://127.0.0.1:8080/x\"\n[http.requests.post]\nmethod = \"POST\"\npath = \"/items\"\nbody = \"{}\"\nheaders = { \"Content-Type\" = \"application/json\" }\n");
        let h = http(&s);
        assert_eq!(h.address, "127.0.0.1:8080");
        assert_eq!(
            String::from_utf8_lossy(&h.requests[0].bytes),
            "POST /items HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        let d = valid("system = \"http\"\n[http]\nurl = \"http://localhost\"\n");
        assert_eq!(http(&d).address, "localhost:80");
        assert_eq!(
            String::from_utf8_lossy(&http(&d).requests[0].bytes),
            "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"
        );
        assert!(http(&d).accepts(204) && !http(&d).accepts(404));
        assert_eq!(http(&d).tls, None);
        let t = valid("system = \"http\"\n[http]\nurl = \"https://api.example.com/v1\"\n");
        assert_eq!(http(&t).address, "api.example.com:443");
        // The URL's path and query are the default request's target; a request's own path wins.
        assert_eq!(
            String::from_utf8_lossy(&http(&t).requests[0].bytes),
            "GET /v1 HTTP/1.1\r\nHost: api.example.com\r\n\r\n"
        );
        for (url, line) in [
            ("http://h:1/slow?x=1#frag", "GET /slow?x=1 HTTP/1.1"),
            ("http://h:1?x=1", "GET /?x=1 HTTP/1.1"),
            ("http://h:1/", "GET / HTTP/1.1"),
        ] {
            let u = valid(&format!("system = \"http\"\n[http]\nurl = \"{url}\"\n"));
            let bytes = String::from_utf8_lossy(&http(&u).requests[0].bytes).into_owned();
            assert!(bytes.starts_with(line), "{url}: {bytes}");
        }
        let own = valid("system = \"http\"\n[http]\nurl = \"http://h:1/v1\"\n[http.requests.a]\npath = \"/items\"\n");
        assert!(String::from_utf8_lossy(&http(&own).requests[0].bytes).starts_with("GET /items "));
        let tls = http(&t).tls.as_ref().unwrap();
        assert_eq!(
            (tls.server_name.as_str(), tls.insecure),
            ("api.example.com", false)
        );
        let p = valid("system = \"http\"\n[http]\nurl = \"https://[::1]:8443\"\ninsecure = true\n");
        assert_eq!(http(&p).address, "[::1]:8443");
        assert_eq!(http(&p).tls.as_ref().unwrap().server_name, "[::1]");
    }

    #[test]
    fn streamed_responses_over_http2_and_their_refusals() {
        const U: &str = "system = \"http\"\n[http]\nurl = \"http://h:1\"\n";
        let s = valid(&format!(
            "{U}version = \"2\"\n[http.requests.a]\nstream = \"sse\"\n"
        ));
        let stream = http(&s).requests[0].stream.as_ref().expect("streamed");
        assert!(!stream.grpc);
        assert_eq!(stream.done, b"[DONE]");
        // Over HTTP/2 nothing of a stream's body is kept to check.
        let (field, e) = refused(&format!(
            "{U}version = \"2\"\n[http.requests.a]\nstream = \"sse\"\nexpect = \"x\"\n"
        ));
        assert_eq!(field, "http.requests.a.expect", "{e}");
        // A stream is no JSON-RPC reply.
        let (field, e) = refused(&format!(
            "{U}json_rpc = true\n[http.requests.a]\nstream = \"sse\"\n"
        ));
        assert_eq!(field, "http.requests.a.stream", "{e}");
    }

    #[test]
    fn requests_that_vary_are_templates_or_files_and_refused_where_they_cannot_go() {
        use crate::http_vary::Vary;
        const U: &str = "system = \"http\"\n[http]\nurl = \"http://h:1\"\n";
        let t = valid(&format!("{U}keys = 10\n[http.requests.a]\nmethod = \"POST\"\npath = \"/i/{{key}}\"\nbody = '{{\"n\": {{seq}}}}'\n"));
        let Some(Vary::Template(v)) = http(&t).requests[0].vary.as_deref() else {
            panic!("a template")
        };
        assert!(v.length && v.head.varies() && v.body.varies());
        // No field: sent as rendered once.
        let plain = valid(&format!("{U}[http.requests.a]\nbody = '{{\"a\": 1}}'\n"));
        assert!(http(&plain).requests[0].vary.is_none());
        // `{{` is a `{` of the text (HTTP/1.1); HTTP/2 sends its braces as written.
        let escaped = valid(&format!(
            "{U}[http.requests.a]\nmethod = \"POST\"\nbody = '{{\"q\": \"{{me{{{{id}}}}\"}}'\n"
        ));
        let Some(Vary::Template(e)) = http(&escaped).requests[0].vary.as_deref() else {
            panic!("a template")
        };
        let sent = crate::http_vary::Piece::Text(br#"{"q": "{me{id}}"}"#.to_vec());
        assert_eq!(e.body.pieces, vec![sent]);
        let h2 = valid(&format!("{U}version = \"2\"\n[http.requests.a]\nmethod = \"POST\"\nbody = '{{\"q\": \"{{me{{id}}}}\"}}'\n"));
        assert!(http(&h2).requests[0].vary.is_none());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("targets.txt");
        std::fs::write(&file, "GET http://h:1/a\nX-A: 1\n\nPOST /b\n\n").unwrap();
        let f = valid(&format!(
            "{U}[http.requests.f]\nfile = \"{}\"\nheaders = {{ X-B = \"2\" }}\n",
            file.display()
        ));
        let Some(Vary::File(rf)) = http(&f).requests[0].vary.as_deref() else {
            panic!("a file")
        };
        assert_eq!(rf.len(), 2);
        assert_eq!(
            String::from_utf8_lossy(rf.request(1)),
            "POST /b HTTP/1.1\r\nHost: h:1\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n"
        );
        for (text, field, says) in [
            (
                format!("{U}[http.requests.a]\npath = \"/i/{{key}}\"\n"),
                "http.keys",
                "has {key}",
            ),
            (
                format!("{U}[http.requests.a]\npath = \"/i/{{sequence}}\"\n"),
                "http.requests.a.path",
                "{sequence}",
            ),
            (
                format!("{U}[http.requests.a]\nheaders = {{ X = \"{{sq}}\" }}\n"),
                "http.requests.a.headers",
                "{sq}",
            ),
            (
                format!("{U}[http.requests.a]\nmethod = \"POST\"\nbody = \"{{seq}}\"\nheaders = {{ Content-Length = \"3\" }}\n"),
                "http.requests.a.headers",
                "length varies",
            ),
            (
                format!("{U}version = \"2\"\n[http.requests.a]\npath = \"/{{seq}}\"\n"),
                "http.requests.a.path",
                "HTTP/2",
            ),
            (
                format!(
                    "{U}[http.requests.f]\nfile = \"{}\"\nmethod = \"PUT\"\n",
                    file.display()
                ),
                "http.requests.f.file",
                "method",
            ),
            (
                format!(
                    "{U}[http.requests.f]\nfile = \"{}/none\"\n",
                    dir.path().display()
                ),
                "http.requests.f.file",
                "cannot be read",
            ),
        ] {
            let (at, message) = refused(&text);
            assert_eq!(at, field, "{message}");
            assert!(message.contains(says), "{message}");
        }
        for (content, says) in [
            ("POST /a\nTransfer-Encoding: chunked\n", "Transfer-Encoding"),
            ("POST /a\n@/nonexistent/body\n", "names the body file"),
            ("POST /a\nContent-Length: 5\n", "its body is 0 bytes"),
            (
                "GET http://other:1/a\n",
                "line 1 asks http://other:1/a, and the run's server is http://h:1",
            ),
            ("HEAD /a\n", "HEAD"),
            ("GET /a\nno colon here\n", "line 2"),
            ("{\"url\": \"/a\", \"body\": \"!!\"}\n", "base64"),
            ("\n\n", "holds no request"),
        ] {
            std::fs::write(&file, content).unwrap();
            let (_, message) = refused(&format!(
                "{U}[http.requests.f]\nfile = \"{}\"\n",
                file.display()
            ));
            assert!(message.contains(says), "{content:?}: {message}");
        }
    }

    #[test]
    fn a_json_rpc_call_is_a_post_with_its_body() {
        let s = valid("system = \"http\"\n[http]\nurl = \"http://127.0.0.1:8545\"\n[http.requests.bal]\nrpc_method = \"eth_getBalance\"\nrpc_params = [\"0xab\", \"latest\"]\n");
        let h = http(&s);
        assert!(h.json_rpc);
        let body =
            r#"{"id":1,"jsonrpc":"2.0","method":"eth_getBalance","params":["0xab","latest"]}"#;
        assert_eq!(
            String::from_utf8_lossy(&h.requests[0].bytes),
            format!("POST / HTTP/1.1\r\nHost: 127.0.0.1:8545\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        );
        assert_eq!(
            refused("system = \"http\"\n[http]\nurl = \"http://x\"\n[http.requests.a]\nrpc_method = \"m\"\nbody = \"{}\"\n").0,
            "http.requests.a.rpc_method"
        );
    }

    #[test]
    fn a_unix_socket_carries_http_1_1_in_clear_and_the_url_its_host_and_path() {
        let d = valid("system = \"http\"\n[http]\nurl = \"http://localhost/api\"\nunix_socket = \"/run/app.sock\"\n");
        assert_eq!(http(&d).address, "unix:///run/app.sock");
        let same = valid("system = \"http\"\n[http]\nurl = \"http://localhost/api\"\nunix_socket = \"unix:///run/app.sock\"\n");
        assert_eq!(http(&same).address, "unix:///run/app.sock");
        assert_eq!(http(&d).authority, "localhost");
        for (text, why) in [
            ("url = \"https://x\"\nunix_socket = \"/s\"", "https"),
            (
                "url = \"http://x\"\nversion = \"2\"\nunix_socket = \"/s\"",
                "HTTP/2",
            ),
            ("url = \"http://x\"\nunix_socket = \"s.sock\"", "absolute"),
        ] {
            let (at, message) = refused(&format!("system = \"http\"\n[http]\n{text}\n"));
            assert_eq!(at, "http.unix_socket", "{text}");
            assert!(message.contains(why), "{message}");
        }
    }

    #[test]
    fn http_refuses_what_it_cannot_send() {
        for (text, field) in [
            ("", "http.url"),
            ("url = \"127.0.0.1:80\"\n", "http.url"),
            ("url = \"ftp://x:21\"\n", "http.url"),
            ("url = \"http://x\"\ninsecure = true\n", "http.insecure"),
            (
                "url = \"https://x\"\nca_file = \"/no/such.pem\"\n",
                "http.ca_file",
            ),
            ("url = \"http://x:0\"\n", "http.url"),
            ("url = \"http://x\"\naccept = [42]\n", "http.accept"),
            (
                "url = \"http://x\"\n[http.requests.a]\nmethod = \"GE T\"\n",
                "http.requests.a.method",
            ),
            (
                "url = \"http://x\"\n[http.requests.a]\npath = \"/a b\"\n",
                "http.requests.a.path",
            ),
            (
                "url = \"http://x\"\n[http.requests.a]\nheaders = { X = \"a\\r\\nEvil: 1\" }\n",
                "http.requests.a.headers",
            ),
            (
                "url = \"http://x\"\n[http.requests.a]\nbody_file = \"/no/such/file\"\n",
                "http.requests.a.body_file",
            ),
        ] {
            assert_eq!(
                refused(&format!("system = \"http\"\n[http]\n{text}")).0,
                field,
                "{text}"
            );
        }
    }

    #[test]
    fn the_http2_client_is_msgbench_s_own_where_it_serves_and_a_choice_it_cannot_serve_is_refused()
    {
        use super::Http2Client::{H2Crate, Own};
        let base = "system = \"http\"\n[http]\nversion = \"2\"\n";
        let client = |text: &str| http(&valid(&format!("{base}{text}"))).client;
        assert_eq!(client("url = \"http://h:1\"\n"), Own);
        assert_eq!(client("url = \"http://h:1\"\nclient = \"msgbench\"\n"), Own);
        let asked = "http.client = \"h2\"";
        assert_eq!(
            client("url = \"http://h:1\"\nclient = \"h2\"\n"),
            H2Crate { why: asked }
        );
        assert_eq!(client("url = \"https://h:1\"\n"), H2Crate { why: "https" });
        assert_eq!(
            client("url = \"https://h:1\"\nclient = \"h2\"\n"),
            H2Crate { why: "https" }
        );
        for (text, why) in [
            (
                "url = \"https://h:1\"\nclient = \"msgbench\"\n",
                "does not speak https",
            ),
            ("url = \"http://h:1\"\nclient = \"hyper\"\n", "is \"hyper\""),
        ] {
            let (field, message) = refused(&format!("{base}{text}"));
            assert_eq!(field, "http.client", "{text}");
            assert!(message.contains(why), "{message}");
        }
        let one = "system = \"http\"\n[http]\nurl = \"http://h:1\"\nclient = \"h2\"\n";
        assert_eq!(refused(one).0, "http.client");
    }

    #[test]
    fn the_client_a_run_s_notes_name_is_read_back() {
        let own = vec![
            "the server allows 8 concurrent streams".to_string(),
            "HTTP/2 through msgbench's own client (http.client = \"h2\" selects the h2 crate's)"
                .to_string(),
        ];
        assert_eq!(super::http2_client(&own), Some("msgbench's own client"));
        let crate_ =
            vec!["HTTP/2 through the h2 crate's client (https), not msgbench's own".to_string()];
        assert_eq!(super::http2_client(&crate_), Some("the h2 crate's client"));
        assert_eq!(super::http2_client(&[]), None);
    }
}

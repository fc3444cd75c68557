//! Server reflection as a client: when a scenario says `reflection = true`, it is checked with
//! the descriptors the gRPC server offers instead of a `.proto`. One bidirectional call
//! (`grpc.reflection.v1`, else `v1alpha`) lists the services, asks for the file defining each,
//! then for every file those import that has not come yet; the files become a
//! `FileDescriptorSet` the check decodes. Bounded: the whole exchange within
//! [`FETCH_TIMEOUT`], at most [`MAX_FILES`] files and [`MAX_BYTES`] of them.
//!
//! It runs on a thread of its own with its own small runtime, so that checking a scenario never
//! depends on where it is called from; [`machine_limits`] hands it to the check, with a cache
//! so that a sweep's points ask each server once.
use super::connect::{self, Failure, Open, Target};
use crate::net::grpc_frame::Frames;
use crate::net::grpc_reflection::{self as wire, Answer, Ask};
use bytes::{Bytes, BytesMut};
use msgbench_model::check::{MachineLimits, Reflector};
use msgbench_model::grpc::ReflectionTarget;
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::ToSocketAddrs;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the whole exchange may take after the connection is open.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Most files taken from a server.
pub const MAX_FILES: usize = 2000;
/// Most bytes of files taken from a server.
pub const MAX_BYTES: usize = 64 << 20;

/// The CPUs this process may use, and server reflection through the network, cached per
/// server: what a scenario is checked against by the command line.
pub fn machine_limits() -> MachineLimits {
    MachineLimits {
        cpus: crate::affinity::allowed_cpus(),
        reflection: Some(reflector()),
    }
}

/// [`fetch`], answering again from a cache for a server already asked.
pub fn reflector() -> Reflector {
    type Cache = HashMap<ReflectionTarget, Result<Vec<u8>, String>>;
    let cache: Arc<Mutex<Cache>> = Arc::default();
    Reflector(Arc::new(move |target: &ReflectionTarget| {
        if let Some(known) = cache.lock().expect("cache").get(target) {
            return known.clone();
        }
        let got = fetch(target);
        cache
            .lock()
            .expect("cache")
            .insert(target.clone(), got.clone());
        got
    }))
}

/// The descriptors `target` offers, as `FileDescriptorSet` bytes; or what the server did.
pub fn fetch(target: &ReflectionTarget) -> Result<Vec<u8>, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the reflection client ({e})"))?;
            tokio::task::LocalSet::new().block_on(&runtime, fetch_from(target))
        })
        .join()
        .unwrap_or_else(|_| Err("the reflection client failed".into()))
    })
}

async fn fetch_from(target: &ReflectionTarget) -> Result<Vec<u8>, String> {
    let address = target
        .address
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("`{}` does not resolve", target.address))?;
    let tls = match &target.server_name {
        None => None,
        Some(host) => {
            let (base, _) =
                crate::drivers::tls::client_config(target.ca_file.as_deref(), target.insecure)?;
            let mut config = (*base).clone();
            config.alpn_protocols = vec![b"h2".to_vec()];
            let name = rustls_pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("`{host}` is not a name TLS can verify ({e})"))?;
            Some((Arc::new(config), name))
        }
    };
    let on = Target {
        address,
        tls,
        stream_window: 4 << 20,
        section: "http",
        not_h2: "is it a gRPC server?",
    };
    let open = connect::open(&on).await.map_err(|f| match f {
        Failure::Connect(e) => format!("cannot connect to {} ({e})", target.url),
        Failure::Problem(p) => format!("{}: {p}", target.url),
    })?;
    let asked = tokio::time::timeout(FETCH_TIMEOUT, ask_for_files(&open, target)).await;
    open.driver.abort();
    match asked {
        Ok(r) => r,
        Err(_) => Err(format!(
            "{}'s server reflection did not answer within {} s",
            target.url,
            FETCH_TIMEOUT.as_secs()
        )),
    }
}

/// Tries the current name of the call, then the older one.
async fn ask_for_files(open: &Open, target: &ReflectionTarget) -> Result<Vec<u8>, String> {
    let mut refused = Vec::new();
    for path in [wire::V1, wire::V1ALPHA] {
        match Session::start(open, target, path).await {
            Ok(session) => return session.collect().await,
            Err(Start::Unimplemented(why)) => refused.push(why),
            Err(Start::Failed(why)) => return Err(why),
        }
    }
    Err(format!(
        "{} does not offer server reflection (grpc.reflection.v1: {}; v1alpha: {})",
        target.url, refused[0], refused[1]
    ))
}

/// Why a reflection call could not start.
enum Start {
    /// The server does not know the call (this name of it).
    Unimplemented(String),
    /// Anything else: the exchange stops here.
    Failed(String),
}

/// One reflection call: requests out, one response in for each.
struct Session {
    send: h2::SendStream<Bytes>,
    body: h2::RecvStream,
    frames: Frames,
    url: String,
    first: Option<Answer>,
}

impl Session {
    /// Opens the call with its first request (the list of services) and reads the answer's
    /// head and first response.
    async fn start(open: &Open, target: &ReflectionTarget, path: &str) -> Result<Session, Start> {
        let scheme = if target.server_name.is_some() {
            "https"
        } else {
            "http"
        };
        let failed = |e: h2::Error| Start::Failed(format!("the reflection call failed ({e})"));
        let mut head = http::Request::builder()
            .method("POST")
            .uri(format!("{scheme}://{}{path}", target.authority))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header(
                "user-agent",
                concat!("msgbench/", env!("CARGO_PKG_VERSION")),
            );
        // The calls' metadata (`authorization`, …), as a server that wants it may.
        for (name, value) in &target.metadata {
            if !["content-type", "te", "user-agent"].contains(&name.as_str()) {
                head = head.header(name.as_str(), value.as_str());
            }
        }
        let head = head
            .body(())
            .map_err(|e| Start::Failed(format!("the reflection call cannot be sent ({e})")))?;
        let mut ready = open.send.clone().ready().await.map_err(failed)?;
        let (response, mut send) = ready.send_request(head, false).map_err(failed)?;
        send.send_data(framed(Ask::ListServices(String::new())), false)
            .map_err(failed)?;
        let response = response.await.map_err(failed)?;
        if response.status() != http::StatusCode::OK {
            return Err(Start::Unimplemented(format!("HTTP {}", response.status())));
        }
        if let Some(Err(why)) = crate::net::grpc_frame::status(response.headers()) {
            return Err(if why.contains("UNIMPLEMENTED") {
                Start::Unimplemented(why)
            } else {
                Start::Failed(format!("{}'s server reflection answered {why}", target.url))
            });
        }
        let mut session = Session {
            send,
            body: response.into_body(),
            frames: Frames::default(),
            url: target.url.clone(),
            first: None,
        };
        let first = session.answer().await;
        match first {
            Err(why) if why.contains("UNIMPLEMENTED") => Err(Start::Unimplemented(why)),
            Err(why) => Err(Start::Failed(why)),
            Ok(a) => {
                session.first = Some(a);
                Ok(session)
            }
        }
    }

    /// Every file the services need, as a `FileDescriptorSet`.
    async fn collect(mut self) -> Result<Vec<u8>, String> {
        let services = match self.first.take() {
            Some(Answer::Services(s)) => s.service,
            other => return Err(self.unexpected("the list of services", other)),
        };
        let wanted: Vec<String> = services
            .into_iter()
            .map(|s| s.name)
            .filter(|n| !n.starts_with(wire::OWN_PACKAGE))
            .collect();
        if wanted.is_empty() {
            return Err(format!(
                "{}'s server reflection lists no service but itself",
                self.url
            ));
        }
        let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut asked: HashSet<String> = HashSet::new();
        let mut queue: VecDeque<Ask> = wanted.into_iter().map(Ask::FileContainingSymbol).collect();
        let mut bytes = 0usize;
        while let Some(ask) = queue.pop_front() {
            if let Ask::FileByFilename(name) = &ask {
                if files.contains_key(name) {
                    continue;
                }
            }
            let what = match &ask {
                Ask::FileContainingSymbol(s) => format!("the file that defines {s}"),
                Ask::FileByFilename(f) => format!("the file {f}"),
                Ask::ListServices(_) => "the list of services".into(),
            };
            self.put(ask)?;
            let got = match self.answer().await? {
                Answer::Files(f) => f.file_descriptor_proto,
                Answer::Error(e) => {
                    return Err(format!(
                        "{}'s server reflection could not give {what}: {} {}",
                        self.url,
                        msgbench_model::grpc::status_name(e.error_code.max(0) as u32),
                        e.error_message
                    ))
                }
                other => return Err(self.unexpected(&what, Some(other))),
            };
            for file in got {
                let names = wire::FileNames::decode(file.as_slice()).map_err(|e| {
                    format!(
                        "{}'s server reflection sent {what} as something that is no file descriptor ({e})",
                        self.url
                    )
                })?;
                if files.contains_key(&names.name) {
                    continue;
                }
                for dependency in names.dependency {
                    if !files.contains_key(&dependency) && asked.insert(dependency.clone()) {
                        queue.push_back(Ask::FileByFilename(dependency));
                    }
                }
                bytes += file.len();
                files.insert(names.name, file);
                if files.len() > MAX_FILES || bytes > MAX_BYTES {
                    return Err(format!(
                        "{}'s server reflection sent more than {MAX_FILES} files or {} MiB",
                        self.url,
                        MAX_BYTES >> 20
                    ));
                }
            }
        }
        let _ = self.send.send_data(Bytes::new(), true);
        let files: Vec<Vec<u8>> = files.into_values().collect();
        Ok(wire::descriptor_set(&files))
    }

    /// Sends one request.
    fn put(&mut self, ask: Ask) -> Result<(), String> {
        self.send
            .send_data(framed(ask), false)
            .map_err(|e| format!("the reflection call failed ({e})"))
    }

    /// The next response, or why none came (the call's status when the server ended it).
    async fn answer(&mut self) -> Result<Answer, String> {
        loop {
            if let Some(message) = self.frames.cut()? {
                let response = wire::Response::decode(message).map_err(|e| {
                    format!(
                        "{}'s server reflection sent a response that does not decode ({e})",
                        self.url
                    )
                })?;
                return response.answer.ok_or_else(|| {
                    format!("{}'s server reflection sent an empty response", self.url)
                });
            }
            match self.body.data().await {
                Some(Ok(data)) => {
                    let _ = self.body.flow_control().release_capacity(data.len());
                    self.frames.push(data);
                }
                Some(Err(e)) => {
                    return Err(format!(
                        "{}'s server reflection ended: {}",
                        self.url,
                        connect::stream_error(&e)
                    ))
                }
                None => {
                    let trailers = self.body.trailers().await.ok().flatten();
                    let status = trailers
                        .as_ref()
                        .and_then(crate::net::grpc_frame::status)
                        .and_then(Result::err)
                        .unwrap_or_else(|| "no answer".into());
                    return Err(format!(
                        "{}'s server reflection ended the call: {status}",
                        self.url
                    ));
                }
            }
        }
    }

    fn unexpected(&self, what: &str, got: Option<Answer>) -> String {
        let got = match got {
            None => "nothing",
            Some(Answer::Files(_)) => "files",
            Some(Answer::Services(_)) => "services",
            Some(Answer::Error(_)) => "an error",
        };
        format!(
            "{}'s server reflection answered a request for {what} with {got}",
            self.url
        )
    }
}

/// A request, framed as gRPC sends it.
fn framed(ask: Ask) -> Bytes {
    let message = wire::Request {
        host: String::new(),
        ask: Some(ask),
    }
    .encode_to_vec();
    let mut framed = BytesMut::with_capacity(5 + message.len());
    crate::net::grpc_frame::put_head(&mut framed, message.len());
    framed.extend_from_slice(&message);
    framed.freeze()
}

//! Server reflection for `msgbench serve grpc` (`grpc.reflection.v1` and `v1alpha`): it
//! answers with the descriptors of `protos/msgbench.proto` (compiled into the binary as text,
//! compiled to descriptors when the server starts), so a scenario may say `reflection = true`
//! against it, and tools such as grpcurl or ghz can list and call it without the file.
//!
//! Bounded like the rest of the server: a request over [`MAX_REQUEST`] ends the call with
//! `RESOURCE_EXHAUSTED`, and an answer is sent only when the client's flow-control window takes
//! it, so a client that asks without reading holds its own stream back, not the server's memory.
use crate::net::grpc_frame::Frames;
use crate::net::grpc_reflection::{self as wire, Answer, Ask};
use bytes::{Bytes, BytesMut};
use prost::Message;
use prost_reflect::DescriptorPool;

/// The `.proto` the server's services are described by.
const OWN_PROTO: &str = include_str!("../../../../protos/msgbench.proto");
/// Largest reflection request read.
const MAX_REQUEST: usize = 64 << 10;

/// What the server offers through reflection.
pub struct Descriptors {
    /// The files, each a serialized `FileDescriptorProto`, by name.
    files: Vec<(String, Vec<u8>)>,
    pool: DescriptorPool,
}

impl Descriptors {
    /// The descriptors of `protos/msgbench.proto`.
    pub fn own() -> Descriptors {
        let files = msgbench_model::grpc::compile_source("msgbench.proto", OWN_PROTO)
            .expect("protos/msgbench.proto compiles");
        let set = wire::descriptor_set(&files);
        let pool = DescriptorPool::decode(set.as_slice()).expect("its descriptors decode");
        let files = files
            .into_iter()
            .map(|f| {
                let names = wire::FileNames::decode(f.as_slice()).expect("a file descriptor");
                (names.name, f)
            })
            .collect();
        Descriptors { files, pool }
    }

    /// The answer to one request.
    fn answer(&self, ask: Option<Ask>) -> Answer {
        let not_found = |what: String| {
            Answer::Error(wire::ErrorAnswer {
                error_code: 5,
                error_message: format!("{what} is not known here"),
            })
        };
        match ask {
            Some(Ask::ListServices(_)) => Answer::Services(wire::Services {
                service: self
                    .pool
                    .services()
                    .map(|s| wire::Service {
                        name: s.full_name().to_string(),
                    })
                    .collect(),
            }),
            Some(Ask::FileByFilename(name)) => match self.file(&name) {
                Some(f) => self.with_imports(f),
                None => not_found(format!("the file {name}")),
            },
            Some(Ask::FileContainingSymbol(symbol)) => match self.file_defining(&symbol) {
                Some(f) => self.with_imports(f),
                None => not_found(format!("the symbol {symbol}")),
            },
            None => Answer::Error(wire::ErrorAnswer {
                error_code: 12,
                error_message:
                    "only list_services, file_by_filename and file_containing_symbol are answered"
                        .into(),
            }),
        }
    }

    fn file(&self, name: &str) -> Option<usize> {
        self.files.iter().position(|(n, _)| n == name)
    }

    /// The file that defines a service, method, message or enum by its full name.
    fn file_defining(&self, symbol: &str) -> Option<usize> {
        let p = &self.pool;
        let file = p
            .get_service_by_name(symbol)
            .map(|s| s.parent_file())
            .or_else(|| p.get_message_by_name(symbol).map(|m| m.parent_file()))
            .or_else(|| p.get_enum_by_name(symbol).map(|e| e.parent_file()))
            .or_else(|| {
                let (service, _method) = symbol.rsplit_once('.')?;
                p.get_service_by_name(service).map(|s| s.parent_file())
            })?;
        self.file(file.name())
    }

    /// A file first, then every file it imports, each once (as the reference servers send).
    fn with_imports(&self, first: usize) -> Answer {
        let mut order = vec![first];
        let mut i = 0;
        while i < order.len() {
            let (name, _) = &self.files[order[i]];
            if let Some(f) = self.pool.get_file_by_name(name) {
                for d in f.dependencies() {
                    if let Some(j) = self.file(d.name()) {
                        if !order.contains(&j) {
                            order.push(j);
                        }
                    }
                }
            }
            i += 1;
        }
        Answer::Files(wire::Files {
            file_descriptor_proto: order.iter().map(|&j| self.files[j].1.clone()).collect(),
        })
    }
}

/// Answers one reflection call: each request as it comes, until the client ends its side.
pub async fn serve(
    mut body: h2::RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    descriptors: &Descriptors,
) -> Result<(), h2::Error> {
    let mut stream = respond.send_response(super::grpc_stream::grpc_head(), false)?;
    let mut frames = Frames::default();
    let mut out = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
        frames.push(chunk);
        loop {
            let request = match frames.cut() {
                Ok(Some(m)) if m.len() <= MAX_REQUEST => m,
                Ok(Some(_)) => {
                    return super::grpc_stream::end_stream(
                        &mut stream,
                        (
                            "8",
                            Some("reflection request larger than the server's limit"),
                        ),
                    )
                }
                Ok(None) => break,
                Err(_) => {
                    let why = "not a stream of uncompressed gRPC messages";
                    return super::grpc_stream::end_stream(&mut stream, ("13", Some(why)));
                }
            };
            let Ok(request) = wire::Request::decode(request) else {
                let why = "not a ServerReflectionRequest";
                return super::grpc_stream::end_stream(&mut stream, ("13", Some(why)));
            };
            let response = wire::Response {
                valid_host: request.host.clone(),
                answer: Some(descriptors.answer(request.ask.clone())),
                original_request: Some(request),
            }
            .encode_to_vec();
            crate::net::grpc_frame::put_head(&mut out, response.len());
            out.extend_from_slice(&response);
            let message = out.split().freeze();
            if !super::grpc_stream::window_takes(&mut stream, message.len()).await? {
                return Ok(()); // the client reset the stream
            }
            stream.send_data(message, false)?;
        }
    }
    super::grpc_stream::end_stream(&mut stream, ("0", None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_descriptors_answer_services_symbols_and_files() {
        let d = Descriptors::own();
        let Answer::Services(s) = d.answer(Some(Ask::ListServices(String::new()))) else {
            panic!("services")
        };
        let names: Vec<&str> = s.service.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["msgbench.Echo", "msgbench.Feed"]);
        for symbol in ["msgbench.Echo", "msgbench.Echo.Call", "msgbench.Tick"] {
            let Answer::Files(f) = d.answer(Some(Ask::FileContainingSymbol(symbol.into()))) else {
                panic!("{symbol}")
            };
            let names = wire::FileNames::decode(f.file_descriptor_proto[0].as_slice()).unwrap();
            assert_eq!(names.name, "msgbench.proto");
        }
        assert!(matches!(
            d.answer(Some(Ask::FileContainingSymbol("nope.Nothing".into()))),
            Answer::Error(wire::ErrorAnswer { error_code: 5, .. })
        ));
        assert!(matches!(
            d.answer(Some(Ask::FileByFilename("msgbench.proto".into()))),
            Answer::Files(_)
        ));
        assert!(matches!(
            d.answer(None),
            Answer::Error(wire::ErrorAnswer { error_code: 12, .. })
        ));
    }
}

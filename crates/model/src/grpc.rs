//! gRPC calls for the `http` system: a `.proto` file (with its imports) compiled when the
//! scenario is checked — `protox`, no code generation at build time — and each call's request,
//! given as JSON, encoded once into its protobuf bytes and gRPC's length-prefixed frame.
//! Anything wrong (an unreadable `.proto`, an unknown service or method, JSON that does not
//! match the request message) is refused here, before any load, with what there is.
pub use crate::check::ReflectionTarget;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, MethodDescriptor};
use std::path::Path;

/// The `.proto` at `path` and everything it imports (looked up in `include`, then in the
/// `.proto`'s own folder; Google's well-known types are built in); or, for a `.protoset` or
/// `.pb` file, the compiled descriptors it holds (`protoc --descriptor_set_out
/// --include_imports`, as ghz's `--protoset` takes).
pub fn load(path: &str, include: &[String]) -> Result<DescriptorPool, String> {
    if !Path::new(path).is_file() {
        return Err(format!(
            "\"{path}\" is not a file that can be read (relative paths start where msgbench runs)"
        ));
    }
    if path.ends_with(".protoset") || path.ends_with(".pb") {
        let bytes = std::fs::read(path).map_err(|e| format!("\"{path}\" cannot be read ({e})"))?;
        return DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
            format!("\"{path}\" is not a FileDescriptorSet with its imports ({e}); write one with protoc --include_imports --descriptor_set_out")
        });
    }
    let own_dir = Path::new(path)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let mut includes: Vec<std::path::PathBuf> = include.iter().map(Into::into).collect();
    includes.push(own_dir.clone());
    let mut compiler = protox::Compiler::new(&includes).map_err(|e| e.to_string())?;
    // protox names a file by its path under an include folder.
    let name = Path::new(path)
        .strip_prefix(&own_dir)
        .map(|p| p.to_path_buf())
        .unwrap_or_else(|_| path.into());
    let opened = include
        .iter()
        .find_map(|i| Path::new(path).strip_prefix(i).ok())
        .unwrap_or(&name)
        .to_path_buf();
    compiler
        .include_imports(true)
        .open_file(&opened)
        .map_err(|e| {
            let at = location(&e).map(|(file, line, col)| format!(" at {file}:{line}:{col}"));
            let searched: Vec<String> = includes.iter().map(|p| p.display().to_string()).collect();
            let looked = if e.is_file_not_found() {
                format!(" (imports are looked up in: {})", searched.join(", "))
            } else {
                String::new()
            };
            format!(
                "\"{path}\" does not compile{}: {e}{looked}",
                at.unwrap_or_default()
            )
        })?;
    Ok(compiler.descriptor_pool())
}

impl ReflectionTarget {
    /// The server at `url` (as given: `text`), with the section's TLS options and the calls'
    /// metadata.
    pub(crate) fn of(
        text: &str,
        url: &crate::url::Url,
        (ca_file, insecure): (Option<&str>, bool),
        metadata: Vec<(String, String)>,
    ) -> ReflectionTarget {
        ReflectionTarget {
            url: text.to_string(),
            address: url.address.clone(),
            authority: url.authority.clone(),
            server_name: url.tls.then(|| url.host.clone()),
            ca_file: ca_file.map(str::to_string),
            insecure,
            metadata,
        }
    }
}

/// The descriptors `target` offers through server reflection, asked through `limits`; the
/// error says what the server did, for the field `reflection`.
pub fn reflected(
    limits: &crate::check::MachineLimits,
    target: &ReflectionTarget,
) -> Result<DescriptorPool, String> {
    let Some(reflector) = &limits.reflection else {
        return Err("needs the server, and this check may not use the network".into());
    };
    let set = (reflector.0)(target)?;
    DescriptorPool::decode(set.as_slice()).map_err(|e| {
        format!(
            "got descriptors from {} that do not fit together ({e})",
            target.url
        )
    })
}

/// The files of one `.proto` given as text (importing nothing but Google's well-known types),
/// each a serialized `FileDescriptorProto`, imports included: what a server that was built from
/// it offers through reflection.
pub fn compile_source(name: &str, source: &str) -> Result<Vec<Vec<u8>>, String> {
    struct Text {
        name: String,
        source: String,
    }
    impl protox::file::FileResolver for Text {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            if name == self.name {
                protox::file::File::from_source(name, &self.source)
            } else {
                Err(protox::Error::file_not_found(name))
            }
        }
    }
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(Text {
        name: name.into(),
        source: source.into(),
    });
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler
        .include_imports(true)
        .open_file(name)
        .map_err(|e| format!("{name} does not compile: {e}"))?;
    Ok(compiler
        .file_descriptor_set()
        .file
        .iter()
        .map(Message::encode_to_vec)
        .collect())
}

/// Where a compile error points: file, line and column (from 1), when it says.
fn location(e: &protox::Error) -> Option<(String, usize, usize)> {
    use miette::Diagnostic;
    fn first(d: &dyn Diagnostic) -> Option<(String, usize, usize)> {
        if let (Some(source), Some(mut labels)) = (d.source_code(), d.labels()) {
            if let Some(label) = labels.next() {
                if let Ok(c) = source.read_span(label.inner(), 0, 0) {
                    let name = c.name().unwrap_or("the .proto").to_string();
                    return Some((name, c.line() + 1, c.column() + 1));
                }
            }
        }
        d.related()?.find_map(first)
    }
    first(e)
}

/// The `[ticks.grpc]` section: the tick clients read a gRPC server stream instead of a
/// WebSocket — each connection (an HTTP/2 connection to `ticks.address`, `http://` or
/// `https://`) makes one call and reads its stream of messages as a feed (`[ticks.feed]`,
/// `format = "protobuf"`).
#[derive(
    Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcStreamSpec {
    /// The `.proto` that describes the call (or a `.protoset`/`.pb` of compiled descriptors).
    pub proto: String,
    /// Ask the server for its descriptors (server reflection) when the scenario is checked,
    /// instead of reading `proto`.
    pub reflection: bool,
    /// Folders its imports are looked up in (its own folder is searched last).
    pub include: Vec<String>,
    /// The server-streaming method, `package.Service/Method`.
    pub call: String,
    /// The request message as JSON (protobuf's JSON mapping); default `{}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Metadata sent with the call (`authorization`, …).
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// Validated `[ticks.grpc]`.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcStream {
    /// `package.Service/Method`.
    pub call: String,
    /// `/package.Service/Method`.
    pub path: String,
    /// The request message, framed.
    pub frame: Vec<u8>,
    /// Metadata, lower-case names.
    pub metadata: Vec<(String, String)>,
    /// `host:port` to connect to.
    pub address: String,
    /// `:authority`.
    pub authority: String,
    /// TLS (`https://`): the name the certificate must carry.
    pub server_name: Option<String>,
}

impl GrpcStreamSpec {
    /// The call and the message its stream carries (whose fields `[ticks.feed]` names), or
    /// what is wrong: `(field, problem, fix)`.
    pub(crate) fn validate(
        &self,
        address: &str,
        (ca_file, insecure): (Option<&str>, bool),
        limits: &crate::check::MachineLimits,
    ) -> Result<(GrpcStream, prost_reflect::MessageDescriptor), (String, String, String)> {
        let wrong = |field: &str, problem: String, fix: &str| {
            Err((format!("ticks.grpc.{field}"), problem, fix.to_string()))
        };
        let url = match crate::url::parse_url(address) {
            Ok(u) => u,
            Err((why, _)) => {
                return Err((
                    "ticks.address".into(),
                    format!("is \"{address}\", which {why}"),
                    "a gRPC server's address is http://host:port (cleartext HTTP/2) or https://host:port".into(),
                ))
            }
        };
        let mut metadata = Vec::new();
        for (name, value) in &self.metadata {
            match metadata_entry(name, value) {
                Some(entry) => metadata.push(entry),
                None => {
                    return wrong(
                        "metadata",
                        format!("has {name:?}, which a gRPC call cannot carry as metadata"),
                        METADATA_RULE,
                    )
                }
            }
        }
        let pool = self.descriptors(address, &url, (ca_file, insecure), &metadata, limits)?;
        let method = match method(&pool, &self.call, Shape::ServerStreaming) {
            Ok(m) => m,
            Err(e) => return wrong(
                "call",
                e,
                "name a server-streaming method of the .proto, e.g. call = \"msgbench.Feed/Ticks\"",
            ),
        };
        let frame = match request_frame(&method, self.message.as_deref().unwrap_or("{}")) {
            Ok(f) => f,
            Err(e) => return wrong("message", e, "write the request as protobuf's JSON mapping"),
        };
        let path = format!("/{}", self.call);
        Ok((
            GrpcStream {
                call: self.call.clone(),
                path,
                frame,
                metadata,
                address: url.address,
                authority: url.authority,
                server_name: url.tls.then_some(url.host),
            },
            method.output(),
        ))
    }
}

impl GrpcStreamSpec {
    /// The descriptors of the call: asked of the server (`reflection`) or read from the
    /// `.proto`; the error as `validate`'s.
    #[allow(clippy::type_complexity)]
    fn descriptors(
        &self,
        address: &str,
        url: &crate::url::Url,
        (ca_file, insecure): (Option<&str>, bool),
        metadata: &[(String, String)],
        limits: &crate::check::MachineLimits,
    ) -> Result<prost_reflect::DescriptorPool, (String, String, String)> {
        let wrong = |field: &str, problem: String, fix: &str| {
            Err((format!("ticks.grpc.{field}"), problem, fix.to_string()))
        };
        if self.reflection {
            if !self.proto.is_empty() {
                return wrong(
                    "reflection",
                    "is given with ticks.grpc.proto".into(),
                    "give one: the .proto (read here), or reflection = true (asked of the server)",
                );
            }
            let target = ReflectionTarget::of(address, url, (ca_file, insecure), metadata.to_vec());
            match reflected(limits, &target) {
                Ok(p) => Ok(p),
                Err(e) => wrong("reflection", e, "the server must run and offer server reflection when the scenario is checked; or give its .proto with proto = \"feed.proto\""),
            }
        } else {
            if self.proto.is_empty() {
                return wrong(
                    "proto",
                    "is missing".into(),
                    "give the .proto that describes the call, e.g. proto = \"protos/msgbench.proto\", or ask the server: reflection = true",
                );
            }
            match load(&self.proto, &self.include) {
                Ok(p) => Ok(p),
                Err(e) => wrong("proto", e, "give a .proto file that protoc would compile, and `include` folders for its imports"),
            }
        }
    }
}

/// What [`metadata_entry`] takes, in words (the fix of a refused entry).
pub const METADATA_RULE: &str = "use lower-case names of letters, digits, - _ . (not grpc-*, content-type or te) and printable values";

/// `name: value` as metadata a gRPC call may carry (name lower-cased), or `None`: a name that
/// is reserved (`:…`, `grpc-*`, `content-type`, `te`, connection headers) or not a token of
/// letters, digits, `- _ .`, or a value with control characters.
pub fn metadata_entry(name: &str, value: &str) -> Option<(String, String)> {
    let lower = name.to_ascii_lowercase();
    let reserved = lower.starts_with(':')
        || lower.starts_with("grpc-")
        || [
            "content-type",
            "te",
            "connection",
            "transfer-encoding",
            "host",
        ]
        .contains(&lower.as_str());
    let token = !lower.is_empty()
        && (lower.bytes()).all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    let printable = !value.bytes().any(|b| b < 0x20 && b != b'\t');
    (!reserved && token && printable).then(|| (lower, value.to_string()))
}

/// The kind of call a system measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One request, one response (`system = "http"`).
    Unary,
    /// One request, a stream of responses (`system = "ticks"`, `[ticks.grpc]`).
    ServerStreaming,
    /// A stream each way, each reply paired with its request by a field (`system = "http"`,
    /// `match`).
    Bidi,
    /// A stream of requests, one response (`system = "http"`, `messages` per call).
    ClientStreaming,
}

/// The shape of the method `call` of `pool`, if it has it.
pub fn shape_of(pool: &DescriptorPool, call: &str) -> Option<Shape> {
    let (service, name) = call.split_once('/')?;
    let m = pool
        .get_service_by_name(service)?
        .methods()
        .find(|m| m.name() == name)?;
    Some(shape_of_method(&m))
}

fn shape_of_method(m: &MethodDescriptor) -> Shape {
    match (m.is_client_streaming(), m.is_server_streaming()) {
        (false, false) => Shape::Unary,
        (false, true) => Shape::ServerStreaming,
        (true, true) => Shape::Bidi,
        (true, false) => Shape::ClientStreaming,
    }
}

/// The method `call` (`package.Service/Method`) of `pool`, of the `shape` the system measures;
/// the error lists what exists, or says which system measures the method's shape.
pub fn method(pool: &DescriptorPool, call: &str, shape: Shape) -> Result<MethodDescriptor, String> {
    let Some((service, name)) = call.split_once('/') else {
        return Err(format!(
            "\"{call}\" is not package.Service/Method (e.g. \"helloworld.Greeter/SayHello\")"
        ));
    };
    let Some(s) = pool.get_service_by_name(service) else {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        return Err(format!(
            "names the service \"{service}\", which the .proto does not have (it has: {})",
            list(&known)
        ));
    };
    let Some(m) = s.methods().find(|m| m.name() == name) else {
        let known: Vec<String> = s.methods().map(|m| m.name().to_string()).collect();
        return Err(format!(
            "names the method \"{name}\", which {service} does not have (it has: {})",
            list(&known)
        ));
    };
    let found = shape_of_method(&m);
    if shape == found {
        return Ok(m);
    }
    Err(match found {
        Shape::ServerStreaming => format!(
            "names {call}, a server-streaming method: leave `match` and `messages` out (each call is then measured as a stream: its first message, its gaps), or read one long stream as a feed with system = \"ticks\" and [ticks.grpc] (docs/http2-grpc.md)"
        ),
        Shape::Unary if shape == Shape::Bidi => format!(
            "names {call}, a unary method, with `match`: leave `match` out (it pairs replies with requests on a bidirectional stream)"
        ),
        Shape::Unary if shape == Shape::ClientStreaming => format!(
            "names {call}, a unary method, with `messages`: leave `messages` out (it is how many messages a client-streaming call sends)"
        ),
        Shape::ClientStreaming if shape == Shape::ServerStreaming => format!(
            "names {call}, a client-streaming method: measure it with system = \"http\", grpc = \"{call}\" and messages = N in a request"
        ),
        Shape::ClientStreaming => format!(
            "names {call}, a client-streaming method: say how many messages each call sends, e.g. messages = 10 (the call's latency runs to its one response)"
        ),
        Shape::Unary => format!(
            "names {call}, a unary method: measure it with system = \"http\" and grpc = \"{call}\" in a request"
        ),
        Shape::Bidi if shape == Shape::Unary => format!(
            "names {call}, a bidirectional method: say which field pairs each reply with its request, e.g. match = \"id\" (a 64-bit integer or a string in both messages)"
        ),
        Shape::Bidi => format!(
            "names {call}, a bidirectional method: measure it with system = \"http\", grpc = \"{call}\" and match = \"<field>\" in a request"
        ),
    })
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The request message of `method` from `json` (protobuf's JSON mapping), as gRPC sends it:
/// an uncompressed flag byte, its length (4 bytes, big-endian), its protobuf encoding.
pub fn request_frame(method: &MethodDescriptor, json: &str) -> Result<Vec<u8>, String> {
    let input = method.input();
    let mut de = serde_json::Deserializer::from_str(json);
    let message = DynamicMessage::deserialize(input.clone(), &mut de)
        .and_then(|m| de.end().map(|()| m))
        .map_err(|e| {
            format!(
                "is not a {} as JSON: {e} (its fields: {}; 64-bit integers are strings, bytes base64)",
                input.full_name(),
                list(
                    &input
                        .fields()
                        .map(|f| f.json_name().to_string())
                        .collect::<Vec<_>>()
                )
            )
        })?;
    let body = message.encode_to_vec();
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.push(0);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// How a scalar field of a streamed message is read off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoKind {
    /// A varint: `uint32/64`, `int32/64` (a negative one reads as a huge number).
    Varint,
    /// A zigzag varint: `sint32/64`.
    Zigzag,
    /// 4 bytes: `fixed32`, `sfixed32`.
    Fixed32,
    /// 8 bytes: `fixed64`, `sfixed64`.
    Fixed64,
    /// 8 bytes: a `double`.
    Double,
    /// A `google.protobuf.Timestamp` (seconds and nanos since the Unix epoch), read as Unix ns.
    Timestamp,
    /// A `string` holding a decimal number (a request id written as text).
    Text,
}

/// What a field is read for, which decides the types it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A feed's sequence number: any integer.
    Sequence,
    /// A feed's timestamp: an integer, a double or a `google.protobuf.Timestamp`.
    Timestamp,
    /// What pairs a bidirectional call's replies with its requests: a 64-bit integer (request
    /// ids run past 2^32) or a string.
    Match,
}

/// A field of a streamed message, by its numbers from the outer message in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoField {
    /// The dotted names, as the scenario gave them.
    pub path: String,
    /// Field numbers: every one but the last names a message field.
    pub numbers: Vec<u32>,
    /// How the last one is read.
    pub kind: ProtoKind,
}

/// What pairs a bidirectional call's replies with its requests: the same dotted field in the
/// request message (set to each request's id) and in the reply (read back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BidiMatch {
    /// Where the id goes in a request.
    pub request: ProtoField,
    /// Where it is in a reply.
    pub reply: ProtoField,
}

/// Deepest a match field may be nested (each level adds a few bytes to every message).
const MAX_MATCH_DEPTH: usize = 4;

impl BidiMatch {
    /// The field `path` of `method`'s request and reply messages.
    pub fn new(method: &MethodDescriptor, path: &str) -> Result<BidiMatch, String> {
        let request = field_path(&method.input(), path, Role::Match)?;
        let reply = field_path(&method.output(), path, Role::Match)?;
        if request.numbers.len() > MAX_MATCH_DEPTH {
            return Err(format!(
                "is nested {} deep: put the id at most {MAX_MATCH_DEPTH} messages deep",
                request.numbers.len()
            ));
        }
        Ok(BidiMatch { request, reply })
    }
}

/// The field at the dotted `path` of `message` (names as in the `.proto`), of a type its
/// `role` can use. The error names the part that is wrong and lists the fields that exist
/// there.
pub fn field_path(
    message: &prost_reflect::MessageDescriptor,
    path: &str,
    role: Role,
) -> Result<ProtoField, String> {
    let timestamp = role == Role::Timestamp;
    use prost_reflect::{Cardinality, Kind};
    let parts: Vec<&str> = path.split('.').collect();
    if path.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "is {path:?}: give a dotted field path of {}, e.g. \"seq\" or \"header.seq\"",
            message.full_name()
        ));
    }
    let mut at = message.clone();
    let mut numbers = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let Some(field) = at.get_field_by_name(part) else {
            let known: Vec<String> = at.fields().map(|f| f.name().to_string()).collect();
            return Err(format!(
                "names \"{part}\", which {} does not have (its fields: {})",
                at.full_name(),
                list(&known)
            ));
        };
        if field.cardinality() == Cardinality::Repeated {
            return Err(format!(
                "names {}.{part}, a repeated field (or a map): point at one value",
                at.full_name()
            ));
        }
        numbers.push(field.number());
        let last = i + 1 == parts.len();
        match (field.kind(), last) {
            (Kind::Message(m), true)
                if timestamp && m.full_name() == "google.protobuf.Timestamp" =>
            {
                return Ok(ProtoField {
                    path: path.into(),
                    numbers,
                    kind: ProtoKind::Timestamp,
                })
            }
            (Kind::Message(m), false) => at = m,
            (kind, true) => {
                let read = scalar_kind(kind, role, &at, part)?;
                return Ok(ProtoField {
                    path: path.into(),
                    numbers,
                    kind: read,
                });
            }
            (other, false) => {
                return Err(format!(
                    "goes into {}.{part}, of type {}, which has no fields",
                    at.full_name(),
                    kind_name(&other)
                ))
            }
        }
    }
    unreachable!("a path has a last part")
}

/// How the last field of a path, of `kind`, is read in the `role` it plays: an integer (every
/// width but where a match needs 64 bits), a double for a timestamp, a string for a match.
fn scalar_kind(
    kind: prost_reflect::Kind,
    role: Role,
    at: &prost_reflect::MessageDescriptor,
    part: &str,
) -> Result<ProtoKind, String> {
    use prost_reflect::Kind;
    let (wide, timestamp) = (role != Role::Match, role == Role::Timestamp);
    Ok(match kind {
        Kind::Uint64 | Kind::Int64 => ProtoKind::Varint,
        Kind::Uint32 | Kind::Int32 if wide => ProtoKind::Varint,
        Kind::Sint64 => ProtoKind::Zigzag,
        Kind::Sint32 if wide => ProtoKind::Zigzag,
        Kind::Fixed32 | Kind::Sfixed32 if wide => ProtoKind::Fixed32,
        Kind::Fixed64 | Kind::Sfixed64 => ProtoKind::Fixed64,
        Kind::Double if timestamp => ProtoKind::Double,
        Kind::String if role == Role::Match => ProtoKind::Text,
        other => {
            let wanted = match role {
                Role::Timestamp => "an integer, a double or a google.protobuf.Timestamp",
                Role::Sequence => "an integer",
                Role::Match => "a 64-bit integer (request ids run past 2^32) or a string",
            };
            return Err(format!(
                "names {}.{part}, of type {}: it must be {wanted}",
                at.full_name(),
                kind_name(&other)
            ));
        }
    })
}

fn kind_name(kind: &prost_reflect::Kind) -> String {
    match kind {
        prost_reflect::Kind::Message(m) => m.full_name().to_string(),
        prost_reflect::Kind::Enum(e) => format!("enum {}", e.full_name()),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The name of gRPC status `code` (as `grpc-status` carries it).
pub fn status_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("UNKNOWN_CODE")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = r#"syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
message Item { string name = 1; int64 price = 2; }
message Order {
  string id = 1;
  repeated Item items = 2;
  map<string, string> tags = 3;
  oneof pay { string card = 4; int32 voucher = 5; }
  common.Money total = 6;
  google.protobuf.Timestamp at = 7;
}
message Ack { bool ok = 1; }
service Orders {
  rpc Place(Order) returns (Ack);
  rpc Watch(Ack) returns (stream Order);
}
"#;
    const COMMON: &str =
        "syntax = \"proto3\";\npackage common;\nmessage Money { string currency = 1; int64 units = 2; }\n";

    fn pool() -> (tempfile::TempDir, DescriptorPool) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("shop.proto"), PROTO).unwrap();
        let inc = dir.path().join("inc");
        std::fs::create_dir(&inc).unwrap();
        std::fs::write(inc.join("common.proto"), COMMON).unwrap();
        let path = dir.path().join("shop.proto");
        let pool = load(path.to_str().unwrap(), &[inc.to_str().unwrap().to_string()]).unwrap();
        (dir, pool)
    }

    #[test]
    fn nested_imported_repeated_oneof_and_map_fields_encode_as_protobuf() {
        let (_dir, pool) = pool();
        let m = method(&pool, "shop.Orders/Place", Shape::Unary).unwrap();
        let frame = request_frame(
            &m,
            r#"{"id":"o1","items":[{"name":"a","price":"3"}],"tags":{"k":"v"},"voucher":7,"total":{"currency":"EUR","units":5},"at":"1970-01-01T00:00:01Z"}"#,
        )
        .unwrap();
        assert_eq!(frame[0], 0);
        let len = u32::from_be_bytes(frame[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 5);
        // The same message written by hand with prost's encoders, field by field.
        let mut want = Vec::new();
        prost::encoding::string::encode(1, &"o1".to_string(), &mut want);
        let mut item = Vec::new();
        prost::encoding::string::encode(1, &"a".to_string(), &mut item);
        prost::encoding::int64::encode(2, &3, &mut item);
        prost::encoding::bytes::encode(2, &item, &mut want);
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, &"k".to_string(), &mut entry);
        prost::encoding::string::encode(2, &"v".to_string(), &mut entry);
        prost::encoding::bytes::encode(3, &entry, &mut want);
        prost::encoding::int32::encode(5, &7, &mut want);
        let mut money = Vec::new();
        prost::encoding::string::encode(1, &"EUR".to_string(), &mut money);
        prost::encoding::int64::encode(2, &5, &mut money);
        prost::encoding::bytes::encode(6, &money, &mut want);
        let mut at = Vec::new();
        prost::encoding::int64::encode(1, &1, &mut at);
        prost::encoding::bytes::encode(7, &at, &mut want);
        assert_eq!(&frame[5..], &want[..]);
    }

    #[test]
    fn what_is_wrong_is_named_with_what_exists() {
        let (dir, pool) = pool();
        let e = method(&pool, "shop.Order/Place", Shape::Unary).unwrap_err();
        assert!(e.contains("shop.Orders"), "{e}");
        let e = method(&pool, "shop.Orders/Pay", Shape::Unary).unwrap_err();
        assert!(e.contains("Place") && e.contains("Watch"), "{e}");
        let e = method(&pool, "shop.Orders.Place", Shape::Unary).unwrap_err();
        assert!(e.contains("package.Service/Method"), "{e}");
        let e = method(&pool, "shop.Orders/Watch", Shape::Unary).unwrap_err();
        assert!(e.contains("streaming"), "{e}");
        let e = method(&pool, "shop.Orders/Place", Shape::ServerStreaming).unwrap_err();
        assert!(e.contains("a unary method"), "{e}");
        let m = method(&pool, "shop.Orders/Place", Shape::Unary).unwrap();
        let e = request_frame(&m, r#"{"idd":"x"}"#).unwrap_err();
        assert!(e.contains("idd") && e.contains("shop.Order"), "{e}");
        let e = request_frame(&m, r#"{"items":[{"price":"cheap"}]}"#).unwrap_err();
        assert!(e.contains("shop.Order"), "{e}");
        let e = load(dir.path().join("none.proto").to_str().unwrap(), &[]).unwrap_err();
        assert!(e.contains("none.proto"), "{e}");
        // An import that cannot be found (no include folder given).
        let e = load(dir.path().join("shop.proto").to_str().unwrap(), &[]).unwrap_err();
        assert!(e.contains("common.proto"), "{e}");
    }

    #[test]
    fn statuses_have_their_names() {
        assert_eq!(status_name(0), "OK");
        assert_eq!(status_name(14), "UNAVAILABLE");
        assert_eq!(status_name(99), "UNKNOWN_CODE");
    }
}

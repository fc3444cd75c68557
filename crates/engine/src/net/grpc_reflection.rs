//! gRPC server reflection's messages (`grpc.reflection.v1.ServerReflection`, and its older
//! name `v1alpha`, which has the same messages): the part msgbench uses — listing the services,
//! and asking for the file that defines a symbol or has a name. Written with `prost`'s derive
//! (a handful of fields; no code generation at build time); the client is
//! [`crate::drivers::http2::reflection`], the server `msgbench serve grpc`.

/// The reflection call's path, current name.
pub const V1: &str = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
/// The same call under its older name, which many servers still offer alone.
pub const V1ALPHA: &str = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
/// The services a reflection answer names that are reflection itself.
pub const OWN_PACKAGE: &str = "grpc.reflection.";

/// `ServerReflectionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// The virtual host asked about (empty: the server's own).
    #[prost(string, tag = "1")]
    pub host: String,
    /// What is asked.
    #[prost(oneof = "Ask", tags = "3, 4, 7")]
    pub ask: Option<Ask>,
}

/// What a request asks.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Ask {
    /// The file of this name (`file_by_filename`).
    #[prost(string, tag = "3")]
    FileByFilename(String),
    /// The file that defines this fully qualified symbol (`file_containing_symbol`).
    #[prost(string, tag = "4")]
    FileContainingSymbol(String),
    /// The services (`list_services`; its content is not used).
    #[prost(string, tag = "7")]
    ListServices(String),
}

/// `ServerReflectionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    /// The host the answer is for.
    #[prost(string, tag = "1")]
    pub valid_host: String,
    /// The request answered.
    #[prost(message, optional, tag = "2")]
    pub original_request: Option<Request>,
    /// The answer.
    #[prost(oneof = "Answer", tags = "4, 6, 7")]
    pub answer: Option<Answer>,
}

/// What a response answers.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Answer {
    /// Serialized `FileDescriptorProto`s: the file asked for, and perhaps some it imports.
    #[prost(message, tag = "4")]
    Files(Files),
    /// The services.
    #[prost(message, tag = "6")]
    Services(Services),
    /// Why the request could not be answered.
    #[prost(message, tag = "7")]
    Error(ErrorAnswer),
}

/// `FileDescriptorResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Files {
    /// Each a serialized `FileDescriptorProto`.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub file_descriptor_proto: Vec<Vec<u8>>,
}

/// `ListServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Services {
    /// The services the server offers.
    #[prost(message, repeated, tag = "1")]
    pub service: Vec<Service>,
}

/// `ServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Service {
    /// Its full name (a service) or path (a file).
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `ErrorResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ErrorAnswer {
    /// A gRPC status code.
    #[prost(int32, tag = "1")]
    pub error_code: i32,
    /// Its explanation.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// The two fields of a `FileDescriptorProto` that say what to fetch next: its name and the
/// files it imports (the rest is skipped when decoding).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FileNames {
    /// Its full name (a service) or path (a file).
    #[prost(string, tag = "1")]
    pub name: String,
    /// The files it imports.
    #[prost(string, repeated, tag = "3")]
    pub dependency: Vec<String>,
}

/// `FileDescriptorSet` bytes from serialized `FileDescriptorProto`s (field 1, repeated): what a
/// `.protoset` file holds and what the scenario check decodes.
pub fn descriptor_set(files: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in files {
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(f.len() as u64, &mut out);
        out.extend_from_slice(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_request_is_encoded_as_the_reflection_proto_says() {
        let r = Request {
            host: String::new(),
            ask: Some(Ask::FileContainingSymbol("a.B".into())),
        };
        // field 4, length-delimited, "a.B"
        assert_eq!(r.encode_to_vec(), b"\x22\x03a.B");
        let r = Request {
            host: String::new(),
            ask: Some(Ask::ListServices(String::new())),
        };
        assert_eq!(r.encode_to_vec(), b"\x3a\x00");
    }

    #[test]
    fn a_descriptor_set_holds_each_file_as_field_one() {
        let set = descriptor_set(&[b"ab".to_vec(), Vec::new()]);
        assert_eq!(set, b"\x0a\x02ab\x0a\x00");
    }
}

//! The seam of the stream family's feeds that are not WebSockets: a [`FeedSource`] hands the
//! tick client's reader one message at a time, and says how its stream ended. A new kind of
//! stream is one file implementing it ([`super::grpc_feed`], [`super::sse_feed`]) and one
//! variant of the client's `Socket` (and [`super::udp_feed`], datagrams).
use crate::drivers::failure::OpenError;
use std::task::{Context, Poll};

/// One message of a feed, borrowed from its source until the next poll.
#[derive(Debug, Clone, Copy)]
pub enum FeedMessage<'a> {
    /// A message read whole: a gRPC stream's protobuf message, a UDP datagram.
    Bytes {
        /// The message.
        payload: &'a [u8],
        /// It is text (JSON), not binary.
        text: bool,
    },
    /// A Server-Sent Event: its data, and the stream's last event id at it.
    Event {
        /// The data lines, joined.
        data: &'a [u8],
        /// The last `id:` the stream gave.
        id: Option<&'a [u8]>,
    },
}

/// Why a stream ended.
#[derive(Debug)]
pub enum StreamEnd {
    /// The server ended it as finished (gRPC status 0).
    Finished,
    /// The connection went, or the server ended the stream with an error: why.
    Lost(String),
    /// The server broke the stream's framing: why.
    Protocol(String),
}

/// A feed read message by message.
pub trait FeedSource {
    /// The next message, or how the stream ended.
    fn poll_message(&mut self, cx: &mut Context<'_>) -> Poll<Result<FeedMessage<'_>, StreamEnd>>;
}

/// Where a feed's server is: a TLS client's configuration and the name its server's certificate must carry.
pub type TlsTarget = (
    std::sync::Arc<rustls::ClientConfig>,
    rustls_pki_types::ServerName<'static>,
);

/// The first address `address` (`host:port`) resolves to.
pub fn resolve(address: &str) -> Result<std::net::SocketAddr, OpenError> {
    use std::net::ToSocketAddrs;
    address
        .to_socket_addrs()
        .map_err(OpenError::Connect)?
        .next()
        .ok_or_else(|| {
            OpenError::Connect(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("`{address}` does not resolve"),
            ))
        })
}

/// For a TLS server (`host` set): the run's configuration (`base`; the Mozilla roots without
/// one) offering `alpn`, and `host` as the name to verify.
pub fn tls_target(
    host: Option<&str>,
    base: Option<std::sync::Arc<rustls::ClientConfig>>,
    alpn: &[u8],
) -> Result<Option<TlsTarget>, OpenError> {
    let Some(host) = host else {
        return Ok(None);
    };
    let base = match base {
        Some(c) => c,
        None => {
            crate::drivers::tls::client_config(None, false)
                .map_err(OpenError::Handshake)?
                .0
        }
    };
    let mut config = (*base).clone();
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
        OpenError::Handshake(format!("`{host}` is not a name TLS can verify ({e})"))
    })?;
    Ok(Some((std::sync::Arc::new(config), name)))
}

//! The built-in HTTP/1.1 server (`msgbench serve http`): the request server of
//! [`super::rpc`] (its threads, limits, backpressure, stall injection and service model)
//! speaking HTTP/1.1, so that an `http` run can be measured against a server whose latency is
//! known exactly.
//!
//! Every request is answered, in order (pipelining included), with `200 OK` and a body of
//! `body_bytes` after the service time: fixed or exponential around `service`, computed
//! (`busy`) or waited (`sleep`). A request's query may ask for its own: `?service_us=250`,
//! `?bytes=4096`, `?status=503` (any of them, in any order). A request that is not HTTP/1.x, is
//! chunked, or is larger than `max_frame` closes its connection (counted as a protocol error).
use super::rpc::{Ask, BadRequest, HeaderKey, RpcServer, ServerWire};
use msgbench_model::rpc::RpcServerConfig;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use std::io::{self, Write};

/// What every response is, unless its request's query says otherwise.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpServerOptions {
    /// Service time, ns (the mean, when exponential).
    pub service_ns: u64,
    /// Exponentially distributed service times (else fixed).
    pub exponential: bool,
    /// Wait the service time on a timer (else compute for it: a thread's capacity is then
    /// 1 / service time).
    pub sleep: bool,
    /// Response body size, bytes.
    pub body_bytes: u32,
    /// A fixed body for every response instead (a JSON-RPC result, a page); `?bytes=` is then
    /// ignored.
    pub body: Option<std::sync::Arc<[u8]>>,
}

impl Default for HttpServerOptions {
    fn default() -> Self {
        HttpServerOptions {
            service_ns: 0,
            exponential: false,
            sleep: false,
            body_bytes: 13,
            body: None,
        }
    }
}

/// Starts the HTTP server on `listen` with the request server's `limits`.
pub fn start(
    limits: &RpcServerConfig,
    options: HttpServerOptions,
    listen: std::net::SocketAddr,
) -> io::Result<RpcServer> {
    start_on(limits, options, &listen.into())
}

/// [`start`] on a TCP address or a Unix socket.
pub fn start_on(
    limits: &RpcServerConfig,
    options: HttpServerOptions,
    listen: &crate::net::endpoint::Endpoint,
) -> io::Result<RpcServer> {
    let seed = std::sync::atomic::AtomicU64::new(0x5eed);
    RpcServer::start_serving(limits, listen, "http", move || HttpWire {
        options: options.clone(),
        rng: SmallRng::seed_from_u64(seed.fetch_add(1, std::sync::atomic::Ordering::Relaxed)),
        exp: Exp::new(1.0).expect("rate 1 is valid"),
    })
}

/// HTTP/1.1 for the request server.
struct HttpWire {
    options: HttpServerOptions,
    rng: SmallRng,
    exp: Exp<f64>,
}

/// Longest request head, bytes.
const MAX_HEAD: usize = 64 * 1024;
/// Headers a request may have.
const MAX_HEADERS: usize = 64;

/// A request's body length from its `Content-Length`: `Err` for one that is not a number, or
/// two that differ (RFC 9112 §6.3: a request smuggled past a proxy reads so), and for
/// `Transfer-Encoding` (chunked requests are not served).
fn body_length(headers: &[httparse::Header]) -> Result<Option<u64>, BadRequest> {
    let mut length = None;
    for h in headers {
        if h.name.eq_ignore_ascii_case("content-length") {
            let value = crate::net::http::parse_length(h.value).ok_or(BadRequest)?;
            if length.is_some_and(|l| l != value) {
                return Err(BadRequest);
            }
            length = Some(value);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(BadRequest);
        }
    }
    Ok(length)
}

impl ServerWire for HttpWire {
    const IN_ORDER: bool = true;

    fn decode(
        &mut self,
        buf: &[u8],
        max_frame: u32,
        seq: u64,
    ) -> Result<Option<(Ask, usize)>, BadRequest> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        let head = match request.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            // A head is re-parsed on each read until complete: bounding it bounds that work.
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD.min(max_frame as usize) => {
                return Err(BadRequest)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(BadRequest),
        };
        let size = (head as u64)
            .checked_add(body_length(request.headers)?.unwrap_or(0))
            .filter(|size| *size <= max_frame as u64)
            .ok_or(BadRequest)?;
        if (buf.len() as u64) < size {
            return Ok(None);
        }
        let asked = Query::of(request.path.unwrap_or("/"));
        let service_ns = match asked.service_us {
            Some(us) => us.saturating_mul(1000),
            None if self.options.exponential && self.options.service_ns > 0 => {
                (self.exp.sample(&mut self.rng) * self.options.service_ns as f64) as u64
            }
            None => self.options.service_ns,
        };
        let key = HeaderKey {
            class: asked.status.unwrap_or(200),
            id: seq,
            client_ns: 0,
            service_ns,
            reply_bytes: asked
                .bytes
                .unwrap_or(self.options.body_bytes)
                .min(max_frame.saturating_sub(256)),
        };
        let sleep = self.options.sleep;
        Ok(Some((Ask { key, sleep }, size as usize)))
    }

    fn rejection(&self) -> &'static [u8] {
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    }

    fn respond(&self, key: &HeaderKey, out: &mut Vec<u8>) {
        let reason = match key.class {
            200 => "OK",
            404 => "Not Found",
            500 => "Internal Server Error",
            503 => "Service Unavailable",
            _ => "Status",
        };
        let length = self
            .options
            .body
            .as_ref()
            .map_or(key.reply_bytes as usize, |b| b.len());
        // Writing to a Vec cannot fail.
        let _ = write!(
            out,
            "HTTP/1.1 {} {reason}\r\nContent-Length: {length}\r\n\r\n",
            key.class
        );
        match &self.options.body {
            Some(body) => out.extend_from_slice(body),
            None => out.resize(out.len() + length, b'x'),
        }
    }
}

/// What a request's query asks for.
#[derive(Debug, Default, PartialEq)]
struct Query {
    service_us: Option<u64>,
    bytes: Option<u32>,
    status: Option<u16>,
}

impl Query {
    /// The `service_us`, `bytes` and `status` parameters of `path`'s query; others and bad
    /// values are ignored.
    fn of(path: &str) -> Query {
        let mut q = Query::default();
        let Some((_, query)) = path.split_once('?') else {
            return q;
        };
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("service_us", v)) => q.service_us = v.parse().ok(),
                Some(("bytes", v)) => q.bytes = v.parse().ok(),
                Some(("status", v)) => q.status = v.parse().ok().filter(|s| (200..600).contains(s)),
                _ => {}
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire() -> HttpWire {
        HttpWire {
            options: HttpServerOptions::default(),
            rng: SmallRng::seed_from_u64(1),
            exp: Exp::new(1.0).unwrap(),
        }
    }

    #[test]
    fn a_request_is_framed_and_its_query_asks_for_its_response() {
        let mut w = wire();
        let get = b"GET /x?service_us=250&bytes=4&status=503 HTTP/1.1\r\nHost: a\r\n\r\n";
        let (ask, size) = w.decode(get, 1 << 20, 7).unwrap().unwrap();
        assert_eq!(size, get.len());
        assert_eq!(
            (
                ask.key.service_ns,
                ask.key.reply_bytes,
                ask.key.class,
                ask.key.id
            ),
            (250_000, 4, 503, 7)
        );
        let mut out = Vec::new();
        w.respond(&ask.key, &mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nxxxx"
        );
        let post = b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        for cut in 0..post.len() {
            assert!(
                w.decode(&post[..cut], 1 << 20, 0).unwrap().is_none(),
                "{cut}"
            );
        }
        assert_eq!(w.decode(post, 1 << 20, 0).unwrap().unwrap().1, post.len());
        assert!(w.decode(post, 40, 0).is_err());
        assert!(w.decode(b"SSH-2.0-OpenSSH\r\n\r\n", 1 << 20, 0).is_err());
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert!(w.decode(chunked, 1 << 20, 0).is_err());
        assert_eq!(Query::of("/?status=42&bytes=-1&x"), Query::default());
    }

    #[test]
    fn overflowing_or_conflicting_lengths_are_refused() {
        let mut w = wire();
        for bad in [
            // head + 2^64 - 1 wrapped to less than the head: its "body" was then served as
            // another request.
            "POST / HTTP/1.1\r\nContent-Length: 18446744073709551615\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 0\r\n\r\nhello",
            "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
        ] {
            assert_eq!(w.decode(bad.as_bytes(), 1 << 20, 0).err(), Some(BadRequest), "{bad}");
        }
        // The same length twice is one length.
        let twice = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(w.decode(twice, 1 << 20, 0).unwrap().unwrap().1, twice.len());
        assert!(w.rejection().starts_with(b"HTTP/1.1 400 Bad Request"));
    }
}

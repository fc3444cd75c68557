//! What every gRPC response stream of the built-in server does, whatever the method: its
//! head, its trailers, and waiting for the client's flow-control window. Used by the calls
//! ([`super::grpc`]) and by server reflection ([`super::grpc_reflection`]).
use bytes::Bytes;

/// The head of every answer: 200, `application/grpc`.
pub fn grpc_head() -> http::Response<()> {
    http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("a static response head")
}

/// Ends a response stream with its trailers: `grpc-status` and, if any, `grpc-message`.
pub fn end_stream(
    stream: &mut h2::SendStream<Bytes>,
    (code, why): (&'static str, Option<&'static str>),
) -> Result<(), h2::Error> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static(code));
    if let Some(why) = why {
        trailers.insert("grpc-message", http::HeaderValue::from_static(why));
    }
    stream.send_trailers(trailers)
}

/// Waits until the client's flow-control window takes `bytes` more on `stream`: a client that
/// does not read holds its own stream, never the server's memory. `false`: the client reset it.
pub async fn window_takes(
    stream: &mut h2::SendStream<Bytes>,
    bytes: usize,
) -> Result<bool, h2::Error> {
    stream.reserve_capacity(bytes);
    while stream.capacity() < bytes {
        match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e),
            None => return Ok(false),
        }
    }
    Ok(true)
}

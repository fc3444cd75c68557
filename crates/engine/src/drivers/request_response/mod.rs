//! Request/response load: [`launcher`] (pacing and `when_full` per connection, tested on a
//! manual clock), [`in_flight`] (the requests in flight), carried by [`byte_stream`] (one mio
//! event loop per thread, generic over the [`byte_stream::Wire`] and the
//! [`byte_stream::Transport`]: RPC, Redis, HTTP/1.1, over TCP or TLS) or by [`caller`] (a caller
//! thread handing requests through SPSC rings to a socket thread, [`caller::Sockets`]:
//! [`ws_socket`]'s WebSocket JSON-RPC here, `drivers::http2`'s HTTP/2 streams). [`keys`]
//! draws the key of a request's `{key}`.
pub mod byte_stream;
pub mod caller;
pub mod in_flight;
pub mod keys;
pub mod launcher;
pub mod login;
pub mod ws_socket;
pub mod ws_streams;

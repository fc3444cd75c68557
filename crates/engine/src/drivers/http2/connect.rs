//! Opening an HTTP/2 connection as a client, for every driver that speaks HTTP/2 (the `http`
//! system's HTTP/2 callers, the tick clients reading a gRPC stream): TCP, TLS with ALPN `h2`
//! for https, the preface and settings, then a PING the server must answer — the proof that it
//! speaks HTTP/2 at all, before any load. Each failure says what the server did and what to
//! change, naming the scenario's section.
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// How long opening a connection (TCP, TLS, the HTTP/2 preface and a PING answered) may take.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response head (HPACK-decoded header list) accepted: a larger one is a connection
/// error, not memory.
const MAX_HEAD: u32 = 1 << 20;
/// The receive window of every connection: large enough that a fast server is never held back
/// by this client's window updates (h2load opens 1 GiB windows by default).
const CONNECTION_WINDOW: u32 = 64 << 20;

/// Where and how to connect.
pub struct Target {
    /// The server's address.
    pub address: SocketAddr,
    /// `Some` for https: the rustls configuration (ALPN `h2`) and the name to verify.
    pub tls: Option<(
        Arc<rustls::ClientConfig>,
        rustls_pki_types::ServerName<'static>,
    )>,
    /// Each stream's receive window, bytes.
    pub stream_window: u32,
    /// The scenario's section, for fixes (`http`, `ticks`).
    pub section: &'static str,
    /// What to do about a server that does not speak HTTP/2.
    pub not_h2: &'static str,
}

/// An open connection: where new streams start, and the task that drives its frames.
pub struct Open {
    /// Where new streams start.
    pub send: h2::client::SendRequest<Bytes>,
    /// The task that drives the connection's frames (abort it to drop the connection).
    pub driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
    /// How long its TLS handshake took (ns), for https.
    pub tls_ns: Option<u64>,
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub enum Failure {
    /// TCP: nothing listens there, or the host is not reachable.
    Connect(std::io::Error),
    /// What the server did instead of HTTP/2 (TLS, ALPN, preface, PING), and the fix.
    Problem(String),
}

/// How long a closing connection may take to say goodbye.
const CLOSE_GRACE: Duration = Duration::from_millis(200);

/// Lets a connection whose streams are all dropped close cleanly (with no stream and no
/// handle left, `h2` sends GOAWAY), given a moment; a server that does not let go is dropped.
/// Must run inside a `LocalSet`.
pub fn close_gracefully(open: Open) {
    let Open { send, driver, .. } = open;
    drop(send);
    let abort = driver.abort_handle();
    tokio::task::spawn_local(async move {
        let _ = tokio::time::timeout(CLOSE_GRACE, driver).await;
        abort.abort();
    });
}

/// Opens one connection (within [`OPEN_TIMEOUT`]); must run inside a `LocalSet`.
pub async fn open(target: &Target) -> Result<Open, Failure> {
    let opening = async {
        let tcp = TcpStream::connect(target.address)
            .await
            .map_err(Failure::Connect)?;
        let _ = tcp.set_nodelay(true);
        match &target.tls {
            None => handshake(tcp, target).await,
            Some((config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let started = std::time::Instant::now();
                let tls = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    let text = e.to_string();
                    // A cleartext server answers the ClientHello with bytes that are no TLS record.
                    if text.contains("InvalidContentType") || text.contains("corrupt message") {
                        return Failure::Problem(format!(
                            "the server does not speak TLS there ({text}); for a cleartext port, use http://"
                        ));
                    }
                    // The alert a server sends when it offers none of the client's ALPN
                    // protocols: it takes TLS, but not HTTP/2.
                    if text.contains("NoApplicationProtocol") {
                        return Failure::Problem(format!(
                            "the server refused HTTP/2 in the TLS handshake ({text}); {}, or enable HTTP/2 on the server",
                            target.not_h2
                        ));
                    }
                    Failure::Problem(format!(
                        "the TLS handshake failed ({text}); a private CA's certificate needs `{0}.ca_file = \"ca.pem\"`, or skip the check with `{0}.insecure = true`",
                        target.section
                    ))
                })?;
                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                if alpn.as_deref() != Some(b"h2") {
                    let offered = alpn
                        .map(|a| String::from_utf8_lossy(&a).into_owned())
                        .unwrap_or_else(|| "nothing".into());
                    return Err(Failure::Problem(format!(
                        "the server did not agree to HTTP/2 in the TLS handshake (ALPN: {offered}); {}, or enable HTTP/2 on the server",
                        target.not_h2
                    )));
                }
                let tls_ns = started.elapsed().as_nanos() as u64;
                let mut open = handshake(tls, target).await?;
                open.tls_ns = Some(tls_ns);
                Ok(open)
            }
        }
    };
    match tokio::time::timeout(OPEN_TIMEOUT, opening).await {
        Ok(r) => r,
        Err(_) => Err(Failure::Problem(format!(
            "no HTTP/2 answer to msgbench's PING within {} s: not an HTTP/2 port, or a server that sends frames but never answers",
            OPEN_TIMEOUT.as_secs()
        ))),
    }
}

async fn handshake<T>(io: T, target: &Target) -> Result<Open, Failure>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let (send, mut connection) = h2::client::Builder::new()
        .initial_window_size(target.stream_window)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEAD)
        .max_frame_size(1 << 20)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|e| Failure::Problem(format!("the HTTP/2 handshake failed ({e})")))?;
    let mut ping = connection
        .ping_pong()
        .expect("a new connection's PING handle");
    let driver = tokio::task::spawn_local(connection);
    if let Err(e) = ping.ping(h2::Ping::opaque()).await {
        // The connection's own error, when it ended first, says more than the PING's (which
        // may be only the broken pipe that followed it).
        let mut driver = driver;
        let ended = tokio::time::timeout(Duration::from_millis(100), &mut driver).await;
        driver.abort();
        let e = match ended {
            Ok(Ok(Err(own))) => own,
            _ => e,
        };
        let why = if e.is_io()
            && e.get_io()
                .is_some_and(|io| io.kind() != std::io::ErrorKind::InvalidData)
        {
            // Closed without a word: a server at its connection limit, or one that hangs up on
            // what it does not understand.
            format!(
                "the server closed the connection before answering HTTP/2's preface ({e}): it does not speak HTTP/2 (then {}), or it is at its connection limit",
                target.not_h2
            )
        } else if e
            .reason()
            .is_some_and(|r| r != h2::Reason::FRAME_SIZE_ERROR)
        {
            // HTTP/2 frames, but against its rules (a SETTINGS value out of range, frames past
            // the client's flood limits): the server speaks HTTP/2, wrongly. (An HTTP/1.1
            // answer reads as a frame of megabytes: FRAME_SIZE_ERROR, told below.)
            format!(
                "the server broke HTTP/2's rules in its opening ({e}): a SETTINGS value out of range, or more frames than a client accepts unanswered; check the server"
            )
        } else {
            format!(
                "the server does not speak HTTP/2 ({e}); is it an HTTP/1.1 server? {}",
                target.not_h2
            )
        };
        return Err(Failure::Problem(why));
    }
    Ok(Open {
        send,
        driver,
        tls_ns: None,
    })
}

/// What a connection's end is counted as: `GOAWAY (REASON)`, or what else ended it.
pub fn connection_error(e: &h2::Error) -> String {
    match e.reason() {
        Some(reason) if e.is_go_away() => format!("HTTP/2 GOAWAY ({reason:?})"),
        Some(reason) => format!("HTTP/2 connection error ({reason:?})"),
        None if e.is_io() => "HTTP/2 connection lost".to_string(),
        None => format!("HTTP/2 connection error ({e})"),
    }
}

/// What a failed stream is counted as: `RST_STREAM (REASON)`, or its connection's end.
pub fn stream_error(e: &h2::Error) -> String {
    match e.reason() {
        Some(reason) if e.is_reset() => format!("HTTP/2 RST_STREAM ({reason:?})"),
        _ => connection_error(e),
    }
}

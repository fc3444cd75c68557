//! TLS for the byte-stream driver: a [`Transport`] that is a rustls client session over a
//! non-blocking mio TCP stream. The broker connections use the same session and handshake
//! ([`handshake`], [`TlsStream::from_handshaken`]).
//!
//! The handshake is done blocking, at connect time, and timed on its own: its cost is counted
//! in the run's [`msgbench_model::result::Connections`] and never lands in a request's latency
//! (a reconnection's handshake happens before the launcher sends on the new connection). After
//! it, reads and writes are non-blocking. rustls keeps encrypted bytes the socket would not
//! take; [`Transport::wants_write`] tells the driver to stay interested in writability until
//! they are gone, so nothing waits in rustls for a write that never comes.
use super::request_response::byte_stream::Transport;
use crate::net::endpoint::Endpoint;
use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::ClientConnection;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to open a TLS session: the client configuration (roots or a CA file, or no
/// verification) and the name the certificate must carry.
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
    /// What verifies the certificate, for the error when it does not verify.
    roots: String,
    /// The scenario's section these settings come from (`http`, `pubsub.tls`), for messages.
    section: &'static str,
}

impl TlsConnector {
    /// A connector for `host` (a DNS name or an IP address), verifying against the Mozilla
    /// roots compiled in (`webpki-roots`) plus the certificates of `ca_file`, or against
    /// nothing when `insecure`. The error says what is wrong with the file or the name.
    pub fn new(host: &str, ca_file: Option<&str>, insecure: bool) -> Result<TlsConnector, String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` is not a name a certificate can carry ({e})"))?;
        let (config, roots) = client_config(ca_file, insecure)?;
        Ok(TlsConnector {
            config,
            server_name,
            roots,
            section: "http",
        })
    }

    /// A connector for a broker (`[pubsub.tls]`, `[redis.tls]`): its CA file or none, its
    /// client certificate for mutual TLS.
    pub fn for_broker(tls: &msgbench_model::broker_tls::BrokerTls) -> Result<TlsConnector, String> {
        let host = tls.server_name.as_str();
        let server_name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` is not a name a certificate can carry ({e})"))?;
        let client_cert = tls
            .client_cert
            .as_ref()
            .map(|(cert, key)| (cert.as_str(), key.as_str()));
        let (config, roots) = tls_config(
            tls.ca_file.as_deref(),
            tls.insecure,
            client_cert,
            tls.section,
        )?;
        Ok(TlsConnector {
            config,
            server_name,
            roots,
            section: tls.section,
        })
    }

    /// The same settings for a server named `host` (another broker of a cluster, named by
    /// its metadata).
    pub fn named(&self, host: &str) -> Result<TlsConnector, String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(host.to_string())
            .map_err(|e| format!("`{host}` is not a name a certificate can carry ({e})"))?;
        Ok(TlsConnector {
            server_name,
            config: self.config.clone(),
            roots: self.roots.clone(),
            section: self.section,
        })
    }

    /// What the broker's certificate is checked against, in words.
    pub fn roots(&self) -> &str {
        &self.roots
    }
}

/// A rustls client configuration (shared by the HTTP transport and the WebSocket clients):
/// the Mozilla roots plus `ca_file`, or no verification when `insecure`; and, in words, what
/// verifies the certificate.
pub fn client_config(
    ca_file: Option<&str>,
    insecure: bool,
) -> Result<(Arc<rustls::ClientConfig>, String), String> {
    tls_config(ca_file, insecure, None, "http")
}

/// [`client_config`] with a client certificate and key (mutual TLS), its words naming the
/// scenario's `section`.
pub fn tls_config(
    ca_file: Option<&str>,
    insecure: bool,
    client_cert: Option<(&str, &str)>,
    section: &str,
) -> Result<(Arc<rustls::ClientConfig>, String), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let (builder, roots) = if insecure {
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)));
        (builder, format!("nothing ({section}.insecure = true)"))
    } else {
        let mut store = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        let roots = match ca_file {
            Some(path) => {
                add_ca_file(&mut store, path)?;
                format!("the Mozilla roots and {path}")
            }
            None => "the Mozilla roots".to_string(),
        };
        (builder.with_root_certificates(store), roots)
    };
    let config = match client_cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(client_chain(cert)?, client_key(key)?)
            .map_err(|e| {
                format!(
                    "the client certificate \"{cert}\" and key \"{key}\" do not go together: {e}"
                )
            })?,
    };
    Ok((Arc::new(config), roots))
}

/// The certificate chain of the PEM file at `path` (mutual TLS).
fn client_chain(path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("the certificate file \"{path}\" cannot be read: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate file \"{path}\" is not PEM certificates: {e}"))?;
    if chain.is_empty() {
        return Err(format!(
            "the certificate file \"{path}\" holds no certificate (give a PEM file with -----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(chain)
}

/// The private key of the PEM file at `path` (mutual TLS); its bytes never in a message.
fn client_key(path: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        format!("the key file \"{path}\" holds no private key msgbench can read (PKCS#8, PKCS#1 or SEC1 PEM): {e}")
    })
}

/// Adds every certificate of the PEM file at `path` to `store`.
fn add_ca_file(store: &mut rustls::RootCertStore, path: &str) -> Result<(), String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("the CA file \"{path}\" cannot be read: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the CA file \"{path}\" is not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "the CA file \"{path}\" holds no certificate (give a PEM file with -----BEGIN CERTIFICATE-----)"
        ));
    }
    for cert in certs {
        store
            .add(cert)
            .map_err(|e| format!("the CA file \"{path}\" has a certificate rustls refuses: {e}"))?;
    }
    Ok(())
}

/// A TLS client session over a non-blocking TCP stream.
pub struct TlsStream {
    tcp: TcpStream,
    session: ClientConnection,
    handshake_ns: Option<u64>,
}

impl Transport for TlsStream {
    type Connector = TlsConnector;

    fn connect(c: &TlsConnector, address: &Endpoint, timeout: Duration) -> io::Result<Self> {
        // The model refuses https with a Unix socket.
        let Endpoint::Tcp(address) = address else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "TLS runs over TCP only",
            ));
        };
        let mut tcp = std::net::TcpStream::connect_timeout(address, timeout)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        let (session, handshake_ns) = handshake(c, &mut tcp)?;
        tcp.set_read_timeout(None)?;
        tcp.set_write_timeout(None)?;
        TlsStream::from_handshaken(tcp, session, Some(handshake_ns))
    }

    fn take_handshake_ns(&mut self) -> Option<u64> {
        self.handshake_ns.take()
    }

    fn wants_write(&self) -> bool {
        self.session.wants_write()
    }
}

/// A TLS handshake over `tcp` (blocking, its timeouts bounding it): the session and how long
/// the handshake took, ns. Its error is of kind `InvalidData`, in words, with the fix.
pub fn handshake(
    c: &TlsConnector,
    tcp: &mut std::net::TcpStream,
) -> io::Result<(ClientConnection, u64)> {
    let started = Instant::now();
    let mut session =
        ClientConnection::new(c.config.clone(), c.server_name.clone()).map_err(io::Error::other)?;
    while session.is_handshaking() {
        session
            .complete_io(tcp)
            .map_err(|e| handshake_error(e, c))?;
    }
    Ok((session, started.elapsed().as_nanos() as u64))
}

/// The handshake's error in words, with the fix when the certificate did not verify.
fn handshake_error(e: io::Error, c: &TlsConnector) -> io::Error {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let certificate =
        rustls_error.is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
    let alert = rustls_error.is_some_and(|r| matches!(r, rustls::Error::AlertReceived(_)));
    let plain = rustls_error.is_some_and(|r| {
        matches!(
            r,
            rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. }
        )
    }) || e.to_string().contains("corrupt message");
    // What to do about a port that speaks no TLS: the scenario's way of asking for none.
    let no_tls = match c.section {
        "http" => "use http://".to_string(),
        section => format!("take [{section}] out"),
    };
    let wrong_name = rustls_error.is_some_and(|r| {
        matches!(
            r,
            rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. }
            )
        )
    });
    let text = if wrong_name {
        format!(
            "TLS handshake failed: {e}; the certificate does not carry the name {:?}. Set \
             `{section}.server_name` to a name it carries (or reach the server by that name)",
            c.server_name.to_str(),
            section = c.section
        )
    } else if certificate {
        format!(
            "TLS handshake failed: {e}; the certificate was checked against {} for the name {:?}. \
             Give the CA that signed it with `{section}.ca_file = \"ca.pem\"`, or skip the check with \
             `{section}.insecure = true` (the report says so)",
            c.roots,
            c.server_name.to_str(),
            section = c.section
        )
    } else if alert {
        format!(
            "TLS handshake failed: {e}: the server refused the session; if it asks for a client \
             certificate, give {section}.cert_file and {section}.key_file (one its CA signed)",
            section = c.section
        )
    } else if plain {
        format!("TLS handshake failed: {e}: the server does not speak TLS there; is it a plain port? Then {no_tls}")
    } else if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut {
        format!("TLS handshake got no answer in time (is it a TLS port? if not, {no_tls})")
    } else {
        format!("TLS handshake failed: {e} (is it a TLS port? if not, {no_tls})")
    };
    io::Error::new(io::ErrorKind::InvalidData, text)
}

impl TlsStream {
    /// A stream over `tcp` whose handshake is done (blocking), made non-blocking.
    pub fn from_handshaken(
        tcp: std::net::TcpStream,
        session: ClientConnection,
        handshake_ns: Option<u64>,
    ) -> io::Result<TlsStream> {
        tcp.set_nonblocking(true)?;
        Ok(TlsStream {
            tcp: TcpStream::from_std(tcp),
            session,
            handshake_ns,
        })
    }

    /// The TCP stream under the session (for its socket's figures).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Writes the encrypted bytes rustls holds until it holds none or the socket is full.
    fn write_tls(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.session.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // No plaintext buffered: read records from the socket (WouldBlock ends the read).
            if self.session.read_tls(&mut self.tcp)? == 0 {
                return Ok(0);
            }
            self.session
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // Alerts or key updates the session wants sent; a full socket can wait.
            match self.write_tls() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
    }
}

impl Write for TlsStream {
    /// Takes plaintext only when rustls holds no encrypted bytes the socket refused: the
    /// driver's write buffer, not rustls's, is where requests wait (bounded by the window).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_tls()?;
        let n = self.session.writer().write(buf)?;
        match self.write_tls() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_tls()
    }
}

impl mio::event::Source for TlsStream {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.tcp.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.tcp.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.tcp.deregister(registry)
    }
}

/// `http.insecure = true`: every certificate is taken; signatures are still checked so the
/// session is TLS, only the chain and the name are not.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

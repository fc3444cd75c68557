//! TLS for the byte-stream driver: a [`Transport`] that is a rustls client session over a
//! non-blocking mio TCP stream.
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
use rustls::pki_types::{CertificateDer, ServerName};
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
        })
    }
}

/// A rustls client configuration (shared by the HTTP transport and the WebSocket clients):
/// the Mozilla roots plus `ca_file`, or no verification when `insecure`; and, in words, what
/// verifies the certificate.
pub fn client_config(
    ca_file: Option<&str>,
    insecure: bool,
) -> Result<(Arc<rustls::ClientConfig>, String), String> {
    {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let (config, roots) = if insecure {
            let config = builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
                .with_no_client_auth();
            (config, "nothing (http.insecure = true)".to_string())
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
            let config = builder.with_root_certificates(store).with_no_client_auth();
            (config, roots)
        };
        Ok((Arc::new(config), roots))
    }
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
        let started = Instant::now();
        let mut session = ClientConnection::new(c.config.clone(), c.server_name.clone())
            .map_err(io::Error::other)?;
        while session.is_handshaking() {
            session
                .complete_io(&mut tcp)
                .map_err(|e| handshake_error(e, c))?;
        }
        let handshake_ns = started.elapsed().as_nanos() as u64;
        tcp.set_read_timeout(None)?;
        tcp.set_write_timeout(None)?;
        tcp.set_nonblocking(true)?;
        Ok(TlsStream {
            tcp: TcpStream::from_std(tcp),
            session,
            handshake_ns: Some(handshake_ns),
        })
    }

    fn take_handshake_ns(&mut self) -> Option<u64> {
        self.handshake_ns.take()
    }

    fn wants_write(&self) -> bool {
        self.session.wants_write()
    }
}

/// The handshake's error in words, with the fix when the certificate did not verify.
fn handshake_error(e: io::Error, c: &TlsConnector) -> io::Error {
    let certificate = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| matches!(r, rustls::Error::InvalidCertificate(_)));
    let text = if certificate {
        format!(
            "TLS handshake failed: {e}; the certificate was checked against {} for the name {:?}. \
             Give the CA that signed it with `http.ca_file = \"ca.pem\"`, or skip the check with \
             `http.insecure = true` (the report says so)",
            c.roots,
            c.server_name.to_str()
        )
    } else if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut {
        "TLS handshake got no answer in time (is it a TLS port?)".to_string()
    } else {
        format!("TLS handshake failed: {e} (is it a TLS port?)")
    };
    io::Error::new(io::ErrorKind::InvalidData, text)
}

impl TlsStream {
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

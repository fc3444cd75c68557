//! The opening of a broker's connections, before the run's schedule starts: blocking I/O,
//! every read bounded by [`OPEN_TIMEOUT`], every failure one [`EngineError`] that names the
//! broker and its address (and, when nothing listens, how to start one).
use super::consumer::broken;
use super::message::RunMark;
use super::protocol::{BrokerProtocol, Hello, Incoming};
use super::stream::{OpeningStream, TlsOpening};
use super::watchdog::Watchdog;
use crate::error::EngineError;
use msgbench_model::pubsub::PubsubConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// What to do about a refusal that is the broker asking who connects.
pub fn login_hint(config: &PubsubConfig, text: &str) -> &'static str {
    let lower = text.to_ascii_lowercase();
    let about_login = [
        "authorization",
        "noauth",
        "wrongpass",
        "not authorized",
        "user name or password",
        "access_refused",
    ]
    .iter()
    .any(|w| lower.contains(w));
    if lower.contains("tls required") && config.tls.is_none() {
        return "; the broker asks for TLS: give [pubsub.tls] (docs/pubsub.md)";
    }
    match (about_login, config.auth.is_some()) {
        (false, _) => "",
        (true, false) => "; the broker asks who connects: give [pubsub.auth] (docs/pubsub.md)",
        (true, true) => {
            "; check [pubsub.auth]'s user and secret (and the file or variable it is read from)"
        }
    }
}

/// The start of the opening's error when the broker said nothing in time.
const NO_ANSWER: &str = "no answer to the opening within";

/// Longest a connection's opening (connect, handshake, subscription) may take.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(3);

/// What every opening of a run knows: its settings, the broker's address, the run's mark and
/// the watchdog every connection of the opening is handed to.
#[derive(Clone, Copy)]
pub struct Opening<'a> {
    /// The run's settings.
    pub config: &'a PubsubConfig,
    /// The broker's address.
    pub address: SocketAddr,
    /// Where subscriptions' connections go (`pubsub.subscriber_address`, else `address`).
    pub subscriber_address: SocketAddr,
    /// This run's mark on every message.
    pub mark: RunMark,
    /// Shuts the opening's connections down when it makes no progress or Ctrl-C comes.
    pub watchdog: &'a Watchdog,
    /// TLS to the broker (`[pubsub.tls]`), and the handshakes it took.
    pub tls: Option<&'a TlsOpening>,
}

impl Opening<'_> {
    /// The error of a broker `problem` at the run's address.
    pub fn error(&self, problem: String) -> EngineError {
        broker_error(self.config, problem)
    }

    /// An answered request of a long wait on a connection already open: progress, for the
    /// watchdog.
    pub fn progress(&self) {
        self.watchdog.progress();
    }

    /// A connection to the broker, its reads bounded by the opening's timeout, watched by the
    /// opening's watchdog; its TLS started, unless the broker greets first in plaintext.
    pub fn connect(&self, receive_buffer: u32) -> Result<OpeningStream, EngineError> {
        self.connect_to(self.address, &self.config.address, receive_buffer)
    }

    /// [`Opening::connect`] for a subscription's connection: to the subscriber address.
    pub fn connect_subscriber(&self, receive_buffer: u32) -> Result<OpeningStream, EngineError> {
        let written = self
            .config
            .subscriber_address
            .as_deref()
            .unwrap_or(&self.config.address);
        self.connect_to(self.subscriber_address, written, receive_buffer)
    }

    /// [`Opening::connect`] to another server of the broker's cluster, at `host`:`port` as
    /// the broker named it (Kafka's metadata): its TLS certificate must carry `host`.
    pub fn connect_named(
        &self,
        host: &str,
        port: u16,
        receive_buffer: u32,
    ) -> Result<OpeningStream, EngineError> {
        use std::net::ToSocketAddrs;
        let written = format!("{host}:{port}");
        let address = (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                self.error(format!(
                    "its cluster names a broker at {written}, which does not resolve"
                ))
            })?;
        if address == self.address {
            return self.connect(receive_buffer);
        }
        let tcp = connect_for_opening(self.config, (address, &written), receive_buffer)
            .map_err(|e| match e {
                // The classic misconfiguration: a broker advertising an address only its own
                // network reaches.
                EngineError::Connect {
                    address, source, ..
                } => EngineError::Connect {
                    hint: format!(
                        "the cluster's metadata names a broker at {address}: check its advertised.listeners (clients must reach that address)"
                    ),
                    address,
                    source,
                },
                e => e,
            })?;
        self.watchdog.watch(&tcp);
        let stream = OpeningStream::Plain(tcp);
        match self.tls {
            Some(tls) => tls
                .start_named(stream, host)
                .map_err(|e| self.error(format!("{written}: {e}"))),
            None => Ok(stream),
        }
    }

    /// [`Opening::connect`] to `address` (`written` as the scenario gives it).
    fn connect_to(
        &self,
        address: SocketAddr,
        written: &str,
        receive_buffer: u32,
    ) -> Result<OpeningStream, EngineError> {
        let tcp = connect_for_opening(self.config, (address, written), receive_buffer)?;
        self.watchdog.watch(&tcp);
        let stream = OpeningStream::Plain(tcp);
        match self.tls {
            Some(tls) if !tls.after_greeting => self.start_tls(stream),
            _ => Ok(stream),
        }
    }

    /// Starts the connection's TLS (when the scenario asks for it).
    pub fn start_tls(&self, stream: OpeningStream) -> Result<OpeningStream, EngineError> {
        match self.tls {
            Some(tls) => tls.start(stream).map_err(|e| self.error(e.to_string())),
            None => Ok(stream),
        }
    }
}

/// A TCP connection to `address` without Nagle's delay, its receive buffer set first when
/// `receive_buffer` is not 0 (so the window it offers is sized from the start).
fn connect(address: SocketAddr, receive_buffer: u32) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    if receive_buffer > 0 {
        socket.set_recv_buffer_size(receive_buffer as usize)?;
    }
    socket.connect_timeout(&address.into(), OPEN_TIMEOUT)?;
    socket.set_tcp_nodelay(true)?;
    Ok(socket.into())
}

/// Opens one connection to the broker's address (a publisher's, or one of the broker's own
/// requests), as [`open_at`] does.
pub fn open(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    name: &str,
    subscription: Option<(&str, Option<&str>, u64)>,
) -> Result<(OpeningStream, Vec<u8>), EngineError> {
    open_at(run, protocol, name, subscription, false)
}

/// Opens one consumer of a subscription, at the subscriber address
/// (`pubsub.subscriber_address`, else the broker's), as [`open_at`] does.
pub fn open_consumer(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    name: &str,
    subscription: (&str, Option<&str>, u64),
) -> Result<(OpeningStream, Vec<u8>), EngineError> {
    open_at(run, protocol, name, Some(subscription), true)
}

/// Opens one connection: connect, the broker's hello, and (for a consumer) the subscription,
/// each answered before it returns. Returns the stream and any bytes read past the answers.
fn open_at(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    name: &str,
    subscription: Option<(&str, Option<&str>, u64)>,
    consumer: bool,
) -> Result<(OpeningStream, Vec<u8>), EngineError> {
    let opened = open_on(run, protocol, name, subscription, consumer);
    // A consumer's failure is the subscriber server's: its message names that address.
    match (opened, &run.config.subscriber_address) {
        (
            Err(EngineError::Broker {
                broker, problem, ..
            }),
            Some(at),
        ) if consumer => Err(EngineError::Broker {
            address: at.clone(),
            broker,
            problem,
        }),
        (opened, _) => opened,
    }
}

/// [`open_at`]'s work.
fn open_on(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    name: &str,
    subscription: Option<(&str, Option<&str>, u64)>,
    consumer: bool,
) -> Result<(OpeningStream, Vec<u8>), EngineError> {
    let config = run.config;
    let broker_error = |problem: String| broker_error(config, problem);
    let receive_buffer = match subscription {
        Some(_) => config.receive_buffer,
        None => 0,
    };
    let mut stream = match consumer {
        true => run.connect_subscriber(receive_buffer)?,
        false => run.connect(receive_buffer)?,
    };
    let mut input = Vec::new();
    let mut at = 0;
    // A broker that speaks first (NATS's INFO) is heard before anything is sent: a broker
    // that takes TLS only is refused before the hello (and its secret) goes out in clear.
    if protocol.greeting().is_some() {
        at = read_greeting(run, protocol, &mut stream, &mut input)?;
        stream = run.start_tls(stream)?;
    }
    let hello = Hello {
        name,
        auth: config.auth.as_ref(),
        greeting: &input[..at],
    };
    let mut expected = send_hello(config, protocol, &hello, subscription, &mut stream)?;
    let hello_answered = |expected: i32| subscription.is_some() && expected == 1;
    while expected > 0 {
        match protocol.decode(&input[at..]) {
            Ok(Some((incoming, used))) => {
                match incoming {
                    Incoming::Reply => expected -= 1,
                    Incoming::Error(text) => {
                        // The hello is answered first: an error before its answer refuses the
                        // connection (its login), not the subscription after it.
                        let what = match subscription {
                            Some((topic, ..)) if hello_answered(expected) => {
                                format!("the subscription to {topic}")
                            }
                            _ => "the connection".into(),
                        };
                        let text = String::from_utf8_lossy(text);
                        return Err(broker_error(format!(
                            "it refused {what}: {text}{}",
                            login_hint(config, &text)
                        )));
                    }
                    _ => {}
                }
                at += used;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                return Err(broker_error(format!(
                    "this is not a {} server ({e}); check pubsub.broker and pubsub.address",
                    config.broker.name()
                )))
            }
        }
        read_opening(config, &mut stream, &mut input)?;
    }
    stream.set_read_timeout(None).map_err(EngineError::Io)?;
    Ok((stream, input.split_off(at)))
}

/// The first thing a broker that speaks first sent (NATS's `INFO`, `used` bytes at the start
/// of `input`): its greeting, and not one that takes TLS only when the scenario gives none.
fn check_greeting(
    config: &PubsubConfig,
    protocol: &dyn BrokerProtocol,
    input: &[u8],
    used: usize,
) -> Result<(), EngineError> {
    let Some(greeting) = protocol.greeting() else {
        return Ok(());
    };
    if !input.starts_with(greeting) {
        return Err(broker_error(config, format!(
            "this is not a {} server (it did not begin with {} but with {:?}); check pubsub.broker and pubsub.address",
            protocol.name(),
            String::from_utf8_lossy(greeting),
            String::from_utf8_lossy(&input[..input.len().min(40)])
        )));
    }
    if config.tls.is_none()
        && String::from_utf8_lossy(&input[..used]).contains("\"tls_required\":true")
    {
        return Err(broker_error(config,
            "the server requires TLS (its INFO says tls_required): give [pubsub.tls] (docs/pubsub.md)".into(),
        ));
    }
    Ok(())
}

/// Writes a connection's hello and (for a consumer) its subscription: the answers the broker
/// owes for them.
fn send_hello(
    config: &PubsubConfig,
    protocol: &dyn BrokerProtocol,
    hello: &Hello<'_>,
    subscription: Option<(&str, Option<&str>, u64)>,
    stream: &mut OpeningStream,
) -> Result<i32, EngineError> {
    let mut out = Vec::new();
    protocol
        .hello(hello, &mut out)
        .map_err(|e| broker_error(config, format!("its login cannot be made: {e}")))?;
    let mut expected = 1;
    if let Some((topic, group, sid)) = subscription {
        protocol.subscribe(topic, group, sid, config.qos, &mut out);
        expected += 1;
    }
    stream
        .write_all(&out)
        .map_err(|e| broker_error(config, format!("writing the opening failed ({e})")))?;
    Ok(expected)
}

/// Reads the broker's plaintext greeting (NATS's `INFO`), before anything is sent and before
/// TLS starts: the bytes it took. A broker that offers no TLS to a scenario that asks for it is
/// told apart here, before a handshake it cannot answer.
fn read_greeting(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    stream: &mut OpeningStream,
    input: &mut Vec<u8>,
) -> Result<usize, EngineError> {
    let config = run.config;
    loop {
        match protocol.decode(input) {
            Ok(Some((_, used))) => {
                check_greeting(config, protocol, input, used)?;
                let line = String::from_utf8_lossy(&input[..used]);
                if run.tls.is_some()
                    && !(line.contains("\"tls_required\":true")
                        || line.contains("\"tls_available\":true"))
                {
                    return Err(run.error(
                        "[pubsub.tls] is given but the server offers no TLS (its INFO says neither tls_required nor tls_available); turn TLS on at the server, or take [pubsub.tls] out".into(),
                    ));
                }
                return Ok(used);
            }
            Ok(None) => read_opening(config, stream, input).map_err(|e| match e {
                // Silence where the broker speaks first: another kind of server, waiting for
                // a client to speak.
                EngineError::Broker { problem, .. }
                    if input.is_empty() && problem.starts_with(NO_ANSWER) =>
                {
                    run.error(format!(
                        "this is not a {} server, or not one that answers: it sent nothing within {} s, where a {} server begins with {}; check pubsub.broker and pubsub.address",
                        protocol.name(),
                        OPEN_TIMEOUT.as_secs(),
                        protocol.name(),
                        String::from_utf8_lossy(protocol.greeting().unwrap_or_default()).trim()
                    ))
                }
                e => e,
            })?,
            Err(e) => {
                return Err(run.error(format!(
                    "this is not a {} server ({e}); check pubsub.broker and pubsub.address",
                    config.broker.name()
                )))
            }
        }
    }
}

/// Reads the next bytes of a connection's opening into `input`: the broker's hanging up, its
/// silence past [`OPEN_TIMEOUT`] or a failed read ends the opening, with what it may mean.
fn read_opening(
    config: &PubsubConfig,
    stream: &mut OpeningStream,
    input: &mut Vec<u8>,
) -> Result<(), EngineError> {
    let broker_error = |problem: String| broker_error(config, problem);
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) => Err(broker_error(format!(
            "it closed the connection during the opening; {}",
            which_server(config)
        ))),
        Ok(n) => {
            input.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(broker_error(format!(
                "{NO_ANSWER} {} s; is this a {} server?",
                OPEN_TIMEOUT.as_secs(),
                config.broker.name()
            )))
        }
        Err(e) => Err(broker_error(format!(
            "{} during the opening; {}",
            broken(&e, "reading"),
            read_hint(config, &e)
        ))),
    }
}

/// What a failed read of the opening may mean: a TLS alert is the broker refusing the
/// session (most often for want of a client certificate).
fn read_hint(config: &PubsubConfig, e: &std::io::Error) -> String {
    let text = e.to_string().to_ascii_lowercase();
    if config.tls.is_some() && text.contains("alert") {
        if text.contains("certificate") || text.contains("handshake") {
            return "the broker refused the TLS session: if it asks for a client certificate, give [pubsub.tls] cert_file and key_file (one its CA signed)".into();
        }
        return "the broker ended the TLS session".into();
    }
    which_server(config)
}

/// The question a broker hanging up on the opening raises: is it this broker, and, for a
/// plain client, is the port a TLS one?
fn which_server(config: &PubsubConfig) -> String {
    let tls = match config.tls {
        None => " (or a TLS port: then give [pubsub.tls])",
        Some(_) => "",
    };
    format!(
        "is this a {} server{tls}? check pubsub.broker and pubsub.address",
        config.broker.name()
    )
}

/// The error of a broker `problem` at the run's address.
pub fn broker_error(config: &PubsubConfig, problem: String) -> EngineError {
    EngineError::Broker {
        address: config.address.clone(),
        broker: config.broker.name(),
        problem,
    }
}

/// A connection to the broker, its reads bounded by the opening's timeout; a failure to connect
/// says how to start the broker.
pub fn connect_for_opening(
    config: &PubsubConfig,
    (address, written): (SocketAddr, &str),
    receive_buffer: u32,
) -> Result<TcpStream, EngineError> {
    let stream = connect(address, receive_buffer).map_err(|source| EngineError::Connect {
        address: written.to_string(),
        source,
        hint: config.broker.hint().into(),
    })?;
    stream
        .set_read_timeout(Some(OPEN_TIMEOUT))
        .map_err(EngineError::Io)?;
    Ok(stream)
}

/// Reads what the broker sent next into `input`; its silence past the opening's timeout, or
/// its hanging up, is the opening's failure.
pub fn read_more(
    config: &PubsubConfig,
    stream: &mut OpeningStream,
    input: &mut Vec<u8>,
) -> Result<(), EngineError> {
    read_opening(config, stream, input)?;
    if input.len() > 1 << 20 {
        return Err(broker_error(
            config,
            "it sent over 1 MiB during the opening without one whole answer".into(),
        ));
    }
    Ok(())
}

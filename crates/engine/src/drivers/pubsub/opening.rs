//! The opening of a broker's connections, before the run's schedule starts: blocking I/O,
//! every read bounded by [`OPEN_TIMEOUT`], every failure one [`EngineError`] that names the
//! broker and its address (and, when nothing listens, how to start one).
use super::consumer::broken;
use super::message::RunMark;
use super::protocol::{BrokerProtocol, Incoming};
use super::watchdog::Watchdog;
use crate::error::EngineError;
use msgbench_model::pubsub::PubsubConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// What to do about a refusal that is the broker asking who connects.
fn login_hint(config: &PubsubConfig, text: &str) -> &'static str {
    let lower = text.to_ascii_lowercase();
    let about_login = [
        "authorization",
        "noauth",
        "wrongpass",
        "not authorized",
        "user name or password",
    ]
    .iter()
    .any(|w| lower.contains(w));
    match (about_login, config.auth.is_some()) {
        (false, _) => "",
        (true, false) => "; the broker asks who connects: give [pubsub.auth] (docs/pubsub.md)",
        (true, true) => {
            "; check [pubsub.auth]'s user and secret (and the file or variable it is read from)"
        }
    }
}

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
    /// This run's mark on every message.
    pub mark: RunMark,
    /// Shuts the opening's connections down when it makes no progress or Ctrl-C comes.
    pub watchdog: &'a Watchdog,
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
    /// opening's watchdog.
    pub fn connect(&self, receive_buffer: u32) -> Result<TcpStream, EngineError> {
        let stream = connect_for_opening(self.config, self.address, receive_buffer)?;
        self.watchdog.watch(&stream);
        Ok(stream)
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

/// Opens one connection: connect, the broker's hello, and (for a consumer) the subscription,
/// each answered before it returns. Returns the stream and any bytes read past the answers.
pub fn open(
    run: &Opening<'_>,
    protocol: &dyn BrokerProtocol,
    name: &str,
    subscription: Option<(&str, Option<&str>, u64)>,
) -> Result<(TcpStream, Vec<u8>), EngineError> {
    let config = run.config;
    let broker_error = |problem: String| broker_error(config, problem);
    let receive_buffer = match subscription {
        Some(_) => config.receive_buffer,
        None => 0,
    };
    let mut stream = run.connect(receive_buffer)?;
    let mut out = Vec::new();
    protocol.hello(name, config.auth.as_ref(), &mut out);
    let mut expected = 1;
    let hello_answered = |expected: i32| subscription.is_some() && expected == 1;
    if let Some((topic, group, sid)) = subscription {
        protocol.subscribe(topic, group, sid, config.qos, &mut out);
        expected += 1;
    }
    stream
        .write_all(&out)
        .map_err(|e| broker_error(format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let mut at = 0;
    while expected > 0 {
        match protocol.decode(&input[at..]) {
            // A broker that speaks first (NATS's INFO) must have.
            Ok(Some(_))
                if at == 0
                    && protocol
                        .greeting()
                        .is_some_and(|greeting| !input.starts_with(greeting)) =>
            {
                return Err(broker_error(format!(
                    "this is not a {} server (it did not begin with {} but with {:?}); check pubsub.broker and pubsub.address",
                    protocol.name(),
                    String::from_utf8_lossy(protocol.greeting().unwrap_or_default()),
                    String::from_utf8_lossy(&input[..input.len().min(40)])
                )))
            }
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

/// Reads the next bytes of a connection's opening into `input`: the broker's hanging up, its
/// silence past [`OPEN_TIMEOUT`] or a failed read ends the opening, with what it may mean.
fn read_opening(
    config: &PubsubConfig,
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
) -> Result<(), EngineError> {
    let broker_error = |problem: String| broker_error(config, problem);
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) => Err(broker_error(format!(
            "it closed the connection during the opening; is this a {} server? check pubsub.broker and pubsub.address",
            config.broker.name()
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
                "no answer to the opening within {} s; is this a {} server?",
                OPEN_TIMEOUT.as_secs(),
                config.broker.name()
            )))
        }
        Err(e) => Err(broker_error(format!(
            "{} during the opening; is this a {} server? check pubsub.broker and pubsub.address",
            broken(&e, "reading"),
            config.broker.name()
        ))),
    }
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
    address: SocketAddr,
    receive_buffer: u32,
) -> Result<TcpStream, EngineError> {
    let stream = connect(address, receive_buffer).map_err(|source| EngineError::Connect {
        address: config.address.clone(),
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
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
) -> Result<(), EngineError> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk) {
        Ok(0) => Err(broker_error(
            config,
            "it closed the connection during the opening".into(),
        )),
        Ok(n) => {
            input.extend_from_slice(&chunk[..n]);
            if input.len() > 1 << 20 {
                return Err(broker_error(
                    config,
                    "it sent over 1 MiB during the opening without one whole answer".into(),
                ));
            }
            Ok(())
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(broker_error(
                config,
                format!(
                    "no answer to the opening within {} s; is this a {} server? check pubsub.broker and pubsub.address",
                    OPEN_TIMEOUT.as_secs(),
                    config.broker.name()
                ),
            ))
        }
        Err(e) => Err(broker_error(
            config,
            format!("reading during the opening failed ({e})"),
        )),
    }
}

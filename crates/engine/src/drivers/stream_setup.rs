//! The opening of brokers that keep streams, before the run's schedule starts: Redis Streams'
//! consumer groups set at each stream's end, JetStream's streams and durable consumers made
//! through its API. Blocking I/O, bounded by the opening's timeout, like the rest of the
//! opening in [`super::pubsub`].
use super::pubsub::{broker_error, connect_for_opening, open, OPEN_TIMEOUT};
use crate::error::EngineError;
use crate::net::{jetstream, nats, redis_streams, resp};
use msgbench_model::pubsub::PubsubConfig;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// Redis Streams: every `(topic, group)` starts at its stream's end (the stream made when
/// missing; a group left by an earlier run moved to the end, so it reads nothing old).
pub fn reset_redis_groups(
    config: &PubsubConfig,
    address: SocketAddr,
    groups: &[(String, String)],
) -> Result<(), EngineError> {
    let fail = |problem: String| broker_error(config, problem);
    let mut stream = connect_for_opening(config, address, 0)?;
    let mut out = Vec::new();
    for (topic, group) in groups {
        redis_streams::reset_group(topic, group, &mut out);
    }
    stream
        .write_all(&out)
        .map_err(|e| fail(format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let mut at = 0;
    for (topic, group) in groups {
        for step in ["create", "move"] {
            let (reply, used) = read_reply(config, &mut stream, &mut input, at)?;
            let text = &input[at..at + used];
            if reply == resp::Reply::Error {
                let error = resp::error_text(text, used);
                if !(step == "create" && error.starts_with(b"BUSYGROUP")) {
                    return Err(fail(format!(
                        "it refused to {step} consumer group {group} of stream {topic}: {}{}",
                        String::from_utf8_lossy(error),
                        if error.starts_with(b"WRONGTYPE") {
                            " (the key exists and is not a stream: use another pubsub.topic_prefix)"
                        } else if error.starts_with(b"ERR unknown command") {
                            " (Redis Streams need Redis 5 or later)"
                        } else {
                            ""
                        }
                    )));
                }
            }
            at += used;
        }
    }
    Ok(())
}

/// The next whole RESP reply in `input` from `at`, reading more from `stream` as needed.
fn read_reply(
    config: &PubsubConfig,
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
    at: usize,
) -> Result<(resp::Reply, usize), EngineError> {
    loop {
        match resp::decode(&input[at..]) {
            Ok(Some(found)) => return Ok(found),
            Ok(None) => read_more(config, stream, input)?,
            Err(e) => {
                return Err(broker_error(
                    config,
                    format!(
                        "this is not a Redis server ({e}); check pubsub.broker and pubsub.address"
                    ),
                ))
            }
        }
    }
}

/// Reads what the broker sent next into `input`; its silence past the opening's timeout, or
/// its hanging up, is the opening's failure.
fn read_more(
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
        Err(e) => Err(broker_error(
            config,
            format!(
                "no answer during the opening within {} s ({e})",
                OPEN_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// A connection to JetStream's API: requests published with a reply subject under its inbox,
/// answered one at a time.
pub struct JetstreamApi<'a> {
    config: &'a PubsubConfig,
    stream: TcpStream,
    input: Vec<u8>,
    inbox: String,
}

impl<'a> JetstreamApi<'a> {
    /// Opens it: connected, its inbox subscribed.
    pub fn open(
        config: &'a PubsubConfig,
        address: SocketAddr,
        mark: [u8; 4],
    ) -> Result<JetstreamApi<'a>, EngineError> {
        let inbox = format!("{}.api", jetstream::publisher_inbox(mark, 0));
        let (stream, input) = open(config, address, "api", Some((&inbox, None, 1)))?;
        stream
            .set_read_timeout(Some(OPEN_TIMEOUT))
            .map_err(EngineError::Io)?;
        Ok(JetstreamApi {
            config,
            stream,
            input,
            inbox,
        })
    }

    /// Sends one API request and returns its answer's JSON.
    fn request(&mut self, subject: &str, body: &[u8]) -> Result<Vec<u8>, EngineError> {
        let mut out = Vec::new();
        nats::publish(subject, Some(&self.inbox), body, &mut out);
        self.stream.write_all(&out).map_err(|e| {
            broker_error(
                self.config,
                format!("writing to JetStream's API failed ({e})"),
            )
        })?;
        loop {
            match nats::decode(&self.input) {
                Ok(Some((op, used))) => {
                    let answer = match op {
                        nats::ServerOp::Msg {
                            status: Some(s), ..
                        } if s.starts_with(b"503") => Err(broker_error(
                            self.config,
                            "JetStream is not enabled on this server (its API has no responders): start nats-server with -js (and -sd DIR for where it stores)".into(),
                        )),
                        nats::ServerOp::Msg { payload, .. } => Ok(Some(payload.to_vec())),
                        nats::ServerOp::Err(text) => Err(broker_error(
                            self.config,
                            format!("it refused a JetStream request: {}", String::from_utf8_lossy(text)),
                        )),
                        nats::ServerOp::Ping => {
                            let _ = self.stream.write_all(nats::PONG);
                            Ok(None)
                        }
                        _ => Ok(None),
                    };
                    self.input.drain(..used);
                    if let Some(payload) = answer? {
                        return Ok(payload);
                    }
                }
                Ok(None) => read_more(self.config, &mut self.stream, &mut self.input)?,
                Err(e) => {
                    return Err(broker_error(
                        self.config,
                        format!("this is not a nats server ({e})"),
                    ))
                }
            }
        }
    }

    /// `topic`'s stream exists, keeping the run's number of messages: created, or updated
    /// when an earlier run made it with another bound.
    pub fn ensure_stream(&mut self, topic: &str) -> Result<(), EngineError> {
        let max = self.config.stream_max_messages;
        let (subject, body) = jetstream::stream_request(topic, max, false);
        let answer = self.request(&subject, &body)?;
        let error = match jetstream::api_error(&answer) {
            Some(e) if e.code == jetstream::STREAM_NAME_IN_USE => {
                let (subject, body) = jetstream::stream_request(topic, max, true);
                let answer = self.request(&subject, &body)?;
                jetstream::api_error(&answer)
            }
            other => other,
        };
        match error {
            None => Ok(()),
            Some(e) => Err(broker_error(
                self.config,
                format!(
                    "JetStream refused stream {} for subject {topic}: {} (error {}){}",
                    jetstream::stream_name(topic),
                    e.description,
                    e.code,
                    if e.description.contains("overlap") {
                        "; another stream takes these subjects: use another pubsub.topic_prefix"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }

    /// The durable consumer `durable` of `topic`'s stream, from its end, delivering to
    /// `deliver` (in `group`, when shared): an earlier run's of that name deleted first.
    pub fn create_consumer(
        &mut self,
        topic: &str,
        durable: &str,
        deliver: &str,
        group: Option<&str>,
    ) -> Result<(), EngineError> {
        let answer = self.request(&jetstream::delete_consumer_subject(topic, durable), b"")?;
        if let Some(e) = jetstream::api_error(&answer) {
            if e.code != jetstream::CONSUMER_NOT_FOUND {
                return Err(broker_error(
                    self.config,
                    format!("JetStream refused to delete an earlier run's consumer {durable}: {} (error {})", e.description, e.code),
                ));
            }
        }
        let (subject, body) = jetstream::consumer_request(
            topic,
            durable,
            deliver,
            group,
            max_ack_pending(self.config),
        );
        let answer = self.request(&subject, &body)?;
        match jetstream::api_error(&answer) {
            None => Ok(()),
            Some(e) => Err(broker_error(
                self.config,
                format!(
                    "JetStream refused consumer {durable} of stream {}: {} (error {})",
                    jetstream::stream_name(topic),
                    e.description,
                    e.code
                ),
            )),
        }
    }
}

/// Deliveries a JetStream consumer may leave unacknowledged: JetStream's default (1000), so a
/// slow subscription's backlog waits in the stream, where its bound applies, as it does for a
/// consumer made with the defaults; fewer for big messages (at most 32 MiB of them on their
/// way, under NATS's slow-consumer limit of a connection).
pub fn max_ack_pending(config: &PubsubConfig) -> u32 {
    ((32 << 20) / config.message_bytes.max(1)).clamp(1, 1000)
}

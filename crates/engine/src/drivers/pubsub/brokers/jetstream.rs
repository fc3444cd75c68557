//! NATS JetStream: a stream per topic, made (or its bound updated) through JetStream's API
//! before the run; a durable push consumer per subscription (shared: a deliver group), every
//! delivery acknowledged (`+ACK` to its reply subject); every publish answered by the stream
//! (its PubAck, on the publisher's inbox). NATS's protocol ([`super::nats`]) with
//! [`wire::jetstream`]'s subjects and answers.
use super::nats;
use crate::drivers::pubsub::client::{
    open_subscribed, shared_group, BrokerClient, Framing, OpenedPublisher, Slot,
};
use crate::drivers::pubsub::consumer::Consumer;
use crate::drivers::pubsub::opening::{broker_error, open, read_more, Opening, OPEN_TIMEOUT};
use crate::drivers::pubsub::protocol::{AckId, BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::{jetstream, nats as nats_wire};
use crate::error::EngineError;
use msgbench_model::pubsub::{PubsubConfig, Subscription};
use std::io::Write;

/// NATS JetStream; its API connection kept while the run opens.
#[derive(Default)]
pub struct Jetstream {
    api: Option<JetstreamApi>,
}

impl BrokerProtocol for Jetstream {
    fn name(&self) -> &'static str {
        "jetstream"
    }

    fn hello(&self, hello: &Hello<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        // Headers on: JetStream's refusals of a publish nobody stores are 503 statuses.
        nats_wire::connect(hello, true, out)
    }

    fn greeting(&self) -> Option<&'static [u8]> {
        Some(b"INFO")
    }

    fn subscribe(&self, topic: &str, group: Option<&str>, sid: u64, _qos: u8, out: &mut Vec<u8>) {
        nats::subscribe(topic, group, sid, out);
    }

    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        nats::decode(buf, true)
    }

    fn publish_answer(&self, payload: &[u8]) -> Result<bool, String> {
        match jetstream::pub_ack_refusal(payload) {
            None => Ok(true),
            Some(why) => Err(why),
        }
    }

    fn ack(&self, id: AckId<'_>, out: &mut Vec<u8>) {
        if let AckId::Subject(subject) = id {
            out.extend_from_slice(b"PUB ");
            out.extend_from_slice(subject);
            out.extend_from_slice(b" 0\r\n\r\n");
        }
    }

    fn pong(&self) -> &'static [u8] {
        nats_wire::PONG
    }
}

impl BrokerClient for Jetstream {
    fn prepare(&mut self, run: &Opening<'_>) -> Result<(), EngineError> {
        let mut api = JetstreamApi::open(run, self.protocol())?;
        for topic in &run.config.topics {
            api.ensure_stream(run.config, topic)?;
        }
        self.api = Some(api);
        Ok(())
    }

    fn open_consumers(
        &mut self,
        run: &Opening<'_>,
        sub: &Subscription,
        slots: &[Slot],
    ) -> Result<Vec<Consumer>, EngineError> {
        let config = run.config;
        let topic = &config.topics[sub.topic as usize];
        let group = shared_group(config, sub);
        let deliver = jetstream::deliver_subject(run.mark, &sub.name);
        let consumers = open_subscribed(run, self.protocol(), sub, &deliver, slots)?;
        // Its deliveries have somewhere to go: the consumer is made once they listen.
        let durable = jetstream::durable_name(topic, &sub.name);
        let api = self.api.as_mut().expect("prepared before consumers open");
        api.create_consumer(config, topic, &durable, &deliver, group)?;
        Ok(consumers)
    }

    fn open_publisher(
        &mut self,
        run: &Opening<'_>,
        index: u32,
        topic: &str,
    ) -> Result<OpenedPublisher, EngineError> {
        // Its PubAcks come to its inbox.
        let inbox = jetstream::publisher_inbox(run.mark, index);
        let name = format!("p{index}");
        let (stream, leftover) = open(run, self.protocol(), &name, Some((&inbox, None, 1)))?;
        let frame = self.publish_frame(run.config, topic, Some(&inbox));
        Ok(OpenedPublisher {
            stream,
            leftover,
            framing: Framing::Each(frame),
        })
    }

    fn publish_frame(
        &self,
        config: &PubsubConfig,
        topic: &str,
        inbox: Option<&str>,
    ) -> PublishFrame {
        nats::publish_frame(config, topic, inbox)
    }

    fn opened(&mut self) {
        self.api = None;
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }
}

/// A connection to JetStream's API: requests published with a reply subject under its inbox,
/// answered one at a time.
pub struct JetstreamApi {
    stream: OpeningStream,
    input: Vec<u8>,
    inbox: String,
}

impl JetstreamApi {
    /// Opens it: connected, its inbox subscribed.
    pub fn open(
        run: &Opening<'_>,
        protocol: &dyn BrokerProtocol,
    ) -> Result<JetstreamApi, EngineError> {
        let inbox = format!("{}.api", jetstream::publisher_inbox(run.mark, 0));
        let (stream, input) = open(run, protocol, "api", Some((&inbox, None, 1)))?;
        stream
            .set_read_timeout(Some(OPEN_TIMEOUT))
            .map_err(EngineError::Io)?;
        Ok(JetstreamApi {
            stream,
            input,
            inbox,
        })
    }

    /// Sends one API request and returns its answer's JSON.
    fn request(
        &mut self,
        config: &PubsubConfig,
        subject: &str,
        body: &[u8],
    ) -> Result<Vec<u8>, EngineError> {
        let mut out = Vec::new();
        nats_wire::publish(subject, Some(&self.inbox), body, &mut out);
        self.stream.write_all(&out).map_err(|e| {
            broker_error(config, format!("writing to JetStream's API failed ({e})"))
        })?;
        loop {
            match nats_wire::decode(&self.input) {
                Ok(Some((op, used))) => {
                    let answer = match op {
                        nats_wire::ServerOp::Msg {
                            status: Some(s), ..
                        } if s.starts_with(b"503") => Err(broker_error(
                            config,
                            "JetStream is not enabled on this server (its API has no responders): start nats-server with -js (and -sd DIR for where it stores)".into(),
                        )),
                        nats_wire::ServerOp::Msg { payload, .. } => Ok(Some(payload.to_vec())),
                        nats_wire::ServerOp::Err(text) => Err(broker_error(
                            config,
                            format!("it refused a JetStream request: {}", String::from_utf8_lossy(text)),
                        )),
                        nats_wire::ServerOp::Ping => {
                            let _ = self.stream.write_all(nats_wire::PONG);
                            Ok(None)
                        }
                        _ => Ok(None),
                    };
                    self.input.drain(..used);
                    if let Some(payload) = answer? {
                        return Ok(payload);
                    }
                }
                Ok(None) => read_more(config, &mut self.stream, &mut self.input)?,
                Err(e) => {
                    return Err(broker_error(
                        config,
                        format!("this is not a nats server ({e})"),
                    ))
                }
            }
        }
    }

    /// `topic`'s stream exists, keeping the run's number of messages: created, or updated
    /// when an earlier run made it with another bound.
    pub fn ensure_stream(&mut self, config: &PubsubConfig, topic: &str) -> Result<(), EngineError> {
        let max = config.stream_max_messages;
        let (subject, body) = jetstream::stream_request(topic, max, false);
        let answer = self.request(config, &subject, &body)?;
        let error = match jetstream::api_error(&answer) {
            Some(e) if e.code == jetstream::STREAM_NAME_IN_USE => {
                // Another bound: updated only if msgbench made it.
                let info = self.request(config, &jetstream::stream_info_subject(topic), b"")?;
                if !jetstream::made_by_msgbench(&info) {
                    return Err(broker_error(
                        config,
                        format!(
                            "JetStream stream {} (subject {topic}) exists and is not msgbench's: msgbench would change its bound to pubsub.stream_max_messages = {max}; use another pubsub.topic_prefix",
                            jetstream::stream_name(topic)
                        ),
                    ));
                }
                let (subject, body) = jetstream::stream_request(topic, max, true);
                let answer = self.request(config, &subject, &body)?;
                jetstream::api_error(&answer)
            }
            other => other,
        };
        match error {
            None => Ok(()),
            Some(e) => Err(broker_error(
                config,
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
        config: &PubsubConfig,
        topic: &str,
        durable: &str,
        deliver: &str,
        group: Option<&str>,
    ) -> Result<(), EngineError> {
        let answer = self.request(
            config,
            &jetstream::delete_consumer_subject(topic, durable),
            b"",
        )?;
        if let Some(e) = jetstream::api_error(&answer) {
            if e.code != jetstream::CONSUMER_NOT_FOUND {
                return Err(broker_error(
                    config,
                    format!("JetStream refused to delete an earlier run's consumer {durable}: {} (error {})", e.description, e.code),
                ));
            }
        }
        let (subject, body) =
            jetstream::consumer_request(topic, durable, deliver, group, max_ack_pending(config));
        let answer = self.request(config, &subject, &body)?;
        match jetstream::api_error(&answer) {
            None => Ok(()),
            Some(e) => Err(broker_error(
                config,
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

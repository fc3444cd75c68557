//! Redis Streams: `XADD` (answered with the entry's id, each stream trimmed to
//! `stream_max_messages`), a consumer group per subscription read with `XREADGROUP` and
//! acknowledged with `XACK` ([`wire::redis_streams`]); shared subscriptions are consumers of
//! one group. Before the run, each group is set at its stream's end, and a stream that is not
//! msgbench's is refused rather than trimmed.
use super::redis::hello;
use crate::drivers::pubsub::client::{consumer_name, BrokerClient, Slot};
use crate::drivers::pubsub::consumer::{turn_bytes, Consumer, Pull};
use crate::drivers::pubsub::opening::{broker_error, open, read_more, Opening};
use crate::drivers::pubsub::protocol::{BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::redis_streams;
use crate::error::EngineError;
use crate::net::resp;
use msgbench_model::pubsub::{PubsubConfig, Subscription};
use std::io::Write;

/// Redis Streams.
pub struct RedisStreams;

impl BrokerProtocol for RedisStreams {
    fn name(&self) -> &'static str {
        "redis-streams"
    }

    fn hello(&self, h: &Hello<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        hello(h.auth, out);
        Ok(())
    }

    /// A publisher's answers: XADD's id (a bulk string). A consumer's replies are read whole
    /// by its [`redis_streams::Reader`].
    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        let Some((reply, used)) = resp::decode(buf).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let incoming = match (reply, buf[0]) {
            (resp::Reply::Error, _) => Incoming::Error(resp::error_text(buf, used)),
            (_, b'$') => Incoming::Ack,
            _ if buf.starts_with(b"+PONG") => Incoming::Reply,
            _ => Incoming::Other,
        };
        Ok(Some((incoming, used)))
    }
}

impl BrokerClient for RedisStreams {
    fn prepare(&mut self, run: &Opening<'_>) -> Result<(), EngineError> {
        let groups: Vec<(String, String)> = run
            .config
            .subscriptions()
            .iter()
            .map(|s| {
                (
                    run.config.topics[s.topic as usize].clone(),
                    group_of(&s.name),
                )
            })
            .collect();
        reset_groups(run, &groups)
    }

    fn open_consumers(
        &mut self,
        run: &Opening<'_>,
        sub: &Subscription,
        slots: &[Slot],
    ) -> Result<Vec<Consumer>, EngineError> {
        let config = run.config;
        let topic = &config.topics[sub.topic as usize];
        let cost = config.cost_ns(sub);
        // About a turn's worth per read, as a Kafka fetch.
        let count = (turn_bytes(config, cost) / (config.message_bytes as usize + 64))
            .clamp(1, 10_000) as u32;
        let mut consumers = Vec::new();
        for &Slot { k, .. } in slots {
            let name = consumer_name(sub, k);
            let reader = redis_streams::Reader::new(
                topic,
                &group_of(&sub.name),
                &format!("msgbench-{name}"),
                count,
            );
            let (mut stream, leftover) = open(run, self.protocol(), &name, None)?;
            let mut first = Vec::new();
            reader.request(&mut first);
            stream
                .write_all(&first)
                .map_err(|e| run.error(format!("writing a read failed ({e})")))?;
            let size = config.message_bytes as usize;
            let consumer = Consumer::pulling(stream, &leftover, size, Box::new(reader));
            consumers.push(consumer.map_err(EngineError::Io)?);
        }
        Ok(consumers)
    }

    fn publish_frame(&self, config: &PubsubConfig, topic: &str, _: Option<&str>) -> PublishFrame {
        let size = config.message_bytes as usize;
        PublishFrame {
            prefix: redis_streams::publish_prefix(topic, size, config.stream_max_messages),
            id_at: None,
            suffix: b"\r\n",
        }
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }
}

impl Pull for redis_streams::Reader {
    fn on_input(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        on_message: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, u64), (String, bool)> {
        self.on_replies(input, out, on_message)
            .map(|used| (used, 0))
            .map_err(|e| (e, false))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The consumer group of subscription `sub`.
fn group_of(sub: &str) -> String {
    format!("msgbench-{sub}")
}

/// Redis Streams: every `(topic, group)` starts at its stream's end (the stream made when
/// missing; a group left by an earlier run moved to the end, so it reads nothing old).
fn reset_groups(run: &Opening<'_>, groups: &[(String, String)]) -> Result<(), EngineError> {
    let config = run.config;
    let fail = |problem: String| broker_error(config, problem);
    let mut stream = run.connect(0)?;
    log_in(config, &mut stream)?;
    refuse_streams_of_others(config, &mut stream, groups)?;
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
                            crate::drivers::pubsub::opening::login_hint(
                                config,
                                &String::from_utf8_lossy(error),
                            )
                        }
                    )));
                }
            }
            at += used;
        }
    }
    Ok(())
}

/// Sends the run's `AUTH` (if it has one) on a connection opened without a hello, and reads
/// its answer: a refusal fails the opening in Redis's words.
fn log_in(config: &PubsubConfig, stream: &mut OpeningStream) -> Result<(), EngineError> {
    let mut out = Vec::new();
    super::redis::login(config.auth.as_ref(), &mut out);
    if out.is_empty() {
        return Ok(());
    }
    stream
        .write_all(&out)
        .map_err(|e| broker_error(config, format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let (reply, used) = read_reply(config, stream, &mut input, 0)?;
    if reply == resp::Reply::Error {
        let error = String::from_utf8_lossy(resp::error_text(&input[..used], used)).into_owned();
        return Err(broker_error(
            config,
            format!(
                "it refused the login: {error}{}",
                crate::drivers::pubsub::opening::login_hint(config, &error)
            ),
        ));
    }
    Ok(())
}

/// Every publish trims its stream to `stream_max_messages`: a stream that exists and is not
/// msgbench's (it has no consumer group, or one msgbench did not make) is refused, not trimmed.
fn refuse_streams_of_others(
    config: &PubsubConfig,
    stream: &mut OpeningStream,
    groups: &[(String, String)],
) -> Result<(), EngineError> {
    let mut topics: Vec<&str> = groups.iter().map(|(t, _)| t.as_str()).collect();
    topics.dedup();
    let mut out = Vec::new();
    for t in &topics {
        redis_streams::groups_request(t, &mut out);
    }
    stream
        .write_all(&out)
        .map_err(|e| broker_error(config, format!("writing the opening failed ({e})")))?;
    let mut input = Vec::new();
    let mut at = 0;
    for t in topics {
        let (reply, used) = read_reply(config, stream, &mut input, at)?;
        let text = &input[at..at + used];
        at += used;
        if reply == resp::Reply::Error {
            // No such key: the run makes the stream. A key of another type is named when its
            // group is made.
            continue;
        }
        let names = redis_streams::group_names(text).map_err(|e| broker_error(config, e))?;
        let others: Vec<&String> = names
            .iter()
            .filter(|n| !n.starts_with("msgbench-"))
            .collect();
        if names.is_empty() || !others.is_empty() {
            return Err(broker_error(
                config,
                format!(
                    "stream {t} exists and is not msgbench's ({}): every publish would trim it to pubsub.stream_max_messages = {}; use another pubsub.topic_prefix",
                    if names.is_empty() {
                        "it has no consumer group".to_string()
                    } else {
                        format!("its consumer groups include {}", others.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
                    },
                    config.stream_max_messages
                ),
            ));
        }
    }
    Ok(())
}

/// The next whole RESP reply in `input` from `at`, reading more from `stream` as needed.
fn read_reply(
    config: &PubsubConfig,
    stream: &mut OpeningStream,
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

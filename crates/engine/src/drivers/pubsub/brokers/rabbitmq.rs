//! RabbitMQ (AMQP 0.9.1, [`wire::amqp`]): each topic an exchange (`[pubsub.rabbitmq]
//! exchange_type`), each subscription a queue of its own (`queue_type`: classic, quorum or
//! stream) bound to its topic's exchange with the topic's name as the binding key; the
//! consumers of a shared subscription compete on its queue. Publishers publish to their
//! topic's exchange with the topic's name as the routing key, answered by the broker when
//! `confirms` is on (`confirm.select`); consumers take at most `prefetch` deliveries
//! unacknowledged, acknowledging each (`basic.ack`) or none (`ack = "auto"`).
//!
//! Before the run each exchange and queue is deleted and declared again (a queue of an earlier
//! run would hand this one its messages; an exchange of another type would refuse its
//! settings), each queue empty and bound; at the end they are deleted: the names under
//! `pubsub.topic_prefix` are the run's. A queue keeps every message until it is read: one that
//! had not come is on its way, never lost.
//!
//! Why not `lapin` or `amqprs`: both are asynchronous clients that own their sockets on a
//! runtime of their own, while every broker here is read by msgbench's own threads (one
//! thread, many connections, non-blocking sockets) so that what is measured is the broker and
//! not a client library's executor; their codec (`amq-protocol`, lapin's) makes and reads
//! every method of the opening.
use crate::drivers::pubsub::client::{
    consumer_name, BrokerClient, Ended, Framing, OpenedPublisher, Slot,
};
use crate::drivers::pubsub::consumer::Consumer;
use crate::drivers::pubsub::opening::{broker_error, login_hint, read_more, Opening, OPEN_TIMEOUT};
use crate::drivers::pubsub::protocol::{AckId, BrokerProtocol, Hello, Incoming, PublishFrame};
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::amqp::{self, Received};
use crate::error::EngineError;
use amq_protocol::protocol::{basic, channel, confirm, connection, exchange, queue, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable};
use msgbench_model::pubsub::{PubsubConfig, Subscription};
use msgbench_model::rabbitmq::QueueType;
use std::io::Write;

/// RabbitMQ: whether its consumers acknowledge (set when the run is prepared), and the
/// publishers' goodbye.
pub struct Rabbitmq {
    auto_ack: bool,
    close: Vec<u8>,
}

impl Default for Rabbitmq {
    fn default() -> Rabbitmq {
        Rabbitmq {
            auto_ack: false,
            close: amqp::close(),
        }
    }
}

impl BrokerProtocol for Rabbitmq {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    /// Nothing: AMQP's opening is a dialogue of its own ([`Amqp::open`]).
    fn hello(&self, _hello: &Hello<'_>, _out: &mut Vec<u8>) -> Result<(), String> {
        Ok(())
    }

    fn decode<'a>(&self, buf: &'a [u8]) -> Result<Option<(Incoming<'a>, usize)>, String> {
        let Some((received, used)) = amqp::receive(buf)? else {
            return Ok(None);
        };
        let incoming = match received {
            Received::Delivery { tag, payload } => Incoming::Message {
                payload,
                ack: (!self.auto_ack).then_some(AckId::Tag(tag)),
            },
            // Confirms of one channel come in publish order (RabbitMQ confirms a publish once
            // every queue it was routed to has it): each one answers every publish up to it.
            Received::Confirm {
                tag, nack: false, ..
            } => Incoming::Confirmed(tag),
            Received::Confirm { nack: true, .. } => {
                Incoming::Error(b"the broker could not take a publish (basic.nack)")
            }
            Received::Closed { text, .. } => Incoming::Error(text),
            Received::Cancelled => {
                Incoming::Error(b"the broker ended the consumer (basic.cancel: its queue is gone)")
            }
            Received::Heartbeat => Incoming::Ping,
            Received::CloseOk => Incoming::Reply,
            Received::Other => Incoming::Other,
        };
        Ok(Some((incoming, used)))
    }

    fn ack(&self, id: AckId<'_>, out: &mut Vec<u8>) {
        if let AckId::Tag(tag) = id {
            amqp::ack(tag, out);
        }
    }

    fn pong(&self) -> &'static [u8] {
        amqp::HEARTBEAT_FRAME
    }

    fn goodbye(&self) -> &[u8] {
        &self.close
    }
}

impl BrokerClient for Rabbitmq {
    /// Each topic's exchange and each subscription's queue deleted and declared again, each
    /// queue bound. A shard deletes nothing (another shard may read the queue, or have bound
    /// it already): it declares — RabbitMQ's declare is idempotent — binds, and empties a
    /// queue of an earlier run (`queue.purge`, before anyone publishes: the schedule starts at
    /// the agreed instant, after every shard's opening).
    fn prepare(&mut self, run: &Opening<'_>) -> Result<(), EngineError> {
        let config = run.config;
        self.auto_ack = config.rabbitmq.auto_ack;
        let mut admin = Amqp::open(run, "msgbench-prepare", run.connect(0)?)?;
        // A shard leaves the exchanges be: another shard may have bound its queues already.
        let whole = config.shard.is_whole();
        for topic in &config.topics {
            if whole {
                let doing = "deleting an earlier run's exchange";
                admin.call(run, delete_exchange(topic), doing)?;
            }
            admin.call(
                run,
                declare_exchange(config, topic),
                "declaring its exchange",
            )?;
        }
        for sub in config.subscriptions() {
            let (queue, topic) = (queue_name(config, &sub), &config.topics[sub.topic as usize]);
            if whole {
                admin.call(run, delete_queue(&queue), "deleting an earlier run's queue")?;
            }
            admin.call(run, declare_queue(config, &queue), "declaring a queue")?;
            if !whole {
                admin.call(run, purge_queue(&queue), "emptying an earlier run's queue")?;
            }
            admin.call(run, bind_queue(&queue, topic), "binding a queue")?;
            run.progress();
        }
        Ok(())
    }

    fn open_consumers(
        &mut self,
        run: &Opening<'_>,
        sub: &Subscription,
        slots: &[Slot],
    ) -> Result<Vec<Consumer>, EngineError> {
        let config = run.config;
        let queue = queue_name(config, sub);
        let mut consumers = Vec::new();
        for &Slot { k, .. } in slots {
            let name = consumer_name(sub, k);
            let stream = run.connect_subscriber(config.receive_buffer)?;
            let mut amqp = Amqp::open(run, &name, stream)?;
            if config.rabbitmq.prefetch > 0 {
                let qos = basic::AMQPMethod::Qos(basic::Qos {
                    prefetch_count: config.rabbitmq.prefetch,
                    global: false,
                });
                amqp.call(run, AMQPClass::Basic(qos), "setting the prefetch")?;
            }
            amqp.call(run, consume(config, &queue, &name), "subscribing")?;
            let (stream, leftover) = amqp.into_parts();
            let size = config.message_bytes as usize;
            consumers.push(Consumer::new(stream, &leftover, size).map_err(EngineError::Io)?);
        }
        Ok(consumers)
    }

    fn open_publisher(
        &mut self,
        run: &Opening<'_>,
        index: u32,
        topic: &str,
    ) -> Result<OpenedPublisher, EngineError> {
        let mut amqp = Amqp::open(run, &format!("p{index}"), run.connect(0)?)?;
        if run.config.rabbitmq.confirms {
            let select = confirm::AMQPMethod::Select(confirm::Select { nowait: false });
            amqp.call(run, AMQPClass::Confirm(select), "asking for confirms")?;
        }
        let (stream, leftover) = amqp.into_parts();
        Ok(OpenedPublisher {
            stream,
            leftover,
            framing: Framing::Each(self.publish_frame(run.config, topic, None)),
        })
    }

    fn publish_frame(&self, config: &PubsubConfig, topic: &str, _: Option<&str>) -> PublishFrame {
        PublishFrame {
            prefix: amqp::publish_prefix(
                topic,
                topic,
                config.message_bytes,
                config.rabbitmq.persistent,
            ),
            id_at: None,
            suffix: &[amqp::FRAME_END],
        }
    }

    fn retains(&self) -> bool {
        true
    }

    /// The run's queues and exchanges deleted (a stream or quorum queue would keep its
    /// messages on disk); a shard's left (another shard may still read them: the next run
    /// empties them).
    fn finish(&mut self, run: &Opening<'_>, subscriptions: &[Ended<'_>]) -> Vec<String> {
        if !run.config.shard.is_whole() {
            return Vec::new();
        }
        let deleted = (|| {
            let mut admin = Amqp::open(run, "msgbench-finish", run.connect(0)?)?;
            for sub in subscriptions {
                let queue = format!("{}.{}", sub.topic, sub.name);
                admin.call(run, delete_queue(&queue), "deleting the run's queue")?;
            }
            for topic in &run.config.topics {
                admin.call(run, delete_exchange(topic), "deleting the run's exchange")?;
            }
            Ok::<(), EngineError>(())
        })();
        match deleted {
            Ok(()) => Vec::new(),
            Err(e) => vec![format!(
                "the run's queues and exchanges were not all deleted: {e}"
            )],
        }
    }

    fn protocol(&self) -> &dyn BrokerProtocol {
        self
    }
}

/// Subscription `sub`'s queue: `<topic>.<subscription>` (`msgbench.0.t0-s1`).
fn queue_name(config: &PubsubConfig, sub: &Subscription) -> String {
    format!("{}.{}", config.topics[sub.topic as usize], sub.name)
}

fn declare_exchange(config: &PubsubConfig, topic: &str) -> AMQPClass {
    AMQPClass::Exchange(exchange::AMQPMethod::Declare(exchange::Declare {
        exchange: topic.into(),
        kind: config.rabbitmq.exchange_type.name().into(),
        passive: false,
        durable: true,
        auto_delete: false,
        internal: false,
        nowait: false,
        arguments: FieldTable::default(),
    }))
}

fn delete_exchange(topic: &str) -> AMQPClass {
    AMQPClass::Exchange(exchange::AMQPMethod::Delete(exchange::Delete {
        exchange: topic.into(),
        if_unused: false,
        nowait: false,
    }))
}

fn purge_queue(queue: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Purge(queue::Purge {
        queue: queue.into(),
        nowait: false,
    }))
}

fn delete_queue(queue: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Delete(queue::Delete {
        queue: queue.into(),
        if_unused: false,
        if_empty: false,
        nowait: false,
    }))
}

/// A queue of the scenario's type: a quorum queue and a stream are durable (RabbitMQ asks it
/// of them), a classic queue not.
fn declare_queue(config: &PubsubConfig, queue: &str) -> AMQPClass {
    let kind = config.rabbitmq.queue_type;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(kind.name().into()),
    );
    AMQPClass::Queue(queue::AMQPMethod::Declare(queue::Declare {
        queue: queue.into(),
        passive: false,
        durable: kind != QueueType::Classic,
        exclusive: false,
        auto_delete: false,
        nowait: false,
        arguments,
    }))
}

fn bind_queue(queue: &str, topic: &str) -> AMQPClass {
    AMQPClass::Queue(queue::AMQPMethod::Bind(queue::Bind {
        queue: queue.into(),
        exchange: topic.into(),
        routing_key: topic.into(),
        nowait: false,
        arguments: FieldTable::default(),
    }))
}

/// `basic.consume` of `queue` as `tag`; a stream read from its end (`x-stream-offset: next`).
fn consume(config: &PubsubConfig, queue: &str, tag: &str) -> AMQPClass {
    let mut arguments = FieldTable::default();
    if config.rabbitmq.queue_type == QueueType::Stream {
        arguments.insert(
            "x-stream-offset".into(),
            AMQPValue::LongString("next".into()),
        );
    }
    AMQPClass::Basic(basic::AMQPMethod::Consume(basic::Consume {
        queue: queue.into(),
        consumer_tag: tag.into(),
        no_local: false,
        no_ack: config.rabbitmq.auto_ack,
        exclusive: false,
        nowait: false,
        arguments,
    }))
}

/// One connection during the opening: blocking, each answer awaited.
struct Amqp {
    stream: OpeningStream,
    input: Vec<u8>,
}

impl Amqp {
    /// Opens the connection on `stream` (connected, TLS started) as `name`: the protocol
    /// header, the login (SASL PLAIN: `[pubsub.auth]`, else guest), the tuning, the virtual
    /// host `/` and channel [`amqp::CHANNEL`].
    fn open(run: &Opening<'_>, name: &str, stream: OpeningStream) -> Result<Amqp, EngineError> {
        let mut amqp = Amqp {
            stream,
            input: Vec::new(),
        };
        amqp.write(run, amqp::PROTOCOL_HEADER)?;
        let start = amqp.answer(run, "the opening")?;
        if !matches!(
            start,
            AMQPClass::Connection(connection::AMQPMethod::Start(_))
        ) {
            return Err(run.error(format!("it opened with {start:?}, not connection.start")));
        }
        let start_ok = connection::AMQPMethod::StartOk(connection::StartOk {
            client_properties: client_properties(name),
            mechanism: "PLAIN".into(),
            response: login(run.config).into(),
            locale: "en_US".into(),
        });
        amqp.send(run, AMQPClass::Connection(start_ok), 0)?;
        let tune = match amqp.answer(run, "the login")? {
            AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) => tune,
            other => return Err(run.error(format!("it answered the login with {other:?}"))),
        };
        let frame_max = tune_frame_max(run.config, tune.frame_max)?;
        // No heartbeats: a consumer with ack = "auto" writes nothing for the whole run, and
        // RabbitMQ would end it for silence after two of its intervals (60 s by default).
        let tune_ok = connection::AMQPMethod::TuneOk(connection::TuneOk {
            channel_max: 1,
            frame_max,
            heartbeat: 0,
        });
        amqp.send(run, AMQPClass::Connection(tune_ok), 0)?;
        let open = connection::AMQPMethod::Open(connection::Open {
            virtual_host: "/".into(),
        });
        amqp.call_on(
            run,
            AMQPClass::Connection(open),
            0,
            "opening virtual host /",
        )?;
        let channel = channel::AMQPMethod::Open(channel::Open {});
        amqp.call(run, AMQPClass::Channel(channel), "opening its channel")?;
        Ok(amqp)
    }

    /// Sends `method` on the channel and awaits its answer (`…-ok`).
    fn call(
        &mut self,
        run: &Opening<'_>,
        method: AMQPClass,
        doing: &str,
    ) -> Result<(), EngineError> {
        self.call_on(run, method, amqp::CHANNEL, doing)
    }

    fn call_on(
        &mut self,
        run: &Opening<'_>,
        method: AMQPClass,
        channel: u16,
        doing: &str,
    ) -> Result<(), EngineError> {
        self.send(run, method, channel)?;
        self.answer(run, doing).map(|_| ())
    }

    fn send(
        &mut self,
        run: &Opening<'_>,
        method: AMQPClass,
        channel: u16,
    ) -> Result<(), EngineError> {
        self.write(run, &amqp::method(channel, method))
    }

    fn write(&mut self, run: &Opening<'_>, bytes: &[u8]) -> Result<(), EngineError> {
        self.stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush())
            .map_err(|e| run.error(format!("writing during the opening: {e}")))
    }

    /// The next method the broker sends (heartbeats skipped); its closing of the channel or
    /// the connection is the opening's failure, its text and code said.
    fn answer(&mut self, run: &Opening<'_>, doing: &str) -> Result<AMQPClass, EngineError> {
        // A deadline of its own, for the end of the run too (no watchdog then): a server that
        // sends only heartbeats, or trickles, does not hold the run.
        let deadline = std::time::Instant::now() + OPEN_TIMEOUT;
        loop {
            if std::time::Instant::now() > deadline {
                return Err(run.error(format!(
                    "no answer to {doing} within {} s",
                    OPEN_TIMEOUT.as_secs()
                )));
            }
            let framed = amqp::frame(&self.input).map_err(|e| {
                run.error(format!("this is not an AMQP 0-9-1 server ({e}); check pubsub.broker and pubsub.address"))
            })?;
            let Some((frame, used)) = framed else {
                read_more(run.config, &mut self.stream, &mut self.input)?;
                continue;
            };
            let (kind, payload) = (frame.kind, frame.payload.to_vec());
            self.input.drain(..used);
            if kind != amqp::METHOD {
                continue;
            }
            return match amqp::parse_method(&payload).map_err(|e| run.error(e))? {
                AMQPClass::Connection(connection::AMQPMethod::Close(c)) => Err(refused(
                    run.config,
                    doing,
                    c.reply_code,
                    c.reply_text.as_str(),
                )),
                AMQPClass::Channel(channel::AMQPMethod::Close(c)) => Err(refused(
                    run.config,
                    doing,
                    c.reply_code,
                    c.reply_text.as_str(),
                )),
                class => Ok(class),
            };
        }
    }

    /// The stream, its reads unbounded again, and what was read past the last answer.
    fn into_parts(self) -> (OpeningStream, Vec<u8>) {
        let _ = self.stream.set_read_timeout(None);
        (self.stream, self.input)
    }
}

/// The error of the broker's closing the connection or channel while `doing`.
fn refused(config: &PubsubConfig, doing: &str, code: u16, text: &str) -> EngineError {
    let fix = match code {
        403 => login_hint(config, "not authorized"),
        406 => "; an exchange or queue of that name exists with other settings (another exchange_type, a queue_type RabbitMQ does not change): delete it, or give another pubsub.topic_prefix",
        530 => "; the user may not use virtual host /",
        _ => "",
    };
    broker_error(config, format!("it refused {doing} ({code}): {text}{fix}"))
}

/// SASL PLAIN's response: `\0user\0password` (RabbitMQ's `guest` without `[pubsub.auth]`).
fn login(config: &PubsubConfig) -> String {
    match &config.auth {
        Some(c) => format!(
            "\0{}\0{}",
            c.user.as_deref().unwrap_or_default(),
            c.password.as_ref().map(|p| p.expose()).unwrap_or_default()
        ),
        None => "\0guest\0guest".into(),
    }
}

/// The frame size to agree: RabbitMQ's offer, at most [`amqp::FRAME_MAX`]; a message must fit
/// one body frame (8 bytes of framing).
fn tune_frame_max(config: &PubsubConfig, offered: u32) -> Result<u32, EngineError> {
    let frame_max = if offered == 0 {
        amqp::FRAME_MAX
    } else {
        offered.min(amqp::FRAME_MAX)
    };
    if config.message_bytes + 8 > frame_max {
        return Err(broker_error(
            config,
            format!(
                "its frames are at most {frame_max} bytes, and msgbench reads a message in one: give pubsub.message_bytes at most {}",
                frame_max - 8
            ),
        ));
    }
    Ok(frame_max)
}

/// What the connection says of itself (shown in RabbitMQ's management UI).
fn client_properties(name: &str) -> FieldTable {
    let mut capabilities = FieldTable::default();
    // authentication_failure_close: a refused login is said (connection.close, 403) before
    // the broker hangs up, rather than a bare hang-up.
    for flag in [
        "publisher_confirms",
        "consumer_cancel_notify",
        "basic.nack",
        "authentication_failure_close",
    ] {
        capabilities.insert(flag.into(), AMQPValue::Boolean(true));
    }
    let mut properties = FieldTable::default();
    properties.insert("product".into(), AMQPValue::LongString("msgbench".into()));
    properties.insert("connection_name".into(), AMQPValue::LongString(name.into()));
    properties.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    properties
}

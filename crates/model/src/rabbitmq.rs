//! `[pubsub.rabbitmq]`: RabbitMQ's own settings ([`RabbitmqOptions`] → [`RabbitmqConfig`]).
//! Each topic is an exchange, each subscription a queue bound to its topic's exchange (the
//! routing key and binding key are the topic's name), the consumers of a shared subscription
//! compete on that queue — the layout RabbitMQ PerfTest and the OpenMessaging Benchmark's
//! RabbitMQ driver use.
use crate::broker::Broker;
use crate::check::{Invalid, ScenarioError};
use serde::{Deserialize, Serialize};

/// The `[pubsub.rabbitmq]` section, every key optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RabbitmqOptions {
    /// The type of each topic's exchange: `"direct"` (the default), `"fanout"` or `"topic"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange_type: Option<ExchangeType>,
    /// The type of each subscription's queue: `"classic"` (the default), `"quorum"` (replicated,
    /// Raft) or `"stream"` (an append-only log read from its end).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_type: Option<QueueType>,
    /// Publisher confirms (`confirm.select`): the broker answers each publish once its queues
    /// hold it; the answer's latency is measured from the intended publish time. Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirms: Option<bool>,
    /// Deliveries a consumer may hold unacknowledged (`basic.qos`): 0 is no bound. Default 0,
    /// and 1000 for a stream queue (which needs one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefetch: Option<u16>,
    /// How deliveries are acknowledged: `"manual"` (the default: a `basic.ack` each) or
    /// `"auto"` (the broker forgets a message once sent; not for stream queues).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack: Option<AckMode>,
    /// Messages published persistent (delivery mode 2: written to disk by a classic queue).
    /// Default false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
}

/// An exchange's type.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ExchangeType {
    /// Routes by the exact routing key.
    #[default]
    Direct,
    /// Routes to every bound queue.
    Fanout,
    /// Routes by pattern (`*`, `#`); here every binding key is the topic's name.
    Topic,
}

impl ExchangeType {
    /// Its name in `exchange.declare`.
    pub fn name(self) -> &'static str {
        match self {
            ExchangeType::Direct => "direct",
            ExchangeType::Fanout => "fanout",
            ExchangeType::Topic => "topic",
        }
    }
}

/// A queue's type (`x-queue-type`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum QueueType {
    /// A classic queue, not durable.
    #[default]
    Classic,
    /// A quorum queue (durable, replicated).
    Quorum,
    /// A stream (durable, an append-only log; consumers read from its end).
    Stream,
}

impl QueueType {
    /// Its name as `x-queue-type`.
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
            QueueType::Stream => "stream",
        }
    }
}

/// How deliveries are acknowledged.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AckMode {
    /// `basic.ack` per delivery.
    #[default]
    Manual,
    /// `no-ack` consumers.
    Auto,
}

/// RabbitMQ's settings, checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RabbitmqConfig {
    /// Each topic's exchange type.
    pub exchange_type: ExchangeType,
    /// Each subscription's queue type.
    pub queue_type: QueueType,
    /// Publisher confirms.
    pub confirms: bool,
    /// Each consumer's prefetch (0: no bound).
    pub prefetch: u16,
    /// Deliveries acknowledged by the broker's sending them.
    pub auto_ack: bool,
    /// Delivery mode 2.
    pub persistent: bool,
}

/// A stream queue's prefetch unless the scenario gives one.
pub const STREAM_PREFETCH: u16 = 1000;

impl RabbitmqOptions {
    /// Checks the section: only with RabbitMQ, a stream queue read with manual acknowledgement
    /// and a prefetch.
    pub fn validate(
        &self,
        broker: Broker,
        invalid: &Invalid,
    ) -> Result<RabbitmqConfig, ScenarioError> {
        if broker != Broker::Rabbitmq {
            if *self != RabbitmqOptions::default() {
                return Err(invalid(
                    "pubsub.rabbitmq",
                    format!("is given with broker = \"{}\"", broker.name()),
                    "these settings are RabbitMQ's: take the section out, or set broker = \"rabbitmq\"",
                ));
            }
            return Ok(RabbitmqConfig::default());
        }
        let queue_type = self.queue_type.unwrap_or_default();
        let stream = queue_type == QueueType::Stream;
        let auto_ack = self.ack.unwrap_or_default() == AckMode::Auto;
        if stream && auto_ack {
            return Err(invalid(
                "pubsub.rabbitmq.ack",
                "is \"auto\" with queue_type = \"stream\"".into(),
                "a stream queue's consumers acknowledge what they read: take ack out (manual)",
            ));
        }
        let prefetch = self
            .prefetch
            .unwrap_or(if stream { STREAM_PREFETCH } else { 0 });
        if stream && prefetch == 0 {
            return Err(invalid(
                "pubsub.rabbitmq.prefetch",
                "is 0 with queue_type = \"stream\"".into(),
                &format!("a stream queue's consumers need a prefetch: give 1 to 65535 (unset: {STREAM_PREFETCH})"),
            ));
        }
        Ok(RabbitmqConfig {
            exchange_type: self.exchange_type.unwrap_or_default(),
            queue_type,
            confirms: self.confirms.unwrap_or(false),
            prefetch,
            auto_ack,
            persistent: self.persistent.unwrap_or(false),
        })
    }
}

impl RabbitmqConfig {
    /// Its settings in scenario-file spelling, for a run's one-line description.
    pub fn describe(&self) -> String {
        format!(
            "exchange_type={} queue_type={} confirms={} prefetch={} ack={}{}",
            self.exchange_type.name(),
            self.queue_type.name(),
            self.confirms,
            self.prefetch,
            if self.auto_ack { "auto" } else { "manual" },
            if self.persistent { " persistent" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::ScenarioError;

    fn invalid(field: &str, problem: String, fix: &str) -> ScenarioError {
        ScenarioError::Invalid {
            source_name: "test".into(),
            field: field.into(),
            problem,
            fix: fix.into(),
        }
    }

    fn refused(options: &RabbitmqOptions, broker: Broker) -> String {
        match options.validate(broker, &invalid) {
            Err(ScenarioError::Invalid { field, .. }) => field,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_stream_queue_gets_a_prefetch_and_manual_acknowledgement() {
        let stream = RabbitmqOptions {
            queue_type: Some(QueueType::Stream),
            ..Default::default()
        };
        let config = stream.validate(Broker::Rabbitmq, &invalid).unwrap();
        assert_eq!((config.prefetch, config.auto_ack), (STREAM_PREFETCH, false));
        let auto = RabbitmqOptions {
            ack: Some(AckMode::Auto),
            ..stream.clone()
        };
        assert_eq!(refused(&auto, Broker::Rabbitmq), "pubsub.rabbitmq.ack");
        let unbounded = RabbitmqOptions {
            prefetch: Some(0),
            ..stream
        };
        assert_eq!(
            refused(&unbounded, Broker::Rabbitmq),
            "pubsub.rabbitmq.prefetch"
        );
    }

    #[test]
    fn the_section_is_refused_for_another_broker_and_defaults_are_perf_test_s() {
        let confirms = RabbitmqOptions {
            confirms: Some(true),
            ..Default::default()
        };
        assert_eq!(refused(&confirms, Broker::Nats), "pubsub.rabbitmq");
        let config = RabbitmqOptions::default()
            .validate(Broker::Rabbitmq, &invalid)
            .unwrap();
        assert_eq!(config, RabbitmqConfig::default());
        assert_eq!(
            config.describe(),
            "exchange_type=direct queue_type=classic confirms=false prefetch=0 ack=manual"
        );
    }
}

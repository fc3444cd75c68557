//! Every broker msgbench speaks, one file each behind [`BrokerClient`], and the one place a
//! broker is chosen ([`client`]). Adding a broker: its file here (its wire code under
//! [`super::wire`] when it needs one), a variant of [`Broker`] with its entry in the model's
//! broker table, and one line below.
pub mod jetstream;
pub mod kafka;
pub mod mqtt;
pub mod nats;
pub mod rabbitmq;
pub mod redis;
pub mod redis_streams;

use super::client::BrokerClient;
use msgbench_model::pubsub::Broker;

/// The client of `broker`, for one run.
pub fn client(broker: Broker) -> Box<dyn BrokerClient> {
    match broker {
        Broker::Nats => Box::new(nats::Nats),
        Broker::Redis => Box::new(redis::Redis),
        Broker::Mqtt => Box::new(mqtt::Mqtt { v5: false }),
        Broker::Mqtt5 => Box::new(mqtt::Mqtt { v5: true }),
        Broker::Kafka => Box::<kafka::Kafka>::default(),
        Broker::RedisStreams => Box::new(redis_streams::RedisStreams),
        Broker::Jetstream => Box::new(jetstream::Jetstream::default()),
        Broker::Rabbitmq => Box::new(rabbitmq::Rabbitmq::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_broker_has_a_client_that_speaks_under_its_name() {
        for broker in Broker::ALL {
            assert_eq!(client(broker).name(), broker.name());
        }
    }
}

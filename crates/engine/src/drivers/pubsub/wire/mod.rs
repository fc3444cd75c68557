//! The brokers' protocols, as bytes: encoders and decoders without I/O, tested without a
//! socket. Redis's RESP is shared with the `redis` system ([`crate::net::resp`]).
pub mod amqp;
pub mod jetstream;
pub mod kafka;
pub mod kafka_codec;
pub mod kafka_group;
pub mod mqtt;
pub mod nats;
pub mod redis_streams;

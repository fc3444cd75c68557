//! The data model of msgbench: what to measure ([`scenario`]), how a scenario file expands into
//! runs ([`sweep`]), and what one run produced ([`result`], [`metrics`]).
//!
//! This crate knows nothing about how load is generated. The engine turns a [`scenario::Scenario`]
//! into a [`result::RunResult`]; reports read `RunResult`s and nothing else. Keeping both sides on
//! this crate alone makes "reports never re-run load" a compile-time fact.
#![deny(missing_docs)]

pub mod arrivals;
pub mod broker;
pub mod broker_auth;
pub mod broker_tls;
pub mod check;
pub mod client;
pub mod duration;
pub mod fairness;
pub mod feed;
pub mod files;
pub mod grpc;
pub mod histogram;
pub mod histogram_sum;
pub mod http;
pub mod http_vary;
pub mod kind;
pub mod metrics;
pub mod omb;
pub mod pacing;
pub mod percentile;
pub mod pubsub;
pub mod queue;
pub mod rabbitmq;
pub mod redis;
pub mod result;
pub mod rpc;
pub mod scenario;
pub mod search;
pub mod shard;
pub mod slo;
pub mod sse;
pub mod stage_judge;
pub mod stages;
pub mod stats;
pub mod sut;
pub mod sweep;
pub mod threshold;
pub mod ticks;
pub mod udp;
pub mod url;
pub mod verdict;
pub mod warning;
pub mod when_full;
pub mod wire;
pub mod wire_template;
pub mod ws_rpc;

pub use check::ScenarioError;
pub use result::RunResult;
pub use scenario::Scenario;
pub use sweep::Experiment;

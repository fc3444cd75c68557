//! An OpenMessaging Benchmark (OMB) workload ([`OmbWorkload`], its YAML fields) turned into the
//! equivalent `pubsub` scenario ([`OmbWorkload::to_scenario`]), so a user runs the workloads
//! they already have: `msgbench import omb workloads/1-topic-1-partition-1kb.yaml`. Each
//! setting without a counterpart is named in the scenario's comments, never dropped silently.
use crate::pubsub::{Broker, HEADER_BYTES, MAX_MESSAGE_BYTES};
use serde::Deserialize;

/// The fields of OMB's `Workload` (its YAML keys), with OMB's defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct OmbWorkload {
    /// The workload's name.
    pub name: String,
    /// Topics.
    pub topics: u32,
    /// Partitions per topic.
    pub partitions_per_topic: u32,
    /// How messages get keys (`NO_KEY`, `KEY_ROUND_ROBIN`, `RANDOM_NANO`).
    pub key_distributor: Option<String>,
    /// Bytes per message.
    pub message_size: u32,
    /// Random payloads instead of `payloadFile`.
    pub use_randomized_payloads: bool,
    /// Share of random bytes in a randomized payload.
    pub random_bytes_ratio: f64,
    /// Randomized payloads to draw from.
    pub randomized_payload_pool_size: u32,
    /// The file whose bytes are every message's payload.
    pub payload_file: Option<String>,
    /// Subscriptions per topic.
    pub subscriptions_per_topic: u32,
    /// Producers per topic.
    pub producers_per_topic: u32,
    /// Consumers per subscription.
    pub consumer_per_subscription: u32,
    /// Messages per second over all producers; 0: OMB searches the highest balanced rate.
    pub producer_rate: u64,
    /// Where OMB's rate search starts (with `producerRate: 0`).
    pub producer_start_rate: Option<u64>,
    /// Backlog OMB accepts while searching.
    pub acceptable_backlog: Option<u64>,
    /// Rate steps (OMB's increasing-rate mode).
    pub producer_increment_rate: Option<u64>,
    /// Seconds between rate steps.
    pub producer_increment_seconds: Option<u64>,
    /// Percentage of the messages a subscription receives (filters).
    pub message_rate_received_for_subscription: Option<u32>,
    /// GB to accumulate before consumers start (OMB's backlog drain test).
    #[serde(rename = "consumerBacklogSizeGB")]
    pub consumer_backlog_size_gb: u64,
    /// Producer pause before the drain.
    pub producer_pause_before_drain: Option<u64>,
    /// Producer pause during the drain.
    pub producer_pause_during_drain: Option<u64>,
    /// Measured minutes (after the warm-up).
    pub test_duration_minutes: u64,
    /// Warm-up minutes (newer OMB versions; one minute when absent).
    pub warmup_duration_minutes: Option<u64>,
}

/// Where the scenario points: the broker and its address.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The broker.
    pub broker: Broker,
    /// Its `host:port`.
    pub address: String,
}

/// OMB's warm-up before every test when the workload names none: one minute.
const OMB_WARMUP_MINUTES: u64 = 1;

impl OmbWorkload {
    /// Replaces OMB's `${name:-default}` placeholders (its `PlaceHolderUtils`): the
    /// environment variable `name` when `lookup` finds it, else the default.
    pub fn resolve_placeholders(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let inner = &after[..end];
            let (name, default) = inner.split_once(":-").unwrap_or((inner, ""));
            out.push_str(&lookup(name.trim()).unwrap_or_else(|| default.to_string()));
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// Checks what msgbench cannot run at all; `source` names the file in the error.
    pub fn check(&self, source: &str) -> Result<(), String> {
        let zero = [
            ("topics", self.topics),
            ("subscriptionsPerTopic", self.subscriptions_per_topic),
            ("producersPerTopic", self.producers_per_topic),
            ("consumerPerSubscription", self.consumer_per_subscription),
            ("messageSize", self.message_size),
        ]
        .into_iter()
        .find(|(_, v)| *v == 0);
        if let Some((field, _)) = zero {
            return Err(format!(
                "{source}: `{field}` is missing or 0; an OMB workload gives it (e.g. {field}: 1)"
            ));
        }
        if self.message_size > MAX_MESSAGE_BYTES {
            return Err(format!(
                "{source}: `messageSize` is {}; msgbench publishes at most {MAX_MESSAGE_BYTES} bytes per message",
                self.message_size
            ));
        }
        if self.test_duration_minutes == 0 {
            return Err(format!(
                "{source}: `testDurationMinutes` is missing or 0; give the measured minutes (e.g. testDurationMinutes: 15)"
            ));
        }
        Ok(())
    }

    /// The equivalent scenario, as a commented TOML file for `target`: what maps, and, in
    /// comments, what does not and why.
    pub fn to_scenario(&self, source: &str, target: &Target) -> String {
        let mut notes = self.differences(target);
        let size = self.message_size.max(HEADER_BYTES);
        let partitions = self.partitions_per_topic.max(1);
        let pacing = if self.producer_rate == 0 {
            let start = self.producer_start_rate.unwrap_or(10_000);
            notes.push(format!(
                "producerRate 0 asks OMB to find the highest rate the broker keeps up with: run `msgbench search` on this file with an SLO (e.g. --slo \"p99 < 10ms\"); it starts at {start}/s (producerStartRate)"
            ));
            format!("mode = \"rate\"\nper_sec = {start}")
        } else {
            format!("mode = \"rate\"\nper_sec = {}", self.producer_rate)
        };
        let name = self.scenario_name();
        let consumers = match target.broker {
            Broker::Redis => 1,
            Broker::Kafka => self.consumer_per_subscription.min(partitions),
            _ => self.consumer_per_subscription,
        };
        let mut out = format!(
            "# Imported from the OpenMessaging Benchmark workload {source}{} by\n# `msgbench import omb`: the same topics, producers, subscriptions, consumers, message size,\n# rate and duration, published through {} and measured end to end per subscription.\n",
            if self.name.is_empty() { String::new() } else { format!(" (`{}`)", self.name) },
            broker_title(target.broker)
        );
        if !notes.is_empty() {
            out.push_str("#\n# What OMB's workload asks that this scenario does differently:\n");
            for n in &notes {
                out.push_str(&format!("# - {n}\n"));
            }
        }
        out.push_str(&format!(
            "name = \"{name}\"\nsystem = \"pubsub\"\n\n[run]\n# OMB measures testDurationMinutes after its warm-up (warmupDurationMinutes, or one minute).\nduration = \"{}m\"\nwarmup = \"{}m\"\n\n[pacing]\n# producerRate: messages per second over all producers.\n{pacing}\n\n[pubsub]\nbroker = \"{}\"\naddress = \"{}\"\ntopics = {}\npublishers_per_topic = {}\nsubscriptions_per_topic = {}\nconsumers_per_subscription = {consumers}\nmessage_bytes = {size}\n{partitions}{unsent}",
            self.test_duration_minutes,
            self.warmup_duration_minutes.unwrap_or(OMB_WARMUP_MINUTES),
            target.broker.name(),
            target.address,
            self.topics,
            self.producers_per_topic,
            self.subscriptions_per_topic,
            partitions = if target.broker == Broker::Kafka {
                format!("partitions = {partitions}\n")
            } else {
                String::new()
            },
            unsent = if 2 * size > 1 << 20 {
                format!("# Room for two messages in each publisher's buffer.\nmax_unsent_bytes = {}\n", 2 * size)
            } else {
                String::new()
            },
        ));
        out
    }

    /// What the workload asks that the scenario does differently, a sentence each.
    fn differences(&self, target: &Target) -> Vec<String> {
        let mut notes: Vec<String> = Vec::new();
        if self.message_size < HEADER_BYTES {
            notes.push(format!(
                "messageSize {} is below msgbench's {HEADER_BYTES}-byte header: messages are {HEADER_BYTES} bytes",
                self.message_size
            ));
        }
        if self.partitions_per_topic > 1 && target.broker != Broker::Kafka {
            notes.push(format!(
                "partitionsPerTopic {}: {} has no partitions; every topic is one ordered stream",
                self.partitions_per_topic,
                broker_title(target.broker)
            ));
        }
        if self
            .key_distributor
            .as_deref()
            .is_some_and(|k| k != "NO_KEY")
        {
            notes.push(format!(
                "keyDistributor {}: messages carry no key ({})",
                self.key_distributor.as_deref().unwrap_or_default(),
                if target.broker == Broker::Kafka {
                    "a publisher fills its partitions in turn, one request's batch each, as Kafka's producer does without keys"
                } else {
                    "keys choose partitions, which this broker has not"
                }
            ));
        }
        let partitions = self.partitions_per_topic.max(1);
        if target.broker == Broker::Kafka && self.consumer_per_subscription > partitions {
            notes.push(format!(
                "consumerPerSubscription {} with partitionsPerTopic {partitions}: a Kafka consumer reads whole partitions, so only {partitions} consumers per subscription get any; the scenario has {partitions}",
                self.consumer_per_subscription
            ));
        }
        if self.payload_file.is_some() || self.use_randomized_payloads {
            notes.push("payloadFile / useRandomizedPayloads: every payload is msgbench's 24-byte header (publisher, sequence number, intended publish time) and padding to messageSize".into());
        }
        if self.consumer_per_subscription > 1 && target.broker == Broker::Redis {
            notes.push(format!(
                "consumerPerSubscription {}: Redis Pub/Sub has no shared subscription; use --broker nats (queue groups)",
                self.consumer_per_subscription
            ));
        }
        if self.consumer_backlog_size_gb > 0 {
            notes.push(format!(
                "consumerBacklogSizeGB {}: the backlog-then-drain test is not built; the scenario publishes and consumes at once",
                self.consumer_backlog_size_gb
            ));
        }
        if self.producer_increment_rate.is_some_and(|r| r > 0) {
            notes.push("producerIncrementRate: rate steps are a sweep here: add `[sweep] \"pacing.per_sec\" = [...]`".into());
        }
        if self
            .message_rate_received_for_subscription
            .is_some_and(|p| p != 100)
        {
            notes.push(
                "messageRateReceivedForSubscription: subscriptions are not filtered here".into(),
            );
        }
        notes
    }

    /// `omb-<the workload's name>`, in the letters a scenario name takes.
    fn scenario_name(&self) -> String {
        let name: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        if name.is_empty() {
            "omb".into()
        } else {
            format!("omb-{name}")
        }
    }
}

/// The broker as the imported scenario uses it: its title, and the defaults the scenario
/// keeps where the workload says nothing (MQTT's QoS, Kafka's acks).
fn broker_title(broker: Broker) -> String {
    let defaults = if broker.is_mqtt() {
        " (QoS 0)"
    } else if broker == Broker::Kafka {
        " (acks=1)"
    } else {
        ""
    };
    format!("{}{defaults}", broker.title())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testing::valid;
    use crate::scenario::System;

    fn nats() -> Target {
        Target {
            broker: Broker::Nats,
            address: "127.0.0.1:4222".into(),
        }
    }

    #[test]
    fn placeholders_take_the_environment_or_their_default() {
        let text = "testDurationMinutes: ${ombTestDuration:-15}\nrate: ${R:-5}${X}";
        let r = OmbWorkload::resolve_placeholders(text, |n| (n == "R").then(|| "7".into()));
        assert_eq!(r, "testDurationMinutes: 15\nrate: 7");
        assert_eq!(
            OmbWorkload::resolve_placeholders("a ${b", |_| None),
            "a ${b"
        );
    }

    #[test]
    fn a_workload_becomes_a_scenario_that_validates_with_every_difference_named() {
        let w = OmbWorkload {
            name: "2 topics / 16 partitions / 1Kb".into(),
            topics: 2,
            partitions_per_topic: 16,
            key_distributor: Some("KEY_ROUND_ROBIN".into()),
            message_size: 1024,
            subscriptions_per_topic: 3,
            producers_per_topic: 2,
            consumer_per_subscription: 4,
            producer_rate: 40_000,
            consumer_backlog_size_gb: 1,
            test_duration_minutes: 5,
            warmup_duration_minutes: Some(2),
            payload_file: Some("payload/payload-1Kb.data".into()),
            ..Default::default()
        };
        w.check("w.yaml").unwrap();
        let text = w.to_scenario("w.yaml", &nats());
        for note in [
            "partitionsPerTopic 16",
            "keyDistributor",
            "payloadFile",
            "consumerBacklogSizeGB 1",
        ] {
            assert!(text.contains(note), "{note}: {text}");
        }
        let s = valid(&text);
        assert_eq!(s.name, "omb-2-topics-16-partitions-1Kb");
        assert_eq!(s.run.duration, std::time::Duration::from_secs(300));
        assert_eq!(s.run.warmup, std::time::Duration::from_secs(120));
        let System::Pubsub { pubsub, .. } = s.system else {
            panic!()
        };
        assert_eq!(
            (
                pubsub.topics.len(),
                pubsub.publishers_per_topic,
                pubsub.subscriptions_per_topic
            ),
            (2, 2, 3)
        );
        assert_eq!(
            (pubsub.consumers_per_subscription, pubsub.message_bytes),
            (4, 1024)
        );
        assert_eq!(s.pacing.target_per_sec(), Some(40_000.0));
    }

    #[test]
    fn a_rate_search_workload_says_how_to_search_and_redis_drops_what_it_cannot_share() {
        let w = OmbWorkload {
            name: "max rate".into(),
            topics: 1,
            message_size: 10,
            subscriptions_per_topic: 1,
            producers_per_topic: 1,
            consumer_per_subscription: 2,
            producer_rate: 0,
            test_duration_minutes: 1,
            ..Default::default()
        };
        let redis = Target {
            broker: Broker::Redis,
            address: "127.0.0.1:6379".into(),
        };
        let text = w.to_scenario("w.yaml", &redis);
        assert!(text.contains("msgbench search"), "{text}");
        assert!(text.contains("per_sec = 10000"), "{text}");
        assert!(text.contains("no shared subscription"), "{text}");
        assert!(text.contains("below msgbench's 24-byte header"), "{text}");
        valid(&text);
    }

    #[test]
    fn what_cannot_run_is_refused_with_the_field() {
        let w = OmbWorkload {
            topics: 1,
            message_size: 100,
            subscriptions_per_topic: 1,
            producers_per_topic: 1,
            consumer_per_subscription: 1,
            ..Default::default()
        };
        let e = w.check("w.yaml").unwrap_err();
        assert!(e.contains("testDurationMinutes"), "{e}");
        let e = OmbWorkload {
            topics: 0,
            ..w.clone()
        }
        .check("w.yaml")
        .unwrap_err();
        assert!(e.contains("`topics`"), "{e}");
    }
}

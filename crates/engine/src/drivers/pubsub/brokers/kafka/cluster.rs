//! A Kafka cluster as its metadata describes it: its brokers, and the leader of every partition
//! of the run's topics. A Produce or a Fetch goes to the partition's leader (any other broker
//! refuses it with `NOT_LEADER_OR_FOLLOWER`), as Kafka's own clients do: the scenario's address
//! is only where the metadata is asked (the bootstrap server), and each publisher and consumer
//! holds a connection to every leader of its partitions.
//!
//! The brokers' addresses come from a peer and are untrusted: at most
//! [`kafka::MAX_NODES`] are kept, a leader must be one of them, and each is reached through
//! the opening's one `connect` (its timeouts, its watchdog, the scenario's TLS and login).
use super::connect;
use crate::drivers::pubsub::opening::Opening;
use crate::drivers::pubsub::stream::OpeningStream;
use crate::drivers::pubsub::wire::kafka::{self, Metadata, Node};
use crate::error::EngineError;

/// The run's view of the cluster.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Its brokers, by node id.
    pub nodes: Vec<Node>,
    /// Per topic of the run (in order), the leader of each partition.
    pub leaders: Vec<Vec<i32>>,
}

impl Cluster {
    /// The cluster of a Metadata answer for `topics` (every partition led by one of its
    /// brokers), or what is missing.
    pub fn of(metadata: Metadata, topics: &[String]) -> Result<Cluster, String> {
        let mut leaders = Vec::new();
        for name in topics {
            let Some((_, _, partitions)) = metadata.topics.iter().find(|(n, ..)| n == name) else {
                return Err(format!("its metadata does not name topic {name}"));
            };
            for (i, &(p, leader)) in partitions.iter().enumerate() {
                if p != i as i32 {
                    return Err(format!(
                        "its metadata of topic {name} lacks partition {i} (it names partition {p})"
                    ));
                }
                if !metadata.nodes.iter().any(|n| n.id == leader) {
                    return Err(format!(
                        "its metadata names broker {leader} as the leader of {name} partition {p}, and no such broker"
                    ));
                }
            }
            leaders.push(partitions.iter().map(|&(_, leader)| leader).collect());
        }
        Ok(Cluster {
            nodes: metadata.nodes,
            leaders,
        })
    }

    /// The broker of node `id`.
    pub fn node(&self, id: i32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// `partitions` of topic `topic` (its index in the run) by their leader: each leader's
    /// node id and its partitions, in the order of `partitions`.
    pub fn by_leader(&self, topic: usize, partitions: &[i32]) -> Vec<(i32, Vec<i32>)> {
        let mut split: Vec<(i32, Vec<i32>)> = Vec::new();
        for &p in partitions {
            let leader = self.leaders[topic][p as usize];
            match split.iter_mut().find(|(l, _)| *l == leader) {
                Some((_, ps)) => ps.push(p),
                None => split.push((leader, vec![p])),
            }
        }
        split
    }

    /// A connection to broker `id`, TLS started and logged in.
    pub fn connect(
        &self,
        run: &Opening<'_>,
        id: i32,
        receive_buffer: u32,
    ) -> Result<OpeningStream, EngineError> {
        let node = self
            .node(id)
            .ok_or_else(|| run.error(format!("its cluster has no broker {id}")))?;
        connect(run, Some(node), receive_buffer)
    }

    /// Which broker leads each partition, in words, for the result (`t.0: 0 → 1
    /// (127.0.0.1:9092), 1 → 2 (127.0.0.1:9093)`): one line per topic.
    pub fn describe(&self, topics: &[String]) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, leaders) in topics.iter().zip(&self.leaders) {
            let each: Vec<String> = leaders
                .iter()
                .enumerate()
                .map(|(p, &id)| match self.node(id) {
                    Some(n) => format!("{p} → broker {id} ({}:{})", n.host, n.port),
                    None => format!("{p} → broker {id}"),
                })
                .collect();
            lines.push(format!(
                "kafka: {name}'s partitions were led by {}",
                each.join(", ")
            ));
        }
        lines
    }
}

/// The cluster as broker `stream` describes it for the run's topics.
pub fn discover(run: &Opening<'_>, stream: &mut OpeningStream) -> Result<Cluster, EngineError> {
    let topics = &run.config.topics;
    let metadata = kafka::metadata(stream, topics).map_err(|e| run.error(e))?;
    Cluster::of(metadata, topics).map_err(|e| run.error(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: i32) -> Node {
        Node {
            id,
            host: "127.0.0.1".into(),
            port: 9090 + id as u16,
        }
    }

    #[test]
    fn partitions_split_by_their_leader_and_a_leader_that_is_no_broker_is_refused() {
        let topics = vec!["t.0".to_string()];
        let metadata = Metadata {
            nodes: vec![node(1), node(2)],
            topics: vec![("t.0".into(), 0, vec![(0, 1), (1, 2), (2, 1)])],
        };
        let cluster = Cluster::of(metadata.clone(), &topics).unwrap();
        assert_eq!(
            cluster.by_leader(0, &[0, 1, 2]),
            vec![(1, vec![0, 2]), (2, vec![1])]
        );
        assert_eq!(cluster.by_leader(0, &[1]), vec![(2, vec![1])]);
        let said = cluster.describe(&topics).join("\n");
        assert!(
            said.contains("0 → broker 1 (127.0.0.1:9091), 1 → broker 2"),
            "{said}"
        );
        let mut lost = metadata;
        lost.topics[0].2[1].1 = 7;
        let e = Cluster::of(lost, &topics).unwrap_err();
        assert!(
            e.contains("broker 7 as the leader of t.0 partition 1"),
            "{e}"
        );
    }
}

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
use crate::drivers::pubsub::client::{Patience, Reroute};
use crate::drivers::pubsub::opening::Opening;
use crate::drivers::pubsub::stream::{OpeningStream, TlsOpening};
use crate::drivers::pubsub::wire::kafka::{self, Metadata, Node};
use crate::drivers::pubsub::wire::kafka_group;
use crate::drivers::tls::TlsConnector;
use crate::error::EngineError;
use msgbench_model::pubsub::PubsubConfig;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

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

    /// A connection to broker `id`, TLS started and logged in. A cluster of one broker is
    /// reached at the scenario's address, whatever it advertises (a broker behind NAT or in
    /// a container often advertises an address only its own network reaches).
    pub fn connect(
        &self,
        run: &Opening<'_>,
        id: i32,
        receive_buffer: u32,
    ) -> Result<OpeningStream, EngineError> {
        if self.nodes.len() <= 1 {
            return connect(run, None, receive_buffer);
        }
        let node = self
            .node(id)
            .ok_or_else(|| run.error(format!("its cluster has no broker {id}")))?;
        connect(run, Some(node), receive_buffer)
    }

    /// Which broker leads each partition, in words, for the result (`kafka: t.0's partitions
    /// were led by 0 → broker 1 (127.0.0.1:9092), …`, `when` being "were"): a line per topic.
    pub fn describe(&self, topics: &[String], when: &str) -> Vec<String> {
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
                "kafka: {name}'s partitions {when} led by {}",
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

/// Longest each step of following a moved leader may take (connect, TLS, login, one
/// request): the thread that follows waits meanwhile.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest following a moved partition may take before its client gives up (a broker that
/// shuts down hands its partitions over in milliseconds; one that dies is named the leader
/// until the controller fences it, after `broker.session.timeout.ms`, 9 s by default).
pub const LEADERLESS_FOR: Duration = Duration::from_secs(12);
/// Brokers asked at most for one answer (the bootstrap server and the first known ones).
const MAX_ASKED: usize = 8;

/// What the run's threads need to follow a partition whose leader moved: the scenario's
/// settings (its TLS and login), the bootstrap address, and the brokers known so far.
pub struct Follow {
    config: PubsubConfig,
    bootstrap: SocketAddr,
    tls: Option<TlsOpening>,
    nodes: Mutex<Vec<Node>>,
}

impl Follow {
    /// For the run of `run`, whose cluster the opening found to be `cluster`.
    pub fn new(run: &Opening<'_>, cluster: &Cluster) -> Result<Follow, EngineError> {
        let tls = match &run.config.tls {
            Some(tls) => {
                let connector = TlsConnector::for_broker(tls).map_err(|e| run.error(e))?;
                Some(TlsOpening::new(connector, false))
            }
            None => None,
        };
        Ok(Follow {
            config: run.config.clone(),
            bootstrap: run.address,
            tls,
            nodes: Mutex::new(cluster.nodes.clone()),
        })
    }

    /// A connection to `host`:`port` (`address`), TLS started, logged in, each step within
    /// [`FOLLOW_TIMEOUT`].
    fn open(&self, address: SocketAddr, host: &str) -> Result<OpeningStream, String> {
        let at = |e: String| format!("{address}: {e}");
        let tcp = std::net::TcpStream::connect_timeout(&address, FOLLOW_TIMEOUT)
            .map_err(|e| at(format!("connecting failed ({e})")))?;
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(FOLLOW_TIMEOUT))
            .and_then(|()| tcp.set_write_timeout(Some(FOLLOW_TIMEOUT)))
            .map_err(|e| at(e.to_string()))?;
        let mut stream = match &self.tls {
            Some(tls) => tls
                .start_named(OpeningStream::Plain(tcp), host)
                .map_err(|e| at(e.to_string()))?,
            None => OpeningStream::Plain(tcp),
        };
        if let Some(credentials) = &self.config.auth {
            super::sasl::log_in(&mut stream, credentials).map_err(at)?;
        }
        Ok(stream)
    }

    /// A connection to broker `id`, as last named by the cluster.
    pub fn open_node(&self, id: i32) -> Result<OpeningStream, String> {
        let node = self
            .lock()
            .iter()
            .find(|n| n.id == id)
            .cloned()
            .ok_or_else(|| format!("the cluster names no broker {id}"))?;
        let address = (node.host.as_str(), node.port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                format!(
                    "broker {id} at {}:{} does not resolve",
                    node.host, node.port
                )
            })?;
        self.open(address, &node.host)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `request`'s answer from one of the cluster's brokers: the bootstrap server first, then
    /// each broker known (the bootstrap server may be the one that went away), at most
    /// [`MAX_ASKED`] of them, none once `patience` is over.
    fn ask<T>(
        &self,
        what: &str,
        patience: &Patience<'_>,
        request: impl Fn(&mut OpeningStream) -> Result<T, String>,
    ) -> Result<T, String> {
        let known: Vec<i32> = self.lock().iter().map(|n| n.id).collect();
        let mut why = String::from("none asked in time");
        for k in 0..=known.len().min(MAX_ASKED - 1) {
            if patience.over() {
                break;
            }
            let opened = match k {
                // The bootstrap server's certificate carries the name the scenario's TLS gives.
                0 => {
                    let name = self.config.tls.as_ref().map(|t| t.server_name.as_str());
                    self.open(self.bootstrap, name.unwrap_or_default())
                }
                k => self.open_node(known[k - 1]),
            };
            match opened.and_then(|mut stream| request(&mut stream)) {
                Ok(answer) => return Ok(answer),
                Err(e) => why = e,
            }
        }
        Err(format!(
            "no broker of the cluster answered {what} (the last: {why})"
        ))
    }

    /// The cluster as one of its brokers describes it now.
    pub fn cluster(&self, patience: &Patience<'_>) -> Result<Cluster, String> {
        let cluster = self.ask("its metadata", patience, |stream| {
            let metadata = kafka::metadata(stream, &self.config.topics)?;
            Cluster::of(metadata, &self.config.topics)
        })?;
        *self.lock() = cluster.nodes.clone();
        Ok(cluster)
    }

    /// The node id of `group`'s coordinator now.
    pub fn coordinator(&self, group: &str, patience: &Patience<'_>) -> Result<i32, String> {
        self.ask("which broker coordinates the group", patience, |stream| {
            let mut out = Vec::new();
            kafka_group::find_coordinator_request(group, 1, &mut out);
            let body = kafka::call(stream, &out, 1)?;
            match kafka_group::find_coordinator_answer(&body)? {
                (0, node) => Ok(node),
                (code, _) => Err(format!("FindCoordinator: {}", kafka::error_name(code))),
            }
        })
    }

    /// The leader of each partition of topic `topic` now, once the cluster answers (asked
    /// again every 100 ms until `patience` is over).
    pub fn leaders_of(&self, topic: &str, patience: &Patience<'_>) -> Result<Vec<i32>, String> {
        let t = self
            .config
            .topics
            .iter()
            .position(|name| name == topic)
            .ok_or_else(|| format!("topic {topic} is not the run's"))?;
        loop {
            match self.cluster(patience) {
                Ok(cluster) => return Ok(cluster.leaders[t].clone()),
                Err(e) if patience.over() => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// A connection to the leader of `topic`'s `partition` now: asked and tried again every
    /// 200 ms until `patience` is over (a broker that died is named the leader until the
    /// controller fences it).
    pub fn reach(
        &self,
        topic: &str,
        partition: i32,
        patience: &Patience<'_>,
    ) -> Result<OpeningStream, String> {
        loop {
            let leaders = self.leaders_of(topic, patience)?;
            let node = *(leaders.get(partition as usize)).ok_or_else(|| {
                format!("its cluster no longer names {topic} partition {partition}")
            })?;
            match self.open_node(node) {
                Ok(stream) => return Ok(stream),
                Err(e) if patience.over() => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}

impl Reroute for Follow {
    fn leaders(&self, topic: &str, patience: &Patience<'_>) -> Result<Vec<i32>, String> {
        self.leaders_of(topic, patience)
    }

    fn connect(&self, node: i32) -> Result<OpeningStream, String> {
        self.open_node(node)
    }

    fn patience(&self) -> Duration {
        LEADERLESS_FOR
    }
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
        let said = cluster.describe(&topics, "were").join("\n");
        assert!(
            said.contains("0 → broker 1 (127.0.0.1:9091), 1 → broker 2"),
            "{said}"
        );
        let mut lost = metadata;
        lost.topics[0].2[1].1 = 7;
        let e = Cluster::of(lost.clone(), &topics).unwrap_err();
        assert!(
            e.contains("broker 7 as the leader of t.0 partition 1"),
            "{e}"
        );
        // A broker's answer is untrusted: a gap in the partitions, a topic not named.
        let mut gap = lost.clone();
        gap.topics[0].2 = vec![(0, 1), (2, 1)];
        let e = Cluster::of(gap, &topics).unwrap_err();
        assert!(e.contains("lacks partition 1"), "{e}");
        let e = Cluster::of(lost, &["t.9".to_string()]).unwrap_err();
        assert!(e.contains("does not name topic t.9"), "{e}");
    }
}

//! A Kafka publisher following a partition whose leader moved (a broker shut down, a leader
//! elected elsewhere): the broker refuses the partition's Produce requests with
//! `NOT_LEADER_OR_FOLLOWER` (or a fenced epoch), or its connection ends. As Kafka's own
//! producer does, the publisher asks the cluster where each of its partitions is led now, fills
//! each from the broker that leads it (a connection to a broker it had none to is opened), and
//! sends the requests refused or left unanswered there again — a refused request was not
//! written, so it is in the log once; one unanswered when its connection ended may have been,
//! and then its messages come twice (the subscriptions count them as duplicates).
//!
//! The following blocks the publisher's thread (the cluster's metadata, maybe a connection,
//! each step bounded by a second); what falls due meanwhile waits and is counted late.
use super::{Leg, Publisher, Request};
use crate::drivers::pubsub::client::Patience;
use mio::{Interest, Registry, Token};
use msgbench_model::pubsub::PubsubConfig;
use std::time::Instant;

/// Times one request is sent again before its publisher gives up (a partition whose leader
/// keeps moving, or a cluster whose metadata keeps naming a broker that refuses it).
const MAX_RESENDS: u32 = 10;

impl Publisher {
    /// Follows its partitions to their leaders now, and sends its refused requests there.
    /// New connections are registered with `registry`, each token its index in `tokens`
    /// (this publisher is `me`).
    pub(super) fn follow(
        &mut self,
        registry: &Registry,
        tokens: &mut Vec<(usize, usize)>,
        (me, config): (usize, &PubsubConfig),
        stop: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        self.to_follow = false;
        let reroute = self.reroute.clone().expect("a publisher that follows");
        // A request refused again at once (metadata behind the controller's): a moment first.
        if self
            .legs
            .iter()
            .any(|l| l.refused.iter().any(|(r, _)| r.resent > 0))
        {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let mut refused: Vec<(Request, Vec<u64>)> = Vec::new();
        let mut mine: Vec<(i32, Option<i32>)> = Vec::new();
        for leg in &mut self.legs {
            refused.append(&mut leg.refused);
            let held = leg.kafka.as_ref().map_or(&[][..], |k| k.partitions());
            mine.extend(held.iter().map(|&p| (p, leg.node.filter(|_| !leg.gone))));
        }
        let mut partitions: Vec<i32> = mine.iter().map(|&(p, _)| p).collect();
        partitions.sort_unstable();
        partitions.dedup();
        // Until every leader is reached: a broker that died is named the leader until the
        // controller fences it.
        let patience = Patience {
            deadline: Instant::now() + reroute.patience(),
            stop,
        };
        let leaders = loop {
            let leaders = reroute.leaders(&self.topic, &patience)?;
            match self.open_missing(&leaders, &partitions, (registry, tokens, me), config) {
                Ok(()) => break leaders,
                Err(why) if patience.over() => return Err(why),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
            }
        };
        let leader_of = |p: i32| leaders.get(p as usize).copied().unwrap_or(-1);
        // A partition held by a connection to a broker that no longer leads it: followed.
        self.followed.0 += mine
            .iter()
            .filter(|&&(p, n)| n != Some(leader_of(p)))
            .count() as u64;
        // An idempotent producer's partitions keep their sequence numbers where they go.
        let sequences: Vec<(i32, i32)> = (self.legs.iter())
            .filter_map(|l| l.kafka.as_ref())
            .flat_map(|k| k.sequences().iter().copied())
            .collect();
        for leg in self.legs.iter_mut() {
            // A connection given up keeps none (they are counted once, followed).
            let led: Vec<i32> = (partitions.iter().copied())
                .filter(|&p| !leg.gone && Some(leader_of(p)) == leg.node)
                .collect();
            if let Some(k) = leg.kafka.as_mut() {
                k.set_partitions(led, &sequences);
            }
        }
        self.resend(refused, &leaders)?;
        self.active = (0..self.legs.len())
            .filter(|&l| {
                let leg = &self.legs[l];
                !leg.gone
                    && leg
                        .kafka
                        .as_ref()
                        .is_some_and(|k| !k.partitions().is_empty())
            })
            .collect();
        Ok(())
    }

    /// Sends each of the `refused` requests again, on the connection to its partition's
    /// leader (`leaders` naming them).
    fn resend(&mut self, refused: Vec<(Request, Vec<u64>)>, leaders: &[i32]) -> Result<(), String> {
        for (mut request, times) in refused {
            let p = request.partition;
            if request.resent >= MAX_RESENDS {
                return Err(format!(
                    "a request to {} partition {p} was refused {MAX_RESENDS} times by the broker its cluster named as the leader",
                    self.topic
                ));
            }
            request.resent += 1;
            let node = leaders.get(p as usize).copied();
            let leg = (self.legs.iter_mut())
                .find(|l| !l.gone && l.node.is_some() && l.node == node)
                .ok_or_else(|| {
                    format!(
                        "no connection to the leader of {} partition {p}",
                        self.topic
                    )
                })?;
            leg.put_request(request, times);
            self.followed.1 += 1;
        }
        Ok(())
    }

    /// A connection to the leader of each of `partitions`, `leaders` naming them: those it
    /// has not, opened.
    fn open_missing(
        &mut self,
        leaders: &[i32],
        partitions: &[i32],
        poll: (&Registry, &mut Vec<(usize, usize)>, usize),
        config: &PubsubConfig,
    ) -> Result<(), String> {
        let (registry, tokens, me) = poll;
        for &p in partitions {
            let node = *leaders.get(p as usize).ok_or_else(|| {
                format!("its cluster no longer names {} partition {p}", self.topic)
            })?;
            if !self.legs.iter().any(|l| !l.gone && l.node == Some(node)) {
                self.open_leg(node, (registry, &mut *tokens, me), config)?;
            }
        }
        Ok(())
    }

    /// Opens a connection to broker `node`, registered with the thread's poll.
    fn open_leg(
        &mut self,
        node: i32,
        (registry, tokens, me): (&Registry, &mut Vec<(usize, usize)>, usize),
        config: &PubsubConfig,
    ) -> Result<(), String> {
        let reroute = self.reroute.clone().expect("a publisher that follows");
        let opened = reroute.connect(node)?;
        let (stream, held) = opened
            .into_running()
            .map_err(|e| format!("broker {node}: {e}"))?;
        let producer = (self.legs.iter().find_map(|l| l.kafka.as_ref()))
            .expect("a Kafka publisher")
            .for_partitions(Vec::new());
        let capacity = config.max_unsent_bytes as usize + config.message_bytes as usize + 2;
        let mut leg = Leg::new(stream, held, Some((node, producer)), config, capacity);
        registry
            .register(
                &mut leg.stream,
                Token(tokens.len()),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| format!("broker {node}: {e}"))?;
        tokens.push((me, self.legs.len()));
        self.legs.push(leg);
        Ok(())
    }
}

impl Leg {
    /// Its broker went away (or its connection broke, or it no longer leads a partition of an
    /// idempotent producer): every request it had not written whole is put aside, to go where
    /// its partition went. One written whole but not answered may be in the broker's log: an
    /// idempotent producer sends it again (the broker writes it once), another does not (a
    /// copy would be a duplicate): its messages come, or stay undelivered. Nothing more is
    /// written or read on it.
    pub(super) fn give_up(&mut self) {
        self.seal();
        let idempotent = self.kafka.as_ref().is_some_and(|k| k.is_idempotent());
        let wrote_to = if idempotent {
            0
        } else {
            self.base + self.written as u64
        };
        if let Some(queue) = self.unanswered.as_mut() {
            for request in self.requests.drain(..) {
                let n = (request.records as usize).min(queue.len());
                let times: Vec<u64> = queue.drain(..n).collect();
                if request.end > wrote_to {
                    self.refused.push((request, times));
                }
            }
        }
        self.out.clear();
        (self.written, self.sealed) = (0, 0);
        self.gone = true;
        let _ = self.stream.tcp().shutdown(std::net::Shutdown::Both);
    }

    /// Sends `request` (its records due at `times`) on this connection, after what it holds.
    fn put_request(&mut self, mut request: Request, times: Vec<u64>) {
        self.seal();
        self.out.extend_from_slice(&request.bytes);
        self.sealed = self.out.len();
        request.end = self.base + self.out.len() as u64;
        self.requests.push_back(request);
        if let Some(queue) = self.unanswered.as_mut() {
            queue.extend(times);
        }
    }
}

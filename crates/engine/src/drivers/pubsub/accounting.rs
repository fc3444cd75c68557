//! Each subscription's accounting from both ends, at the end of the run: what the publishers
//! of its topic sent in the measured window against what reached it. Per subscription, over
//! the measured window (messages by intended publish time): `attempted = sent` (a publisher
//! blocks, it never skips), `sent = delivered + dropped + failed + in flight`, where *dropped*
//! are the messages missing before the last one that arrived from the same publisher (the
//! broker lost them), *failed* what never came to a subscription whose connection ended, and
//! *in flight* what had not come by the end of the drain.
use super::progress::PublisherStats;
use super::subscriber::SubscriptionState;
use crate::drivers::streams::stream_stats::closed_when;
use crate::net::tick::Schedule;
use msgbench_model::histogram::{encode, Percentiles};
use msgbench_model::pubsub::MAX_CONNECTIONS;
use msgbench_model::result::{Counters, SequenceErrors, StreamClient, StreamInterval};
use msgbench_model::result::{
    PublisherFigures, PubsubShardFigures, SubscriptionFigures, MAX_COUNT,
};

/// A subscription's accounting against what the publishers of its topic sent (see the module
/// documentation).
pub fn account(
    delivered: &[u64],
    highest: &[Option<u64>],
    publishers: &[PublisherStats],
    closed: bool,
) -> Counters {
    let mut c = Counters::default();
    for ((p, &got), &top) in publishers.iter().zip(delivered).zip(highest) {
        let sent = p.measured;
        let got = got.min(sent);
        let lost = match (top, p.first_measured) {
            (Some(top), Some(first)) => top
                .saturating_add(1)
                .saturating_sub(first)
                .saturating_sub(got),
            _ => 0,
        }
        .min(sent - got);
        c.sent += sent;
        c.delivered += got;
        c.dropped += lost;
        let rest = sent - got - lost;
        if closed {
            c.failed += rest;
        } else {
            c.in_flight_end += rest;
        }
    }
    c.attempted = c.sent;
    c
}

/// The result record of one subscription.
pub fn stream_of(
    s: &SubscriptionState,
    publishers: &[PublisherStats],
    classes: &[String],
    shared: bool,
    broker: &str,
    window: &Schedule,
) -> StreamClient {
    let counters = account(
        &s.delivered,
        &s.loss_horizon(),
        publishers,
        s.stats.closed.is_some(),
    );
    let seen = s.sequence();
    let mut faults = s.stats.faults.clone();
    faults.protocol_errors += s.foreign;
    // Gaps of an at-most-once broker are its drops (in `dropped`); a shared subscription's
    // consumers read in parallel, so its order across them means nothing.
    let sequence = SequenceErrors {
        gaps: 0,
        duplicates: seen.duplicates,
        reordered: if shared { 0 } else { seen.reordered },
    };
    // Its seconds as it received them; what its publishers generated is filled in after.
    let mut intervals: Vec<StreamInterval> = (s.stats.per_second.iter().enumerate())
        .map(|(k, mine)| StreamInterval {
            start_s: k as f64,
            length_s: 1.0,
            delivered: mine.delivered,
            latency_p50_ns: mine.p50_ns,
            latency_p99_ns: mine.p99_ns,
            latency_max_ns: mine.max_ns,
            ..Default::default()
        })
        .collect();
    regenerate(&mut intervals, publishers);
    StreamClient {
        name: s.stats.name.clone(),
        group: classes[s.stats.group].clone(),
        kind: broker.into(),
        source: None,
        server: None,
        counters,
        sequence,
        gaps_seen: seen.gaps,
        duplicates_seen: seen.duplicates,
        reordered_seen: seen.reordered,
        latency: Percentiles::of(&s.stats.total),
        latency_histogram: encode(&s.stats.total),
        faults,
        closed: s
            .stats
            .closed
            .as_ref()
            .map(|(why, at)| closed_when(why, *at, window)),
        reconnects: u64::from(s.stats.reconnects),
        page_clock: None,
        behind_ns: None,
        intervals,
    }
}

/// A shard's figures for `merge`: what its publishers sent, what its subscriptions got from
/// every publisher of their topics (this shard's and the others').
pub fn shard_figures(
    config: &msgbench_model::pubsub::PubsubConfig,
    states: &[SubscriptionState],
    stats: &[PublisherStats],
) -> PubsubShardFigures {
    let publishers = config
        .local_publishers()
        .into_iter()
        .map(|g| {
            let p = &stats[g as usize];
            PublisherFigures {
                index: g,
                measured: p.measured,
                first_measured: p.first_measured,
                per_second: p.per_second.clone(),
            }
        })
        .collect();
    let subscriptions = states
        .iter()
        .map(|s| SubscriptionFigures {
            name: s.stats.name.clone(),
            topic: s.topic,
            closed: s.stats.closed.is_some(),
            delivered: s.delivered.clone(),
            loss_horizon: s.loss_horizon(),
        })
        .collect();
    PubsubShardFigures {
        publishers_total: stats.len() as u32,
        publishers_per_topic: config.publishers_per_topic,
        publishers,
        subscriptions,
    }
}

/// A merged publish/subscribe run's subscriptions accounted again, exactly: each one (read in
/// one shard) against what every shard's publishers of its topic sent. `streams` are the
/// shards' stream records, whose counters and seconds' `generated` knew their own shard's
/// publishers only. Shard figures that do not fit together (a publisher in two shards or in
/// none, a subscription without its record) are refused with why.
pub fn merge_shards(
    figures: &[&PubsubShardFigures],
    streams: &mut Vec<StreamClient>,
) -> Result<(), String> {
    fold_streams(streams)?;
    let (total, per_topic) = check_figures(figures)?;
    let mut publishers: Vec<Option<PublisherStats>> = vec![None; total as usize];
    for p in figures.iter().flat_map(|f| &f.publishers) {
        let slot = publishers.get_mut(p.index as usize).ok_or(format!(
            "publisher {} is not one of the run's {total}",
            p.index
        ))?;
        if slot.is_some() {
            return Err(format!("publisher {} is in two shards' results", p.index));
        }
        *slot = Some(PublisherStats {
            first_measured: p.first_measured,
            measured: p.measured,
            per_second: p.per_second.clone(),
            ..Default::default()
        });
    }
    let publishers: Vec<PublisherStats> = (publishers.into_iter().enumerate())
        .map(|(i, p)| p.ok_or(format!("publisher {i} is in no shard's result")))
        .collect::<Result<_, _>>()?;
    let folded = fold_figures(figures)?;
    if let Some(s) = streams
        .iter()
        .find(|s| !folded.iter().any(|f| f.name == s.name))
    {
        return Err(format!("subscription {} has no figures", s.name));
    }
    for sub in &folded {
        let per = per_topic as usize;
        let first = (sub.topic as usize).saturating_mul(per);
        let pubs = publishers
            .get(first..first.saturating_add(per))
            .filter(|_| sub.delivered.len() == per && sub.loss_horizon.len() == per)
            .filter(|_| sub.delivered.iter().all(|&d| d <= MAX_COUNT))
            .ok_or(format!(
                "subscription {}'s figures do not fit the run's {total} publishers",
                sub.name
            ))?;
        let stream = streams
            .iter_mut()
            .find(|s| s.name == sub.name)
            .ok_or(format!("subscription {} has no stream record", sub.name))?;
        stream.counters = account(&sub.delivered, &sub.loss_horizon, pubs, sub.closed);
        regenerate(&mut stream.intervals, pubs);
    }
    Ok(())
}

/// The shards' figures are one run's and within bounds (they come from other hosts): one
/// count of publishers, at most [`MAX_CONNECTIONS`], a whole number of topics; each
/// publisher's counts at most [`MAX_COUNT`], its seconds at most [`MAX_SECONDS`] and adding up
/// to what it sent. The run's publishers and publishers per topic.
fn check_figures(figures: &[&PubsubShardFigures]) -> Result<(u32, u32), String> {
    let first = figures.first().ok_or("no shard's figures")?;
    let (total, per_topic) = (first.publishers_total, first.publishers_per_topic);
    if figures
        .iter()
        .any(|f| (f.publishers_total, f.publishers_per_topic) != (total, per_topic))
    {
        return Err("the shards disagree on how many publishers the run has".into());
    }
    if total == 0 || per_topic == 0 || total % per_topic != 0 || u64::from(total) > MAX_CONNECTIONS
    {
        return Err(format!(
            "{total} publishers, {per_topic} a topic, is not a run msgbench makes"
        ));
    }
    for p in figures.iter().flat_map(|f| &f.publishers) {
        let sum = p.per_second.iter().fold(0u64, |a, &n| a.saturating_add(n));
        if p.measured > MAX_COUNT || p.per_second.len() > MAX_SECONDS || sum != p.measured {
            return Err(format!(
                "publisher {}'s counts do not add up ({} sent, {sum} over {} seconds)",
                p.index,
                p.measured,
                p.per_second.len()
            ));
        }
    }
    Ok((total, per_topic))
}

/// Most seconds a publisher's figures may count (a month).
pub const MAX_SECONDS: usize = 31 * 86_400;

/// A shared subscription's figures from every shard that held some of its consumers, as
/// one: per publisher, what they got together, and the lowest of their loss horizons (below
/// it nothing is still on its way to any of them; `None` while one got none).
fn fold_figures(figures: &[&PubsubShardFigures]) -> Result<Vec<SubscriptionFigures>, String> {
    let mut folded: Vec<SubscriptionFigures> = Vec::new();
    for sub in figures.iter().flat_map(|f| &f.subscriptions) {
        let Some(into) = folded.iter_mut().find(|f| f.name == sub.name) else {
            folded.push(sub.clone());
            continue;
        };
        let n = into.delivered.len();
        if into.topic != sub.topic || sub.delivered.len() != n || sub.loss_horizon.len() != n {
            return Err(format!(
                "subscription {}'s shards disagree on its topic",
                sub.name
            ));
        }
        for (a, b) in into.delivered.iter_mut().zip(&sub.delivered) {
            *a = a.saturating_add(*b);
        }
        for (a, b) in into.loss_horizon.iter_mut().zip(&sub.loss_horizon) {
            *a = a.zip(*b).map(|(x, y)| x.min(y));
        }
        into.closed &= sub.closed;
    }
    Ok(folded)
}

/// The records of a shared subscription whose consumers were in several shards, as one: its
/// latencies' histograms added, its faults and sequence errors summed, its seconds' deliveries
/// summed (each second's percentiles the highest of the shards': they are not kept as
/// histograms per second). Counters are accounted again afterwards.
fn fold_streams(streams: &mut Vec<StreamClient>) -> Result<(), String> {
    let mut folded: Vec<StreamClient> = Vec::with_capacity(streams.len());
    for s in streams.drain(..) {
        match folded.iter_mut().find(|f| f.name == s.name) {
            Some(into) => fold_stream(into, s)?,
            None => folded.push(s),
        }
    }
    *streams = folded;
    Ok(())
}

fn fold_stream(into: &mut StreamClient, s: StreamClient) -> Result<(), String> {
    let mut h = msgbench_model::histogram::decode(&into.latency_histogram)?;
    h.add(msgbench_model::histogram::decode(&s.latency_histogram)?)
        .map_err(|e| format!("subscription {}: its histograms do not add: {e:?}", s.name))?;
    (into.latency, into.latency_histogram) = (Percentiles::of(&h), encode(&h));
    into.sequence += s.sequence;
    into.gaps_seen += s.gaps_seen;
    into.duplicates_seen += s.duplicates_seen;
    into.reordered_seen += s.reordered_seen;
    into.faults += s.faults;
    into.reconnects += s.reconnects;
    if s.closed.is_none() {
        into.closed = None;
    }
    for (k, i) in s.intervals.into_iter().enumerate() {
        match into.intervals.get_mut(k) {
            Some(a) => {
                a.delivered += i.delivered;
                a.latency_p50_ns = a.latency_p50_ns.max(i.latency_p50_ns);
                a.latency_p99_ns = a.latency_p99_ns.max(i.latency_p99_ns);
                a.latency_max_ns = a.latency_max_ns.max(i.latency_max_ns);
            }
            None => into.intervals.push(i),
        }
    }
    Ok(())
}

/// A stream's seconds (as many as its publishers generated in, at least) with what every
/// publisher of its topic generated, and the backlog that follows from it.
fn regenerate(intervals: &mut Vec<StreamInterval>, publishers: &[PublisherStats]) {
    let seconds = publishers
        .iter()
        .map(|p| p.per_second.len())
        .max()
        .unwrap_or(0);
    while intervals.len() < seconds {
        let k = intervals.len();
        intervals.push(StreamInterval {
            start_s: k as f64,
            length_s: 1.0,
            ..Default::default()
        });
    }
    let mut backlog = 0i64;
    for (k, i) in intervals.iter_mut().enumerate() {
        // Checked against MAX_COUNT before: no sum here can wrap.
        let generated: u64 = publishers
            .iter()
            .map(|p| p.per_second.get(k).copied().unwrap_or(0))
            .sum();
        (i.generated, i.written) = (generated, generated);
        let change = generated.min(MAX_COUNT) as i64 - i.delivered.min(MAX_COUNT) as i64;
        backlog = backlog.saturating_add(change);
        i.backlog = backlog;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publisher(first: u64, measured: u64) -> PublisherStats {
        PublisherStats {
            sent_all: first + measured,
            first_measured: Some(first),
            measured,
            ..Default::default()
        }
    }

    #[test]
    fn missing_messages_before_the_last_that_came_are_lost_the_rest_in_flight_or_failed() {
        let pubs = [publisher(10, 100), publisher(0, 50)];
        // Publisher 0: 90 of 100 came, the last at seq 104 (so 95 were due by then: 5 lost,
        // 5 after it still on their way); publisher 1: all 50.
        let c = account(&[90, 50], &[Some(104), Some(49)], &pubs, false);
        assert_eq!(
            (
                c.attempted,
                c.sent,
                c.delivered,
                c.dropped,
                c.in_flight_end,
                c.failed
            ),
            (150, 150, 140, 5, 5, 0)
        );
        c.check().unwrap();
        // The same when the subscription's connection ended: the rest failed.
        let c = account(&[90, 50], &[Some(104), Some(49)], &pubs, true);
        assert_eq!((c.dropped, c.failed, c.in_flight_end), (5, 5, 0));
        c.check().unwrap();
        // Nothing measured came at all.
        let c = account(&[0, 0], &[None, None], &pubs, false);
        assert_eq!((c.delivered, c.dropped, c.in_flight_end), (0, 0, 150));
        c.check().unwrap();
    }

    fn figures(
        publishers: Vec<PublisherFigures>,
        subs: Vec<SubscriptionFigures>,
    ) -> PubsubShardFigures {
        PubsubShardFigures {
            publishers_total: 2,
            publishers_per_topic: 2,
            publishers,
            subscriptions: subs,
        }
    }

    fn stream(name: &str) -> StreamClient {
        StreamClient {
            name: name.into(),
            group: "subscriber".into(),
            kind: "nats".into(),
            source: None,
            server: None,
            counters: Counters::default(),
            sequence: SequenceErrors::default(),
            gaps_seen: 0,
            duplicates_seen: 0,
            reordered_seen: 0,
            latency: Percentiles::default(),
            latency_histogram: encode(&msgbench_model::histogram::new_latency_histogram()),
            faults: Default::default(),
            closed: None,
            reconnects: 0,
            page_clock: None,
            behind_ns: None,
            intervals: vec![StreamInterval {
                delivered: 150,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn a_merge_accounts_each_subscription_against_every_shard_s_publishers() {
        // Shard 0: publisher 0 (100 sent from seq 10), subscription t0-s0; shard 1: publisher
        // 1 (50 sent), subscription t0-s1. t0-s1 got 90 of publisher 0's, the last at seq 104:
        // 5 lost before it (judged against shard 0's count), 5 on their way.
        let p = |index, first, measured| PublisherFigures {
            index,
            measured,
            first_measured: Some(first),
            per_second: vec![measured],
        };
        let sub = |name: &str, delivered: Vec<u64>, top: Vec<Option<u64>>| SubscriptionFigures {
            name: name.into(),
            topic: 0,
            closed: false,
            delivered,
            loss_horizon: top,
        };
        let shard0 = figures(
            vec![p(0, 10, 100)],
            vec![sub("t0-s0", vec![100, 50], vec![Some(109), Some(49)])],
        );
        let shard1 = figures(
            vec![p(1, 0, 50)],
            vec![sub("t0-s1", vec![90, 50], vec![Some(104), Some(49)])],
        );
        let mut streams = vec![stream("t0-s0"), stream("t0-s1")];
        merge_shards(&[&shard0, &shard1], &mut streams).unwrap();
        let c = streams[1].counters;
        assert_eq!(
            (c.sent, c.delivered, c.dropped, c.in_flight_end),
            (150, 140, 5, 5)
        );
        assert_eq!(streams[0].counters.delivered, 150);
        // Its seconds generated by both shards' publishers.
        assert_eq!(streams[1].intervals[0].generated, 150);
        // A publisher in two shards, or in none, is refused.
        let twice = figures(vec![p(0, 10, 100)], Vec::new());
        let e = merge_shards(&[&shard0, &twice], &mut streams).unwrap_err();
        assert!(e.contains("two shards"), "{e}");
        let e = merge_shards(&[&shard0], &mut streams).unwrap_err();
        assert!(e.contains("publisher 1 is in no shard"), "{e}");
        // A shared subscription read in both shards: what its consumers got together, judged
        // up to the lower of their horizons (publisher 0: 60 + 30 of 100, horizon 104 → 5
        // lost, 5 on their way); its two records folded into one.
        let half = |delivered, top| sub("t0-s2", vec![delivered, 25], vec![Some(top), Some(49)]);
        let a = figures(vec![p(0, 10, 100)], vec![half(60, 109)]);
        let b = figures(vec![p(1, 0, 50)], vec![half(30, 104)]);
        let mut shared = vec![stream("t0-s2"), stream("t0-s2")];
        merge_shards(&[&a, &b], &mut shared).unwrap();
        assert_eq!(shared.len(), 1);
        let c = shared[0].counters;
        assert_eq!(
            (c.sent, c.delivered, c.dropped, c.in_flight_end),
            (150, 140, 5, 5)
        );
        assert_eq!(shared[0].intervals[0].delivered, 300);
        // Hostile figures (they come from other hosts): counts that do not add up, a run
        // msgbench does not make, a subscription's record without figures.
        let mut lying = shard1.clone();
        lying.publishers[0].per_second = vec![u64::MAX, 7];
        let e = merge_shards(&[&shard0, &lying], &mut streams).unwrap_err();
        assert!(e.contains("do not add up"), "{e}");
        let mut huge = shard0.clone();
        huge.publishers_total = u32::MAX;
        let e = merge_shards(&[&huge], &mut streams).unwrap_err();
        assert!(e.contains("disagree") || e.contains("not a run"), "{e}");
        let e = merge_shards(&[&huge, &huge], &mut streams).unwrap_err();
        assert!(e.contains("not a run msgbench makes"), "{e}");
        let mut orphan = vec![stream("t0-s0"), stream("t0-s1"), stream("t9-s9")];
        let e = merge_shards(&[&shard0, &shard1], &mut orphan).unwrap_err();
        assert!(e.contains("t9-s9 has no figures"), "{e}");
        // Figures of a subscription that does not fit the run's publishers.
        let mut odd = shard1.clone();
        odd.subscriptions[0].topic = 5;
        let e = merge_shards(&[&shard0, &odd], &mut streams).unwrap_err();
        assert!(e.contains("do not fit"), "{e}");
    }
}

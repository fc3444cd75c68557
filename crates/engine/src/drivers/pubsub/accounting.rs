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
use msgbench_model::result::{Counters, SequenceErrors, StreamClient, StreamInterval};

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
    let seconds = s.stats.per_second.len().max(
        publishers
            .iter()
            .map(|p| p.per_second.len())
            .max()
            .unwrap_or(0),
    );
    let mut backlog = 0i64;
    let intervals = (0..seconds)
        .map(|k| {
            let generated: u64 = publishers
                .iter()
                .map(|p| p.per_second.get(k).copied().unwrap_or(0))
                .sum();
            let mine = s.stats.per_second.get(k).copied().unwrap_or_default();
            backlog += generated as i64 - mine.delivered as i64;
            StreamInterval {
                start_s: k as f64,
                length_s: 1.0,
                generated,
                written: generated,
                delivered: mine.delivered,
                dropped: 0,
                backlog,
                latency_p50_ns: mine.p50_ns,
                latency_p99_ns: mine.p99_ns,
                latency_max_ns: mine.max_ns,
            }
        })
        .collect();
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
}

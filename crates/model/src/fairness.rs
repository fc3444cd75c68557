//! Were the connections served equally? Per-connection figures of a request/response run
//! ([`ConnectionResult`]) and one summary over them ([`Fairness`]): Jain's index over what each
//! connection got, the least-served connection's share against the median's, and the spread of
//! per-connection p99. A server that answers one connection first and lets the others wait is
//! exactly what a whole-run percentile hides; [`unequal_service`] says so in one sentence.
use serde::{Deserialize, Serialize};

/// What one connection of a request/response run got (measured requests only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionResult {
    /// Its index among the run's connections, from 0 (thread-major: thread 1's first
    /// connection follows thread 0's last). A reopened connection keeps its index.
    pub index: u32,
    /// Replies counted as delivered.
    pub delivered: u64,
    /// Requests that failed on it (error replies, timeouts, a closed connection).
    pub failed: u64,
    /// Median latency of its delivered requests, ns (to within 3 %: per-connection histograms
    /// are coarser than the run's).
    pub latency_p50_ns: u64,
    /// p99 latency of its delivered requests, ns (to within 3 %).
    pub latency_p99_ns: u64,
    /// Its largest latency, ns (to within 3 %).
    pub latency_max_ns: u64,
}

/// How equally a run's connections (or one group of stream clients) were served.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fairness {
    /// What was compared: `connections`, or `group <name>` for a broadcast stream (clients of
    /// one group share a configuration; groups differ by design, so they are not compared).
    pub scope: String,
    /// How many connections (or clients).
    pub connections: u64,
    /// Their deliveries together.
    pub delivered: u64,
    /// Jain's index over what each got delivered: (Σx)² / (n·Σx²). 1 when all got the same;
    /// 1/n when one got everything.
    pub jain_index: f64,
    /// The connection (or client) that got the fewest deliveries.
    pub least_served: String,
    /// Its share of all deliveries, 0..1.
    pub least_share: f64,
    /// The median connection's share, 0..1.
    pub median_share: f64,
    /// The median connection's deliveries.
    pub median_delivered: u64,
    /// The connection (or client) that got the most deliveries.
    pub most_served: String,
    /// Its share of all deliveries, 0..1.
    pub most_share: f64,
    /// The connection (or client) with the highest p99 latency, among those with at least
    /// [`MIN_DELIVERED_FOR_P99`] deliveries (empty, and the p99 figures 0, with fewer than two
    /// such).
    pub slowest: String,
    /// Its p99, ns.
    pub slowest_p99_ns: u64,
    /// The median connection's p99 (the lower median), ns.
    pub median_p99_ns: u64,
    /// The connection (or client) with the lowest p99 latency.
    pub fastest: String,
    /// Its p99, ns.
    pub fastest_p99_ns: u64,
    /// slowest_p99 / median_p99 (1 when all are equal, or when the p99s were not compared).
    pub p99_max_over_median: f64,
}

/// One connection's figures as fairness reads them.
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// How the sentence names it (`3`, `slow-2`).
    pub name: String,
    /// What it got delivered.
    pub delivered: u64,
    /// Its p99 latency, ns.
    pub p99_ns: u64,
}

/// Jain's index below this: deliveries were far from equal (one connection of two got 3/4 of
/// them: 0.8), whichever connections got less.
pub const POOR_JAIN_INDEX: f64 = 0.8;
/// A least-served connection below this fraction of the median's deliveries is starved.
pub const STARVED_SHARE_OF_MEDIAN: f64 = 0.5;
/// A slowest connection's p99 above this multiple of the median's is waiting on the others…
pub const SLOW_P99_OVER_MEDIAN: f64 = 10.0;
/// …when it is also at least this long, ns (below it, scheduling noise alone can make tenfold
/// differences between microsecond p99s).
pub const SLOW_P99_FLOOR_NS: u64 = 1_000_000;
/// Deliveries per connection, on average, before fairness is judged at all.
pub const MIN_MEAN_DELIVERED: u64 = 50;
/// Deliveries a connection needs for its p99 to enter the p99 spread: with fewer, its "p99" is
/// one of its last few values (with 100, its max), and one host hiccup would read as unequal
/// service.
pub const MIN_DELIVERED_FOR_P99: u64 = 1000;

/// The summary over `served` (at least two), `None` for fewer or when nothing was delivered.
pub fn fairness(scope: &str, served: &[Served]) -> Option<Fairness> {
    let total: u64 = served.iter().map(|s| s.delivered).sum();
    if served.len() < 2 || total == 0 {
        return None;
    }
    let n = served.len() as f64;
    let sum = total as f64;
    let squares: f64 = served.iter().map(|s| (s.delivered as f64).powi(2)).sum();
    let least = served.iter().min_by_key(|s| s.delivered)?;
    let most = served.iter().max_by_key(|s| s.delivered)?;
    let median_delivered = median(served.iter().map(|s| s.delivered));
    // The p99 spread: only connections with enough deliveries for a p99, and the lower median
    // (with two connections the upper one is the slowest, and slowest / median would always
    // read 1).
    let timed: Vec<&Served> = (served.iter())
        .filter(|s| s.delivered >= MIN_DELIVERED_FOR_P99)
        .collect();
    let (slowest, fastest, median_p99) = if timed.len() >= 2 {
        let slowest = timed.iter().max_by_key(|s| s.p99_ns)?;
        let fastest = timed.iter().min_by_key(|s| s.p99_ns)?;
        let median = lower_median(timed.iter().map(|s| s.p99_ns));
        (
            (slowest.name.clone(), slowest.p99_ns),
            (fastest.name.clone(), fastest.p99_ns),
            median,
        )
    } else {
        ((String::new(), 0), (String::new(), 0), 0)
    };
    Some(Fairness {
        scope: scope.to_string(),
        connections: served.len() as u64,
        delivered: total,
        jain_index: sum * sum / (n * squares),
        least_served: least.name.clone(),
        least_share: least.delivered as f64 / sum,
        median_share: median_delivered as f64 / sum,
        median_delivered,
        most_served: most.name.clone(),
        most_share: most.delivered as f64 / sum,
        p99_max_over_median: if median_p99 == 0 {
            1.0
        } else {
            slowest.1 as f64 / median_p99 as f64
        },
        slowest: slowest.0,
        slowest_p99_ns: slowest.1,
        median_p99_ns: median_p99,
        fastest: fastest.0,
        fastest_p99_ns: fastest.1,
    })
}

/// The summary over a request/response run's connections.
pub fn of_connections(connections: &[ConnectionResult]) -> Option<Fairness> {
    let served: Vec<Served> = connections
        .iter()
        .map(|c| Served {
            name: c.index.to_string(),
            delivered: c.delivered,
            p99_ns: c.latency_p99_ns,
        })
        .collect();
    fairness("connections", &served)
}

fn median(values: impl Iterator<Item = u64>) -> u64 {
    middle(values, |n| n / 2)
}

/// Lower median (the smaller middle value of an even count).
fn lower_median(values: impl Iterator<Item = u64>) -> u64 {
    middle(values, |n| n.saturating_sub(1) / 2)
}

/// The value at the index `at(n)` of the `n` values sorted (0 when there are none).
fn middle(values: impl Iterator<Item = u64>, at: fn(usize) -> usize) -> u64 {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    v.get(at(v.len())).copied().unwrap_or(0)
}

/// The sentence that says `f` is poor, `None` when it is not (or when the connections got too
/// few deliveries, 50 each on average, to judge). Poor is any of: the least-served connection got under
/// half the median's deliveries; Jain's index under 0.8 (one or a few connections took most);
/// the slowest connection's p99 over ten times the median's, or the median's over ten times
/// the fastest's (one connection served first), the larger of the two being over 1 ms.
pub fn unequal_service(f: &Fairness) -> Option<String> {
    if f.delivered < MIN_MEAN_DELIVERED * f.connections {
        return None;
    }
    let what = if f.scope == "connections" {
        "connection"
    } else {
        "client"
    };
    let of = match f.scope.strip_prefix("group ") {
        Some(group) => format!("{} in group {group}", f.connections),
        None => f.connections.to_string(),
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    if f.least_share < STARVED_SHARE_OF_MEDIAN * f.median_share {
        return Some(format!(
            "{what} {} of {of} got {:.1} % of the deliveries where the median one got {:.1} % (Jain's index {:.2})",
            f.least_served,
            100.0 * f.least_share,
            100.0 * f.median_share,
            f.jain_index
        ));
    }
    if f.jain_index < POOR_JAIN_INDEX {
        return Some(format!(
            "{what} {} of {of} got {:.1} % of the deliveries (Jain's index {:.2})",
            f.most_served,
            100.0 * f.most_share,
            f.jain_index
        ));
    }
    let slow = f.p99_max_over_median;
    if slow > SLOW_P99_OVER_MEDIAN && f.slowest_p99_ns >= SLOW_P99_FLOOR_NS {
        return Some(format!(
            "{what} {} of {of} had p99 {:.3} ms where the median one had {:.3} ms ({slow:.1}×)",
            f.slowest,
            ms(f.slowest_p99_ns),
            ms(f.median_p99_ns),
        ));
    }
    let fast = f.median_p99_ns as f64 / f.fastest_p99_ns.max(1) as f64;
    if f.fastest_p99_ns > 0 && fast > SLOW_P99_OVER_MEDIAN && f.median_p99_ns >= SLOW_P99_FLOOR_NS {
        return Some(format!(
            "{what} {} of {of} had p99 {:.3} ms where the median one had {:.3} ms ({fast:.1}× longer): it was served first",
            f.fastest,
            ms(f.fastest_p99_ns),
            ms(f.median_p99_ns),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(delivered: &[u64], p99_ms: &[f64]) -> Vec<Served> {
        delivered
            .iter()
            .zip(p99_ms)
            .enumerate()
            .map(|(i, (&d, &p))| Served {
                name: i.to_string(),
                delivered: d,
                p99_ns: (p * 1e6) as u64,
            })
            .collect()
    }

    #[test]
    fn equal_connections_have_index_one_and_no_sentence() {
        let f = fairness("connections", &served(&[1000, 1000, 1000, 1000], &[0.2; 4])).unwrap();
        assert!((f.jain_index - 1.0).abs() < 1e-12);
        assert_eq!((f.least_share, f.median_share), (0.25, 0.25));
        assert_eq!(f.p99_max_over_median, 1.0);
        assert_eq!(unequal_service(&f), None);
    }

    #[test]
    fn one_connection_with_everything_has_index_one_over_n() {
        let f = fairness("connections", &served(&[4000, 0, 0, 0], &[0.2; 4])).unwrap();
        assert!((f.jain_index - 0.25).abs() < 1e-12);
    }

    #[test]
    fn a_starved_connection_is_named_with_its_share() {
        let f = fairness("connections", &served(&[980, 980, 980, 60], &[0.3; 4])).unwrap();
        assert_eq!(f.least_served, "3");
        let s = unequal_service(&f).unwrap();
        assert!(
            s.starts_with(
                "connection 3 of 4 got 2.0 % of the deliveries where the median one got 32.7 %"
            ),
            "{s}"
        );
    }

    #[test]
    fn a_connection_that_waits_is_named_with_its_p99() {
        let f = fairness("connections", &served(&[1000; 4], &[0.4, 0.5, 480.0, 0.45])).unwrap();
        let s = unequal_service(&f).unwrap();
        assert!(
            s.starts_with("connection 2 of 4 had p99 480.000 ms where the median one had 0.450 ms"),
            "{s}"
        );
        // Two connections: slowest over the lower median is slowest over fastest.
        let f = fairness("connections", &served(&[5000, 5000], &[0.3, 40.0])).unwrap();
        assert!((f.p99_max_over_median - 40.0 / 0.3).abs() < 1e-6, "{f:?}");
        let s = unequal_service(&f).unwrap();
        assert!(s.contains("connection 1 of 2 had p99 40.000 ms"), "{s}");
    }

    #[test]
    fn one_favoured_connection_among_starved_ones_is_named() {
        // The median is a starved connection: the index and the fastest p99 say it.
        let f = fairness("connections", &served(&[1000, 60, 60, 60], &[0.1; 4])).unwrap();
        let s = unequal_service(&f).unwrap();
        assert!(
            s.starts_with("connection 0 of 4 got 84.7 % of the deliveries (Jain's index 0.34)"),
            "{s}"
        );
        let f = fairness("connections", &served(&[1000; 4], &[0.1, 30.0, 30.0, 30.0])).unwrap();
        let s = unequal_service(&f).unwrap();
        assert!(
            s.contains("connection 0 of 4 had p99 0.100 ms where the median one had 30.000 ms"),
            "{s}"
        );
    }

    #[test]
    fn a_p99_of_a_few_deliveries_is_not_compared() {
        // 100 deliveries each: a p99 is one of the last values; one hiccup is not unfairness.
        let f = fairness("connections", &served(&[100, 100, 100], &[0.2, 0.2, 30.0])).unwrap();
        assert_eq!((f.p99_max_over_median, f.slowest_p99_ns), (1.0, 0));
        assert_eq!(unequal_service(&f), None);
        // A connection that got nothing has no p99 to compare either.
        let f = fairness("connections", &served(&[3000, 3000, 0], &[2.0, 2.1, 0.0])).unwrap();
        assert_eq!(f.fastest, "0");
    }

    #[test]
    fn tenfold_differences_between_microsecond_p99s_are_noise() {
        let f = fairness("connections", &served(&[1000; 3], &[0.01, 0.02, 0.5])).unwrap();
        assert!(f.p99_max_over_median > 10.0);
        assert_eq!(unequal_service(&f), None);
    }

    #[test]
    fn stream_groups_name_clients() {
        let f = fairness("group slow", &served(&[900, 10], &[1.0, 1.0])).unwrap();
        let s = unequal_service(&f).unwrap();
        assert!(s.starts_with("client 1 of 2 in group slow got"), "{s}");
    }

    #[test]
    fn one_connection_or_nothing_delivered_has_no_figure() {
        assert_eq!(fairness("connections", &served(&[100], &[1.0])), None);
        assert_eq!(fairness("connections", &served(&[0, 0], &[0.0, 0.0])), None);
    }
}

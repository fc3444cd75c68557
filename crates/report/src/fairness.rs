//! The fairness section of both reports: for each run with two or more connections (or a
//! stream group with two or more clients), how equally they were served.
use crate::format::duration_ns;
use msgbench_model::fairness::{unequal_service, Fairness};
use msgbench_model::result::RunResult;

/// True when some run has a fairness figure.
pub fn any(runs: &[RunResult]) -> bool {
    runs.iter().any(|r| !r.fairness.is_empty())
}

const HEADER: [&str; 7] = [
    "run",
    "over",
    "Jain's index",
    "least served",
    "most served",
    "p99 slowest / median / fastest",
    "equal?",
];

const EXPLAINED: &str =
    "Jain's index over each connection's deliveries (1 = equal, 1/n = one got all); \
    shares are of the run's deliveries; per-connection p99s (to within 3.2 %) are compared over \
    connections with at least 1000 deliveries (–: fewer than two had that many).";

fn cells(r: &RunResult, f: &Fairness) -> [String; 7] {
    let share = |name: &str, s: f64| format!("{name}: {:.1} %", 100.0 * s);
    [
        r.run_id.clone(),
        format!("{} {}", f.connections, f.scope),
        format!("{:.3}", f.jain_index),
        share(&f.least_served, f.least_share),
        share(&f.most_served, f.most_share),
        if f.slowest.is_empty() {
            // Fewer than two connections with enough deliveries for a p99.
            "–".to_string()
        } else {
            format!(
                "{} ({}) / {} / {} ({})",
                duration_ns(f.slowest_p99_ns),
                f.slowest,
                duration_ns(f.median_p99_ns),
                duration_ns(f.fastest_p99_ns),
                f.fastest
            )
        },
        match unequal_service(f) {
            Some(_) => "no".to_string(),
            None => "yes".to_string(),
        },
    ]
}

fn rows(runs: &[RunResult]) -> Vec<[String; 7]> {
    (runs.iter())
        .flat_map(|r| r.fairness.iter().map(move |f| cells(r, f)))
        .collect()
}

/// The `## Fairness` section of report.md (empty when no run has a figure).
pub fn markdown(runs: &[RunResult]) -> String {
    if !any(runs) {
        return String::new();
    }
    crate::format::markdown_section("Fairness", EXPLAINED, &HEADER, &rows(runs))
}

/// The fairness section of report.html (empty when no run has a figure).
pub fn html(runs: &[RunResult], escape: fn(&str) -> String) -> String {
    if !any(runs) {
        return String::new();
    }
    let unequal = |row: &[String]| row[6] == "no";
    crate::format::html_section(
        ("Fairness", EXPLAINED),
        &HEADER,
        &rows(runs),
        escape,
        unequal,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use msgbench_model::fairness::{fairness, Served};

    fn run_with(delivered: &[u64]) -> RunResult {
        let served: Vec<Served> = (delivered.iter().enumerate())
            .map(|(i, &d)| Served {
                name: i.to_string(),
                delivered: d,
                p99_ns: 200_000,
            })
            .collect();
        RunResult {
            run_id: format!("r{}", delivered[0]),
            fairness: fairness("connections", &served).into_iter().collect(),
            ..Default::default()
        }
    }

    #[test]
    fn each_run_gets_a_row_and_unequal_service_reads_no() {
        let runs = [run_with(&[1000, 1000]), run_with(&[2000, 30])];
        let md = markdown(&runs);
        assert!(md.contains("| r1000 | 2 connections | 1.000 | 0: 50.0 % | 1: 50.0 % | 200 µs (1) / 200 µs / 200 µs (0) | yes |"), "{md}");
        assert!(
            md.contains("| r2000 | 2 connections | 0.515 | 1: 1.5 % | 0: 98.5 % | – | no |"),
            "{md}"
        );
        assert!(md.trim_end().ends_with("| no |"), "{md}");
        let html = html(&runs, |s| s.to_string());
        assert_eq!(html.matches("class=\"invalid\"").count(), 1, "{html}");
        assert_eq!(markdown(&[RunResult::default()]), "");
    }
}

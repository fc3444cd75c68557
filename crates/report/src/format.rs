//! Number formatting for humans: durations with units, rates with SI suffixes.
use msgbench_model::verdict::three_digits;

/// `812 ns`, `12.3 µs`, `4.56 ms`, `1.23 s`: three significant digits, unit always shown.
pub fn duration_ns(ns: u64) -> String {
    let v = ns as f64;
    let (value, unit) = if v < 1e3 {
        return format!("{ns} ns");
    } else if v < 1e6 {
        (v / 1e3, "µs")
    } else if v < 1e9 {
        (v / 1e6, "ms")
    } else {
        (v / 1e9, "s")
    };
    format!("{} {unit}", three_digits(value))
}

/// `950`, `12.3k`, `4.56M`: three significant digits with an SI suffix.
pub fn count(v: f64) -> String {
    msgbench_model::verdict::count(v)
}

/// A ratio 0..1 as a percentage with sensible precision: `0 %`, `0.03 %`, `35.2 %`, `100 %`.
pub fn percent(ratio: f64) -> String {
    let p = ratio * 100.0;
    if !p.is_finite() {
        // Counters that break the accounting have no meaningful share (the run is invalid).
        "–".to_string()
    } else if p == 0.0 || p == 100.0 {
        format!("{p:.0} %")
    } else if p < 1.0 {
        format!("{p:.2} %")
    } else {
        format!("{p:.1} %")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_carry_units() {
        assert_eq!(duration_ns(812), "812 ns");
        assert_eq!(duration_ns(12_345), "12.3 µs");
        assert_eq!(duration_ns(4_560_000), "4.56 ms");
        assert_eq!(duration_ns(1_230_000_000), "1.23 s");
    }

    #[test]
    fn counts_and_percents() {
        assert_eq!(count(950.0), "950");
        assert_eq!(count(12_345.0), "12.3k");
        assert_eq!(count(4_560_000.0), "4.56M");
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(0.0003), "0.03 %");
        assert_eq!(percent(0.352), "35.2 %");
    }
}

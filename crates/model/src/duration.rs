//! Human-friendly durations in scenario files: `"5s"`, `"1000us"`, `"2ms"`, `"0"`.
use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Parses `"1000us"`, `"1.5s"`, `"0"`; the error names the accepted forms.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if let Some(seconds) = text.strip_suffix('s').and_then(|n| n.parse::<f64>().ok()) {
        if seconds.is_finite() && seconds >= 0.0 {
            return Duration::try_from_secs_f64(seconds)
                .map_err(|_| format!("duration {text:?} is too long"));
        }
    }
    if text.starts_with('-') {
        return Err(format!(
            "duration {text:?} is negative; durations are 0 or more"
        ));
    }
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "duration {text:?} has no unit; write e.g. \"{text}ms\" or \"{text}s\""
        ));
    }
    humantime::parse_duration(text).map_err(|_| {
        format!("cannot parse duration {text:?}; write a number with a unit, e.g. \"500us\", \"2ms\", \"1.5s\", \"1m\"")
    })
}

/// Formats a duration the way a scenario file would write it (`"1ms"`, `"250us"`).
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

/// Serde adapter: `#[serde(with = "crate::duration::serde_text")]`.
pub mod serde_text {
    use super::*;
    /// Serializes as text such as `"2ms"`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }
    /// Deserializes from text such as `"2ms"` (or the integer 0).
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(t) => parse(&t).map_err(serde::de::Error::custom),
            Raw::Int(0) => Ok(Duration::ZERO),
            Raw::Int(n) => Err(serde::de::Error::custom(format!(
                "a bare number ({n}) has no unit; write e.g. \"{n}ms\" or \"{n}us\""
            ))),
        }
    }
}

/// Serde adapter for `Option<Duration>`.
pub mod serde_text_opt {
    use super::*;
    /// Serializes `Some` as text, `None` as nothing.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format(*d)),
            None => s.serialize_none(),
        }
    }
    /// Deserializes text such as `"2ms"` into `Some`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        super::serde_text::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_zero() {
        assert_eq!(parse("1000us").unwrap(), Duration::from_micros(1000));
        assert_eq!(parse("2ms").unwrap(), Duration::from_millis(2));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("0").unwrap(), Duration::ZERO);
        assert!(parse("fast").unwrap_err().contains("\"500us\""));
        assert!(parse("-1s").is_err());
    }

    #[test]
    fn format_round_trips() {
        for text in ["0s", "5s", "2ms", "250us", "7ns"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}

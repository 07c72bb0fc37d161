//! Durations as users write them in flags and env: `500ms`, `10s`, `5m`, `1h`, `0`.

use std::time::Duration;

/// A duration string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {value:?}: expected a number followed by ms, s, m or h (e.g. 500ms, 10s, 5m)")]
pub struct DurationError {
    /// The text that was seen.
    pub value: String,
}

/// Parse `500ms`, `10s`, `1.5s`, `5m`, `2h` or a bare `0`.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let err = || DurationError { value: text.to_string() };
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1 {
        return Err(err());
    }
    // Exact decimal arithmetic in nanoseconds: floating point turned "61959847398ms" into
    // 61959847.398000002s.
    let unit_ns: u128 = match unit {
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3600 * NANOS_PER_SEC,
        _ => return Err(err()),
    };
    let (whole, fraction) = num.split_once('.').unwrap_or((num, ""));
    if whole.len() > MAX_DIGITS || fraction.len() > MAX_DIGITS {
        return Err(err());
    }
    let whole: u128 = whole.parse().map_err(|_| err())?;
    let fraction_ns = match fraction {
        "" => 0,
        f => f.parse::<u128>().map_err(|_| err())? * unit_ns / 10u128.pow(f.len() as u32),
    };
    let ns = whole * unit_ns + fraction_ns;
    if ns > MAX_SECS * NANOS_PER_SEC {
        return Err(err());
    }
    u64::try_from(ns).map(Duration::from_nanos).map_err(|_| err())
}

const NANOS_PER_SEC: u128 = 1_000_000_000;
/// The longest duration accepted, in seconds (about 31 years).
const MAX_SECS: u128 = 1_000_000_000;
/// Digits read on each side of the decimal point (bounds the arithmetic; more is never meant).
const MAX_DIGITS: usize = 20;

/// Render a duration in the shortest of the forms `parse_duration` reads.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_string()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(" 3s "), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn refuses_and_names_the_value() {
        for bad in [
            "",
            "s",
            "10",
            "10x",
            "-1s",
            "-0",
            "+1s",
            "+1",
            "+0",
            "1..2s",
            ".5s",
            "5.s",
            "ten s",
            "1e3s",
            "99999999999h",
            "1 s",
            "0x10s",
            "inf s",
            "NaNs",
            "1_000ms",
            "١s",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert_eq!(e.value, bad);
            assert!(e.to_string().contains("expected a number"), "{e}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for s in ["0s", "500ms", "10s", "5m", "2h", "1500ms"] {
            assert_eq!(format_duration(parse_duration(s).unwrap()), s);
        }
    }
}

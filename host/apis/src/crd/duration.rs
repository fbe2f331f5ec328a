//! Durations as Karpenter writes them: Go-style `720h`, `1h30m`, `10m`, `0s`,
//! and `Never` where a timer can be switched off.
//!
//! The API server checks the format through the schema pattern, so a value that
//! reaches us is well formed; parsing still returns a typed error, because an
//! object stored before the CRD was installed is not checked.

use std::{borrow::Cow, fmt, str::FromStr, time::Duration};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Schema pattern of a duration made of hours, minutes and seconds (`1h30m`).
pub const DURATION_PATTERN: &str = r"^([0-9]+(s|m|h))+$";
/// Schema pattern of a duration that may also be `Never`.
pub const NILLABLE_DURATION_PATTERN: &str = r"^(([0-9]+(s|m|h))+|Never)$";
/// Schema pattern of a budget window: minutes and hours only (cron has no seconds).
pub const BUDGET_DURATION_PATTERN: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";

/// Why a duration string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("duration is empty")]
    Empty,
    #[error("duration {0:?} must be digits followed by h, m or s (for example 720h or 1h30m)")]
    Malformed(String),
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

/// A duration such as `terminationGracePeriod: 48h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KDuration(pub Duration);

/// A duration that may be `Never` (`expireAfter`, `consolidateAfter`).
/// `None` means the timer is off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NillableDuration(pub Option<Duration>);

impl NillableDuration {
    pub const NEVER: Self = Self(None);

    pub fn from_duration(d: Duration) -> Self {
        Self(Some(d))
    }

    /// The duration, or `None` for `Never`.
    pub fn duration(&self) -> Option<Duration> {
        self.0
    }
}

/// Parses `([0-9]+(h|m|s))+`, the language of [`DURATION_PATTERN`].
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed(text.to_owned());
    let overflow = || DurationError::Overflow(text.to_owned());
    let mut total: u64 = 0;
    let mut digits = String::new();
    for ch in text.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit: u64 = match ch {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(malformed()),
        };
        if digits.is_empty() {
            return Err(malformed());
        }
        let n: u64 = digits.parse().map_err(|_| overflow())?;
        let secs = n.checked_mul(unit).ok_or_else(overflow)?;
        total = total.checked_add(secs).ok_or_else(overflow)?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(malformed());
    }
    Ok(Duration::from_secs(total))
}

/// Formats whole seconds the way [`parse_duration`] reads them, shortest form first
/// (`720h`, `1h30m`, `0s`).
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return "0s".to_owned();
    }
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

impl FromStr for KDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(Self)
    }
}

impl fmt::Display for KDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "Never" {
            return Ok(Self::NEVER);
        }
        parse_duration(s).map(|d| Self(Some(d)))
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("Never"),
            Some(d) => f.write_str(&format_duration(d)),
        }
    }
}

macro_rules! string_serde {
    ($ty:ty, $pattern:expr, $name:literal) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = Cow::<'de, str>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({ "type": "string", "pattern": $pattern })
            }
        }
    };
}

string_serde!(KDuration, DURATION_PATTERN, "KDuration");
string_serde!(
    NillableDuration,
    NILLABLE_DURATION_PATTERN,
    "NillableDuration"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_compound_durations() {
        assert_eq!(parse_duration("720h"), Ok(Duration::from_secs(720 * 3600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("10m0s"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_what_the_schema_refuses() {
        for bad in ["", "h", "10", "1.5h", "10ms", "1d", "-1h", "1h 2m"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(matches!(
            parse_duration("99999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn never_round_trips() {
        let never: NillableDuration = serde_json::from_str("\"Never\"").unwrap();
        assert_eq!(never.duration(), None);
        assert_eq!(serde_json::to_string(&never).unwrap(), "\"Never\"");
    }

    #[test]
    fn formats_shortest_form() {
        for text in ["720h", "1h30m", "10m", "45s", "1h0m5s", "0s"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(3605)), "1h5s");
    }
}

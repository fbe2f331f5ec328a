//! Five-field cron schedules in UTC (minute hour day-of-month month day-of-week), as disruption
//! budgets write them, plus the `@yearly`..`@hourly` macros.
//!
//! Fields take `*`, numbers, ranges `a-b`, lists `a,b` and steps `*/n` or `a-b/n`; months and
//! weekdays also take `jan`..`dec` and `sun`..`sat`; weekday `7` is Sunday. As in standard cron, when
//! both day-of-month and day-of-week are restricted a day matching either one matches.

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Why a schedule was refused. A budget with a bad schedule fails closed (allows nothing).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("schedule {0:?} must have five fields or be a macro such as @daily")]
    FieldCount(String),
    #[error("schedule field {field:?} is invalid: {reason}")]
    Field { field: String, reason: &'static str },
}

/// A parsed schedule: one bit set per allowed value of each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    dom_restricted: bool,
    dow_restricted: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn value(text: &str, names: &[&str], offset: u32) -> Option<u32> {
    if let Ok(n) = text.parse::<u32>() {
        return Some(n);
    }
    let lower = text.to_ascii_lowercase();
    names
        .iter()
        .position(|n| *n == lower)
        .map(|i| i as u32 + offset)
}

/// Parses one field into a bitmask over `min..=max`.
fn field(
    text: &str,
    min: u32,
    max: u32,
    names: &[&str],
    name_offset: u32,
) -> Result<(u64, bool), CronError> {
    let err = |reason| CronError::Field {
        field: text.to_owned(),
        reason,
    };
    let mut mask = 0u64;
    let mut restricted = false;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>().map_err(|_| err("step is not a number"))?,
            ),
            None => (part, 1),
        };
        if step == 0 {
            return Err(err("step is zero"));
        }
        let (lo, hi) = if range == "*" {
            (min, max)
        } else {
            restricted = true;
            match range.split_once('-') {
                Some((a, b)) => (
                    value(a, names, name_offset).ok_or_else(|| err("not a number or name"))?,
                    value(b, names, name_offset).ok_or_else(|| err("not a number or name"))?,
                ),
                None => {
                    let v = value(range, names, name_offset)
                        .ok_or_else(|| err("not a number or name"))?;
                    // `5/15` means 5, 20, 35, 50.
                    (v, if part.contains('/') { max } else { v })
                }
            }
        };
        if step != 1 {
            restricted = true;
        }
        if lo < min || hi > max || lo > hi {
            return Err(err("value out of range"));
        }
        let mut v = lo;
        while v <= hi {
            mask |= 1u64 << v;
            v += step;
        }
    }
    Ok((mask, restricted))
}

impl Schedule {
    pub fn parse(text: &str) -> Result<Schedule, CronError> {
        let text = text.trim();
        let expanded = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [m, h, dom, mon, dow] = fields[..] else {
            return Err(CronError::FieldCount(text.to_owned()));
        };
        let (minutes, _) = field(m, 0, 59, &[], 0)?;
        let (hours, _) = field(h, 0, 23, &[], 0)?;
        let (days, dom_restricted) = field(dom, 1, 31, &[], 0)?;
        let (months, _) = field(mon, 1, 12, &MONTHS, 1)?;
        let (mut weekdays, dow_restricted) = field(dow, 0, 7, &WEEKDAYS, 0)?;
        if weekdays & (1 << 7) != 0 {
            weekdays |= 1;
        }
        Ok(Schedule {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: (weekdays & 0x7f) as u8,
            dom_restricted,
            dow_restricted,
        })
    }

    /// Whether the schedule fires at the minute containing `t` (UTC).
    pub fn matches(&self, t: Timestamp) -> bool {
        let z = t.to_zoned(TimeZone::UTC);
        let minute = z.minute() as u32;
        let hour = z.hour() as u32;
        let day = z.day() as u32;
        let month = z.month() as u32;
        let weekday = z.weekday().to_sunday_zero_offset() as u32;
        if self.minutes & (1 << minute) == 0
            || self.hours & (1 << hour) == 0
            || self.months & (1 << month) == 0
        {
            return false;
        }
        let dom_ok = self.days & (1 << day) != 0;
        let dow_ok = self.weekdays & (1 << weekday) != 0;
        match (self.dom_restricted, self.dow_restricted) {
            (true, true) => dom_ok || dow_ok,
            (true, false) => dom_ok,
            (false, true) => dow_ok,
            (false, false) => true,
        }
    }

    /// Whether a window of `duration` opened by some firing is open at `now`: the schedule fired
    /// in `(now - duration, now]`. Windows longer than a year are treated as a year.
    pub fn active(&self, now: Timestamp, duration: Duration) -> bool {
        const YEAR_MINUTES: u64 = 366 * 24 * 60;
        let minutes = (duration.as_secs() / 60).min(YEAR_MINUTES);
        // Start at the minute containing `now` and walk back.
        let start = now.as_second() - now.as_second().rem_euclid(60);
        // A firing at minute `start - k*60` opens a window until `start - k*60 + duration`.
        let secs = duration.as_secs() as i64;
        for k in 0..=minutes as i64 {
            let at = start - k * 60;
            if at + secs <= now.as_second() {
                break;
            }
            let Ok(t) = Timestamp::from_second(at) else {
                break;
            };
            if self.matches(t) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn parses_fields_and_macros() {
        let s = Schedule::parse("0 9 * * mon-fri").unwrap();
        assert!(s.matches(at("2026-12-03T09:00:00Z"))); // Thursday
        assert!(!s.matches(at("2026-12-05T09:00:00Z"))); // Saturday
        assert!(!s.matches(at("2026-12-03T09:01:00Z")));
        let d = Schedule::parse("@daily").unwrap();
        assert!(d.matches(at("2026-01-01T00:00:30Z")));
        assert!(!d.matches(at("2026-01-01T01:00:00Z")));
        let step = Schedule::parse("*/15 * * * *").unwrap();
        assert!(step.matches(at("2026-01-01T01:45:00Z")));
        assert!(!step.matches(at("2026-01-01T01:46:00Z")));
        let sunday7 = Schedule::parse("0 0 * * 7").unwrap();
        assert!(sunday7.matches(at("2026-12-06T00:00:00Z")));
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        let s = Schedule::parse("0 0 1 * sun").unwrap();
        assert!(s.matches(at("2026-12-01T00:00:00Z"))); // Tuesday the 1st
        assert!(s.matches(at("2026-12-06T00:00:00Z"))); // Sunday
        assert!(!s.matches(at("2026-12-07T00:00:00Z")));
    }

    #[test]
    fn rejects_malformed_schedules() {
        for bad in [
            "",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "*/0 * * * *",
            "a * * * *",
            "5-1 * * * *",
            "* * 0 * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn window_is_open_for_its_duration() {
        let s = Schedule::parse("0 9 * * *").unwrap();
        let eight_hours = Duration::from_secs(8 * 3600);
        assert!(s.active(at("2026-12-03T09:00:00Z"), eight_hours));
        assert!(s.active(at("2026-12-03T16:59:59Z"), eight_hours));
        assert!(!s.active(at("2026-12-03T17:00:00Z"), eight_hours));
        assert!(!s.active(at("2026-12-03T08:59:59Z"), eight_hours));
    }
}

//! Calendar periods: windows that start where a calendar's do, in UTC or a named IANA
//! time zone (jiff's bundled tz database, so no host's tzdata is needed): a day at local
//! midnight, an ISO week on Monday, a month on the 1st, a year on January 1st. A month
//! is as long as it is (28 to 31 days), and a day across a daylight-saving change 23 or
//! 25 hours. A `fixed_window` limit can count per period instead of per aligned window
//! (`LimitBuilder::calendar`): a billing period.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::Error;

/// A calendar's period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Period {
    /// From local midnight to the next.
    Day,
    /// An ISO week: Monday's midnight to the next Monday's.
    Week,
    /// The 1st's midnight to the next month's 1st.
    Month,
    /// January 1st's midnight to the next year's.
    Year,
}

impl Period {
    /// Every period, shortest first.
    pub const ALL: [Period; 4] = [Period::Day, Period::Week, Period::Month, Period::Year];

    /// The name policies use: `day`, `week`, `month`, `year`.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// The longest such period can be: a day with an extra hour (a clock set back) and
    /// so on. A calendar limit's nominal window: what its key and TTL are sized by.
    pub fn longest(self) -> Duration {
        const HOUR: u64 = 3_600;
        const DAY: u64 = 24 * HOUR;
        Duration::from_secs(match self {
            Period::Day => DAY + HOUR,
            Period::Week => 7 * DAY + HOUR,
            Period::Month => 31 * DAY + HOUR,
            Period::Year => 366 * DAY + HOUR,
        })
    }

    /// The first day of the period holding `date`.
    fn first(self, date: Date) -> Date {
        match self {
            Period::Day => date,
            Period::Week => date
                .checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days())
                .unwrap_or(date),
            Period::Month => date.first_of_month(),
            Period::Year => date.first_of_year(),
        }
    }

    /// The first day of the period after the one starting on `first`.
    fn next(self, first: Date) -> Option<Date> {
        match self {
            Period::Day => first.checked_add(1.day()).ok(),
            Period::Week => first.checked_add(7.days()).ok(),
            Period::Month => first.checked_add(1.month()).ok(),
            Period::Year => first.checked_add(1.year()).ok(),
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Period {
    type Err = String;

    fn from_str(s: &str) -> Result<Period, String> {
        Period::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown period `{s}`: day, week, month or year"))
    }
}

/// A period of a calendar in a time zone: where its windows start and end.
#[derive(Clone, Debug)]
pub struct Calendar {
    period: Period,
    zone: TimeZone,
    /// The zone's IANA name (`UTC`, `Europe/Berlin`): what tells calendars apart.
    name: Arc<str>,
}

impl Calendar {
    /// `period` in the IANA time zone `zone` (`UTC`, `Europe/Berlin`, `America/New_York`).
    pub fn new(period: Period, zone: &str) -> Result<Calendar, Error> {
        let tz = TimeZone::get(zone).map_err(|_| {
            Error::InvalidLimit(format!(
                "unknown time zone `{zone}`: an IANA name such as UTC or Europe/Berlin"
            ))
        })?;
        Ok(Calendar {
            period,
            zone: tz,
            name: Arc::from(zone),
        })
    }

    /// `period` in UTC.
    pub fn utc(period: Period) -> Calendar {
        Calendar {
            period,
            zone: TimeZone::UTC,
            name: Arc::from("UTC"),
        }
    }

    /// Which period: a day, a week, a month or a year.
    pub fn period(&self) -> Period {
        self.period
    }

    /// The time zone's IANA name.
    pub fn zone(&self) -> &str {
        &self.name
    }

    /// The period holding `now` (µs since the epoch): its start and its end, µs. Outside
    /// the calendar's range (never, for times a `Timestamp` holds), the UTC day.
    pub fn bounds(&self, now: u64) -> (u64, u64) {
        self.try_bounds(now).unwrap_or_else(|| {
            const DAY: u64 = 86_400_000_000;
            let start = now - now % DAY;
            (start, start + DAY)
        })
    }

    fn try_bounds(&self, now: u64) -> Option<(u64, u64)> {
        let at = Timestamp::from_microsecond(i64::try_from(now).ok()?).ok()?;
        let first = self.period.first(at.to_zoned(self.zone.clone()).date());
        let next = self.period.next(first)?;
        // A date's midnight, or where a gap at midnight moves it: its first instant.
        let instant = |d: Date| -> Option<u64> {
            let z = d.to_zoned(self.zone.clone()).ok()?;
            u64::try_from(z.timestamp().as_microsecond()).ok()
        };
        Some((instant(first)?, instant(next)?))
    }

    /// A number that tells calendars apart in a limit's shape.
    pub(crate) fn code(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish() | 1
    }
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Calendar) -> bool {
        self.period == other.period && self.name == other.name
    }
}

impl Eq for Calendar {}

impl Hash for Calendar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.period.hash(state);
        self.name.hash(state);
    }
}

/// `month in Europe/Berlin`.
impl fmt::Display for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.period, self.name)
    }
}

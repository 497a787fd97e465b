//! Sample filters shared by every consumer: threads, a time window (in seconds from the
//! first sample, or in wall-clock time) and status flags.
//!
//! The status filter lets a wall-clock recording be read as a CPU or GIL profile.

use std::collections::HashSet;

use super::error::TachError;
use super::reader::TachFile;
use super::records::Sample;

/// Status byte bits, as CPython's profiler sets them.
pub mod status {
    pub const HAS_GIL: u8 = 1;
    pub const ON_CPU: u8 = 2;
    pub const UNKNOWN: u8 = 4;
    pub const GIL_REQUESTED: u8 = 8;
    pub const HAS_EXCEPTION: u8 = 16;
    pub const MAIN_THREAD: u8 = 32;

    /// One status flag: its bit, the name `--status` takes, the name of its boolean
    /// column in the query tables and Parquet, and what it means.
    #[derive(Debug, Clone, Copy)]
    pub struct Flag {
        pub bit: u8,
        pub name: &'static str,
        pub column: &'static str,
        pub meaning: &'static str,
    }

    /// Every flag, written once, in the order of the query tables' columns.
    pub const FLAGS: [Flag; 6] = [
        Flag {
            bit: HAS_GIL,
            name: "has-gil",
            column: "has_gil",
            meaning: "the thread held the GIL",
        },
        Flag {
            bit: ON_CPU,
            name: "on-cpu",
            column: "on_cpu",
            meaning: "the thread was running on a CPU",
        },
        Flag {
            bit: GIL_REQUESTED,
            name: "gil-requested",
            column: "gil_requested",
            meaning: "the thread was waiting for the GIL",
        },
        Flag {
            bit: HAS_EXCEPTION,
            name: "has-exception",
            column: "has_exception",
            meaning: "an exception was being raised or handled",
        },
        Flag {
            bit: MAIN_THREAD,
            name: "main-thread",
            column: "main_thread",
            meaning: "the interpreter's main thread",
        },
        Flag {
            bit: UNKNOWN,
            name: "unknown",
            column: "unknown",
            meaning: "the sampler could not tell the thread's state",
        },
    ];

    /// `(name, bit)` of every flag, as `--status` takes them (derived from [`FLAGS`]).
    pub const NAMES: [(&str, u8); 6] = {
        let mut out = [("", 0u8); 6];
        let mut i = 0;
        while i < FLAGS.len() {
            out[i] = (FLAGS[i].name, FLAGS[i].bit);
            i += 1;
        }
        out
    };
}

/// Why a filter a user asked for cannot be built (a usage error in every front end).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterError {
    #[error("the {what} time must be a number of seconds, not {value}")]
    NotSeconds { what: &'static str, value: f64 },
    #[error("the window {start} s to {end} s is empty: the end must come after the start")]
    EmptyWindow { start: f64, end: f64 },
    #[error("unknown status flag '{0}': use one of {names} (or no-FLAG)", names = status_names())]
    UnknownStatus(String),
    #[error(
        "--{what} {value}: expected a time of day (14:05, 14:05:30.5, today in UTC unless \
         an offset follows: 14:05+02:00) or an ISO 8601 date and time \
         (2026-11-28T14:05:00Z, 2026-11-28T15:05:00+01:00; UTC without an offset)"
    )]
    WallTime { what: &'static str, value: String },
    #[error("the wall-clock window --since {since} --until {until} is empty: --until must come after --since")]
    EmptyWallWindow { since: String, until: String },
    #[error("the base window --base-since {since} --base-until {until} is empty: --base-until must come after --base-since")]
    EmptyBaseWindow { since: String, until: String },
}

fn status_names() -> String {
    status::NAMES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which samples to keep. The default keeps everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SampleFilter {
    /// Keep only these thread ids (any interpreter); `None` keeps all.
    pub threads: Option<HashSet<u64>>,
    /// Keep samples at or after this many seconds from the first sample.
    pub start_s: Option<f64>,
    /// Keep samples before this many seconds from the first sample.
    pub end_s: Option<f64>,
    /// Status bits that must all be set.
    pub status_set: u8,
    /// Status bits that must all be clear.
    pub status_clear: u8,
    /// Keep samples taken at or after this wall-clock time (UTC, Unix epoch µs).
    pub since_us: Option<i64>,
    /// Keep samples taken before this wall-clock time (UTC, Unix epoch µs).
    pub until_us: Option<i64>,
}

impl SampleFilter {
    pub fn is_empty(&self) -> bool {
        self.threads.is_none()
            && self.start_s.is_none()
            && self.end_s.is_none()
            && self.status_set == 0
            && self.status_clear == 0
            && !self.has_wall_window()
    }

    /// True when the filter has a time window (either kind): the consumers that apply
    /// one decode each sample's time, and bind the window to the file's first timestamp.
    pub fn needs_origin(&self) -> bool {
        self.start_s.is_some() || self.end_s.is_some() || self.has_wall_window()
    }

    /// True when the filter has a wall-clock window (`--since`, `--until`).
    pub fn has_wall_window(&self) -> bool {
        self.since_us.is_some() || self.until_us.is_some()
    }

    /// The offset from `file`'s monotonic timestamps to wall-clock time that a
    /// wall-clock window needs; an error naming the file when it has no wall-clock
    /// origin (CPython's files, and tach's before the origin was recorded).
    pub fn wall_offset(&self, file: &TachFile) -> Result<Option<i64>, TachError> {
        let offset = file.footer().wall_time_us(file.header().start_time_us, 0);
        if self.has_wall_window() && offset.is_none() {
            return Err(TachError::Usage(format!(
                "{}: no wall-clock time recorded (a file written by CPython, or by a tach \
                 older than the wall-clock origin), so --since/--until cannot select its \
                 samples: leave it out, or use --start/--end (seconds from its first sample)",
                file.path().display()
            )));
        }
        Ok(offset)
    }

    /// The filter a user asks for, built the same way by every front end (the CLI's
    /// `--thread/--start/--end/--status` and the Python package's keyword arguments):
    /// thread ids (none: every thread), a window in seconds from the first sample, and
    /// status terms (see [`SampleFilter::add_status`]).
    pub fn from_options<S: AsRef<str>>(
        threads: &[u64],
        start_s: Option<f64>,
        end_s: Option<f64>,
        status: &[S],
    ) -> Result<Self, FilterError> {
        for (what, v) in [("start", start_s), ("end", end_s)] {
            if let Some(v) = v.filter(|v| !v.is_finite()) {
                return Err(FilterError::NotSeconds { what, value: v });
            }
        }
        if let (Some(start), Some(end)) = (start_s, end_s) {
            if start >= end {
                return Err(FilterError::EmptyWindow { start, end });
            }
        }
        let mut f = SampleFilter {
            threads: (!threads.is_empty()).then(|| threads.iter().copied().collect()),
            start_s,
            end_s,
            ..Default::default()
        };
        for term in status {
            f.add_status(term.as_ref())?;
        }
        Ok(f)
    }

    /// Adds a `--status` term: a flag name, or `no-` and a flag name.
    pub fn add_status(&mut self, term: &str) -> Result<(), FilterError> {
        let (negate, name) = match term.strip_prefix("no-") {
            Some(rest) => (true, rest),
            None => (false, term),
        };
        let bit = status::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| *b)
            .ok_or_else(|| FilterError::UnknownStatus(term.to_string()))?;
        if negate {
            self.status_clear |= bit;
        } else {
            self.status_set |= bit;
        }
        Ok(())
    }

    /// Resolves the time window against the profile's first timestamp (a wall-clock
    /// window then keeps nothing: see [`Self::bind_in`]).
    pub fn bind(&self, origin_us: u64) -> BoundFilter<'_> {
        self.bind_in(origin_us, None)
    }

    /// Resolves both time windows: the one in seconds against the profile's first
    /// timestamp, the wall-clock one against `wall_offset_us` (what turns the file's
    /// timestamps into wall-clock time, [`Self::wall_offset`]; without it a wall-clock
    /// window keeps nothing). A sample must be inside both.
    pub fn bind_in(&self, origin_us: u64, wall_offset_us: Option<i64>) -> BoundFilter<'_> {
        let to_us = |s: f64| origin_us as f64 + s * 1e6;
        let mut start_us = self.start_s.map(to_us);
        let mut end_us = self.end_s.map(to_us);
        let to_mono = |wall: i64| match wall_offset_us {
            Some(offset) => wall.wrapping_sub(offset) as f64,
            None => f64::INFINITY,
        };
        if let Some(since) = self.since_us.map(to_mono) {
            start_us = Some(start_us.map_or(since, |s| s.max(since)));
        }
        if let Some(until) = self.until_us {
            // Without an origin nothing is kept: the start is already +inf.
            let until = to_mono(until);
            let until = if until.is_finite() {
                until
            } else {
                f64::NEG_INFINITY
            };
            end_us = Some(end_us.map_or(until, |e| e.min(until)));
        }
        BoundFilter {
            filter: self,
            start_us,
            end_us,
            origin_us,
        }
    }
}

/// A filter with its time window in absolute microseconds.
#[derive(Debug, Clone, Copy)]
pub struct BoundFilter<'a> {
    filter: &'a SampleFilter,
    start_us: Option<f64>,
    end_us: Option<f64>,
    pub origin_us: u64,
}

impl BoundFilter<'_> {
    #[inline]
    pub fn keep(&self, s: &Sample<'_>) -> bool {
        self.keeps_thread(s.thread_id) && self.keeps(s.status, s.timestamp_us)
    }

    /// The thread part of [`Self::keep`]: the same for every sample of a run.
    #[inline]
    pub fn keeps_thread(&self, thread_id: u64) -> bool {
        self.filter
            .threads
            .as_ref()
            .is_none_or(|t| t.contains(&thread_id))
    }

    /// [`Self::keeps`] holds for every sample: no status terms and no time window.
    #[inline]
    pub fn keeps_every_status_and_time(&self) -> bool {
        let f = self.filter;
        f.status_set == 0 && f.status_clear == 0 && self.start_us.is_none() && self.end_us.is_none()
    }

    /// The status and time parts of [`Self::keep`].
    #[inline]
    pub fn keeps(&self, status: u8, timestamp_us: u64) -> bool {
        let f = self.filter;
        if status & f.status_set != f.status_set || status & f.status_clear != 0 {
            return false;
        }
        let ts = timestamp_us as f64;
        !(self.start_us.is_some_and(|v| ts < v) || self.end_us.is_some_and(|v| ts >= v))
    }
}

/// A `--since`/`--until` time in µs since the Unix epoch: ISO 8601 / RFC 3339 with or
/// without an offset (none: UTC; `T` or a space between date and time), or a time of
/// day (`HH:MM`, `HH:MM:SS`, `HH:MM:SS.frac`, then optionally `Z` or `±HH:MM`) on the
/// day `now_us` falls on at that offset (UTC without one).
pub(crate) fn parse_wall_time(text: &str, now_us: i64) -> Option<i64> {
    use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime};
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_micros());
    }
    let (body, offset) = split_offset(text)?;
    const DATE_TIMES: [&str; 6] = [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ];
    let local = DATE_TIMES
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(body, f).ok())
        .or_else(|| {
            let time = ["%H:%M:%S%.f", "%H:%M:%S", "%H:%M"]
                .iter()
                .find_map(|f| NaiveTime::parse_from_str(body, f).ok())?;
            // Today at that offset.
            let local_now = now_us.checked_add(offset as i64 * 1_000_000)?;
            let days = local_now.div_euclid(86_400_000_000);
            let date = NaiveDate::from_ymd_opt(1970, 1, 1)?
                .checked_add_signed(chrono::Duration::days(days))?;
            Some(date.and_time(time))
        })?;
    let zone = FixedOffset::east_opt(offset)?;
    Some(local.and_local_timezone(zone).single()?.timestamp_micros())
}

/// Splits a trailing `Z` or `±HH:MM` (or `±HHMM`) off a time: the rest and the offset
/// in seconds east of UTC (0 without one).
fn split_offset(text: &str) -> Option<(&str, i32)> {
    if let Some(body) = text.strip_suffix(['Z', 'z']) {
        return Some((body, 0));
    }
    // An offset's sign comes after the time of day (a date's dashes come before it).
    let time_at = text.find(':').map_or(text.len(), |c| c.saturating_sub(2));
    let Some(sign_at) = text[time_at..].rfind(['+', '-']).map(|i| i + time_at) else {
        return Some((text, 0));
    };
    let (body, off) = text.split_at(sign_at);
    let sign = if off.starts_with('-') { -1 } else { 1 };
    let digits: String = off[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = digits[2..].parse().ok()?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((body.trim_end(), sign * (hours * 3600 + minutes * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_options_is_what_every_front_end_builds() {
        let f =
            SampleFilter::from_options(&[7, 9], Some(1.0), Some(2.5), &["has-gil", "no-on-cpu"])
                .unwrap();
        assert_eq!(f.threads, Some([7, 9].into_iter().collect()));
        assert_eq!((f.start_s, f.end_s), (Some(1.0), Some(2.5)));
        assert_eq!(
            (f.status_set, f.status_clear),
            (status::HAS_GIL, status::ON_CPU)
        );
        // No thread ids: every thread.
        let all = SampleFilter::from_options::<&str>(&[], None, None, &[]).unwrap();
        assert!(all.is_empty());
        for (start, end, terms, says) in [
            (Some(2.0), Some(1.0), vec![], "empty"),
            (Some(f64::NAN), None, vec![], "number"),
            (None, None, vec!["hot"], "unknown status flag 'hot'"),
        ] {
            let e = SampleFilter::from_options(&[], start, end, &terms).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}

//! The options of the reading commands, each declared once: [`FilterSpec`] (which
//! samples to keep) here, [`super::TopOptions`] and [`super::DiffOptions`] beside their
//! reports. clap derives the flags of `tach top`, `diff`, `export` and `query` from
//! them, and the Python package fills the same structs through serde, so a field added
//! to a spec is a flag and a keyword at once; [`field_names`] lists a spec's fields for
//! the front ends' messages and for the tests that hold every front end to them.

use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, Visitor};

use crate::tach::filter::{parse_wall_time, FilterError};
use crate::tach::SampleFilter;

/// The sample filter a user asks for: threads, a time window and status flags. The
/// doc comments are the flags' `--help`; the Python keywords have the same names.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[cfg_attr(feature = "record", derive(clap::Args))]
#[serde(default, deny_unknown_fields)]
pub struct FilterSpec {
    /// Keep only this thread id (repeatable).
    #[cfg_attr(feature = "record", arg(long = "thread", value_name = "TID"))]
    #[serde(deserialize_with = "one_or_many")]
    pub threads: Vec<u64>,
    /// Keep samples from this many seconds after the first sample.
    #[cfg_attr(feature = "record", arg(long, value_name = "SECONDS"))]
    pub start: Option<f64>,
    /// Keep samples before this many seconds after the first sample.
    #[cfg_attr(feature = "record", arg(long, value_name = "SECONDS"))]
    pub end: Option<f64>,
    /// Keep samples taken at or after this wall-clock time: a time of day (14:05,
    /// 14:05:30.25; today, in UTC unless an offset follows: 14:05+02:00) or ISO 8601
    /// (2026-11-28T14:05:00Z). Needs files recorded by tach (they keep the wall-clock
    /// time of their start).
    #[cfg_attr(feature = "record", arg(long, value_name = "TIME"))]
    pub since: Option<String>,
    /// Keep samples taken before this wall-clock time (as --since).
    #[cfg_attr(feature = "record", arg(long, value_name = "TIME"))]
    pub until: Option<String>,
    /// Keep samples whose status has this flag: on-cpu, has-gil, gil-requested,
    /// has-exception, main-thread, unknown, or no-FLAG (repeatable).
    #[cfg_attr(feature = "record", arg(long, value_name = "FLAG"))]
    #[serde(deserialize_with = "one_or_many")]
    pub status: Vec<String>,
}

impl FilterSpec {
    /// The format's filter, checked (a window that is empty or not in seconds, an
    /// unknown status flag: the same message in every front end).
    pub fn build(&self) -> Result<SampleFilter, FilterError> {
        self.build_at(now_us())
    }

    /// [`Self::build`] with "today" the UTC day of `now_us` (µs since the Unix epoch).
    fn build_at(&self, now_us: i64) -> Result<SampleFilter, FilterError> {
        let mut filter =
            SampleFilter::from_options(&self.threads, self.start, self.end, &self.status)?;
        let parse = |what, value: &Option<String>| match value {
            Some(text) => {
                parse_wall_time(text, now_us)
                    .map(Some)
                    .ok_or_else(|| FilterError::WallTime {
                        what,
                        value: text.clone(),
                    })
            }
            None => Ok(None),
        };
        filter.since_us = parse("since", &self.since)?;
        filter.until_us = parse("until", &self.until)?;
        if let (Some(since), Some(until)) = (filter.since_us, filter.until_us) {
            if since >= until {
                return Err(FilterError::EmptyWallWindow {
                    since: self.since.clone().unwrap_or_default(),
                    until: self.until.clone().unwrap_or_default(),
                });
            }
        }
        Ok(filter)
    }
}

/// Now, in µs since the Unix epoch (0 if the clock is before it).
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// A repeatable option's values: one value, a list, or none (`threads=None` and
/// `threads=7` mean what `threads=[]` and `threads=[7]` do).
fn one_or_many<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum OneOrMany<T> {
        Many(Vec<T>),
        One(T),
    }
    Ok(match Option::<OneOrMany<T>>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(OneOrMany::Many(v)) => v,
        Some(OneOrMany::One(v)) => vec![v],
    })
}

/// The field names of a spec as serde reads them (a struct without `flatten`): what
/// `derive(Deserialize)` hands to `deserialize_struct`, asked for without any data.
pub fn field_names<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Fields;
    #[derive(Debug)]
    struct Found(&'static [&'static str]);
    impl std::fmt::Display for Found {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field names")
        }
    }
    impl std::error::Error for Found {}
    impl de::Error for Found {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Found(&[])
        }
    }
    impl<'de> Deserializer<'de> for Fields {
        type Error = Found;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
            Err(Found(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Found> {
            Err(Found(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    match T::deserialize(Fields) {
        Err(Found(fields)) => fields,
        Ok(_) => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_spec_reads_one_value_or_many_and_builds_the_format_filter() {
        let spec: FilterSpec = serde_json::from_value(serde_json::json!({
            "threads": 7, "status": ["on-cpu", "no-has-gil"], "start": 1.5, "end": null,
        }))
        .unwrap();
        assert_eq!(spec.threads, [7]);
        assert_eq!(spec.status, ["on-cpu", "no-has-gil"]);
        let filter = spec.build().unwrap();
        assert_eq!(filter.threads, Some([7].into_iter().collect()));
        assert_eq!((filter.start_s, filter.end_s), (Some(1.5), None));
        assert_ne!(filter.status_set, 0);
        assert_ne!(filter.status_clear, 0);
        let none: FilterSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(none.build().unwrap().is_empty());
        let bad = serde_json::from_value::<FilterSpec>(serde_json::json!({"thread": [1]}));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("unknown field `thread`"));
        let window = FilterSpec {
            start: Some(2.0),
            end: Some(1.0),
            ..FilterSpec::default()
        };
        assert!(matches!(
            window.build(),
            Err(FilterError::EmptyWindow { .. })
        ));
    }

    #[test]
    fn wall_clock_times_parse_as_iso_8601_or_a_time_of_day() {
        // 2026-11-28T10:00:00Z: "today" for a time of day.
        let now = 1_795_860_000_000_000;
        let at = |t: &str| parse_wall_time(t, now);
        let h14 = 1_795_874_400_000_000; // 2026-11-28T14:00:00Z
        assert_eq!(at("2026-11-28T14:00:00Z"), Some(h14));
        assert_eq!(at("2026-11-28T15:00:00+01:00"), Some(h14));
        assert_eq!(at("2026-11-28 14:00"), Some(h14));
        assert_eq!(at("2026-11-28T14:00:00.25"), Some(h14 + 250_000));
        assert_eq!(at("2026-11-28T09:00-05:00"), Some(h14));
        assert_eq!(at("14:00"), Some(h14));
        assert_eq!(at("14:00Z"), Some(h14));
        assert_eq!(at("14:00:00.000001"), Some(h14 + 1));
        assert_eq!(at("16:00+02:00"), Some(h14));
        assert_eq!(at("0900-0500"), None);
        // Today at the offset: at 10:00Z it is already the 29th in UTC+14.
        assert_eq!(at("00:30+14:00"), Some(1_795_861_800_000_000));
        for bad in [
            "",
            "14",
            "25:00",
            "14:00+2",
            "2026-13-01T00:00Z",
            "noon",
            "14:00+24:00",
        ] {
            assert_eq!(at(bad), None, "{bad}");
        }
        let spec = FilterSpec {
            since: Some("14:10".into()),
            until: Some("14:00".into()),
            ..FilterSpec::default()
        };
        let e = spec.build_at(now).unwrap_err().to_string();
        assert!(e.contains("--until must come after --since"), "{e}");
        let spec = FilterSpec {
            since: Some("2pm".into()),
            ..FilterSpec::default()
        };
        let e = spec.build_at(now).unwrap_err().to_string();
        assert!(e.starts_with("--since 2pm: expected a time of day"), "{e}");
        let spec = FilterSpec {
            since: Some("14:00".into()),
            until: Some("14:10".into()),
            ..FilterSpec::default()
        };
        let f = spec.build_at(now).unwrap();
        assert_eq!(
            (f.since_us, f.until_us),
            (Some(h14), Some(h14 + 600_000_000))
        );
        assert!(f.needs_origin() && !f.is_empty());
    }

    #[test]
    fn field_names_are_the_declared_fields() {
        assert_eq!(
            field_names::<FilterSpec>(),
            ["threads", "start", "end", "since", "until", "status"]
        );
    }
}

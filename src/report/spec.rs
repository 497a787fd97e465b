//! The options of the reading commands, each declared once: [`FilterSpec`] (which
//! samples to keep) here, [`super::TopOptions`] and [`super::DiffOptions`] beside their
//! reports. clap derives the flags of `tach top`, `diff`, `export` and `query` from
//! them, and the Python package fills the same structs through serde, so a field added
//! to a spec is a flag and a keyword at once; [`field_names`] lists a spec's fields for
//! the front ends' messages and for the tests that hold every front end to them.

use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, Visitor};

use crate::tach::filter::FilterError;
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
        SampleFilter::from_options(&self.threads, self.start, self.end, &self.status)
    }
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
    fn field_names_are_the_declared_fields() {
        assert_eq!(
            field_names::<FilterSpec>(),
            ["threads", "start", "end", "status"]
        );
    }
}

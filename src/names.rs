//! Closed sets of named values (a recording mode, a sort order, a report format), each
//! named once: clap's `ValueEnum` derive gives every variant its name, and every front
//! end (the CLI, `python -m tach run`, the Python keywords) turns a name into the value
//! with [`parse`], so a bad name gets one message everywhere and `--help` lists the
//! names from the same place ([`parser`]).
//!
//! clap is built with the recorder (feature `record`: its options are clap types). A
//! build without it (a library that only reads, reports and exports) still parses the
//! report's names: each type lists them ([`without_clap::Named`], implemented beside
//! the type, so that this module knows none of the types it names), and a test checks the lists against
//! clap's derive.

#[cfg(feature = "record")]
pub use with_clap::*;
#[cfg(not(feature = "record"))]
pub use without_clap::{name, parse, NameSet};

/// "a, b or c".
fn joined(names: Vec<String>) -> String {
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The message every front end gives for a bad name:
/// `unknown mode 'x': use wall, cpu, gil or exception`.
fn unknown(what: &str, text: &str, names: Vec<String>) -> String {
    format!("unknown {what} '{text}': use {}", joined(names))
}

#[cfg(feature = "record")]
mod with_clap {
    use std::ffi::OsStr;
    use std::marker::PhantomData;

    use clap::builder::{PossibleValue, TypedValueParser};
    use clap::ValueEnum;

    /// A closed set of named values: with clap, its `ValueEnum` derive names them.
    pub trait NameSet: ValueEnum {}
    impl<E: ValueEnum> NameSet for E {}

    /// The value of `E` called `text`, or the message every front end gives:
    /// `unknown mode 'x': use wall, cpu, gil or exception`.
    pub fn parse<E: ValueEnum>(what: &str, text: &str) -> Result<E, String> {
        E::value_variants()
            .iter()
            .find(|v| {
                v.to_possible_value()
                    .is_some_and(|p| p.matches(text, false))
            })
            .cloned()
            .ok_or_else(|| super::unknown(what, text, names::<E>()))
    }

    fn names<E: ValueEnum>() -> Vec<String> {
        possible::<E>().map(|p| p.get_name().to_string()).collect()
    }

    /// The name of `value` (`E`'s own, as `--help` shows it).
    pub fn name<E: ValueEnum>(value: &E) -> String {
        value
            .to_possible_value()
            .map(|p| p.get_name().to_string())
            .unwrap_or_default()
    }

    fn possible<E: ValueEnum>() -> std::vec::IntoIter<PossibleValue> {
        let values: Vec<PossibleValue> = E::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value())
            .filter(|p| !p.is_hide_set())
            .collect();
        values.into_iter()
    }

    /// clap's parser for a value of `E`: [`parse`]'s message on a bad name, and the names
    /// as `--help`'s possible values.
    pub fn parser<E: ValueEnum + Clone + Send + Sync + 'static>(what: &'static str) -> Parser<E> {
        Parser {
            what,
            values: PhantomData,
        }
    }

    /// See [`parser`].
    #[derive(Clone)]
    pub struct Parser<E> {
        what: &'static str,
        values: PhantomData<fn() -> E>,
    }

    impl<E: ValueEnum + Clone + Send + Sync + 'static> TypedValueParser for Parser<E> {
        type Value = E;

        fn parse_ref(
            &self,
            cmd: &clap::Command,
            _arg: Option<&clap::Arg>,
            value: &OsStr,
        ) -> Result<E, clap::Error> {
            parse(self.what, &value.to_string_lossy()).map_err(|message| {
                clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{message}\n"))
                    .with_cmd(cmd)
            })
        }

        fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
            Some(Box::new(possible::<E>()))
        }
    }
}

/// The report's names, for a build without clap. Each list is in the order of the
/// enum's variants, as clap's derive gives them (`names_match_clap` checks both).
#[cfg(any(test, not(feature = "record")))]
pub(crate) mod without_clap {
    /// A closed set of values, each with its name.
    pub trait Named: Sized + Copy + PartialEq + 'static {
        const NAMES: &'static [(&'static str, Self)];
    }

    /// A closed set of named values: without clap, [`Named`] names them.
    #[cfg_attr(test, allow(dead_code))]
    pub trait NameSet: Named {}
    impl<E: Named> NameSet for E {}

    /// The value of `E` called `text`, or the message every front end gives.
    #[cfg_attr(test, allow(dead_code))]
    pub fn parse<E: Named>(what: &str, text: &str) -> Result<E, String> {
        E::NAMES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|&(_, value)| value)
            .ok_or_else(|| super::unknown(what, text, names::<E>()))
    }

    /// The name of `value`.
    #[cfg_attr(test, allow(dead_code))]
    pub fn name<E: Named>(value: &E) -> String {
        E::NAMES
            .iter()
            .find(|(_, v)| v == value)
            .map(|(name, _)| name.to_string())
            .unwrap_or_default()
    }

    fn names<E: Named>() -> Vec<String> {
        E::NAMES.iter().map(|(name, _)| name.to_string()).collect()
    }
}

/// A value of `E` deserialized from its name, with [`parse`]'s message on a bad one: the
/// Python front ends fill the same specs through serde that clap fills from flags.
pub fn deserialize<'de, D, E>(deserializer: D, what: &str) -> Result<E, D::Error>
where
    D: serde::Deserializer<'de>,
    E: NameSet,
{
    let text = <String as serde::Deserialize>::deserialize(deserializer)?;
    parse(what, &text).map_err(serde::de::Error::custom)
}

/// `#[serde(deserialize_with = ...)]` functions for optional named values, one per
/// kind of name (what the messages call it), generic over the enum so that this module
/// knows none of the types it names. Only the recorder's options use them.
#[cfg(feature = "record")]
pub mod optional {
    use serde::{Deserialize, Deserializer};

    fn named<'de, D: Deserializer<'de>, E: super::NameSet>(
        deserializer: D,
        what: &str,
    ) -> Result<Option<E>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(None),
            Some(text) => super::parse(what, &text)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }

    pub fn mode<'de, D: Deserializer<'de>, E: super::NameSet>(d: D) -> Result<Option<E>, D::Error> {
        named(d, "mode")
    }

    pub fn compression<'de, D: Deserializer<'de>, E: super::NameSet>(
        d: D,
    ) -> Result<Option<E>, D::Error> {
        named(d, "compression")
    }

    pub fn async_mode<'de, D: Deserializer<'de>, E: super::NameSet>(
        d: D,
    ) -> Result<Option<E>, D::Error> {
        named(d, "async mode")
    }
}

#[cfg(test)]
#[cfg(feature = "record")]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[derive(Debug, Clone, Copy, PartialEq, ValueEnum)]
    enum Fruit {
        Apple,
        BloodOrange,
        Pear,
    }

    #[test]
    fn names_come_from_the_enum() {
        assert_eq!(
            parse::<Fruit>("fruit", "blood-orange"),
            Ok(Fruit::BloodOrange)
        );
        assert_eq!(
            parse::<Fruit>("fruit", "kiwi"),
            Err("unknown fruit 'kiwi': use apple, blood-orange or pear".into())
        );
        assert_eq!(name(&Fruit::Pear), "pear");
        let cmd =
            clap::Command::new("t").arg(clap::Arg::new("f").long("fruit").value_parser(parser::<
                Fruit,
            >(
                "fruit"
            )));
        let m = cmd.clone().try_get_matches_from(["t", "--fruit", "pear"]);
        assert_eq!(m.unwrap().get_one::<Fruit>("f"), Some(&Fruit::Pear));
        let err = cmd
            .clone()
            .try_get_matches_from(["t", "--fruit", "kiwi"])
            .unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err
            .to_string()
            .contains("unknown fruit 'kiwi': use apple, blood-orange or pear"));
        let help = cmd.clone().render_help().to_string();
        assert!(
            help.contains("[possible values: apple, blood-orange, pear]"),
            "{help}"
        );
    }

    /// The lists a build without clap parses with are clap's names, in clap's order.
    #[test]
    fn names_match_clap() {
        use crate::report::{Format, GroupBy, Metric, SortBy};
        fn check<E: ValueEnum + without_clap::Named + std::fmt::Debug>() {
            let clap: Vec<(String, E)> =
                E::value_variants().iter().map(|v| (name(v), *v)).collect();
            let ours: Vec<(String, E)> =
                E::NAMES.iter().map(|&(n, v)| (n.to_string(), v)).collect();
            assert_eq!(clap, ours);
            for (n, v) in &ours {
                assert_eq!(parse::<E>("x", n).as_ref(), Ok(v));
                assert_eq!(&without_clap::parse::<E>("x", n), &Ok(*v));
            }
            assert_eq!(
                parse::<E>("x", "nope").unwrap_err(),
                without_clap::parse::<E>("x", "nope").unwrap_err()
            );
        }
        check::<Format>();
        check::<GroupBy>();
        check::<Metric>();
        check::<SortBy>();
    }
}

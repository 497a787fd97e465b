//! Reports over one or several profiles: `tach top` (the pstats summary table) and
//! `tach diff` (which functions' share of the samples changed between two sets of
//! runs, beyond noise). Both read the tach reader's samples and index, never bytes.
//!
//! Rows are keyed by function (filename, function name), by line (filename, line,
//! function name: CPython's pstats key) or by file. Frames of the profiler's own
//! `_sync_coordinator.py` are dropped first, as CPython's collectors do.

mod diff;
mod error;
mod flamediff;
mod keys;
#[cfg(feature = "cli")]
pub(crate) mod live;
mod output;
pub(crate) mod spec;
mod top;

pub use diff::{diff, DiffOptions, DiffReport, DiffRow, Metric, Side, Verdict};
pub use flamediff::write_flamegraph;
pub use output::{top_table_header, top_table_row, write_diff, write_top, Format};
pub use spec::{field_names, FilterSpec};
pub use top::{top, SortBy, TopOptions, TopReport, TopRow};

pub use error::{ReportError, Result};
pub use keys::{GroupBy, Key};

/// The report's names for a build without clap (whose `ValueEnum` derive names them
/// otherwise): in the order of each enum's variants, as `names::tests` checks.
#[cfg(any(test, not(feature = "record")))]
mod names_without_clap {
    use super::{Format, GroupBy, Metric, SortBy};
    use crate::names::without_clap::Named;

    impl Named for Format {
        const NAMES: &'static [(&'static str, Self)] = &[
            ("table", Format::Table),
            ("csv", Format::Csv),
            ("json", Format::Json),
        ];
    }

    impl Named for GroupBy {
        const NAMES: &'static [(&'static str, Self)] = &[
            ("function", GroupBy::Function),
            ("line", GroupBy::Line),
            ("file", GroupBy::File),
        ];
    }

    impl Named for Metric {
        const NAMES: &'static [(&'static str, Self)] =
            &[("self", Metric::SelfShare), ("total", Metric::Total)];
    }

    impl Named for SortBy {
        const NAMES: &'static [(&'static str, Self)] = &[
            ("self", SortBy::SelfTime),
            ("total", SortBy::TotalTime),
            ("samples", SortBy::Samples),
            ("name", SortBy::Name),
        ];
    }
}

//! tach: read, check, rewrite, export, query and record CPython's TACH sampling
//! profiles (the `--binary` output of CPython 3.15's `profiling.sampling`).
//!
//! The modules are private; what a user of the library needs is re-exported:
//!
//! - the format, at the crate root: [`TachFile`] reads a file (its samples as a
//!   [`SampleStream`], its frames, strings and header), [`Writer`] writes one,
//!   [`SampleFilter`] selects samples, [`ProfileIndex`] and [`StackCounts`] aggregate
//!   them, [`totals()`] gives self and cumulative samples per key, [`rewrite`] re-encodes,
//!   [`recover()`] rebuilds a file from the crash journal a killed recording left;
//! - [`export`]: one exporter per output format behind [`export::Exporter`], and the
//!   registry every front end uses;
//! - [`query`] (feature `query`): SQL over profiles;
//! - [`record`]: the in-process recorder;
//! - [`report`]: `tach top` (the pstats summary table) and `tach diff` (share changes
//!   beyond noise between two sets of runs);
//! - [`live`]: `tach top --pid`'s terminal view of a recording in progress;
//! - [`cli`]: the command line, a thin layer over the above.
//!
//! Data flows one way: bytes → the reader → samples or an aggregated index → an
//! exporter, the query tables or a report. The format knows nothing of output formats.

pub mod alloc;
pub mod cli;
pub mod export;
pub mod live;
pub mod names;
pub mod record;
pub mod report;
mod tach;

/// The golden corpus's helpers, one file for the unit tests here and the integration
/// tests (`tests/suite/common.rs`).
#[cfg(test)]
#[path = "../tests/suite/common.rs"]
#[allow(dead_code)]
mod golden_corpus;
#[cfg(feature = "python-record")]
mod python;
#[cfg(feature = "query")]
pub mod query;

pub use crate::tach::counts::{Chunking, GroupCount, Route, StackCounts};
pub use crate::tach::filter::{status, FilterError};
pub use crate::tach::index::{first_timestamp, StackTable, ThreadProfile};
pub use crate::tach::journal::journal_path;
pub use crate::tach::recover::{self, recover, RecoverError, Recovered};
pub use crate::tach::rewrite;
pub use crate::tach::totals::{totals, KeyTotals, Totals};
pub use crate::tach::{
    ByteOrder, CaptureFeatures, Compression, Config, Decompression, Footer, FormatError,
    FrameEntry, Header, Located, Location, OwnedSample, ProfileIndex, ProfilingMode, RecordKind,
    RecordMix, Region, Result, Run, Sample, SampleFilter, SampleStream, Stats, TachError, TachFile,
    WriteSummary, Writer, WriterBuilder, DEFAULT_ZSTD_LEVEL, MAX_STACK_DEPTH, RUN_BATCH,
};

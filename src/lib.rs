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
//! - [`record`]: the recorder, attached to a running interpreter from outside
//!   ([`record::attach()`] then [`record::Session::start`]) or run as a command
//!   ([`record::RecordCommand`]); the same options for every front end
//!   ([`record::options::RecordSpec`]);
//! - [`report`]: `tach top` (the pstats summary table) and `tach diff` (share changes
//!   beyond noise between two sets of runs);
//! - [`run_cli`]: the `tach` command line, a thin clap layer over the above.
//!
//! Data flows one way: bytes → the reader → samples or an aggregated index → an
//! exporter, the query tables or a report. The format knows nothing of output formats.

// The binary's plumbing is private: the command line (reached through [`run_cli`]),
// the live view behind `tach top --pid`, the allocator the binary installs, and the
// names every front end parses.
mod alloc;
mod cli;
pub mod export;
mod live;
mod names;
pub mod record;
pub mod report;
mod tach;

/// The golden corpus's helpers, one file for the unit tests here and the integration
/// tests (`tests/suite/common.rs`).
#[cfg(test)]
#[path = "../tests/suite/common.rs"]
#[allow(dead_code)]
mod golden_corpus;
/// The Python extension (feature `python-record`); only its front ends' command-line
/// definitions are built without it, for the tests that compare them with the CLI's.
#[doc(hidden)]
pub mod python;
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

/// Runs the `tach` command line `args` (the first word is the program name) and returns
/// its exit status: 0 success, 1 a bad or unreadable input, 2 a usage error. Never exits
/// the process (the Python package runs it inside the interpreter).
///
/// The one public door to the CLI: `src/main.rs`, a binary of this package, can only
/// use public items, and a function keeps the clap definitions and the subcommands'
/// modules private (free to change) where a `#[doc(hidden)] pub mod cli` would make
/// every item in them reachable API.
pub fn run_cli<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    cli::main(args)
}

/// Entry points for the fuzz targets (`fuzz/`), built only with `--cfg fuzzing`.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Walks a native stack made from `data` with this process's unwind tables
    /// (`fuzz/fuzz_targets/native.rs`).
    pub fn native_walk(data: &[u8]) {
        crate::record::native_fuzz_walk(data)
    }
}

/// The allocator the `tach` binary installs (big blocks on transparent huge pages:
/// fewer page faults in exports). A library does not choose its user's allocator, so
/// it is here for `src/main.rs` only.
#[doc(hidden)]
pub use crate::alloc::HugePageAlloc;

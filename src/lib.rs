//! tach: read, check, rewrite, export, query and record CPython's TACH sampling
//! profiles (the `--binary` output of CPython 3.15's `profiling.sampling`).
//!
//! The public surface:
//!
//! - the format, at the crate root: [`TachFile`] reads a file (its samples as a
//!   [`SampleStream`] or [`Run`]s, its frames, strings, [`Header`] and [`Stats`]),
//!   [`Writer`] writes one, [`SampleFilter`] selects samples by thread, time and
//!   [`status`], [`rewrite`] re-encodes, [`recover()`] rebuilds a file from the crash
//!   journal ([`journal_path`]) a killed recording left;
//! - [`aggregate`]: samples counted by stack ([`aggregate::StackCounts`],
//!   [`aggregate::ProfileIndex`]) and self and cumulative totals per key
//!   ([`aggregate::totals()`]);
//! - [`export`]: one exporter per output format behind [`export::Exporter`], found by
//!   name in the registry every front end uses ([`export::find`], [`export::export_to`]);
//! - [`report`]: `tach top` (the pstats summary table) and `tach diff` (share changes
//!   beyond noise between two sets of runs);
//! - `query` (feature `query`, on by default): SQL over profiles;
//! - `record` (feature `record`): the recorder, attached to a running interpreter from
//!   outside (`record::attach()` then `record::Session::start`) or run as a command,
//!   with the same options for every front end (`record::options`, clap types);
//! - `run_cli` (feature `cli`, on by default): the `tach` command line, a thin clap
//!   layer over the above.
//!
//! Every other module is private. With `default-features = false` the crate reads,
//! writes, aggregates, reports and exports (and, adding feature `query`, queries)
//! without compiling the command line, the recorder or the native unwinder.
//!
//! Data flows one way: bytes → the reader → samples or an aggregated index → an
//! exporter, the query tables or a report. The format knows nothing of output formats.
//!
//! ```no_run
//! let file = tach::TachFile::open("profile.bin")?;
//! println!("{} samples", file.header().sample_count);
//! let mut samples = file.samples();
//! while let Some(sample) = samples.next_sample()? {
//!     let innermost = sample.stack.first().map_or("", |&frame| file.funcname(frame));
//!     println!("thread {} at {} us: {innermost}", sample.thread_id, sample.timestamp_us);
//! }
//! # Ok::<(), tach::TachError>(())
//! ```

// The binary's plumbing is private: the command line (reached through `run_cli`), the
// live view behind `tach top --pid`, the allocator the binary installs, and the names
// every front end parses.
#[cfg(feature = "cli")]
mod alloc;
#[cfg(feature = "cli")]
mod cli;
pub mod export;
#[cfg(feature = "cli")]
mod live;
mod names;
// The recorder's options' doc comments are clap's `--help` text, where `<pid>` and
// `<GC>` are words, not HTML.
#[cfg(feature = "record")]
#[allow(rustdoc::invalid_html_tags)]
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
/// definitions are built without it (with `cli`), for the tests that compare them with
/// the CLI's.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod python;
#[cfg(feature = "query")]
pub mod query;

pub use crate::tach::filter::{status, FilterError};
pub use crate::tach::journal::journal_path;
pub use crate::tach::reader::expand_dirs;
pub use crate::tach::recover::{self, recover, RecoverError, Recovered};
pub use crate::tach::rewrite;
pub use crate::tach::{
    ByteOrder, CaptureFeatures, Compression, Config, Decompression, Footer, FormatError,
    FrameEntry, Header, Located, Location, OwnedSample, ProfilingMode, RecordKind, RecordMix,
    Region, Result, Run, Sample, SampleFilter, SampleStream, Stats, TachError, TachFile,
    WriteSummary, Writer, WriterBuilder, DEFAULT_ZSTD_LEVEL, MAX_STACK_DEPTH,
};

pub mod aggregate {
    //! Samples aggregated: counted by stack, indexed by thread, summed per key.
    //!
    //! [`StackCounts`] counts each distinct stack once per thread and status (the
    //! fastest pass over a file); [`ProfileIndex`] adds each thread's samples in time
    //! order; [`totals()`] gives self and cumulative samples per key (a function, a
    //! line, a file) from either.

    pub use crate::tach::counts::{GroupCount, StackCounts};
    pub use crate::tach::index::{ProfileIndex, StackTable, ThreadProfile};
    pub use crate::tach::totals::{totals, KeyTotals, Totals};
}

/// The timestamp of a file's first sample: the origin of [`SampleFilter`]'s start and
/// end times. Public for the integration tests only.
#[doc(hidden)]
pub use crate::tach::index::first_timestamp;

/// Runs the `tach` command line `args` (the first word is the program name) and returns
/// its exit status: 0 success, 1 a bad or unreadable input, 2 a usage error. Never exits
/// the process (the Python package runs it inside the interpreter).
///
/// The one public door to the CLI: `src/main.rs`, a binary of this package, can only
/// use public items, and a function keeps the clap definitions and the subcommands'
/// modules private (free to change) where a `#[doc(hidden)] pub mod cli` would make
/// every item in them reachable API.
#[cfg(feature = "cli")]
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
    /// The counter's chunk sizes, chosen by the fuzz target (`fuzz/fuzz_targets/counts.rs`)
    /// so that small inputs are cut into many chunks.
    pub use crate::tach::counts::{Chunking, Route};

    /// Walks a native stack made from `data` with this process's unwind tables
    /// (`fuzz/fuzz_targets/native.rs`).
    #[cfg(feature = "record")]
    pub fn native_walk(data: &[u8]) {
        crate::record::native_fuzz_walk(data)
    }
}

/// The allocator the `tach` binary installs (big blocks on transparent huge pages:
/// fewer page faults in exports). A library does not choose its user's allocator, so
/// it is here for `src/main.rs` only.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub use crate::alloc::HugePageAlloc;

//! The TACH format: varints, header and footer, tables, sample records, the reader and
//! the writer. This module knows nothing of output formats.

pub mod counts;
pub mod error;
pub mod filter;
mod grammar;
pub mod header;
pub mod index;
#[cfg(feature = "cli")]
pub mod info;
pub mod journal;
pub mod reader;
pub mod records;
pub mod recover;
pub mod rewrite;
pub mod source;
pub mod stack_table;
pub mod tables;
pub mod totals;
pub mod varint;
pub mod walk;
pub mod writer;

pub use error::{FormatError, Located, Region, Result, TachError};
pub use filter::SampleFilter;
pub use header::{
    ByteOrder, CaptureFeatures, Compression, Config, Footer, Header, ProfilingMode, Stats,
    MAX_STACK_DEPTH,
};
pub use index::ProfileIndex;
pub use reader::{Decompression, SampleStream, TachFile};
pub use records::{OwnedSample, RecordKind, RecordMix, Run, Sample};
pub use tables::{FrameEntry, Location};
pub use walk::KeptRuns;
pub use writer::{WriteSummary, Writer, WriterBuilder, DEFAULT_ZSTD_LEVEL};

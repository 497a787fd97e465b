//! Errors of the `tach` format layer.
//!
//! Every format error carries the file it came from, the byte offset where the problem
//! was found and what is wrong. Offsets inside a zstd-compressed sample region are
//! offsets in the decompressed stream, and the message says so.

use std::fmt;
use std::path::PathBuf;

use super::varint::VarintError;

/// Where an offset points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// A byte offset in the file itself.
    File,
    /// A byte offset in the decompressed zstd sample stream (which starts at file byte 64).
    DecompressedSamples,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Region::File => f.write_str("of the file"),
            Region::DecompressedSamples => f.write_str("of the decompressed sample data"),
        }
    }
}

/// What is wrong with a file, independent of where it was found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FormatError {
    #[error("file too small for the 64-byte header and 32-byte footer ({size} bytes)")]
    FileTooSmall { size: u64 },
    #[error("invalid magic number 0x{0:08x}: not a TACH file")]
    BadMagic(u32),
    #[error("unsupported format version {0} (this reader supports version 1)")]
    UnsupportedVersion(u32),
    #[error(
        "file was written by Python {major}.{minor}.{micro} with format version {version}; \
         this reader supports version 1"
    )]
    NewerVersion {
        version: u32,
        major: u8,
        minor: u8,
        micro: u8,
    },
    #[error("invalid profiling mode in header: {0}")]
    InvalidProfilingMode(u32),
    #[error("invalid {table} table offset {offset}: {why}")]
    TableOffset {
        table: &'static str,
        offset: u64,
        why: String,
    },
    #[error("invalid table offsets: string table ({string}) is after frame table ({frame})")]
    TablesOutOfOrder { string: u64, frame: u64 },
    #[error("{table} count {count} is larger than the {available} bytes left could hold")]
    CountTooLarge {
        table: &'static str,
        count: u32,
        available: u64,
    },
    #[error("malformed varint in {what}: {reason}")]
    MalformedVarint {
        what: &'static str,
        reason: VarintReason,
    },
    #[error("string {index} is {len} bytes long but only {left} bytes are left in the file")]
    StringTableOverflow { index: u32, len: u32, left: u64 },
    #[error("unexpected end of {0}")]
    UnexpectedEnd(&'static str),
    #[error("zstd decompression error: {0}")]
    Zstd(String),
    #[error("incomplete zstd frame: the sample data is truncated")]
    TruncatedZstd,
    #[error("truncated sample data: {0} trailing bytes do not make a record header")]
    TruncatedSamples(u64),
    #[error("unknown stack encoding {0}")]
    UnknownEncoding(u8),
    #[error(
        "invalid thread count: sample data contains more unique threads than declared in \
         header (declared {declared}, found at least {found})"
    )]
    TooManyThreads { declared: u32, found: u64 },
    #[error("stack depth {0} exceeds capacity 256")]
    StackDepth(u32),
    #[error("final stack depth {0} exceeds capacity 256")]
    FinalStackDepth(u64),
    #[error("shared count {shared} exceeds current stack depth {depth}")]
    SharedExceedsDepth { shared: u32, depth: usize },
    #[error("invalid frame index {index}: the frame table has {count} frames")]
    FrameIndex { index: u32, count: u32 },
    #[error("invalid string index {index} in frame {frame}: the string table has {count} strings")]
    StringIndex { frame: u32, index: u32, count: u32 },
    #[error("invalid RLE count {count}: at most {max} samples fit in the remaining data")]
    RleCount { count: u32, max: u64 },
    #[error("sample count mismatch: header declares {declared} samples but the data holds {decoded}")]
    SampleCountMismatch { declared: u64, decoded: u64 },
    #[error("invalid stats block: {0}")]
    Stats(String),
}

/// Why a varint was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VarintReason(pub VarintError);

impl fmt::Display for VarintReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            VarintError::Truncated => "the data ends inside it",
            VarintError::TooLong => "longer than 10 bytes",
            VarintError::Overflow32 => "value does not fit in 32 bits",
        })
    }
}

/// A format error located in a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    pub offset: u64,
    pub region: Region,
    pub error: FormatError,
}

impl Located {
    pub fn file(offset: u64, error: FormatError) -> Self {
        Located {
            offset,
            region: Region::File,
            error,
        }
    }
}

/// The error type of everything that opens, reads or writes TACH files.
#[derive(Debug, thiserror::Error)]
pub enum TachError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: byte {} {}: {}", path.display(), at.offset, at.region, at.error)]
    Format { path: PathBuf, at: Box<Located> },
    #[error("{0}")]
    Usage(String),
}

impl TachError {
    pub fn format(path: impl Into<PathBuf>, at: Located) -> Self {
        TachError::Format {
            path: path.into(),
            at: Box::new(at),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TachError::Io {
            path: path.into(),
            source,
        }
    }

    /// The format error, when this is one.
    pub fn format_error(&self) -> Option<&FormatError> {
        match self {
            TachError::Format { at, .. } => Some(&at.error),
            _ => None,
        }
    }
}

pub type Result<T, E = TachError> = std::result::Result<T, E>;

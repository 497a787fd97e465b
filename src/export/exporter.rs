//! What every format shares: the [`Exporter`] trait, its input and options, the
//! several-file side ([`DatasetExporter`]) and the export layer's error. The formats
//! use this file and `mod.rs` lists them; nothing here uses a format.

use std::cell::OnceCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::tach::index::ProfileIndex;
use crate::tach::walk::first_timestamp;
use crate::tach::{KeptRuns, Sample, SampleFilter, TachError, TachFile};

/// The tables the Parquet exporter writes, in order (here, not in `parquet.rs`, so that
/// `partition.rs` and the exporter read them from a file that uses neither).
#[cfg(feature = "query")]
pub const PARQUET_TABLES: [&str; 4] = ["samples", "frames", "stacks", "stack_counts"];

/// Errors of the export layer.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Read(#[from] TachError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    /// `--out-dir` found a partition of the same name written from another file.
    #[error("{}: written from another source ({recorded}), not from {now}; use --replace to write it again", partition.display())]
    SourceChanged {
        partition: PathBuf,
        recorded: String,
        now: String,
    },
}

pub type Result<T, E = ExportError> = std::result::Result<T, E>;

/// Format-independent options.
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// Flamegraph: one graph per thread instead of one merged graph.
    pub per_thread: bool,
    /// A title for formats that show one; defaults to the input's file name.
    pub title: Option<String>,
    /// Heatmap: (OLD, NEW) prefixes mapping recorded source paths to local ones.
    pub source_roots: Vec<(String, String)>,
    /// pprof: the wall-clock time of the recording's first sample (`time_nanos`).
    pub start_time: StartTime,
    /// Datasets (`--out-dir` with Parquet): write a partition again when it was written
    /// from another file of the same name.
    pub replace: bool,
}

/// The wall-clock time of a recording's first sample, for formats that carry one
/// (pprof's `time_nanos`): given, or the wall-clock origin stored in the file, or for
/// a file without one (only monotonic clock readings) estimated from its modification
/// time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartTime {
    /// The file's stored wall-clock origin; without one, its modification time minus
    /// the recording's span: the writers (CPython's and tach's) finish the file right
    /// after the last sample, so this is right for a file recorded here and not copied
    /// since.
    #[default]
    FromFileTime,
    /// Nanoseconds since the Unix epoch.
    At(i64),
    /// Leave the time unset (deterministic output whatever the file's mtime).
    Unset,
}

impl StartTime {
    /// Parses `file`, `none`, an RFC 3339 time (`2026-11-25T10:00:00Z`,
    /// `2026-11-25 11:00:00.5+01:00`) or seconds since the Unix epoch (`1764064800.25`).
    pub fn parse(text: &str) -> std::result::Result<StartTime, String> {
        let text = text.trim();
        match text {
            "file" => return Ok(StartTime::FromFileTime),
            "none" => return Ok(StartTime::Unset),
            _ => {}
        }
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
            return t
                .timestamp_nanos_opt()
                .map(StartTime::At)
                .ok_or_else(|| format!("'{text}': outside the years 1677-2262"));
        }
        unix_seconds_ns(text).map(StartTime::At).ok_or_else(|| {
            format!(
                "'{text}': expected an RFC 3339 time (2026-11-25T10:00:00Z), seconds since \
                 the Unix epoch, 'file' or 'none'"
            )
        })
    }
}

/// `SECONDS[.FRACTION]` since the Unix epoch in nanoseconds, exactly (no float rounding),
/// or `None` if it is not that or does not fit.
fn unix_seconds_ns(text: &str) -> Option<i64> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let nanos: i64 = format!("{fraction:0<9}").parse().ok()?;
    whole
        .parse::<i64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)
}

/// Per frame: a native frame that a native walk recorded (`tach record --native`), not
/// CPython's own `<native>` placeholder, whose rendering CPython's exports define.
pub(crate) fn walked_native_frames(file: &TachFile) -> Vec<bool> {
    let mut native = file.native_frames();
    for (n, f) in native.iter_mut().zip(file.frames()) {
        *n = *n && file.string(f.filename) != "~";
    }
    native
}

/// What an exporter reads: one file, the filter to apply, and shared options.
pub struct ExportInput<'a> {
    pub file: &'a TachFile,
    pub filter: &'a SampleFilter,
    pub options: &'a ExportOptions,
    index: OnceCell<ProfileIndex>,
    origin: OnceCell<Option<u64>>,
}

impl<'a> ExportInput<'a> {
    pub fn new(file: &'a TachFile, filter: &'a SampleFilter, options: &'a ExportOptions) -> Self {
        ExportInput {
            file,
            filter,
            options,
            index: OnceCell::new(),
            origin: OnceCell::new(),
        }
    }

    /// The aggregated index of the kept samples (built once). It holds counts only:
    /// formats that need every sample's time read [`ExportInput::for_each_sample`], so
    /// that memory here grows with unique stacks, not with samples.
    pub fn index(&self) -> Result<&ProfileIndex> {
        if let Some(i) = self.index.get() {
            return Ok(i);
        }
        let built = ProfileIndex::build(self.file, self.filter)?;
        Ok(self.index.get_or_init(|| built))
    }

    /// The profile's first timestamp (before filtering), if it has samples.
    pub fn origin_us(&self) -> Result<Option<u64>> {
        if let Some(o) = self.origin.get() {
            return Ok(*o);
        }
        let o = first_timestamp(self.file)?;
        Ok(*self.origin.get_or_init(|| o))
    }

    /// The walk over the file's runs through the filter, its window bound to the
    /// (cached) first timestamp.
    pub fn kept_runs<M>(&self) -> Result<KeptRuns<'a, M>> {
        self.filter.wall_offset(self.file)?;
        let origin = if self.filter.needs_origin() {
            self.origin_us()?.unwrap_or(0)
        } else {
            0
        };
        Ok(KeptRuns::new(self.file, self.filter, origin))
    }

    /// Calls `f` for every kept sample, in file order.
    pub fn for_each_sample(&self, mut f: impl FnMut(&Sample<'_>)) -> Result<()> {
        let mut runs = self.kept_runs::<()>()?;
        while let Some(r) = runs.next_run()? {
            if !r.thread_kept {
                continue;
            }
            for (i, s) in r.run.samples().enumerate() {
                if r.keeps(i) {
                    f(&s);
                }
            }
        }
        Ok(())
    }

    /// The title for formats that show one.
    pub fn title(&self) -> String {
        self.options.title.clone().unwrap_or_else(|| {
            self.file
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "profile".into())
        })
    }
}

/// An output format.
pub trait Exporter: Send + Sync {
    /// The name used by `--format NAME` and `--NAME`.
    fn name(&self) -> &'static str;
    /// One line for `--help`.
    fn description(&self) -> &'static str;
    /// The suffix that replaces `.bin`/`.tach` for the default output path.
    fn extension(&self) -> &'static str;
    /// Writes the whole output.
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()>;
    /// Formats that write several files (Parquet: one per table) when the output is a
    /// path rather than a stream; `None` (the default) for one-file formats.
    fn dataset(&self) -> Option<&dyn DatasetExporter> {
        None
    }
    /// The format's own options (`tach export --NAME`): the CLI builds its flags and
    /// their help from these, and refuses them with another format.
    fn options(&self) -> &'static [FormatOption] {
        &[]
    }
    /// Whether the output is bytes rather than UTF-8 text (Python's `export()` returns
    /// `bytes` for these, `str` for the others). Datasets are binary.
    fn binary(&self) -> bool {
        self.dataset().is_some()
    }
}

/// One option of one format, as [`Exporter::options`] declares it.
pub struct FormatOption {
    /// The long flag, without `--`.
    pub name: &'static str,
    /// The value's placeholder in `--help`; `None` for a switch (no value).
    pub value_name: Option<&'static str>,
    /// May be given more than once (each value is applied in order).
    pub repeatable: bool,
    pub help: &'static str,
    /// Applies one occurrence (a switch gets ""); the error says what was wrong.
    pub apply: fn(&mut ExportOptions, &str) -> std::result::Result<(), String>,
}

/// The several-file side of a format (see [`Exporter::dataset`]).
pub trait DatasetExporter: Send + Sync {
    fn export_dataset(&self, input: &ExportInput<'_>, dest: &Dataset<'_>) -> Result<()>;
    /// Batch (`--out-dir`): the partition `source=<source>` of each table under
    /// `root`, written only when it is not there yet (see `partition`).
    fn export_partition(
        &self,
        input: &Path,
        root: &Path,
        source: &str,
        filter: &SampleFilter,
        options: &ExportOptions,
    ) -> Result<Outcome>;
}

/// What converting one input did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Written,
    /// A dataset's partitions were there already, written from this very file.
    Unchanged,
    /// A dataset's partitions of another file of the same name were written again
    /// (`--replace`).
    Replaced,
}

/// Where a several-file format writes.
pub enum Dataset<'a> {
    /// One input: every file inside this directory.
    Dir(&'a Path),
    /// One partition of a dataset: `DIR/<table>/part-0.parquet`, each file with this
    /// key-value metadata.
    Partition {
        dir: &'a Path,
        metadata: &'a [(String, String)],
    },
}

/// Maps a write error to an export error naming the output.
pub fn write_error(what: &str) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: PathBuf::from(what),
        source,
    }
}

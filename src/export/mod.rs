//! Exporters: one module per output format behind the [`Exporter`] trait, and one
//! registry that the CLI, the batch converter and the Python package all use.
//!
//! Exporters read the reader's filtered sample stream or its aggregated index, never
//! raw bytes. Output is deterministic: the same input gives the same bytes (pprof's
//! default time also reads the file's modification time; `--start-time none` drops it).
//!
//! Adding a format: write `src/export/NAME.rs` implementing [`Exporter`], then add one
//! line to [`REGISTRY`]. Its `--NAME` flag and its own options (declared by
//! [`Exporter::options`]) reach `tach export` and its `--help` from the registry.

pub mod batch;
mod collapsed;
mod flamegraph;
mod gecko;
mod heatmap;
mod jsonl;
mod marshal;
#[cfg(feature = "query")]
mod parquet;
#[cfg(feature = "query")]
pub mod partition;
mod pprof;
mod pstats;
mod pyjson;
pub(crate) mod render;
mod speedscope;

/// The tables the Parquet exporter writes, in order (here, not in `parquet.rs`, so that
/// this module re-exports nothing from a child that uses it).
#[cfg(feature = "query")]
pub const PARQUET_TABLES: [&str; 4] = ["samples", "frames", "stacks", "stack_counts"];

use std::cell::OnceCell;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::tach::index::ProfileIndex;
use crate::tach::walk::first_timestamp;
use crate::tach::{KeptRuns, Sample, SampleFilter, TachError, TachFile};

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

/// Why a format option was refused: the same message from `tach export` and from
/// Python's `export()` / `convert()` (both go through [`apply_options`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("--{option} is an option of --{owner}, not of --{format}")]
    OtherFormat {
        option: &'static str,
        owner: &'static str,
        format: &'static str,
    },
    #[error("--{option}: {message}")]
    BadValue {
        option: &'static str,
        message: String,
    },
    #[error("unknown option '{name}': the formats' options are {}", option_names().join(", "))]
    Unknown { name: String },
}

/// The option called `name` (`start-time`, or `start_time` as a Python keyword) and
/// the format that declares it.
pub fn find_option(name: &str) -> Option<(&'static dyn Exporter, &'static FormatOption)> {
    let name = name.replace('_', "-");
    REGISTRY
        .iter()
        .find_map(|&e| e.options().iter().find(|o| o.name == name).map(|o| (e, o)))
}

/// Every format's options, by name.
pub fn option_names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .flat_map(|e| e.options().iter().map(|o| o.name))
        .collect()
}

/// Applies format options, each given by name with its values in order (a switch:
/// given once, with no value), to `options` for an export to `format`, refusing those
/// of another format and values their format refuses.
pub fn apply_options<'a>(
    format: &dyn Exporter,
    given: impl IntoIterator<Item = (&'a str, &'a [String])>,
    options: &mut ExportOptions,
) -> std::result::Result<(), OptionError> {
    for (name, values) in given {
        let (owner, option) =
            find_option(name).ok_or_else(|| OptionError::Unknown { name: name.into() })?;
        if owner.name() != format.name() {
            return Err(OptionError::OtherFormat {
                option: option.name,
                owner: owner.name(),
                format: format.name(),
            });
        }
        let bad = |message: String| OptionError::BadValue {
            option: option.name,
            message,
        };
        match option.value_name {
            None => (option.apply)(options, "").map_err(bad)?,
            Some(_) if values.len() > 1 && !option.repeatable => {
                return Err(bad("given more than once".into()))
            }
            Some(_) => {
                for value in values {
                    (option.apply)(options, value).map_err(bad)?;
                }
            }
        }
    }
    Ok(())
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

/// Every format, in `--help` order.
pub static REGISTRY: &[&dyn Exporter] = &[
    &collapsed::Collapsed,
    &pstats::Pstats,
    &jsonl::Jsonl,
    &gecko::Gecko,
    &speedscope::Speedscope,
    &flamegraph::Flamegraph,
    &heatmap::Heatmap,
    &pprof::Pprof,
    #[cfg(feature = "query")]
    &parquet::Parquet,
];

/// The exporter called `name`.
pub fn find(name: &str) -> Option<&'static dyn Exporter> {
    REGISTRY.iter().copied().find(|e| e.name() == name)
}

/// The names of all formats, for error messages.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.name()).collect()
}

/// Where an export of `input` goes by default: beside it, with the format's extension
/// in place of `.bin` or `.tach` (as CPython's `replay` does).
pub fn default_output(input: &Path, exporter: &dyn Exporter) -> PathBuf {
    let stem = match input.extension().and_then(|e| e.to_str()) {
        Some("bin") | Some("tach") => input.with_extension(""),
        _ => input.to_path_buf(),
    };
    let mut name = stem.into_os_string();
    name.push(exporter.extension());
    PathBuf::from(name)
}

/// Exports `file` to `out`.
pub fn export_to(
    exporter: &dyn Exporter,
    file: &TachFile,
    filter: &SampleFilter,
    options: &ExportOptions,
    out: &mut dyn Write,
) -> Result<()> {
    let input = ExportInput::new(file, filter, options);
    exporter.export(&input, out)
}

/// Exports `input_path` into the file `output`, writing through a temporary file so
/// that a failed export leaves no partial output behind.
pub fn export_file(
    exporter: &dyn Exporter,
    input_path: &Path,
    output: &Path,
    filter: &SampleFilter,
    options: &ExportOptions,
) -> Result<()> {
    let file = TachFile::open(input_path)?;
    if let Some(ds) = exporter.dataset() {
        let input = ExportInput::new(&file, filter, options);
        return ds.export_dataset(&input, &Dataset::Dir(output));
    }
    let io = |source| ExportError::Io {
        path: output.to_path_buf(),
        source,
    };
    let tmp = {
        let mut name = output.as_os_str().to_owned();
        name.push(".partial");
        PathBuf::from(name)
    };
    let result = (|| {
        let f = std::fs::File::create(&tmp).map_err(io)?;
        // Big enough that writes are few; small enough that its fresh pages (a fault
        // each) cost nothing next to the export.
        let mut w = std::io::BufWriter::with_capacity(128 << 10, f);
        export_to(exporter, &file, filter, options, &mut w)?;
        w.flush().map_err(io)?;
        drop(w);
        // The old output goes first: ext4 writes back a file renamed over another
        // before the rename returns (its `auto_da_alloc` guard), which took 10 of 45 ms
        // when a 6.9 MB collapsed export replaced the previous one. A symlink is
        // replaced, not followed, as the rename alone would do; a directory stays, and
        // the rename then fails as before.
        if std::fs::symlink_metadata(output).is_ok_and(|m| !m.is_dir()) {
            let _ = std::fs::remove_file(output);
        }
        std::fs::rename(&tmp, output).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Maps a write error to an export error naming the output.
pub fn write_error(what: &str) -> impl Fn(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: PathBuf::from(what),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export replaces what was at its path: a file, or a symlink (the link itself,
    /// never its target); a directory there is an error and stays.
    #[test]
    fn export_file_replaces_a_file_or_a_link_and_refuses_a_directory() {
        let input = crate::golden_corpus::golden_bins()
            .into_iter()
            .find(|p| p.ends_with("cpu_recursive.bin"))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (out, target, link) = (
            dir.path().join("out.txt"),
            dir.path().join("target.txt"),
            dir.path().join("link.txt"),
        );
        let export = |to: &Path| {
            export_file(
                &collapsed::Collapsed,
                &input,
                to,
                &SampleFilter::default(),
                &ExportOptions::default(),
            )
        };
        std::fs::write(&out, "old").unwrap();
        export(&out).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.starts_with("tid:"), "{text:.40}");
        std::fs::write(&target, "kept").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        export(&link).unwrap();
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&link).unwrap(), text);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(export(&sub).is_err());
        assert!(sub.is_dir());
        assert!(!dir.path().join("sub.partial").exists());
    }

    #[test]
    fn options_apply_to_their_own_format_only() {
        let mut options = ExportOptions::default();
        let (pprof, flamegraph) = (find("pprof").unwrap(), find("flamegraph").unwrap());
        let none = ["none".to_string()];
        apply_options(pprof, [("start_time", &none[..])], &mut options).unwrap();
        assert_eq!(options.start_time, StartTime::Unset);
        apply_options(flamegraph, [("per-thread", &[][..])], &mut options).unwrap();
        assert!(options.per_thread);
        let err = |format, name: &str, values: &[String]| {
            let mut o = ExportOptions::default();
            apply_options(format, [(name, values)], &mut o)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(flamegraph, "start-time", &none),
            "--start-time is an option of --pprof, not of --flamegraph"
        );
        let heatmap = find("heatmap").unwrap();
        assert_eq!(
            err(heatmap, "source_root", &["x".into()]),
            "--source-root: 'x': expected OLD=NEW (two non-empty paths)"
        );
        assert_eq!(
            err(pprof, "start-time", &["1".into(), "2".into()]),
            "--start-time: given more than once"
        );
        assert!(err(pprof, "colour", &[])
            .starts_with("unknown option 'colour': the formats' options are "));
        assert!(pprof.binary() && find("pstats").unwrap().binary());
        assert!(!find("collapsed").unwrap().binary() && !heatmap.binary());
    }

    #[test]
    fn start_time_spellings() {
        let at = |ns: i64| Ok(StartTime::At(ns));
        let ten = 1_795_168_800_000_000_000; // 2026-11-20T10:00:00Z, from `date -d`
        assert_eq!(StartTime::parse("2026-11-20T10:00:00Z"), at(ten));
        assert_eq!(
            StartTime::parse("2026-11-20 05:00:00.25-05:00"),
            at(ten + 250_000_000)
        );
        // Unix seconds keep every nanosecond (no float rounding at 1.8e18 ns).
        assert_eq!(StartTime::parse("1795168800.000000001"), at(ten + 1));
        assert_eq!(StartTime::parse(" 1795168800 "), at(ten));
        assert_eq!(StartTime::parse("file"), Ok(StartTime::FromFileTime));
        assert_eq!(StartTime::parse("none"), Ok(StartTime::Unset));
        for bad in [
            "",
            "-5",
            "1.0000000001",
            "1e9",
            ".5",
            "9999999999999",
            "tomorrow",
        ] {
            let err = StartTime::parse(bad).unwrap_err();
            assert!(err.contains("RFC 3339"), "{bad}: {err}");
        }
    }
}

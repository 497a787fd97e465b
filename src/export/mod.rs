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
mod exporter;
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

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::tach::{SampleFilter, TachFile};
#[cfg(feature = "query")]
pub use exporter::PARQUET_TABLES;
pub use exporter::{
    write_error, Dataset, DatasetExporter, ExportError, ExportInput, ExportOptions, Exporter,
    FormatOption, Outcome, Result, StartTime,
};

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

//! Parquet through polars, with the schema of `tach query` (see `docs/parquet.md`).
//!
//! Layout: one Parquet file per table (`samples`, `frames`, `stacks`), because a
//! profile is relational (a sample points at a stack, a stack at frames) and
//! flattening stacks into every sample would multiply the data by the stack depth.
//! - one input: a directory `NAME.parquet/` holding `samples.parquet`,
//!   `frames.parquet` and `stacks.parquet`;
//! - `--out-dir DIR` (batch): a hive-partitioned dataset per table,
//!   `DIR/<table>/source=<name>/part-0.parquet`, which Spark, Trino or DuckDB read as
//!   one table with a `source` column; written incrementally, each file recording its
//!   source and the schema version (`super::partition`);
//! - a stream (`-o -`): the `samples` table alone, as one Parquet file.
//!
//! `samples` is streamed: the opened file is decoded in batches with the reader's own
//! filter (`query::batches`), and each batch is encoded as one row group while the next
//! is decoded, so memory does not grow with the samples. The same pass interns the
//! stacks, so `stacks` needs no second decode. Filters apply to `samples`; `frames` and
//! `stacks` are always the whole file's, so every `stack_id` and `frame_id` of the kept
//! samples resolves.

use std::io::Write;
use std::path::{Path, PathBuf};

use polars::prelude::*;

use super::exporter::{
    Dataset, DatasetExporter, ExportError, ExportInput, ExportOptions, Exporter, Outcome, Result,
};
use super::partition::write_partition;
use crate::query::batches::BatchError;
use crate::query::samples_parquet::{write_samples, WrittenSamples};
use crate::query::tables::{frames_frame, frames_with_file, stacks_frame, Wanted};
use crate::query::FILE_VALUE_KEY;
use crate::tach::{SampleFilter, TachFile};

pub struct Parquet;

impl Exporter for Parquet {
    fn name(&self) -> &'static str {
        "parquet"
    }
    fn description(&self) -> &'static str {
        "Parquet tables samples/frames/stacks in the tach query schema (a directory; --out-dir: hive-partitioned)"
    }
    fn extension(&self) -> &'static str {
        ".parquet"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let frames = frames_frame(input.file);
        samples(input, &frames, None, out).map(|_| ())
    }
    fn dataset(&self) -> Option<&dyn DatasetExporter> {
        Some(self)
    }
}

impl DatasetExporter for Parquet {
    fn export_dataset(&self, input: &ExportInput<'_>, dest: &Dataset<'_>) -> Result<()> {
        write_dataset(input, dest)
    }

    fn export_partition(
        &self,
        input: &Path,
        root: &Path,
        source: &str,
        filter: &SampleFilter,
        options: &ExportOptions,
    ) -> Result<Outcome> {
        let value = partition_value(source);
        write_partition(input, root, &value, options.replace, |dir, metadata| {
            let file = TachFile::open(input)?;
            let ei = ExportInput::new(&file, filter, options);
            write_dataset(&ei, &Dataset::Partition { dir, metadata })
        })
    }
}

/// The `file` column's value: the input path as given.
fn file_name(input: &ExportInput<'_>) -> String {
    input.file.path().display().to_string()
}

/// Streams the filtered `samples` table into `out`; returns the file's unique stacks
/// and the samples' counts per stack, thread and status.
fn samples(
    input: &ExportInput<'_>,
    frames: &DataFrame,
    metadata: Option<KeyValueMetadata>,
    out: &mut dyn Write,
) -> Result<WrittenSamples> {
    // A time window is bound to the file's first timestamp before the decode starts
    // (the input caches it); otherwise it is found beside the decode.
    let origin = if input.filter.needs_origin() {
        Some(input.origin_us()?.unwrap_or(0))
    } else {
        None
    };
    write_samples(
        input.file,
        &file_name(input),
        input.filter,
        origin,
        frames,
        metadata,
        out,
    )
    .map_err(|e| match e {
        BatchError::Read(e) => ExportError::Read(e),
        other => ExportError::Unsupported(format!("{}: {other}", input.file.path().display())),
    })
}

/// Hive partition values are path components: keep them plain.
fn partition_value(name: &str) -> String {
    let mut s = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// Where each table goes.
fn table_path(dest: &Dataset<'_>, table: &str) -> PathBuf {
    match dest {
        Dataset::Dir(dir) => dir.join(format!("{table}.parquet")),
        Dataset::Partition { dir, .. } => dir.join(table).join("part-0.parquet"),
    }
}

fn write_dataset(input: &ExportInput<'_>, dest: &Dataset<'_>) -> Result<()> {
    let name = file_name(input);
    let frames = frames_frame(input.file);
    // Every file says which `file` value its rows hold (readers of a dataset take it
    // from the footer); a partition also says where it came from.
    let mut kv = vec![(FILE_VALUE_KEY.to_string(), name.clone())];
    if let Dataset::Partition { metadata, .. } = dest {
        kv.extend(metadata.iter().cloned());
    }
    let metadata = Some(KeyValueMetadata::from_static(kv));
    let mut written = None;
    write_file(&table_path(dest, "samples"), |w| {
        written = Some(samples(input, &frames, metadata.clone(), w)?);
        Ok(())
    })?;
    let Some(WrittenSamples { stacks, counts }) = written else {
        return Err(ExportError::Unsupported(format!(
            "{name}: no samples written"
        )));
    };
    let polars_err = |e: PolarsError| ExportError::Unsupported(format!("{name}: {e}"));
    let mut frames_table = frames_with_file(&name, &frames);
    write_file(&table_path(dest, "frames"), |w| {
        write_table(&mut frames_table, metadata.clone(), w)
    })?;
    let mut stacks_table =
        stacks_frame(&name, &stacks, &frames, &Wanted(None)).map_err(polars_err)?;
    write_file(&table_path(dest, "stacks"), |w| {
        write_table(&mut stacks_table, metadata.clone(), w)
    })?;
    let mut counts_table = counts.frame(&name, &frames).map_err(polars_err)?;
    write_file(&table_path(dest, "stack_counts"), |w| {
        write_table(&mut counts_table, metadata, w)
    })
}

/// A whole table as one Parquet file (`metadata`: its key-value metadata), compressed
/// as `samples` is.
fn write_table(
    df: &mut DataFrame,
    metadata: Option<KeyValueMetadata>,
    out: &mut dyn Write,
) -> Result<()> {
    ParquetWriter::new(out)
        .with_compression(ParquetCompression::Zstd(None))
        .with_key_value_metadata(metadata)
        .finish(df)
        .map(|_| ())
        .map_err(|e| ExportError::Unsupported(format!("writing Parquet: {e}")))
}

/// Writes through `NAME.partial` and renames, so a failure leaves no partial table.
fn write_file(path: &Path, write: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    let io = |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let f = std::fs::File::create(&tmp).map_err(io)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        write(&mut w)?;
        w.flush().map_err(io)?;
        drop(w);
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

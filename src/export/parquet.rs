//! Parquet through polars, with the schema of `tach query` (see `docs/parquet.md`).
//!
//! Layout: one Parquet file per table (`samples`, `frames`, `stacks`), because a
//! profile is relational (a sample points at a stack, a stack at frames) and
//! flattening stacks into every sample would multiply the data by the stack depth.
//! - one input: a directory `NAME.parquet/` holding `samples.parquet`,
//!   `frames.parquet` and `stacks.parquet`;
//! - `--out-dir DIR` (batch): a hive-partitioned dataset per table,
//!   `DIR/<table>/source=<name>/part-0.parquet`, which Spark, Trino or DuckDB read as
//!   one table with a `source` column;
//! - a stream (`-o -`): the `samples` table alone, as one Parquet file.
//!
//! Filters apply to `samples`; `frames` and `stacks` are always the whole file's, so
//! every `stack_id` and `frame_id` of the kept samples resolves.

use std::io::Write;
use std::path::{Path, PathBuf};

use polars::prelude::*;

use super::{Dataset, DatasetExporter, ExportError, ExportInput, Exporter, Result};
use crate::query::output::write_parquet;
use crate::query::QueryEngine;
use crate::tach::TachFile;

pub struct Parquet;

/// The tables written, in order.
pub const TABLES: [&str; 3] = ["samples", "frames", "stacks"];

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
        let engine = engine(input)?;
        let mut df = table(&engine, input, "samples")?;
        write_parquet(&mut df, out).map_err(|e| ExportError::Unsupported(e.to_string()))
    }
    fn dataset(&self) -> Option<&dyn DatasetExporter> {
        Some(self)
    }
}

impl DatasetExporter for Parquet {
    fn export_dataset(&self, input: &ExportInput<'_>, dest: &Dataset<'_>) -> Result<()> {
        write_dataset(input, dest)
    }
}

fn engine(input: &ExportInput<'_>) -> Result<QueryEngine> {
    // The query layer owns its files; reopening maps the same bytes again.
    let path = input.file.path();
    let file = TachFile::open(path)?;
    Ok(QueryEngine::from_file(&path.display().to_string(), file))
}

fn polars_err<'a>(input: &'a ExportInput<'a>) -> impl Fn(PolarsError) -> ExportError + 'a {
    move |e| ExportError::Unsupported(format!("{}: {e}", input.file.path().display()))
}

/// One table with the export's filter applied (to `samples`).
fn table(engine: &QueryEngine, input: &ExportInput<'_>, name: &str) -> Result<DataFrame> {
    let mut lf = engine
        .table(name)
        .map_err(|e| ExportError::Unsupported(e.to_string()))?;
    if name == "samples" {
        if let Some(pred) = filter_expr(input)? {
            lf = lf.filter(pred);
        }
    }
    lf.collect().map_err(polars_err(input))
}

/// The sample filter as a polars predicate, with the same arithmetic as
/// `SampleFilter::bind` so the same samples are kept.
fn filter_expr(input: &ExportInput<'_>) -> Result<Option<Expr>> {
    let f = input.filter;
    let mut preds: Vec<Expr> = Vec::new();
    for flag in crate::tach::filter::status::FLAGS {
        if f.status_set & flag.bit != 0 {
            preds.push(col(flag.column));
        }
        if f.status_clear & flag.bit != 0 {
            preds.push(col(flag.column).not());
        }
    }
    if let Some(threads) = &f.threads {
        let mut ids: Vec<u64> = threads.iter().copied().collect();
        ids.sort_unstable();
        let any = ids
            .into_iter()
            .map(|t| col("thread_id").eq(lit(t)))
            .reduce(|a, b| a.or(b))
            .unwrap_or(lit(false));
        preds.push(any);
    }
    if f.needs_origin() {
        let origin = input.origin_us()?.unwrap_or(0) as f64;
        let ts = col("timestamp_us").cast(DataType::Float64);
        if let Some(s) = f.start_s {
            preds.push(ts.clone().gt_eq(lit(origin + s * 1e6)));
        }
        if let Some(e) = f.end_s {
            preds.push(ts.lt(lit(origin + e * 1e6)));
        }
    }
    Ok(preds.into_iter().reduce(|a, b| a.and(b)))
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
        Dataset::Partition { root, source } => root
            .join(table)
            .join(format!("source={}", partition_value(source)))
            .join("part-0.parquet"),
    }
}

fn write_dataset(input: &ExportInput<'_>, dest: &Dataset<'_>) -> Result<()> {
    let engine = engine(input)?;
    for name in TABLES {
        let mut df = table(&engine, input, name)?;
        let path = table_path(dest, name);
        write_file(&path, &mut df)?;
    }
    Ok(())
}

/// Writes through `NAME.partial` and renames, so a failure leaves no partial table.
fn write_file(path: &Path, df: &mut DataFrame) -> Result<()> {
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
        write_parquet(df, &mut w)
            .map_err(|e| ExportError::Unsupported(format!("{}: {e}", path.display())))?;
        w.flush().map_err(io)?;
        drop(w);
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

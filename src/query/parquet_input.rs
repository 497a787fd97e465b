//! Parquet inputs of `tach query`: what `tach export --parquet` wrote, read back as the
//! same tables with the same columns as a TACH file gives (docs/parquet.md).
//!
//! - a directory with `samples.parquet` (and `frames.parquet`, `stacks.parquet`): one
//!   export (`-o DIR`);
//! - a directory with `samples/` (and `frames/`, `stacks/`) holding `source=NAME/`
//!   partitions: a dataset written by `--out-dir`;
//! - a Parquet file: a lone `samples` table (`-o -`); its `frames` and `stacks` are
//!   empty.
//!
//! Each table is one polars Parquet scan over its files (projection and predicate
//! pushdown: a filter on `file` reaches the scan, whose row-group statistics skip the
//! other partitions' data). The hive column `source` is not exposed: the tables have
//! exactly the columns of the TACH tables, and `file` holds the path the export was
//! given, as `tach query` over that path would. `stack_id` and `frame_id` are per
//! `file`, as over several TACH files. Partition directories and files whose names start
//! with `.` or `_` are skipped (an export writes its temporary files under such names).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use polars::prelude::*;
use rayon::prelude::*;

use super::error::{QueryError, Result};
use super::samples_parquet::{stored_samples_schema, stored_stack_counts_schema, ORIGIN_COLUMN};
use super::schema::{
    is_grouped_column, samples_schema, schema_of, stack_counts_schema, stacks_schema,
    GROUPED_TABLE, TIMESTAMP_DTYPE, WEIGHT_COLUMN,
};
use super::schema::{FILE_VALUE_KEY, SCHEMA_VERSION};

/// The tables an export writes, in the order they are scanned.
const WRITTEN: [&str; 4] = ["samples", "frames", "stacks", "stack_counts"];

/// The columns a written table's files hold: `samples` and `stack_counts` are stored
/// in their own layout (`super::samples_parquet`), the others as the query shows them.
fn stored_schema(table: &str) -> Option<Schema> {
    match table {
        "samples" => Some(stored_samples_schema()),
        "stack_counts" => Some(stored_stack_counts_schema()),
        other => schema_of(other),
    }
}

/// Columns an export of an older schema version lacks, read as null: `samples.wall_time`
/// (version 4).
const ADDED_COLUMNS: [&str; 1] = ["wall_time"];

/// The first bytes of every Parquet file.
const PARQUET_MAGIC: &[u8; 4] = b"PAR1";

/// One Parquet input: per written table, its files (none: an empty table).
pub struct ParquetInput {
    /// Per written table, its files as the directory lists them.
    listed: [Vec<PathBuf>; 4],
    /// Per written table, what its files' footers say: read the first time a query
    /// scans that table. A query over a fleet's dataset reads one or two of the four
    /// tables, and a group of profiles (`super::bounded`) reads its own files' footers.
    footers: [OnceLock<std::result::Result<Arc<Vec<Footer>>, String>>; 4],
    /// Every `samples` file has its `stack_counts` file beside it (a lone samples file
    /// has none): `stack_counts` and the count pushdown read those instead of the
    /// samples.
    counts_complete: bool,
}

/// What one file's footer says, for the scan of its table.
#[derive(Clone, Debug)]
struct Footer {
    /// The `file` value its rows hold (`None`: it has no rows, and is left out of the
    /// scan: with no `file` value it could not be skipped).
    value: Option<String>,
    /// Written before `wall_time` was stored (schema version 3; `samples` only).
    older: bool,
}

/// A table's files that hold rows, with their footers.
struct TableFiles {
    files: Vec<PathBuf>,
    values: Vec<Option<String>>,
    older: Vec<bool>,
}

/// True when `path` is a directory or a Parquet file: an input for [`ParquetInput`]
/// rather than a TACH file.
pub fn is_parquet_input(path: &Path) -> Result<bool> {
    let io = |source| QueryError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return Ok(true);
    }
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path).map_err(io)?;
    let n = f.read(&mut magic).map_err(io)?;
    Ok(n == 4 && &magic == PARQUET_MAGIC)
}

/// Visible entries of a directory (not starting with `.` or `_`), sorted by name, with
/// whether each is a directory (from the directory entry: a dataset of ten thousand
/// recordings has forty thousand files, and a `stat` of each is time).
fn visible(dir: &Path) -> Result<Vec<(PathBuf, bool)>> {
    let io = |source| QueryError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let e = e.map_err(io)?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with('.') || name.starts_with('_')) {
            let kind = e.file_type().map_err(io)?;
            // A link is followed, as `Path::is_dir` follows it.
            let is_dir = if kind.is_symlink() {
                e.path().is_dir()
            } else {
                kind.is_dir()
            };
            out.push((e.path(), is_dir));
        }
    }
    out.sort();
    Ok(out)
}

fn not_an_input(path: &Path, why: &str) -> QueryError {
    QueryError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string()),
    }
}

impl ParquetInput {
    /// Finds the tables' files under `path` (see the module's documentation).
    pub fn open(path: &Path) -> Result<Self> {
        let mut files: [Vec<PathBuf>; 4] = Default::default();
        if !path.is_dir() {
            files[0].push(path.to_path_buf());
        } else if path.join("samples.parquet").is_file() {
            for (i, t) in WRITTEN.iter().enumerate() {
                let f = path.join(format!("{t}.parquet"));
                if f.is_file() {
                    files[i].push(f);
                }
            }
        } else if path.join("samples").is_dir() {
            for (i, t) in WRITTEN.iter().enumerate() {
                let dir = path.join(t);
                if !dir.is_dir() {
                    continue;
                }
                for (part, is_dir) in visible(&dir)? {
                    let is_partition = part
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("source="));
                    if !(is_partition && is_dir) {
                        continue;
                    }
                    for (f, is_dir) in visible(&part)? {
                        if f.extension().is_some_and(|e| e == "parquet") && !is_dir {
                            files[i].push(f);
                        }
                    }
                }
            }
            if files[0].is_empty() {
                return Err(not_an_input(
                    path,
                    "a dataset directory with no samples/source=*/*.parquet partition",
                ));
            }
        } else {
            return Err(not_an_input(
                path,
                "a directory that is not a tach Parquet export: it has neither samples.parquet nor samples/",
            ));
        }
        let counts_complete = files[3].len() == files[0].len();
        Ok(ParquetInput {
            listed: files,
            footers: Default::default(),
            counts_complete,
        })
    }

    /// How many files' profiles the input holds (partitions of `samples`), for the
    /// pushdown's several-files rule.
    pub fn profiles(&self) -> usize {
        self.listed[0].len()
    }

    /// The footers of table `i`'s files, read once (on every core: a dataset of a
    /// thousand recordings has a thousand files a table).
    fn footers(&self, i: usize) -> PolarsResult<Arc<Vec<Footer>>> {
        let read = self.footers[i].get_or_init(|| {
            let want = stored_schema(WRITTEN[i]);
            self.listed[i]
                .par_iter()
                .map(|f| footer(f, WRITTEN[i], want.as_ref()))
                .collect::<Result<Vec<_>>>()
                .map(Arc::new)
                .map_err(|e| e.to_string())
        });
        read.clone()
            .map_err(|e| PolarsError::ComputeError(e.into()))
    }

    /// Table `i`'s files that hold rows, with their `file` values.
    fn table_files(&self, i: usize) -> PolarsResult<TableFiles> {
        let footers = self.footers(i)?;
        let mut t = TableFiles {
            files: Vec::new(),
            values: Vec::new(),
            older: Vec::new(),
        };
        for (f, footer) in self.listed[i].iter().zip(footers.iter()) {
            if footer.value.is_some() {
                t.files.push(f.clone());
                t.values.push(footer.value.clone());
                t.older.push(footer.older);
            }
        }
        Ok(t)
    }

    /// The written table `name` (`samples`, `frames`, `stacks` or `stack_counts`) as
    /// the query shows it: its columns in schema order (`samples`' `time_s` computed
    /// from what is stored).
    fn written(&self, name: &str) -> PolarsResult<LazyFrame> {
        let no_table = || PolarsError::ComputeError(format!("no table {name}").into());
        let schema = schema_of(name).ok_or_else(no_table)?;
        let stored = stored_schema(name).ok_or_else(no_table)?;
        let i = WRITTEN.iter().position(|t| *t == name).unwrap_or(0);
        let t = self.table_files(i)?;
        let files = &t.files;
        if files.is_empty() {
            return Ok(DataFrame::empty_with_schema(&schema).lazy());
        }
        // `wall_time` of files written before it was stored is null: all of them, by a
        // literal; some of them, by a scan that inserts it where it is missing (polars
        // takes a scan's columns from its first file unless it is given them).
        let older = if i == 0 {
            t.older.iter().filter(|o| **o).count()
        } else {
            0
        };
        let all_older = older == files.len();
        let fill = (older > 0 && !all_older).then_some(&stored);
        Ok(scan_with(files, Some((&stored, &t.values)), fill)?.select(
            schema
                .iter_names()
                .map(|n| match n.as_str() {
                    "time_s" => (col("timestamp_us") - col(ORIGIN_COLUMN))
                        .map(seconds, |_, f| {
                            Ok(Field::new(f.name().clone(), DataType::Float64))
                        })
                        .alias("time_s"),
                    "wall_time" if all_older => lit(NULL).cast(TIMESTAMP_DTYPE).alias("wall_time"),
                    _ => col(n.clone()),
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// A table of the query schema over this input.
    pub fn table(&self, name: &str) -> PolarsResult<LazyFrame> {
        Ok(match name {
            "samples" | "frames" | "stacks" => self.written(name)?,
            "stack_counts" if self.counts_complete => self.written(name)?,
            "stack_counts" => {
                let schema = stack_counts_schema();
                let keys: Vec<Expr> = schema
                    .iter_names()
                    .filter(|n| n.as_str() != "samples")
                    .map(|n| col(n.clone()))
                    .collect();
                self.written("samples")?
                    .group_by_stable(keys)
                    .agg([len().cast(DataType::UInt64).alias("samples")])
                    .select(
                        schema
                            .iter_names()
                            .map(|n| col(n.clone()))
                            .collect::<Vec<_>>(),
                    )
            }
            "sample_frames" => {
                let sf = schema_of("sample_frames").unwrap_or_default();
                let samples = samples_schema();
                let sample_cols: Vec<Expr> = sf
                    .iter_names()
                    .take_while(|n| n.as_str() != "depth")
                    .filter(|n| samples.contains(n))
                    .chain(std::iter::once(&PlSmallStr::from("depth")))
                    .map(|n| col(n.clone()))
                    .collect();
                let stacks = self.written("stacks")?;
                self.written("samples")?
                    .select(sample_cols)
                    .join(
                        stacks,
                        [col("file"), col("stack_id")],
                        [col("file"), col("stack_id")],
                        JoinArgs::new(JoinType::Inner),
                    )
                    .select(sf.iter_names().map(|n| col(n.clone())).collect::<Vec<_>>())
            }
            GROUPED_TABLE => {
                let cols: Vec<Expr> = samples_schema()
                    .iter_names()
                    .filter(|n| is_grouped_column(n))
                    .map(|n| col(n.clone()))
                    .collect();
                if self.counts_complete {
                    // The stored stack_counts hold every grouped column (the leaf
                    // frame's too), one row per stack, thread and status: a query
                    // reads thousands of rows, not one per sample.
                    let stored = stored_stack_counts_schema();
                    let t = self.table_files(3)?;
                    let counts = if t.files.is_empty() {
                        DataFrame::empty_with_schema(&stored).lazy()
                    } else {
                        scan(&t.files, Some((&stored, &t.values)))?
                    };
                    counts.select(
                        cols.into_iter()
                            .chain([col("samples").cast(IDX_DTYPE).alias(WEIGHT_COLUMN)])
                            .collect::<Vec<_>>(),
                    )
                } else {
                    // One row per sample, each of weight 1: the grouped table's rows
                    // repeated by their weight, so sum(weight) is count(*).
                    self.written("samples")?
                        .select(cols)
                        .with_column(lit(1).cast(IDX_DTYPE).alias(WEIGHT_COLUMN))
                }
            }
            other => polars_bail!(ComputeError: "no table {other}"),
        })
    }

    /// This input as inputs of at most `per` partitions each, in order
    /// (`super::bounded` scans them one at a time).
    pub fn groups(&self, per: usize) -> Vec<ParquetInput> {
        let per = per.max(1);
        let n = self.listed.iter().map(Vec::len).max().unwrap_or(0);
        (0..n)
            .step_by(per)
            .map(|start| self.partitions(start..start + per))
            .collect()
    }

    /// The same input over partitions `range` of each table (by position: a complete
    /// dataset's tables list the same sources in the same order). Footers already read
    /// come along; the others are read by the part when it scans.
    fn partitions(&self, range: std::ops::Range<usize>) -> ParquetInput {
        let part = |len: usize| range.start.min(len)..range.end.min(len);
        ParquetInput {
            listed: std::array::from_fn(|i| self.listed[i][part(self.listed[i].len())].to_vec()),
            footers: std::array::from_fn(|i| {
                let slot = OnceLock::new();
                if let Some(Ok(all)) = self.footers[i].get() {
                    let _ = slot.set(Ok(Arc::new(all[part(all.len())].to_vec())));
                }
                slot
            }),
            counts_complete: self.counts_complete,
        }
    }

    /// `select distinct COLUMNS from stacks` over this input (the pushdown's distinct
    /// stacks table, here computed by polars).
    pub fn distinct_stacks(&self, columns: &[String]) -> PolarsResult<LazyFrame> {
        let all = stacks_schema();
        let cols: Vec<Expr> = columns
            .iter()
            .filter(|c| all.contains(c))
            .map(|c| col(c.as_str()))
            .collect();
        Ok(self
            .written("stacks")?
            .select(cols)
            .unique_stable(None, UniqueKeepStrategy::First))
    }
}

/// Microseconds since the origin as `time_s`, computed as the TACH scan computes it:
/// `t as f64 / 1e6`. (polars divides by a literal as a product with its reciprocal,
/// which differs in the last bit for some values.)
fn seconds(us: Column) -> PolarsResult<Column> {
    let secs: Float64Chunked = us
        .i64()?
        .iter()
        .map(|t| t.map(|t| t as f64 / 1e6))
        .collect();
    Ok(secs.with_name(us.name().clone()).into_column())
}

/// One Parquet scan over `files` (hive partitioning, so a dataset's `source=` column is
/// known to polars, which the table then leaves out; paths are taken as they are, not
/// as glob patterns). With `stats` (per file, its one `file` value when known), polars
/// skips the files a predicate on `file` rules out while it optimizes the plan, so
/// `--explain` shows the scan of the files that are left.
fn scan(files: &[PathBuf], stats: Option<(&Schema, &[Option<String>])>) -> PolarsResult<LazyFrame> {
    scan_with(files, stats, None)
}

/// [`scan`], given the files' columns when `fill_missing` is some: a column a file
/// lacks is then read as nulls.
fn scan_with(
    files: &[PathBuf],
    stats: Option<(&Schema, &[Option<String>])>,
    fill_missing: Option<&Schema>,
) -> PolarsResult<LazyFrame> {
    let paths: Vec<PlRefPath> = files
        .iter()
        .map(|p| PlRefPath::from(p.to_string_lossy().as_ref()))
        .collect();
    let table_statistics = match stats {
        Some((schema, values)) => Some(TableStatistics(Arc::new(file_statistics(schema, values)?))),
        None => None,
    };
    let args = UnifiedScanArgs {
        // `source` stays text (a recording named 2024), and no value is parsed as a
        // date (polars is built without its date types).
        hive_options: HiveOptions {
            schema: Some(Arc::new(Schema::from_iter([Field::new(
                "source".into(),
                DataType::String,
            )]))),
            try_parse_dates: false,
            ..HiveOptions::new_enabled()
        },
        glob: false,
        cast_columns_policy: CastColumnsPolicy::ERROR_ON_MISMATCH,
        missing_columns_policy: match fill_missing {
            Some(_) => MissingColumnsPolicy::Insert,
            None => MissingColumnsPolicy::Raise,
        },
        extra_columns_policy: ExtraColumnsPolicy::Raise,
        table_statistics,
        ..Default::default()
    };
    let options = ParquetOptions {
        schema: fill_missing.map(|s| Arc::new(s.clone())),
        parallel: Default::default(),
        low_memory: false,
        use_statistics: true,
    };
    let sources = ScanSources::Paths(paths.into_iter().collect());
    Ok(DslBuilder::scan_parquet(sources, options, args)?
        .build()
        .into())
}

/// The statistics polars' file skipping reads (`<column>_min`, `_max`, `_nc` and
/// `len`, one row per file): `file` is `values[i]` in file `i` (every row of a
/// partition has the same), everything else unknown (null), so only a predicate on
/// `file` can skip a file.
fn file_statistics(schema: &Schema, values: &[Option<String>]) -> PolarsResult<DataFrame> {
    let n = values.len();
    let mut cols = vec![Column::full_null("len".into(), n, &IDX_DTYPE)];
    for (name, dtype) in schema.iter() {
        if name.as_str() == "file" {
            let v: Vec<Option<&str>> = values.iter().map(|v| v.as_deref()).collect();
            cols.push(Column::new("file_min".into(), v.clone()));
            cols.push(Column::new("file_max".into(), v));
            let nc: Vec<Option<IdxSize>> = values.iter().map(|v| v.as_ref().map(|_| 0)).collect();
            cols.push(IdxCa::from_iter_options("file_nc".into(), nc.into_iter()).into_column());
            continue;
        }
        cols.push(Column::full_null(format!("{name}_min").into(), n, dtype));
        cols.push(Column::full_null(format!("{name}_max").into(), n, dtype));
        cols.push(Column::full_null(
            format!("{name}_nc").into(),
            n,
            &IDX_DTYPE,
        ));
    }
    DataFrame::new(n, cols)
}

/// What a table's file says in its footer, read once: its columns, checked against
/// `want` (the table's stored schema), and the one `file` value of its rows (`None`: it
/// has no rows). Files tach writes record that value in their footer
/// ([`FILE_VALUE_KEY`]), read without touching the rows; a file without it (an older
/// export) gives it from its first row. With it, whether the file lacks
/// [`ADDED_COLUMNS`] (an export of an older schema version).
fn footer(f: &Path, table: &str, want: Option<&Schema>) -> Result<Footer> {
    let unreadable = |e: PolarsError| not_an_input(f, &format!("not a readable Parquet file: {e}"));
    let file = std::fs::File::open(f).map_err(|source| QueryError::Io {
        path: f.to_path_buf(),
        source,
    })?;
    let mut reader = ParquetReader::new(file);
    let metadata = reader.get_metadata().map_err(unreadable)?.clone();
    let mut older = false;
    if let Some(want) = want {
        let arrow = reader.schema().map_err(unreadable)?;
        let have = Schema::from_arrow_schema(arrow.as_ref());
        check_columns(f, table, want, &have)?;
        older = ADDED_COLUMNS.iter().any(|c| !have.contains(c));
    }
    if metadata.num_rows == 0 {
        return Ok(Footer { value: None, older });
    }
    let recorded = metadata
        .key_value_metadata()
        .as_ref()
        .and_then(|kv| kv.iter().find(|e| e.key == FILE_VALUE_KEY))
        .and_then(|e| e.value.clone());
    let value = match recorded {
        Some(value) => Some(value),
        None => first_file_value(f).map_err(|e| not_an_input(f, &e.to_string()))?,
    };
    Ok(Footer { value, older })
}

/// A table's file must have the table's columns with its types (more are allowed).
fn check_columns(f: &Path, table: &str, want: &Schema, have: &Schema) -> Result<()> {
    for (name, dtype) in want.iter() {
        match have.get(name) {
            Some(d) if d == dtype => {}
            None if ADDED_COLUMNS.contains(&name.as_str()) => {}
            Some(d) => {
                return Err(not_an_input(
                    f,
                    &format!("column {name} of {table} is {d}, the schema says {dtype}"),
                ))
            }
            None => {
                return Err(not_an_input(
                    f,
                    &format!(
                        "no column {name} (the {table} table of schema version {})",
                        SCHEMA_VERSION
                    ),
                ))
            }
        }
    }
    Ok(())
}

/// The `file` value of a file's first row (`None`: no rows).
fn first_file_value(f: &Path) -> PolarsResult<Option<String>> {
    let df = scan(std::slice::from_ref(&f.to_path_buf()), None)?
        .select([col("file")])
        .limit(1)
        .collect()?;
    let file = df.column("file")?.str()?;
    // `get` asserts its index: an empty partition has no value.
    if file.is_empty() {
        return Ok(None);
    }
    Ok(file.get(0).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, file: &str, kv: Option<&str>) {
        let mut df = df!("file" => [file, file]).unwrap();
        let mut w = ParquetWriter::new(std::fs::File::create(path).unwrap());
        if let Some(v) = kv {
            w = w.with_key_value_metadata(Some(KeyValueMetadata::from_static(vec![(
                FILE_VALUE_KEY.to_string(),
                v.to_string(),
            )])));
        }
        w.finish(&mut df).unwrap();
    }

    #[test]
    fn the_file_value_comes_from_the_footer_when_it_is_there() {
        let dir = std::env::temp_dir().join(format!("tach-pq-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let with = dir.join("with.parquet");
        let without = dir.join("without.parquet");
        // The footer's value wins: the rows are not read (they say otherwise here).
        write(&with, "rows.bin", Some("footer.bin"));
        write(&without, "rows.bin", None);
        let value = |f: &Path| footer(f, "samples", None).unwrap().value;
        assert_eq!(value(&with).as_deref(), Some("footer.bin"));
        // An older export without the key: its first row.
        assert_eq!(value(&without).as_deref(), Some("rows.bin"));
        // The columns are checked from the same footer: a table without one of its
        // columns, or with another type, is refused with the file's name.
        let want = Schema::from_iter([Field::new("file".into(), DataType::String)]);
        assert!(footer(&with, "samples", Some(&want)).is_ok());
        let other = Schema::from_iter([Field::new("file".into(), DataType::Int64)]);
        let e = footer(&with, "samples", Some(&other))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("with.parquet") && e.contains("column file of samples is str"),
            "{e}"
        );
        let more = Schema::from_iter([Field::new("lineno".into(), DataType::Int64)]);
        let e = footer(&with, "samples", Some(&more))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no column lineno (the samples table"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

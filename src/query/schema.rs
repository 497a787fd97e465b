//! The query tables' columns, written once: names, types and what each means.
//!
//! Everything that shows or builds a table reads this: the table scans
//! (`tables.rs`), `tach query --schema`, the Parquet exporter (its files are these
//! tables), the Python package (its DataFrames are these tables) and the "Tables"
//! section of docs/query.md, which a test regenerates and compares.

use polars::prelude::{
    DataType, Expr, Field, LazyFrame, PolarsResult, Schema, TimeUnit, TimeZone, IDX_DTYPE,
};

use crate::tach::filter::status;

/// The version of this schema, shown by `tach query --schema` and docs/query.md. It
/// changes when a column is added, removed, renamed or retyped, here or in the layout
/// a Parquet export stores the tables in (`samples_parquet.rs`). Version 2: exports
/// store `origin_us` in place of `samples.time_s` and write `stack_counts`. Version 3:
/// the frame columns end with `native`. Version 4: `samples.wall_time`, stored as it is
/// (a dataset of version 3 still reads: its `wall_time` is null).
pub const SCHEMA_VERSION: u32 = 4;

/// The Parquet key-value metadata key under which every file of a tach Parquet export
/// records its `file` column's one value, so that a reader of a dataset learns it from
/// the footer instead of from the rows.
pub const FILE_VALUE_KEY: &str = "tach.file";

/// The columns SQL sees unsigned (`super::signed` casts every other unsigned integer
/// column to a signed one); `semantics` widens arithmetic on them.
pub(super) const UNSIGNED_COLUMNS: [&str; 1] = ["thread_id"];

/// The SQL-visible type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    String,
    Boolean,
    Int32,
    Int64,
    UInt32,
    UInt64,
    Float64,
    /// Microseconds since the Unix epoch, UTC: Parquet's TIMESTAMP(MICROS, UTC).
    Timestamp,
}

/// The type of [`ColumnType::Timestamp`].
pub const TIMESTAMP_DTYPE: DataType =
    DataType::Datetime(TimeUnit::Microseconds, Some(TimeZone::UTC));

impl ColumnType {
    pub fn dtype(self) -> DataType {
        match self {
            ColumnType::String => DataType::String,
            ColumnType::Boolean => DataType::Boolean,
            ColumnType::Int32 => DataType::Int32,
            ColumnType::Int64 => DataType::Int64,
            ColumnType::UInt32 => DataType::UInt32,
            ColumnType::UInt64 => DataType::UInt64,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::Timestamp => TIMESTAMP_DTYPE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Boolean => "boolean",
            ColumnType::Int32 => "int32",
            ColumnType::Int64 => "int64",
            ColumnType::UInt32 => "uint32",
            ColumnType::UInt64 => "uint64",
            ColumnType::Float64 => "float64",
            ColumnType::Timestamp => "timestamp",
        }
    }
}

/// One column of a table.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColumnType,
    pub meaning: &'static str,
}

/// One table: its name, what a row is, and its columns in order.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: &'static str,
    pub row: &'static str,
    pub columns: Vec<Column>,
}

impl Table {
    pub fn polars_schema(&self) -> Schema {
        Schema::from_iter(
            self.columns
                .iter()
                .map(|c| Field::new(c.name.into(), c.ty.dtype())),
        )
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|c| c.name == name)
    }
}

const fn col(name: &'static str, ty: ColumnType, meaning: &'static str) -> Column {
    Column { name, ty, meaning }
}

use ColumnType as T;

const FILE: Column = col("file", T::String, "the input path as given");
const FRAME_ID: Column = col("frame_id", T::UInt32, "the frame (see `frames`)");

/// A frame's own columns, shared by `frames`, `stacks` and `sample_frames`.
const FRAME_COLUMNS: [Column; 9] = [
    col("filename", T::String, "the code's file name"),
    col("funcname", T::String, "the function's qualified name"),
    col(
        "lineno",
        T::Int32,
        "the line (null where CPython stores -1; its own outputs print 0)",
    ),
    col(
        "end_lineno",
        T::Int32,
        "the last line of the instruction's location",
    ),
    col("column", T::Int32, "the first column of the location"),
    col("end_column", T::Int32, "the column after the location"),
    col(
        "opcode",
        T::Int32,
        "the base opcode of the instruction, when the recording has opcodes",
    ),
    col(
        "opname",
        T::String,
        "CPython 3.15's name for the opcode, specialized forms included",
    ),
    col(
        "native",
        T::Boolean,
        "a native (C, C++, Rust) frame of a --native recording, or CPython's <native>",
    ),
];

/// The status byte and one boolean column per flag of [`status::FLAGS`].
fn status_columns() -> Vec<Column> {
    let mut v = vec![col(
        "status",
        T::Int32,
        "the status byte (its flags follow)",
    )];
    v.extend(
        status::FLAGS
            .iter()
            .map(|f| col(f.column, T::Boolean, f.meaning)),
    );
    v
}

/// Per-sample columns: identity, time, thread and status.
fn sample_columns() -> Vec<Column> {
    let mut v = vec![
        FILE,
        col(
            "sample",
            T::Int64,
            "index of the sample in file order, from 0",
        ),
        col(
            "timestamp_us",
            T::Int64,
            "CPython's monotonic timestamp, in microseconds",
        ),
        col(
            "time_s",
            T::Float64,
            "seconds since the profile's first sample",
        ),
        col(
            "wall_time",
            T::Timestamp,
            "when the sample was taken, UTC, to the microsecond (null: the file has no \
             wall-clock origin, as CPython's)",
        ),
        col("thread_id", T::UInt64, "the thread"),
        col("interpreter_id", T::UInt32, "the interpreter"),
    ];
    v.extend(status_columns());
    v.push(col(
        "stack_id",
        T::UInt32,
        "the unique stack (see `stacks`)",
    ));
    v
}

fn samples() -> Table {
    let mut columns = sample_columns();
    columns.extend([
        col(
            "depth",
            T::UInt32,
            "frames in the stack (at most 256, as CPython writes them)",
        ),
        col("frame_id", T::UInt32, "the leaf (innermost) frame"),
        col(
            "funcname",
            T::String,
            "the leaf frame's function, so self time needs no join",
        ),
        col("filename", T::String, "the leaf frame's file"),
        col("lineno", T::Int32, "the leaf frame's line"),
    ]);
    Table {
        name: "samples",
        row: "one row per thread-sample; funcname/filename/lineno are the leaf frame's",
        columns,
    }
}

fn frames() -> Table {
    let mut columns = vec![FILE, FRAME_ID];
    columns.extend(FRAME_COLUMNS);
    Table {
        name: "frames",
        row: "the frame table",
        columns,
    }
}

fn stacks() -> Table {
    let mut columns = vec![
        FILE,
        col(
            "stack_id",
            T::UInt32,
            "the unique stack, numbered by first appearance",
        ),
        col(
            "position",
            T::UInt32,
            "0 = leaf, increasing towards the root",
        ),
        FRAME_ID,
    ];
    columns.extend(FRAME_COLUMNS);
    Table {
        name: "stacks",
        row: "one row per frame of each unique stack; position 0 = leaf",
        columns,
    }
}

fn stack_counts() -> Table {
    let mut columns = vec![
        FILE,
        col("stack_id", T::UInt32, "the unique stack (see `stacks`)"),
        col("thread_id", T::UInt64, "the thread"),
        col("interpreter_id", T::UInt32, "the interpreter"),
    ];
    columns.extend(status_columns());
    columns.push(col(
        "samples",
        T::UInt64,
        "samples with this stack, thread and status",
    ));
    Table {
        name: "stack_counts",
        row: "samples per unique stack, thread and status: join with stacks for inclusive counts",
        columns,
    }
}

fn sample_frames() -> Table {
    let mut columns = sample_columns();
    columns.extend([
        col("depth", T::UInt32, "frames in the sample's stack"),
        col(
            "position",
            T::UInt32,
            "0 = leaf, increasing towards the root",
        ),
        FRAME_ID,
    ]);
    columns.extend(FRAME_COLUMNS);
    Table {
        name: "sample_frames",
        row: "one row per frame of each sample; lazy, large: prefer stacks + stack_counts",
        columns,
    }
}

/// Every table, in `--schema` order.
pub fn tables() -> Vec<Table> {
    vec![
        samples(),
        frames(),
        stacks(),
        stack_counts(),
        sample_frames(),
    ]
}

/// The table called `name`.
pub fn table(name: &str) -> Option<Table> {
    tables().into_iter().find(|t| t.name == name)
}

/// What `tach query --schema` prints.
pub fn schema_text() -> String {
    let mut s = format!("schema version {SCHEMA_VERSION}\n");
    for t in tables() {
        s.push_str(&format!("{}  ({})\n", t.name, t.row));
        for c in &t.columns {
            s.push_str(&format!(
                "  {:<16} {:<8} {}\n",
                c.name,
                c.ty.name(),
                c.meaning
            ));
        }
    }
    s
}

/// The tables as Markdown: the generated part of docs/query.md.
pub fn schema_markdown() -> String {
    let mut s = format!("Schema version {SCHEMA_VERSION}.\n");
    for t in tables() {
        s.push_str(&format!("\n### `{}`: {}\n", t.name, t.row));
        s.push_str("| column | type | meaning |\n|---|---|---|\n");
        for c in &t.columns {
            s.push_str(&format!(
                "| {} | {} | {} |\n",
                c.name,
                c.ty.name(),
                c.meaning
            ));
        }
    }
    s
}

/// The grouped samples table the count pushdown reads; not listed in `--schema`.
pub const GROUPED_TABLE: &str = "__tach_sample_groups";
/// Its weight column: the number of samples a row stands for.
pub const WEIGHT_COLUMN: &str = "__tach_samples";

/// A table's columns as polars fields, from the one definition above.
fn schema_named(name: &str) -> Schema {
    table(name).map(|t| t.polars_schema()).unwrap_or_default()
}

pub fn samples_schema() -> Schema {
    schema_named("samples")
}

pub fn frames_schema() -> Schema {
    schema_named("frames")
}

pub fn stacks_schema() -> Schema {
    schema_named("stacks")
}

pub fn stack_counts_schema() -> Schema {
    schema_named("stack_counts")
}

pub fn sample_frames_schema() -> Schema {
    schema_named("sample_frames")
}

/// The schema of a table by name.
pub fn schema_of(name: &str) -> Option<Schema> {
    table(name).map(|t| t.polars_schema())
}

/// Columns of `samples` that differ from one sample to the next of the same stack,
/// thread and status: not in the grouped table.
const PER_SAMPLE_COLUMNS: [&str; 4] = ["sample", "timestamp_us", "time_s", "wall_time"];

/// A `samples` column that is the same for every sample of one stack, thread and
/// status: a column of the grouped table.
pub(crate) fn is_grouped_column(name: &str) -> bool {
    !PER_SAMPLE_COLUMNS.contains(&name) && samples_schema().contains(name)
}

/// The grouped samples table the count pushdown reads (`super::pushdown`): the
/// `samples` columns but the per-sample ones, and the weight.
pub fn sample_groups_schema() -> Schema {
    let mut v: Vec<Field> = samples_schema()
        .iter()
        .filter(|(name, _)| !PER_SAMPLE_COLUMNS.contains(&name.as_str()))
        .map(|(name, dtype)| Field::new(name.clone(), dtype.clone()))
        .collect();
    // The type polars gives count(*), so sum(weight) has the same.
    v.push(Field::new(WEIGHT_COLUMN.into(), IDX_DTYPE));
    Schema::from_iter(v)
}

/// `lf` with every unsigned integer column but `thread_id` cast to a signed 64-bit one:
/// how SQL sees the tables. polars' arithmetic keeps an unsigned type unsigned and wraps
/// (`min(depth) - max(depth)` gives 4294967043 for -253, `frame_id - 10 < 0` is never
/// true); SQL's integers are signed. `thread_id` is an identifier that real recordings
/// fill with all 64 bits (values above 2^63 exist), so it stays an unsigned 64-bit
/// integer. The cast is a projection after the scan, so polars still pushes the columns
/// a query uses, its filters and its LIMIT into the scan.
pub fn signed(mut lf: LazyFrame) -> PolarsResult<LazyFrame> {
    let schema = lf.collect_schema()?;
    let casts: Vec<Expr> = schema
        .iter()
        .filter(|(name, dtype)| {
            dtype.is_unsigned_integer() && !UNSIGNED_COLUMNS.contains(&name.as_str())
        })
        .map(|(name, _)| polars::prelude::col(name.clone()).strict_cast(DataType::Int64))
        .collect();
    Ok(if casts.is_empty() {
        lf
    } else {
        lf.with_columns(casts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEGIN: &str = "<!-- schema: generated from src/query/schema.rs; do not edit -->\n";
    const END: &str = "<!-- end of schema -->";

    /// docs/query.md holds the generated tables verbatim: change the schema, and this
    /// fails until the docs say the same (copy `schema_markdown()` between the markers).
    #[test]
    fn docs_show_the_schema_as_defined() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/query.md");
        let docs = std::fs::read_to_string(path).unwrap();
        let start = docs
            .find(BEGIN)
            .expect("docs/query.md lacks the schema marker")
            + BEGIN.len();
        let end = docs[start..]
            .find(END)
            .expect("docs/query.md lacks the end marker")
            + start;
        let expected = schema_markdown();
        assert!(
            docs[start..end] == expected,
            "docs/query.md's tables differ from src/query/schema.rs; they should read:\n{expected}"
        );
    }

    #[test]
    fn every_status_flag_has_its_column() {
        let t = table("stack_counts").unwrap();
        for f in status::FLAGS {
            assert_eq!(
                t.column(f.column).map(|c| c.ty),
                Some(T::Boolean),
                "{}",
                f.name
            );
        }
    }
}

//! The query tables as polars lazy frames built straight from the reader.
//!
//! `samples`, `stacks` and `stack_counts` are anonymous scans: polars tells the scan
//! which columns the query needs (projection pushdown) and how many rows (a LIMIT
//! without ORDER BY), and the scan decodes the file and builds only those columns.
//! `frames` is small and built once per file. `sample_frames` is a lazy join of
//! `samples` with `stacks`, so it costs nothing unless a query reads it.
//!
//! Every table has a `file` column (the path as given), so several files are one
//! table. `stack_id` and `frame_id` are per file: joins go on (`file`, `stack_id`) or
//! (`file`, `frame_id`).

use std::any::Any;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use polars::prelude::*;

use super::batches::{
    batch_columns, in_order, pipeline, wall_offset_us, BatchContext, BatchError, Needs, Origin,
    BATCH_ROWS,
};
pub(crate) use super::columns::Wanted;
use super::columns::{file_column, status_columns};
use super::opnames::opname;
pub use super::schema::{
    frames_schema, sample_frames_schema, sample_groups_schema, samples_schema, schema_of,
    stack_counts_schema, stacks_schema,
};
use super::schema::{GROUPED_TABLE, WEIGHT_COLUMN};
use crate::tach::counts::{GroupCount, StackCounts};
use crate::tach::filter::status as flag;
use crate::tach::index::StackTable;
use crate::tach::{SampleFilter, TachFile};

/// One input and what the scans share about it.
pub struct Source {
    /// The value of the `file` column.
    pub name: String,
    file: SourceFile,
    frames: OnceLock<DataFrame>,
    /// Unique stacks and per-(stack, thread, status) counts, from one full decode
    /// shared by the `stacks`, `stack_counts` and grouped sample scans (polars may run
    /// them at once: the others wait for the first instead of decoding again).
    aggregate: OnceLock<Result<Arc<StackCounts>, String>>,
    /// The profile's first timestamp (the origin of `time_s`), once a scan found it.
    pub(crate) origin: OnceLock<u64>,
}

/// A source's file: open, or opened on first use. A fleet's ten thousand files, each
/// checked when the query starts, are not all held open: their string and frame
/// tables (about 100 KB a file) would be, with nothing read from most of them.
enum SourceFile {
    Open(TachFile),
    Later(PathBuf, OnceLock<Result<TachFile, String>>),
}

impl Source {
    pub fn new(name: String, file: TachFile) -> Self {
        Self::with(name, SourceFile::Open(file))
    }

    /// A source whose file is opened when a scan first reads it (the caller has
    /// checked it, or a scan reports the error).
    pub fn later(name: String, path: PathBuf) -> Self {
        Self::with(name, SourceFile::Later(path, OnceLock::new()))
    }

    fn with(name: String, file: SourceFile) -> Self {
        Source {
            name,
            file,
            frames: OnceLock::new(),
            aggregate: OnceLock::new(),
            origin: OnceLock::new(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &std::path::Path {
        match &self.file {
            SourceFile::Open(f) => f.path(),
            SourceFile::Later(p, _) => p,
        }
    }

    /// The file, opened now if it was not.
    pub fn file(&self) -> PolarsResult<&TachFile> {
        match &self.file {
            SourceFile::Open(f) => Ok(f),
            SourceFile::Later(path, once) => once
                .get_or_init(|| TachFile::open(path).map_err(|e| e.to_string()))
                .as_ref()
                .map_err(|e| PolarsError::ComputeError(e.clone().into())),
        }
    }

    /// The frames table of this file, without the `file` column.
    pub fn frames(&self) -> PolarsResult<&DataFrame> {
        let file = self.file()?;
        Ok(self.frames.get_or_init(|| frames_frame(file)))
    }

    fn aggregate(&self) -> PolarsResult<Arc<StackCounts>> {
        let file = self.file()?;
        self.aggregate
            .get_or_init(|| {
                StackCounts::count(file)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| PolarsError::ComputeError(e.into()))
    }
}

/// The tables every query can use, in `--schema` order (see `schema.rs`).
pub const TABLES: [&str; 5] = [
    "samples",
    "frames",
    "stacks",
    "stack_counts",
    "sample_frames",
];

/// A frame's own columns (those of `frames` after `file` and `frame_id`).
fn frame_fields() -> Vec<Field> {
    frames_schema()
        .iter_fields()
        .filter(|f| f.name != "file" && f.name != "frame_id")
        .collect()
}

/// The sample columns that `sample_frames` keeps: those it shares with `samples`
/// before `depth` (the leaf-frame ones come from the stack instead).
fn sample_frames_sample_columns() -> Vec<PlSmallStr> {
    let samples = samples_schema();
    sample_frames_schema()
        .iter_names()
        .take_while(|n| n.as_str() != "depth")
        .filter(|n| samples.contains(n))
        .cloned()
        .collect()
}

/// `-1` in the frame table means "absent": null in SQL.
fn opt_i32(v: i32) -> Option<i32> {
    (v != -1).then_some(v)
}

/// The frames table of one file, without `file`. Columns are in `frame_fields` order
/// after `frame_id`.
pub(crate) fn frames_frame(file: &TachFile) -> DataFrame {
    let frames = file.frames();
    let n = frames.len();
    let ids: Vec<u32> = (0..n as u32).collect();
    let filename: Vec<&str> = frames.iter().map(|f| file.string(f.filename)).collect();
    let funcname: Vec<&str> = frames.iter().map(|f| file.string(f.funcname)).collect();
    let int_col = |name: &str, get: fn(&crate::tach::FrameEntry) -> i32| {
        Column::new(
            name.into(),
            frames.iter().map(|f| opt_i32(get(f))).collect::<Vec<_>>(),
        )
    };
    let cols = vec![
        Column::new("frame_id".into(), ids),
        Column::new("filename".into(), filename),
        Column::new("funcname".into(), funcname),
        int_col("lineno", |f| f.lineno),
        int_col("end_lineno", |f| f.end_lineno),
        int_col("column", |f| f.column),
        int_col("end_column", |f| f.end_column),
        Column::new(
            "opcode".into(),
            frames
                .iter()
                .map(|f| f.opcode().map(i32::from))
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "opname".into(),
            frames
                .iter()
                .map(|f| f.opcode().map(opname))
                .collect::<Vec<_>>(),
        ),
        Column::new("native".into(), file.native_frames()),
    ];
    // Every column has n rows by construction.
    DataFrame::new(n, cols).unwrap_or_else(|_| DataFrame::empty())
}

/// Gathers frame columns (by frame id) for `ids`; a null id gives a null row. String
/// columns are views, so this copies 16 bytes per row and never the text.
fn gather_frame_columns(
    frames: &DataFrame,
    ids: &IdxCa,
    wanted: &dyn Fn(&str) -> bool,
    rename: &dyn Fn(&str) -> String,
) -> PolarsResult<Vec<Column>> {
    let mut out = Vec::new();
    for c in frames.columns() {
        if c.name().as_str() == "frame_id" || !wanted(c.name()) {
            continue;
        }
        let mut taken = c.take(ids)?;
        taken.rename(rename(c.name()).into());
        out.push(taken);
    }
    Ok(out)
}

fn scan_lf(
    scan: impl AnonymousScan + 'static,
    schema: Schema,
    name: &'static str,
) -> PolarsResult<LazyFrame> {
    LazyFrame::anonymous_scan(
        Arc::new(scan),
        ScanArgsAnonymous {
            schema: Some(Arc::new(schema)),
            name,
            ..Default::default()
        },
    )
}

/// Puts the columns in the order polars asked for them (it does not reorder a scan's
/// output: `select lineno, funcname from stacks` must get lineno first), or in schema
/// order when it asked for all; keeps only those built.
fn ordered(
    schema: &Schema,
    wanted: &Wanted,
    mut cols: Vec<Column>,
    height: usize,
) -> PolarsResult<DataFrame> {
    let names: Vec<&str> = match &wanted.0 {
        Some(list) => list.iter().map(|n| n.as_str()).collect(),
        None => schema.iter_names().map(|n| n.as_str()).collect(),
    };
    let mut out = Vec::with_capacity(cols.len());
    for name in names {
        if let Some(i) = cols.iter().position(|c| c.name() == name) {
            out.push(cols.swap_remove(i));
        }
    }
    DataFrame::new(height, out)
}

/// A LIMIT pushed into a scan (`DataFrame::head(None)` would mean 10 rows).
fn first_rows(df: DataFrame, n_rows: Option<usize>) -> PolarsResult<DataFrame> {
    Ok(match n_rows {
        Some(n) => df.head(Some(n)),
        None => df,
    })
}

/// The `samples` table of one file.
struct SamplesScan(Arc<Source>);

impl AnonymousScan for SamplesScan {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(Arc::new(samples_schema()))
    }
    fn allows_projection_pushdown(&self) -> bool {
        true
    }
    fn scan(&self, args: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        let w = Wanted(args.with_columns.clone());
        samples_frame(&self.0, &w, args.n_rows)
    }
}

/// The `samples` table of one file, the columns `w` asks for (at most `limit` rows):
/// one chunk per decoded batch, and `file` one scalar column over all of them.
pub fn samples_frame(src: &Source, w: &Wanted, limit: Option<usize>) -> PolarsResult<DataFrame> {
    let without_file = Wanted(Some(
        samples_schema()
            .iter_names()
            .filter(|n| n.as_str() != "file" && w.has(n))
            .cloned()
            .collect(),
    ));
    let mut out: Option<DataFrame> = None;
    for_each_samples_batch(src, &without_file, limit, |df| {
        match &mut out {
            Some(acc) => {
                acc.vstack_mut_owned(df)?;
            }
            None => out = Some(df),
        }
        Ok(())
    })
    .map_err(|e| PolarsError::ComputeError(e.to_string().into()))?;
    let mut df = match out {
        Some(df) => df,
        None => DataFrame::empty_with_schema(&projected(&without_file)),
    };
    let height = df.height();
    if w.has("file") {
        df.with_column(file_column(&src.name, height))?;
    }
    in_order(w, df.into_columns(), height)
}

/// Calls `each` with the `samples` table of one file batch by batch (the columns `w`
/// asks for, in its order; at most `limit` rows in all): batches decoded on one core and
/// built into columns on another (`super::batches`).
pub fn for_each_samples_batch(
    src: &Source,
    w: &Wanted,
    limit: Option<usize>,
    mut each: impl FnMut(DataFrame) -> Result<(), BatchError>,
) -> Result<(), BatchError> {
    let needs = Needs::of(w);
    let origin = match (w.has("time_s"), src.origin.get()) {
        (false, _) => Origin::Unneeded,
        (true, Some(&o)) => Origin::Known(o),
        (true, None) => Origin::Find,
    };
    let frames = src.frames()?;
    let file = src.file()?;
    let everything = SampleFilter::default();
    let end = pipeline(
        file,
        &everything,
        origin,
        needs,
        BATCH_ROWS,
        limit,
        |b, origin_us| {
            let rows = b.rows;
            let ctx = BatchContext {
                name: &src.name,
                frames,
                origin_us: origin_us as i64,
                wall_offset_us: wall_offset_us(file),
            };
            each(in_order(w, batch_columns(b, w, &ctx)?, rows)?)
        },
    )?;
    if let Some(o) = end.origin_us {
        let _ = src.origin.set(o);
    }
    Ok(())
}

/// The `samples` schema restricted to what `w` asks for.
fn projected(w: &Wanted) -> Schema {
    Schema::from_iter(samples_schema().iter_fields().filter(|f| w.has(f.name())))
}

/// What one grouped row is keyed on; a part the query does not use is 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct GroupKey {
    stack_id: u32,
    /// Decoder thread slot (thread and interpreter id).
    thread: u32,
    status: u8,
    /// Leaf frame id, NO_LEAF for an empty stack.
    leaf: IdxSize,
    depth: u32,
}

/// Leaf frame id of an empty stack (null in the frame columns).
const NO_LEAF: IdxSize = IdxSize::MAX;

/// `samples` of one file grouped by the columns a query asks for, with the number of
/// samples of each group (see `super::pushdown`). Each row repeated `weight` times is
/// the projected `samples` table, in another order.
struct SampleGroupsScan(Arc<Source>);

impl AnonymousScan for SampleGroupsScan {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(Arc::new(sample_groups_schema()))
    }
    fn allows_projection_pushdown(&self) -> bool {
        true
    }
    fn scan(&self, args: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        let src = &self.0;
        let w = Wanted(args.with_columns.clone());
        let want_thread = w.has("thread_id") || w.has("interpreter_id");
        let want_status = w.has("status") || flag::FLAGS.iter().any(|f| w.has(f.column));
        let want_leaf =
            w.has("frame_id") || ["funcname", "filename", "lineno"].iter().any(|c| w.has(c));
        let want_stack = w.has("stack_id");
        let want_depth = w.has("depth");
        // Group key -> row; per row its key, thread and interpreter ids, and weight.
        let mut rows: rustc_hash::FxHashMap<GroupKey, usize> = Default::default();
        let mut keys: Vec<GroupKey> = Vec::new();
        let mut ids: Vec<(u64, u32)> = Vec::new();
        let mut weight: Vec<IdxSize> = Vec::new();
        // The groups come in first-seen order, so the rows do too.
        let counts = src.aggregate()?;
        for g in &counts.groups {
            let stack = counts.stacks.get(g.stack);
            let key = GroupKey {
                stack_id: if want_stack { g.stack } else { 0 },
                thread: if want_thread { g.thread } else { 0 },
                status: if want_status { g.status } else { 0 },
                leaf: match (want_leaf, stack.first()) {
                    (false, _) => 0,
                    (true, Some(&f)) => f as IdxSize,
                    (true, None) => NO_LEAF,
                },
                depth: if want_depth { stack.len() as u32 } else { 0 },
            };
            let row = *rows.entry(key).or_insert_with(|| {
                keys.push(key);
                ids.push(counts.threads[g.thread as usize]);
                weight.push(0);
                keys.len() - 1
            });
            weight[row] += g.samples as IdxSize;
        }
        let n = keys.len();
        let mut cols = vec![file_column(&src.name, n)];
        if want_thread {
            cols.push(Column::new(
                "thread_id".into(),
                ids.iter().map(|i| i.0).collect::<Vec<_>>(),
            ));
            cols.push(Column::new(
                "interpreter_id".into(),
                ids.iter().map(|i| i.1).collect::<Vec<_>>(),
            ));
        }
        if want_status {
            let status: Vec<u8> = keys.iter().map(|k| k.status).collect();
            cols.extend(status_columns(&w, &status));
        }
        if want_stack {
            cols.push(Column::new(
                "stack_id".into(),
                keys.iter().map(|k| k.stack_id).collect::<Vec<_>>(),
            ));
        }
        if want_depth {
            cols.push(Column::new(
                "depth".into(),
                keys.iter().map(|k| k.depth).collect::<Vec<_>>(),
            ));
        }
        if want_leaf {
            let leaf = IdxCa::from_iter_options(
                "frame_id".into(),
                keys.iter().map(|k| (k.leaf != NO_LEAF).then_some(k.leaf)),
            );
            cols.push(leaf.clone().into_series().into_column());
            let wanted = |c: &str| matches!(c, "funcname" | "filename" | "lineno") && w.has(c);
            cols.extend(gather_frame_columns(src.frames()?, &leaf, &wanted, &|c| {
                c.to_string()
            })?);
        }
        cols.push(Column::new(WEIGHT_COLUMN.into(), weight));
        cols.retain(|c| w.has(c.name()));
        first_rows(ordered(&sample_groups_schema(), &w, cols, n)?, args.n_rows)
    }
}

/// The `stacks` table of one file: one row per frame of each unique stack.
struct StacksScan(Arc<Source>);

impl AnonymousScan for StacksScan {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(Arc::new(stacks_schema()))
    }
    fn allows_projection_pushdown(&self) -> bool {
        true
    }
    fn scan(&self, args: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        let w = Wanted(args.with_columns.clone());
        let agg = self.0.aggregate()?;
        let df = stacks_frame(&self.0.name, &agg.stacks, self.0.frames()?, &w)?;
        first_rows(df, args.n_rows)
    }
}

/// The `stacks` table of one file from its unique stacks (ids in first-seen order), the
/// columns `w` asks for: the query's scan and the Parquet exporter build it here.
pub(crate) fn stacks_frame(
    name: &str,
    table: &StackTable,
    frames: &DataFrame,
    w: &Wanted,
) -> PolarsResult<DataFrame> {
    let mut sid = Vec::new();
    let mut pos = Vec::new();
    let mut fid = Vec::new();
    for id in 0..table.len() as u32 {
        for (p, &f) in table.get(id).iter().enumerate() {
            sid.push(id);
            pos.push(p as u32);
            fid.push(f);
        }
    }
    let n = sid.len();
    let mut cols = vec![
        file_column(name, n),
        Column::new("stack_id".into(), sid),
        Column::new("position".into(), pos),
    ];
    let ids = IdxCa::from_vec("frame_id".into(), fid);
    cols.extend(gather_frame_columns(frames, &ids, &|c| w.has(c), &|c| {
        c.to_string()
    })?);
    cols.push(ids.into_series().into_column());
    cols.retain(|c| w.has(c.name()));
    ordered(&stacks_schema(), w, cols, n)
}

/// The columns of a distinct stacks table: `columns`, in that order.
fn distinct_stacks_schema(columns: &[String]) -> Schema {
    let all = stacks_schema();
    Schema::from_iter(columns.iter().filter_map(|c| all.get_field(c)))
}

/// `stacks` of one file restricted to `columns`, each distinct row once: what
/// `select distinct COLUMNS from stacks` gives (the pushdown's second rewrite reads
/// it). Rows are left out here, by the values they would show, so polars has no
/// distinct to compute over one row per frame of every stack.
struct DistinctStacksScan {
    src: Arc<Source>,
    columns: Vec<String>,
}

/// Per frame: an id of the values it shows in the frame columns `columns` (equal
/// values, equal id). The values are derived as `frames_frame` derives them, text
/// compared as text.
struct FrameKeys<'a> {
    file: &'a TachFile,
    columns: Vec<String>,
    of_frame: Vec<u32>,
    ids: rustc_hash::FxHashMap<Vec<u64>, u32>,
    texts: rustc_hash::FxHashMap<&'a str, u64>,
    opnames: rustc_hash::FxHashMap<String, u64>,
    /// Per frame, when the `native` column is wanted.
    native: Vec<bool>,
}

impl<'a> FrameKeys<'a> {
    fn new(file: &'a TachFile, wanted: &dyn Fn(&str) -> bool) -> Self {
        let columns: Vec<String> = frame_fields()
            .into_iter()
            .map(|f| f.name.to_string())
            .filter(|c| wanted(c))
            .collect();
        let native = if columns.iter().any(|c| c == "native") {
            file.native_frames()
        } else {
            Vec::new()
        };
        FrameKeys {
            native,
            file,
            columns,
            of_frame: vec![u32::MAX; file.frames().len()],
            ids: Default::default(),
            texts: Default::default(),
            opnames: Default::default(),
        }
    }

    fn key(&mut self, frame: u32) -> u32 {
        if self.columns.is_empty() {
            return 0;
        }
        let cached = self.of_frame[frame as usize];
        if cached != u32::MAX {
            return cached;
        }
        let file = self.file;
        let e = &file.frames()[frame as usize];
        let int = |v: i32| opt_i32(v).map_or(u64::MAX, |v| v as u32 as u64);
        let (texts, opnames) = (&mut self.texts, &mut self.opnames);
        let mut text = |t: &'a str| {
            let n = texts.len() as u64;
            *texts.entry(t).or_insert(n)
        };
        // Named as the `opname` column names it (two numbers could share a name).
        let mut name_of = |op: u8| {
            let n = opnames.len() as u64;
            *opnames.entry(opname(op)).or_insert(n)
        };
        let mut values = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            values.push(match c.as_str() {
                "filename" => text(file.string(e.filename)),
                "funcname" => text(file.string(e.funcname)),
                "opname" => e.opcode().map_or(u64::MAX, &mut name_of),
                "lineno" => int(e.lineno),
                "end_lineno" => int(e.end_lineno),
                "column" => int(e.column),
                "end_column" => int(e.end_column),
                "native" => u64::from(self.native[frame as usize]),
                _ => e.opcode().map_or(u64::MAX, u64::from),
            });
        }
        let n = self.ids.len() as u32;
        let id = *self.ids.entry(values).or_insert(n);
        self.of_frame[frame as usize] = id;
        id
    }
}

impl AnonymousScan for DistinctStacksScan {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(Arc::new(distinct_stacks_schema(&self.columns)))
    }
    fn allows_projection_pushdown(&self) -> bool {
        true
    }
    fn scan(&self, args: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        // Rows are told apart by every column of the table, whichever of them the
        // query reads in the end.
        let w = Wanted(args.with_columns.clone());
        let has = |c: &str| self.columns.iter().any(|x| x == c);
        let agg = self.src.aggregate()?;
        let table = &agg.stacks;
        let mut keys = FrameKeys::new(self.src.file()?, &has);
        let (by_stack, by_position, by_frame) = (has("stack_id"), has("position"), has("frame_id"));
        let mut seen: rustc_hash::FxHashSet<[u32; 4]> = Default::default();
        let (mut sid, mut pos, mut fid) = (Vec::new(), Vec::new(), Vec::new());
        for id in 0..table.len() as u32 {
            for (p, &f) in table.get(id).iter().enumerate() {
                let row = [
                    if by_stack { id } else { 0 },
                    if by_position { p as u32 } else { 0 },
                    if by_frame { f } else { 0 },
                    keys.key(f),
                ];
                if seen.insert(row) {
                    sid.push(id);
                    pos.push(p as u32);
                    fid.push(f);
                }
            }
        }
        let n = sid.len();
        let mut cols = vec![
            file_column(&self.src.name, n),
            Column::new("stack_id".into(), sid),
            Column::new("position".into(), pos),
        ];
        let ids = IdxCa::from_vec("frame_id".into(), fid);
        cols.extend(gather_frame_columns(
            self.src.frames()?,
            &ids,
            &|c| has(c) && w.has(c),
            &|c| c.to_string(),
        )?);
        cols.push(ids.into_series().into_column());
        cols.retain(|c| has(c.name()) && w.has(c.name()));
        let schema = distinct_stacks_schema(&self.columns);
        first_rows(ordered(&schema, &w, cols, n)?, args.n_rows)
    }
}

/// A distinct stacks table over all sources (see [`DistinctStacksScan`]). Rows of
/// different files are distinct only if `file` is one of the columns, which the
/// rewrite requires when there are several.
pub fn distinct_stacks(sources: &[Arc<Source>], columns: &[String]) -> PolarsResult<LazyFrame> {
    let per_file = sources
        .iter()
        .map(|s| {
            scan_lf(
                DistinctStacksScan {
                    src: s.clone(),
                    columns: columns.to_vec(),
                },
                distinct_stacks_schema(columns),
                "tach distinct stacks",
            )
        })
        .collect::<PolarsResult<Vec<_>>>()?;
    union_of(per_file)
}

/// The `stack_counts` table of one file: samples per (stack, thread, status).
struct StackCountsScan(Arc<Source>);

impl AnonymousScan for StackCountsScan {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn schema(&self, _: Option<usize>) -> PolarsResult<SchemaRef> {
        Ok(Arc::new(stack_counts_schema()))
    }
    fn allows_projection_pushdown(&self) -> bool {
        true
    }
    fn scan(&self, args: AnonymousScanArgs) -> PolarsResult<DataFrame> {
        let w = Wanted(args.with_columns.clone());
        let src = &self.0;
        let agg = src.aggregate()?;
        let rows = &agg.groups;
        let n = rows.len();
        let status: Vec<u8> = rows.iter().map(|r| r.status).collect();
        let thread = |r: &GroupCount| agg.threads[r.thread as usize];
        let mut cols = vec![
            file_column(&src.name, n),
            Column::new(
                "stack_id".into(),
                rows.iter().map(|r| r.stack).collect::<Vec<_>>(),
            ),
            Column::new(
                "thread_id".into(),
                rows.iter().map(|r| thread(r).0).collect::<Vec<_>>(),
            ),
            Column::new(
                "interpreter_id".into(),
                rows.iter().map(|r| thread(r).1).collect::<Vec<_>>(),
            ),
            Column::new(
                "samples".into(),
                rows.iter().map(|r| r.samples).collect::<Vec<_>>(),
            ),
        ];
        cols.extend(status_columns(&w, &status));
        cols.retain(|c| w.has(c.name()));
        first_rows(ordered(&stack_counts_schema(), &w, cols, n)?, args.n_rows)
    }
}

/// The `frames` table of one file.
fn frames_lf(src: &Arc<Source>) -> PolarsResult<LazyFrame> {
    Ok(frames_with_file(&src.name, src.frames()?).lazy())
}

/// The `frames` table: the file's frames (see [`frames_frame`]) after a `file` column.
pub(crate) fn frames_with_file(name: &str, frames: &DataFrame) -> DataFrame {
    let n = frames.height();
    let mut cols = vec![file_column(name, n)];
    cols.extend(frames.columns().iter().cloned());
    DataFrame::new(n, cols).unwrap_or_else(|_| DataFrame::empty_with_schema(&frames_schema()))
}

/// One table over all sources.
pub fn table(name: &str, sources: &[Arc<Source>]) -> PolarsResult<LazyFrame> {
    let per_file: Vec<LazyFrame> = sources
        .iter()
        .map(|s| -> PolarsResult<LazyFrame> {
            Ok(match name {
                "samples" => scan_lf(SamplesScan(s.clone()), samples_schema(), "tach samples")?,
                "frames" => frames_lf(s)?,
                "stacks" => scan_lf(StacksScan(s.clone()), stacks_schema(), "tach stacks")?,
                "stack_counts" => scan_lf(
                    StackCountsScan(s.clone()),
                    stack_counts_schema(),
                    "tach stack_counts",
                )?,
                "sample_frames" => sample_frames_lf(s)?,
                GROUPED_TABLE => scan_lf(
                    SampleGroupsScan(s.clone()),
                    sample_groups_schema(),
                    "tach samples grouped",
                )?,
                other => polars_bail!(ComputeError: "no table {other}"),
            })
        })
        .collect::<PolarsResult<_>>()?;
    union_of(per_file)
}

/// The files' frames of one table as one.
fn union_of(per_file: Vec<LazyFrame>) -> PolarsResult<LazyFrame> {
    match per_file.len() {
        1 => Ok(per_file.into_iter().next().unwrap_or_default()),
        _ => concat(per_file, UnionArgs::default()),
    }
}

/// `sample_frames` for one file: samples joined with their stack's frames. Lazy: the
/// join runs only if a query reads this table, and it has one row per frame of every
/// sample (use `stack_counts` with `stacks` for whole-profile inclusive counts).
fn sample_frames_lf(src: &Arc<Source>) -> PolarsResult<LazyFrame> {
    let samples = scan_lf(SamplesScan(src.clone()), samples_schema(), "tach samples")?.select(
        sample_frames_sample_columns()
            .into_iter()
            .map(col)
            .chain([col("depth")])
            .collect::<Vec<_>>(),
    );
    let stacks = scan_lf(StacksScan(src.clone()), stacks_schema(), "tach stacks")?.select(
        stacks_schema()
            .iter_names()
            .filter(|n| n.as_str() != "file")
            .map(|n| col(n.clone()))
            .collect::<Vec<_>>(),
    );
    let joined = samples.join(
        stacks,
        [col("stack_id")],
        [col("stack_id")],
        JoinArgs::new(JoinType::Inner),
    );
    let order: Vec<Expr> = sample_frames_schema()
        .iter_names()
        .map(|n| col(n.clone()))
        .collect();
    Ok(joined.select(order))
}

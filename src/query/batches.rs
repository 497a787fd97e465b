//! The `samples` table built batch by batch straight from the reader's runs, with the
//! reader's own filter ([`SampleFilter`], so its rules live in `tach/filter.rs` only).
//!
//! One pass over the file gives every consumer of per-sample rows its batches: the
//! Parquet exporter writes each as a row group, the Python package's `samples()` and
//! lazy `scan()` turn each into a DataFrame chunk, and the query's `samples` scan. A
//! batch holds what the decoder knows per sample (sample index, time, thread slot,
//! status, stack id, leaf frame, depth), filled run by run: a REPEAT run of N samples
//! costs N copies of a few words, not N decodes. Turning a batch into columns
//! ([`batch_columns`]) is a second step, so it can run on another core than the decode.
//!
//! Stack ids are numbered by first appearance over the whole file, filtered-out samples
//! included, as the `stacks` table numbers them: ids of kept samples always resolve.

use std::sync::{mpsc, Arc};

use polars::prelude::*;

use super::columns::{file_column, status_columns, Wanted};
use super::schema::{samples_schema, TIMESTAMP_DTYPE};
use crate::tach::filter::status as flag;
use crate::tach::stack_table::StackTable;
use crate::tach::walk::first_timestamp;
use crate::tach::{KeptRuns, Result, SampleFilter, TachError, TachFile};

/// Rows of a batch, about (a run is never split, so a batch may hold up to one run
/// more): the Parquet exporter's row group, a DataFrame chunk.
pub const BATCH_ROWS: usize = 1 << 19;

/// Leaf frame of an empty stack (null in the frame columns).
pub const NO_LEAF: u32 = u32::MAX;

/// What the scan must decode, from the columns asked for.
#[derive(Debug, Clone, Copy)]
pub struct Needs {
    pub sample: bool,
    pub timestamp: bool,
    pub thread: bool,
    pub status: bool,
    pub stack_id: bool,
    pub depth: bool,
    pub leaf: bool,
}

impl Needs {
    pub fn of(w: &Wanted) -> Needs {
        Needs {
            sample: w.has("sample"),
            timestamp: w.has("timestamp_us") || w.has("time_s") || w.has("wall_time"),
            thread: w.has("thread_id") || w.has("interpreter_id"),
            status: w.has("status") || flag::FLAGS.iter().any(|f| w.has(f.column)),
            stack_id: w.has("stack_id"),
            depth: w.has("depth"),
            leaf: ["frame_id", "funcname", "filename", "lineno"]
                .iter()
                .any(|c| w.has(c)),
        }
    }
}

/// Kept samples of one stretch of the file, per sample; only what [`Needs`] asked is
/// filled (the other vectors stay empty).
#[derive(Debug, Default)]
pub struct RawBatch {
    pub rows: usize,
    /// Index in file order of every sample, kept or not.
    pub sample: Vec<i64>,
    pub timestamp_us: Vec<i64>,
    /// Dense thread slot: an index in [`RawBatch::threads`].
    pub thread: Vec<u32>,
    pub status: Vec<u8>,
    pub stack_id: Vec<u32>,
    pub depth: Vec<u32>,
    /// Leaf frame ids; [`NO_LEAF`] for an empty stack.
    pub leaf: Vec<u32>,
    pub empty_stacks: bool,
    /// (thread id, interpreter id) per slot, as far as the decode has seen.
    pub threads: Arc<Vec<(u64, u32)>>,
}

/// Decodes a file into [`RawBatch`]es, keeping the samples the filter keeps.
pub struct SampleBatches<'a> {
    /// The filtered runs; the memo is the stack id of each thread slot's current stack,
    /// so a run with an unchanged stack reuses it instead of hashing the stack again.
    runs: KeptRuns<'a, u32>,
    needs: Needs,
    batch_rows: usize,
    /// Rows still wanted (a LIMIT).
    left: usize,
    stacks: StackTable,
    threads: Arc<Vec<(u64, u32)>>,
    next_sample: i64,
    done: bool,
}

impl<'a> SampleBatches<'a> {
    /// `origin_us` binds the filter's time window (the file's first timestamp; any
    /// value when the filter has no window). `limit`: at most this many rows.
    pub fn new(
        file: &'a TachFile,
        filter: &'a SampleFilter,
        origin_us: u64,
        needs: Needs,
        batch_rows: usize,
        limit: Option<usize>,
    ) -> Self {
        SampleBatches {
            runs: KeptRuns::new(file, filter, origin_us),
            needs,
            batch_rows: batch_rows.max(1),
            left: limit.unwrap_or(usize::MAX),
            stacks: StackTable::default(),
            threads: Arc::new(Vec::new()),
            next_sample: 0,
            done: false,
        }
    }

    /// The unique stacks interned so far (all of the file's after the last batch, when
    /// stack ids were asked for).
    pub fn into_stacks(self) -> StackTable {
        self.stacks
    }

    /// The next batch, `Ok(None)` after the last.
    pub fn next_batch(&mut self) -> Result<Option<RawBatch>> {
        if self.done || self.left == 0 {
            return Ok(None);
        }
        let n = &self.needs;
        let cap = self.batch_rows.min(self.left);
        let mut b = RawBatch::default();
        let with = |on: bool| if on { cap } else { 0 };
        b.sample.reserve(with(n.sample));
        b.timestamp_us.reserve(with(n.timestamp));
        b.thread.reserve(with(n.thread));
        b.status.reserve(with(n.status));
        b.stack_id.reserve(with(n.stack_id));
        b.depth.reserve(with(n.depth));
        b.leaf.reserve(with(n.leaf));
        while b.rows < cap {
            let Some(mut r) = self.runs.next_run()? else {
                self.done = true;
                break;
            };
            let run = r.run;
            let slot = run.thread as usize;
            if slot >= self.threads.len() {
                // Slots are dense and first-seen: a new one is the next index.
                let t = Arc::make_mut(&mut self.threads);
                t.resize(slot + 1, (0, 0));
                t[slot] = (run.thread_id, run.interpreter_id);
            }
            // Stack ids cover every sample, kept or not (see the module's docs).
            let stack_id = if n.stack_id {
                let stacks = &mut self.stacks;
                *r.memo_or_insert_with(|run| stacks.intern(run.stack))
            } else {
                0
            };
            let first = self.next_sample;
            self.next_sample += run.len() as i64;
            if !r.thread_kept {
                continue;
            }
            let leaf = match run.stack.first() {
                Some(&f) => f,
                None => {
                    b.empty_stacks = true;
                    NO_LEAF
                }
            };
            let depth = run.stack.len() as u32;
            // A run is kept whole (the batch may pass `cap` by up to one run); only a
            // LIMIT cuts it.
            let room = self.left;
            let mut push = |i: usize, ts: u64, st: u8| {
                if n.sample {
                    b.sample.push(first + i as i64);
                }
                if n.timestamp {
                    b.timestamp_us.push(ts as i64);
                }
                if n.status {
                    b.status.push(st);
                }
            };
            let mut kept = 0usize;
            let pairs = run.timestamps_us.iter().zip(run.statuses).enumerate();
            if r.keeps_whole() {
                // A whole run (or what the LIMIT leaves of it).
                for (i, (&ts, &st)) in pairs.take(room) {
                    push(i, ts, st);
                }
                kept = run.len().min(room);
            } else {
                for (i, (&ts, &st)) in pairs {
                    if kept == room {
                        break;
                    }
                    if r.keeps_sample(st, ts) {
                        push(i, ts, st);
                        kept += 1;
                    }
                }
            }
            let fill = |v: &mut Vec<u32>, on: bool, x: u32| {
                if on {
                    v.resize(v.len() + kept, x);
                }
            };
            fill(&mut b.thread, n.thread, run.thread);
            fill(&mut b.stack_id, n.stack_id, stack_id);
            fill(&mut b.depth, n.depth, depth);
            fill(&mut b.leaf, n.leaf, leaf);
            b.rows += kept;
            self.left -= kept;
            if self.left == 0 {
                break;
            }
        }
        b.threads = self.threads.clone();
        // No row means the end (the loop stops early only at the end or the LIMIT).
        Ok((b.rows > 0).then_some(b))
    }
}

/// Why a batch pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(transparent)]
    Read(#[from] TachError),
    #[error(transparent)]
    Build(#[from] PolarsError),
    #[error("{0}")]
    Thread(&'static str),
}

/// Where `time_s` gets the profile's first timestamp from.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    Known(u64),
    /// Found by a decode of its own on another thread, while the batches are decoded.
    Find,
    /// `time_s` is not built.
    Unneeded,
}

/// What a pipeline leaves besides its output.
pub struct PipelineEnd {
    /// The unique stacks, ids as in the batches (empty unless stack ids were asked).
    pub stacks: StackTable,
    /// The profile's first timestamp, when it was found or given.
    pub origin_us: Option<u64>,
}

/// Decodes `file` on a second thread into batches of `batch_rows` (at most one waiting)
/// while `each` turns each batch into output on the calling thread, so the two cores
/// split decoding and building. `each` gets the batch and the profile's first timestamp
/// (0 when [`Origin::Unneeded`]). A filter with a time window needs the origin before
/// the decode: [`Origin::Find`] then finds it first.
pub fn pipeline(
    file: &TachFile,
    filter: &SampleFilter,
    origin: Origin,
    needs: Needs,
    batch_rows: usize,
    limit: Option<usize>,
    mut each: impl FnMut(RawBatch, u64) -> Result<(), BatchError>,
) -> Result<PipelineEnd, BatchError> {
    filter.wall_offset(file)?;
    let mut known = match origin {
        Origin::Known(o) => Some(o),
        Origin::Find if filter.needs_origin() => Some(first_timestamp(file)?.unwrap_or(0)),
        Origin::Find => None,
        Origin::Unneeded => Some(0),
    };
    let bind_at = known.unwrap_or(0);
    std::thread::scope(|s| {
        let mut finder = known.is_none().then(|| s.spawn(|| first_timestamp(file)));
        let (tx, rx) = mpsc::sync_channel::<RawBatch>(1);
        let decoder = s.spawn(move || -> Result<StackTable> {
            let mut batches = SampleBatches::new(file, filter, bind_at, needs, batch_rows, limit);
            while let Some(b) = batches.next_batch()? {
                if tx.send(b).is_err() {
                    // The consumer stopped on an error of its own.
                    break;
                }
            }
            Ok(batches.into_stacks())
        });
        let mut result = Ok(());
        for b in rx.iter() {
            let o = match (known, finder.take()) {
                (Some(o), _) => o,
                (None, Some(h)) => {
                    let found = h
                        .join()
                        .map_err(|_| BatchError::Thread("the origin search panicked"))??
                        .unwrap_or(0);
                    known = Some(found);
                    found
                }
                (None, None) => 0,
            };
            if let Err(e) = each(b, o) {
                result = Err(e);
                break;
            }
        }
        drop(rx);
        let stacks = decoder
            .join()
            .map_err(|_| BatchError::Thread("the decoder panicked"))??;
        result?;
        // No batch: the origin search (if any) is joined by the scope, unneeded.
        let origin_us = match origin {
            Origin::Unneeded => None,
            _ => known,
        };
        Ok(PipelineEnd { stacks, origin_us })
    })
}

/// What turning a batch into columns needs besides the batch.
#[derive(Clone, Copy)]
pub struct BatchContext<'a> {
    /// The value of the `file` column.
    pub name: &'a str,
    /// The file's frames table (`frame_id` first), for the leaf frame's columns.
    pub frames: &'a DataFrame,
    /// The profile's first timestamp, for `time_s`.
    pub origin_us: i64,
    /// What turns a timestamp into `wall_time` (see [`wall_offset_us`]); `None`: the
    /// file has no wall-clock origin, and `wall_time` is null.
    pub wall_offset_us: Option<i64>,
}

/// The file's wall-clock origin minus its start time: added to a sample's monotonic
/// timestamp, the sample's wall-clock time (UTC, Unix epoch µs), as
/// [`Footer::wall_time_us`](crate::tach::Footer::wall_time_us) computes it.
pub fn wall_offset_us(file: &TachFile) -> Option<i64> {
    let start = file.header().start_time_us;
    file.footer().wall_time_us(start, 0)
}

/// The columns `w` asks for, from one batch, in `samples` order. String columns are
/// views into the frames table's buffers: 16 bytes a row, never a copy of the text.
pub fn batch_columns(b: RawBatch, w: &Wanted, ctx: &BatchContext<'_>) -> PolarsResult<Vec<Column>> {
    let n = b.rows;
    let mut cols = Vec::new();
    if w.has("file") {
        cols.push(file_column(ctx.name, n));
    }
    if w.has("sample") {
        cols.push(Column::new("sample".into(), b.sample));
    }
    if w.has("time_s") {
        let origin = ctx.origin_us;
        let secs: Vec<f64> = b
            .timestamp_us
            .iter()
            .map(|&t| (t - origin) as f64 / 1e6)
            .collect();
        cols.push(Column::new("time_s".into(), secs));
    }
    if w.has("wall_time") {
        let col = match ctx.wall_offset_us {
            Some(offset) => {
                let us: Vec<i64> = b
                    .timestamp_us
                    .iter()
                    .map(|&t| t.wrapping_add(offset))
                    .collect();
                Column::new("wall_time".into(), us).cast(&TIMESTAMP_DTYPE)?
            }
            None => Column::full_null("wall_time".into(), n, &TIMESTAMP_DTYPE),
        };
        cols.push(col);
    }
    if w.has("timestamp_us") {
        cols.push(Column::new("timestamp_us".into(), b.timestamp_us));
    }
    if w.has("thread_id") {
        // Every slot of a batch is in its thread list (added before its first row).
        let ids: Vec<u64> = b
            .thread
            .iter()
            .map(|&s| b.threads.get(s as usize).map_or(0, |t| t.0))
            .collect();
        cols.push(Column::new("thread_id".into(), ids));
    }
    if w.has("interpreter_id") {
        let ids: Vec<u32> = b
            .thread
            .iter()
            .map(|&s| b.threads.get(s as usize).map_or(0, |t| t.1))
            .collect();
        cols.push(Column::new("interpreter_id".into(), ids));
    }
    cols.extend(status_columns(w, &b.status));
    if w.has("stack_id") {
        cols.push(Column::new("stack_id".into(), b.stack_id));
    }
    if w.has("depth") {
        cols.push(Column::new("depth".into(), b.depth));
    }
    if Needs::of(w).leaf {
        let ids = leaf_ids(b.leaf, b.empty_stacks);
        if w.has("frame_id") {
            cols.push(ids.clone().into_series().into_column());
        }
        for c in ["funcname", "filename", "lineno"] {
            if w.has(c) {
                let mut taken = ctx.frames.column(c)?.take(&ids)?;
                taken.rename(c.into());
                cols.push(taken);
            }
        }
    }
    Ok(cols)
}

/// Leaf frame ids as polars' gather indices; [`NO_LEAF`] becomes a null.
fn leaf_ids(leaf: Vec<u32>, empty_stacks: bool) -> IdxCa {
    // IdxSize is u32 or u64 depending on polars' build: convert only when it differs.
    if empty_stacks {
        IdxCa::from_iter_options(
            "frame_id".into(),
            leaf.into_iter()
                .map(|f| (f != NO_LEAF).then_some(f as IdxSize)),
        )
    } else {
        #[allow(clippy::useless_conversion)]
        let v: Vec<IdxSize> = leaf.into_iter().map(IdxSize::from).collect();
        IdxCa::from_vec("frame_id".into(), v)
    }
}

/// Puts columns in the order `w` lists them (schema order when it lists none).
pub fn in_order(w: &Wanted, mut cols: Vec<Column>, height: usize) -> PolarsResult<DataFrame> {
    let schema = samples_schema();
    let names: Vec<PlSmallStr> = match &w.0 {
        Some(list) => list.iter().cloned().collect(),
        None => schema.iter_names().cloned().collect(),
    };
    let mut out = Vec::with_capacity(cols.len());
    for name in names {
        if let Some(i) = cols.iter().position(|c| c.name() == &name) {
            out.push(cols.swap_remove(i));
        }
    }
    DataFrame::new(height, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden_corpus::golden_bins;

    /// (sample, timestamp, thread slot, status, leaf) of every kept sample, sample by
    /// sample through the reader and its filter: what the batches must hold.
    fn expected(
        file: &TachFile,
        filter: &SampleFilter,
        origin: u64,
    ) -> Vec<(i64, i64, u32, u8, u32)> {
        let bound = filter.bind(origin);
        let mut out = Vec::new();
        let mut i = 0i64;
        file.for_each_sample(|s| {
            if bound.keep(s) {
                let leaf = s.stack.first().copied().unwrap_or(NO_LEAF);
                out.push((i, s.timestamp_us as i64, s.thread, s.status, leaf));
            }
            i += 1;
        })
        .unwrap();
        out
    }

    fn batched(
        file: &TachFile,
        filter: &SampleFilter,
        origin: u64,
        rows: usize,
        limit: Option<usize>,
    ) -> Vec<(i64, i64, u32, u8, u32)> {
        let needs = Needs::of(&Wanted(None));
        let mut batches = SampleBatches::new(file, filter, origin, needs, rows, limit);
        let mut out = Vec::new();
        while let Some(b) = batches.next_batch().unwrap() {
            assert!(b.rows > 0);
            for r in 0..b.rows {
                out.push((
                    b.sample[r],
                    b.timestamp_us[r],
                    b.thread[r],
                    b.status[r],
                    b.leaf[r],
                ));
            }
        }
        out
    }

    /// Batches far shorter than the runs (7 rows, REPEAT runs of thousands) and longer
    /// ones, with and without a filter and a LIMIT, hold exactly the reader's samples.
    #[test]
    fn batches_hold_the_samples_the_reader_keeps() {
        let gil = SampleFilter::from_options(&[], Some(0.2), Some(2.0), &["has-gil"]).unwrap();
        for path in golden_bins() {
            let file = TachFile::open(&path).unwrap();
            let origin = first_timestamp(&file).unwrap().unwrap_or(0);
            for filter in [SampleFilter::default(), gil.clone()] {
                let want = expected(&file, &filter, origin);
                for rows in [7, 1000, BATCH_ROWS] {
                    assert_eq!(
                        batched(&file, &filter, origin, rows, None),
                        want,
                        "{path:?}"
                    );
                }
                let some = want.len() / 3;
                assert_eq!(
                    batched(&file, &filter, origin, 7, Some(some)),
                    want[..some],
                    "{path:?}"
                );
            }
        }
    }
}

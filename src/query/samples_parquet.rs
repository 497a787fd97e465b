//! The `samples` table written as Parquet row groups while the file is decoded, with
//! bounded memory: the Parquet exporter's streaming half (`export/parquet.rs`).
//!
//! Each batch of `super::batches` becomes one row group of polars' batched writer.
//! The columns whose values repeat from a small set are handed to the encoder already
//! dictionary-encoded, keyed by what the decoder knows: `funcname` and `filename` by the
//! leaf frame's string, `thread_id` by the thread slot, `file` by nothing. polars would
//! otherwise hash every string of every row to find the same dictionary (most of the
//! export's time). The Parquet and Arrow schema are exactly [`stored_samples_schema`]:
//! strings are `string` columns whose pages are dictionary pages, as polars writes them.
//! Each dictionary holds only the values its row group uses, so the statistics
//! (min/max) stay exact. `sample` and `timestamp_us` are delta-encoded, the flags
//! run-length encoded, every page zstd-compressed. The columns are encoded in parallel,
//! and the next batch is decoded meanwhile on the decoder's thread. The same pass counts
//! the rows per stack, thread and status: the `stack_counts` table ([`GroupCounts`]).

use std::io::Write;
use std::sync::Arc;

use polars::prelude::*;
use polars_arrow::array::{Array, DictionaryArray, PrimitiveArray, Utf8ViewArray};
use polars_arrow::bitmap::MutableBitmap;
use polars_arrow::datatypes::{ArrowDataType, IntegerType};
use polars_parquet::write::{
    array_to_columns, compress, get_dtype_encoding, CompressedPage, CompressionOptions, Encoding,
    ParquetType, StatisticsOptions, Version, WriteOptions,
};
use rayon::prelude::*;

use rustc_hash::FxHashMap;

use super::batches::{
    batch_columns, in_order, pipeline, wall_offset_us, BatchContext, BatchError, Needs, Origin,
    RawBatch, BATCH_ROWS, NO_LEAF,
};
use super::columns::Wanted;
use super::schema::{samples_schema, stack_counts_schema};
use crate::tach::index::StackTable;
use crate::tach::{SampleFilter, TachFile};

/// The column a dataset's `samples` stores in place of `time_s`: the profile's first
/// timestamp, the same in every row of a file (so its pages hold it once).
pub const ORIGIN_COLUMN: &str = "origin_us";

/// The leaf-frame columns of `samples` that a dataset's `stack_counts` also stores, so
/// that self time over a fleet is one scan of that table, with no join.
pub const STACK_COUNTS_LEAF_COLUMNS: [&str; 5] =
    ["depth", "frame_id", "funcname", "filename", "lineno"];

/// `samples` as a Parquet export stores it: the query's columns, with `time_s`
/// replaced by [`ORIGIN_COLUMN`]. `time_s` is `(timestamp_us - origin_us) / 1e6`, a
/// double whose low mantissa bits differ in every row: stored, it cost 7.0 of the 15.0
/// bytes a sample of a big real recording (docs/parquet.md), while `timestamp_us`
/// packs into a few bits a sample and `origin_us` into nothing.
pub fn stored_samples_schema() -> Schema {
    Schema::from_iter(samples_schema().iter().map(|(name, dtype)| {
        if name.as_str() == "time_s" {
            Field::new(ORIGIN_COLUMN.into(), DataType::Int64)
        } else {
            Field::new(name.clone(), dtype.clone())
        }
    }))
}

/// `stack_counts` as a Parquet export stores it: the query's columns, then the leaf
/// frame's ([`STACK_COUNTS_LEAF_COLUMNS`], typed as in `samples`).
pub fn stored_stack_counts_schema() -> Schema {
    let samples = samples_schema();
    let mut fields: Vec<Field> = stack_counts_schema()
        .iter()
        .map(|(n, d)| Field::new(n.clone(), d.clone()))
        .collect();
    for c in STACK_COUNTS_LEAF_COLUMNS {
        let dtype = samples.get(c).cloned().unwrap_or(DataType::Null);
        fields.push(Field::new(c.into(), dtype));
    }
    Schema::from_iter(fields)
}

/// Columns given to the encoder as dictionaries (built here from the decoder's ids).
const DICTIONARY_COLUMNS: [&str; 4] = ["file", "thread_id", "funcname", "filename"];

/// Integer columns that differ from one sample to the next but by little: a dictionary
/// of them would be as long as the column, while their differences (1 for `sample`,
/// the sampling interval within a run for `timestamp_us` and `wall_time`) pack into a
/// few bits.
const DELTA_COLUMNS: [&str; 3] = ["sample", "timestamp_us", "wall_time"];

/// The compression of every page tach writes: zstd's default level. The encodings
/// leave runs and small integers; zstd also removes what repeats across them (a
/// thread's alternating stacks, a status pattern).
pub const COMPRESSION: CompressionOptions = CompressionOptions::Zstd(None);

fn parquet_err(e: impl std::fmt::Display) -> PolarsError {
    PolarsError::ComputeError(format!("writing Parquet: {e}").into())
}

/// What every row group shares.
struct Encoder<'a> {
    file: &'a TachFile,
    name: &'a str,
    frames: &'a DataFrame,
    /// The columns built as polars columns: all but [`DICTIONARY_COLUMNS`].
    rest: Wanted,
    /// Per frame, the string index of its function and of its file name.
    funcname_of: Vec<u32>,
    filename_of: Vec<u32>,
    fields: Vec<ParquetType>,
    options: WriteOptions,
}

/// What writing `samples` leaves for the other tables.
pub struct WrittenSamples {
    /// The file's unique stacks (ids as in `stack_id`), kept samples or not.
    pub stacks: StackTable,
    /// The kept samples counted per stack, thread and status.
    pub counts: GroupCounts,
}

/// Streams the filtered `samples` table of `file` into `out` as Parquet (in
/// [`stored_samples_schema`]), counting its rows per stack, thread and status on the
/// way. `origin_us` is the file's first timestamp when the caller has it (it must, for
/// a filter with a time window); `metadata` is the file's key-value metadata (a dataset
/// partition's source).
pub fn write_samples(
    file: &TachFile,
    name: &str,
    filter: &SampleFilter,
    origin_us: Option<u64>,
    frames: &DataFrame,
    metadata: Option<KeyValueMetadata>,
    out: &mut dyn Write,
) -> Result<WrittenSamples, BatchError> {
    let schema = stored_samples_schema();
    let mut writer = ParquetWriter::new(out)
        .with_compression(ParquetCompression::Zstd(None))
        .with_key_value_metadata(metadata)
        .batched(&schema)?;
    let rest: Vec<PlSmallStr> = schema
        .iter_names()
        .filter(|n| !DICTIONARY_COLUMNS.contains(&n.as_str()) && n.as_str() != ORIGIN_COLUMN)
        .cloned()
        .collect();
    let enc = Encoder {
        file,
        name,
        frames,
        rest: Wanted(Some(rest.into())),
        funcname_of: file.frames().iter().map(|f| f.funcname).collect(),
        filename_of: file.frames().iter().map(|f| f.filename).collect(),
        fields: writer.parquet_schema().fields().to_vec(),
        // What polars' own writer uses (`ParquetWriter::materialize_options`).
        options: WriteOptions {
            statistics: StatisticsOptions::default(),
            version: Version::V1,
            compression: COMPRESSION,
            data_page_size: None,
        },
    };
    let origin = origin_us.map_or(Origin::Find, Origin::Known);
    let needs = Needs::of(&Wanted(None));
    let mut counts = GroupCounts::default();
    let end = pipeline(
        file,
        filter,
        origin,
        needs,
        BATCH_ROWS,
        None,
        |b, origin_us| {
            counts.add(&b);
            let rows = b.rows as u64;
            let pages = enc.row_group(b, origin_us as i64)?;
            writer.write_row_group(rows, &pages)?;
            Ok(())
        },
    )?;
    writer.finish()?;
    Ok(WrittenSamples {
        stacks: end.stacks,
        counts,
    })
}

/// One (stack, thread slot, status) group of kept samples.
#[derive(Debug, Clone, Copy)]
struct Group {
    stack_id: u32,
    thread: u32,
    status: u8,
    leaf: u32,
    depth: u32,
    samples: u64,
}

/// Samples counted per stack, thread and status while `samples` is written: the rows
/// of `stack_counts`, without a second decode.
#[derive(Debug, Default)]
pub struct GroupCounts {
    index: FxHashMap<(u32, u32, u8), usize>,
    groups: Vec<Group>,
    threads: Arc<Vec<(u64, u32)>>,
}

impl GroupCounts {
    fn add(&mut self, b: &RawBatch) {
        self.threads = b.threads.clone();
        let GroupCounts { index, groups, .. } = self;
        // Rows come run by run: a row with the last row's key needs no lookup.
        let mut last: Option<((u32, u32, u8), usize)> = None;
        for r in 0..b.rows {
            let key = (b.stack_id[r], b.thread[r], b.status[r]);
            let i = match last {
                Some((k, i)) if k == key => i,
                _ => *index.entry(key).or_insert_with(|| {
                    groups.push(Group {
                        stack_id: key.0,
                        thread: key.1,
                        status: key.2,
                        leaf: b.leaf[r],
                        depth: b.depth[r],
                        samples: 0,
                    });
                    groups.len() - 1
                }),
            };
            groups[i].samples += 1;
            last = Some((key, i));
        }
    }

    /// The stored `stack_counts` table ([`stored_stack_counts_schema`]) of file `name`,
    /// ordered by stack, thread (first seen first) and status.
    pub fn frame(&self, name: &str, frames: &DataFrame) -> PolarsResult<DataFrame> {
        let mut groups = self.groups.clone();
        groups.sort_unstable_by_key(|g| (g.stack_id, g.thread, g.status));
        let b = RawBatch {
            rows: groups.len(),
            thread: groups.iter().map(|g| g.thread).collect(),
            status: groups.iter().map(|g| g.status).collect(),
            stack_id: groups.iter().map(|g| g.stack_id).collect(),
            depth: groups.iter().map(|g| g.depth).collect(),
            leaf: groups.iter().map(|g| g.leaf).collect(),
            empty_stacks: groups.iter().any(|g| g.leaf == NO_LEAF),
            threads: self.threads.clone(),
            ..Default::default()
        };
        let schema = stored_stack_counts_schema();
        let built: Vec<PlSmallStr> = schema
            .iter_names()
            .filter(|n| n.as_str() != "samples")
            .cloned()
            .collect();
        let wanted = Wanted(Some(built.into()));
        let ctx = BatchContext {
            name,
            frames,
            origin_us: 0,
            wall_offset_us: None,
        };
        let mut cols = batch_columns(b, &wanted, &ctx)?;
        cols.push(Column::new(
            "samples".into(),
            groups.iter().map(|g| g.samples).collect::<Vec<u64>>(),
        ));
        let all = Wanted(Some(
            schema.iter_names().cloned().collect::<Vec<_>>().into(),
        ));
        in_order(&all, cols, groups.len())
    }
}

impl Encoder<'_> {
    /// One batch as the compressed pages of one row group, a list per column.
    fn row_group(&self, mut b: RawBatch, origin_us: i64) -> PolarsResult<Vec<Vec<CompressedPage>>> {
        let rows = b.rows;
        let leaf = std::mem::take(&mut b.leaf);
        let funcname = self.strings(&leaf, &self.funcname_of)?;
        let filename = self.strings(&leaf, &self.filename_of)?;
        let threads = thread_ids(&b.thread, &b.threads)?;
        let file = constant_string(self.name, rows)?;
        // batch_columns reads the leaf frames again for frame_id and lineno.
        b.leaf = leaf;
        let ctx = BatchContext {
            name: self.name,
            frames: self.frames,
            origin_us,
            wall_offset_us: wall_offset_us(self.file),
        };
        let mut cols = batch_columns(b, &self.rest, &ctx)?;
        let mut arrays: Vec<(Box<dyn Array>, Encoding)> = Vec::with_capacity(self.fields.len());
        let (mut funcname, mut filename, mut threads, mut file) =
            (Some(funcname), Some(filename), Some(threads), Some(file));
        for name in stored_samples_schema().iter_names() {
            if name.as_str() == ORIGIN_COLUMN {
                // One value: a dictionary of one entry and a single RLE run.
                let origin = PrimitiveArray::from_vec(vec![origin_us; rows]).boxed();
                arrays.push((origin, Encoding::RleDictionary));
                continue;
            }
            let dict = match name.as_str() {
                "file" => file.take(),
                "thread_id" => threads.take(),
                "funcname" => funcname.take(),
                "filename" => filename.take(),
                _ => None,
            };
            if let Some(array) = dict {
                arrays.push((array, Encoding::RleDictionary));
                continue;
            }
            let i = cols
                .iter()
                .position(|c| c.name() == name)
                .ok_or_else(|| parquet_err(format!("column {name} was not built")))?;
            let series = cols.swap_remove(i).take_materialized_series().rechunk();
            let array = series.to_arrow(0, CompatLevel::newest());
            let encoding = if DELTA_COLUMNS.contains(&name.as_str()) {
                Encoding::DeltaBinaryPacked
            } else if array.dtype() == &ArrowDataType::Boolean {
                // The flags hold for runs of samples: RLE stores each run once.
                Encoding::Rle
            } else {
                // polars' choice: a dictionary when the values' range is small.
                get_dtype_encoding(array.dtype())
                    .first()
                    .copied()
                    .unwrap_or(Encoding::Plain)
            };
            arrays.push((array, encoding));
        }
        let options = self.options;
        arrays
            .into_par_iter()
            .zip(self.fields.par_iter())
            .map(|((array, encoding), ty)| {
                let mut pages = Vec::new();
                for column in array_to_columns(&array, ty.clone(), options, &[encoding])? {
                    for page in column {
                        pages.push(
                            compress(page?, Vec::new(), options.compression)
                                .map_err(parquet_err)?,
                        );
                    }
                }
                Ok(pages)
            })
            .collect()
    }

    /// A string column of the leaf frames (`of_frame`: a frame's string index) as a
    /// dictionary of the strings this batch uses, first seen first.
    fn strings(&self, leaf: &[u32], of_frame: &[u32]) -> PolarsResult<Box<dyn Array>> {
        let mut dense = vec![u32::MAX; self.file.strings().len()];
        let mut used: Vec<u32> = Vec::new();
        let mut keys: Vec<u32> = Vec::with_capacity(leaf.len());
        let mut validity: Option<MutableBitmap> = None;
        // Runs share a leaf: remember the last one.
        let mut last = (NO_LEAF, 0u32);
        for (row, &f) in leaf.iter().enumerate() {
            if f == last.0 && f != NO_LEAF {
                if let Some(v) = validity.as_mut() {
                    v.push(true);
                }
                keys.push(last.1);
                continue;
            }
            let string = of_frame.get(f as usize).copied();
            let slot = string.and_then(|s| dense.get_mut(s as usize));
            let Some(slot) = slot else {
                // An empty stack has no leaf frame: null, as in the DataFrame.
                let v = validity.get_or_insert_with(|| {
                    let mut v = MutableBitmap::with_capacity(leaf.len());
                    v.extend_constant(row, true);
                    v
                });
                v.push(false);
                keys.push(0);
                continue;
            };
            if *slot == u32::MAX {
                *slot = used.len() as u32;
                used.push(string.unwrap_or(0));
            }
            let key = *slot;
            if let Some(v) = validity.as_mut() {
                v.push(true);
            }
            last = (f, key);
            keys.push(key);
        }
        let values = Utf8ViewArray::from_slice_values(
            used.iter()
                .map(|&s| self.file.string(s))
                .collect::<Vec<_>>(),
        );
        dictionary(keys, validity, values.boxed())
    }
}

/// A dictionary array of `u32` keys.
fn dictionary(
    keys: Vec<u32>,
    validity: Option<MutableBitmap>,
    values: Box<dyn Array>,
) -> PolarsResult<Box<dyn Array>> {
    let keys = PrimitiveArray::new(
        ArrowDataType::UInt32,
        keys.into(),
        validity.map(|v| v.into()),
    );
    let dtype =
        ArrowDataType::Dictionary(IntegerType::UInt32, Box::new(values.dtype().clone()), false);
    Ok(DictionaryArray::try_new(dtype, keys, values)?.boxed())
}

/// `thread_id` from the rows' thread slots, as a dictionary of the ids used.
fn thread_ids(slots: &[u32], threads: &[(u64, u32)]) -> PolarsResult<Box<dyn Array>> {
    let mut dense = vec![u32::MAX; threads.len()];
    let mut used: Vec<u64> = Vec::new();
    let mut keys = Vec::with_capacity(slots.len());
    for &s in slots {
        let slot = dense
            .get_mut(s as usize)
            .ok_or_else(|| parquet_err("a sample of an unknown thread"))?;
        if *slot == u32::MAX {
            *slot = used.len() as u32;
            used.push(threads[s as usize].0);
        }
        keys.push(*slot);
    }
    dictionary(keys, None, PrimitiveArray::from_vec(used).boxed())
}

/// The `file` column: one value, `rows` times.
fn constant_string(value: &str, rows: usize) -> PolarsResult<Box<dyn Array>> {
    dictionary(
        vec![0; rows],
        None,
        Utf8ViewArray::from_slice_values([value]).boxed(),
    )
}

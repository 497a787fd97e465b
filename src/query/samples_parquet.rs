//! The `samples` table written as Parquet row groups while the file is decoded, with
//! bounded memory: the Parquet exporter's streaming half (`export/parquet.rs`).
//!
//! Each batch of `super::batches` becomes one row group of polars' batched writer.
//! The columns whose values repeat from a small set are handed to the encoder already
//! dictionary-encoded, keyed by what the decoder knows: `funcname` and `filename` by the
//! leaf frame's string, `thread_id` by the thread slot, `file` by nothing. polars would
//! otherwise hash every string of every row to find the same dictionary (most of the
//! export's time). The Parquet and Arrow schema are still exactly `samples_schema()`:
//! strings are `string` columns whose pages are dictionary pages, as polars writes them.
//! Each dictionary holds only the values its row group uses, so the statistics
//! (min/max) stay exact. The columns are encoded in parallel, and the next batch is
//! decoded meanwhile on the decoder's thread.

use std::io::Write;

use polars::prelude::*;
use polars_arrow::array::{Array, DictionaryArray, PrimitiveArray, Utf8ViewArray};
use polars_arrow::bitmap::MutableBitmap;
use polars_arrow::datatypes::{ArrowDataType, IntegerType};
use polars_parquet::write::{
    array_to_columns, compress, get_dtype_encoding, CompressedPage, CompressionOptions, Encoding,
    ParquetType, StatisticsOptions, Version, WriteOptions,
};
use rayon::prelude::*;

use super::batches::{
    batch_columns, pipeline, BatchContext, BatchError, Needs, Origin, RawBatch, BATCH_ROWS, NO_LEAF,
};
use super::tables::{samples_schema, Wanted};
use crate::tach::index::StackTable;
use crate::tach::{SampleFilter, TachFile};

/// Columns given to the encoder as dictionaries (built here from the decoder's ids).
const DICTIONARY_COLUMNS: [&str; 4] = ["file", "thread_id", "funcname", "filename"];

/// Columns that differ from one sample to the next: written plain, as the dictionary
/// polars would try for them is as long as the column.
const PLAIN_COLUMNS: [&str; 3] = ["sample", "timestamp_us", "time_s"];

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

/// Streams the filtered `samples` table of `file` into `out` as Parquet; returns the
/// file's unique stacks (ids as in `stack_id`). `origin_us` is the file's first
/// timestamp when the caller has it (it must, for a filter with a time window);
/// `metadata` is the file's key-value metadata (a dataset partition's source).
pub fn write_samples(
    file: &TachFile,
    name: &str,
    filter: &SampleFilter,
    origin_us: Option<u64>,
    frames: &DataFrame,
    metadata: Option<KeyValueMetadata>,
    out: &mut dyn Write,
) -> Result<StackTable, BatchError> {
    let schema = samples_schema();
    let mut writer = ParquetWriter::new(out)
        .with_compression(ParquetCompression::Snappy)
        .with_key_value_metadata(metadata)
        .batched(&schema)?;
    let rest: Vec<PlSmallStr> = schema
        .iter_names()
        .filter(|n| !DICTIONARY_COLUMNS.contains(&n.as_str()))
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
            compression: CompressionOptions::Snappy,
            data_page_size: None,
        },
    };
    let origin = origin_us.map_or(Origin::Find, Origin::Known);
    let needs = Needs::of(&Wanted(None));
    let end = pipeline(
        file,
        filter,
        origin,
        needs,
        BATCH_ROWS,
        None,
        |b, origin_us| {
            let rows = b.rows as u64;
            let pages = enc.row_group(b, origin_us as i64)?;
            writer.write_row_group(rows, &pages)?;
            Ok(())
        },
    )?;
    writer.finish()?;
    Ok(end.stacks)
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
        };
        let mut cols = batch_columns(b, &self.rest, &ctx)?;
        let mut arrays: Vec<(Box<dyn Array>, Encoding)> = Vec::with_capacity(self.fields.len());
        let (mut funcname, mut filename, mut threads, mut file) =
            (Some(funcname), Some(filename), Some(threads), Some(file));
        for name in samples_schema().iter_names() {
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
            let encoding = if PLAIN_COLUMNS.contains(&name.as_str()) {
                Encoding::Plain
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

//! polars DataFrames handed to Python through the Arrow C stream interface: an object
//! with `__arrow_c_stream__` that `polars.DataFrame(obj)` (and `pyarrow.table(obj)`)
//! import without copying. This works with any polars wheel from PyPI, unlike
//! pyo3-polars, which ties the Rust and Python polars versions together (docs/python.md).

use std::sync::Mutex;

use polars::prelude::{Column, CompatLevel, DataFrame, IntoColumn, PolarsResult};
use polars_arrow::array::{ArrayRef, StructArray};
use polars_arrow::datatypes::{ArrowDataType, Field};
use polars_arrow::ffi::{export_iterator, ArrowArrayStream};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// A DataFrame waiting to be imported by a DataFrame library.
#[pyclass(module = "tach._native", name = "ArrowStream", frozen)]
pub struct ArrowStream {
    df: Mutex<DataFrame>,
}

impl ArrowStream {
    pub fn new(df: DataFrame) -> Self {
        ArrowStream { df: Mutex::new(df) }
    }
}

/// The C stream owns raw pointers; it is only moved between threads as a whole and
/// released once (by its consumer, or by the capsule when nobody consumed it).
#[repr(transparent)]
struct SendStream(#[allow(dead_code)] ArrowArrayStream);
// SAFETY: the stream's private data (record batches) is Send; the struct is never
// shared, only moved, and the Arrow C stream contract allows use from any thread.
unsafe impl Send for SendStream {}

#[pymethods]
impl ArrowStream {
    /// The Arrow PyCapsule interface: a capsule named "arrow_array_stream". The
    /// requested schema is ignored (allowed by the protocol): columns keep their types,
    /// strings as Arrow string views.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        // Columns are Arc'd: the clone is cheap, and the stream can be read again.
        let mut df = self
            .df
            .lock()
            .map_err(|_| PyRuntimeError::new_err("DataFrame lock poisoned"))?
            .clone();
        let stream = py.detach(|| stream_of(&mut df));
        PyCapsule::new_with_value(py, SendStream(stream), c"arrow_array_stream")
    }

    fn __len__(&self) -> usize {
        self.df.lock().map(|d| d.height()).unwrap_or(0)
    }
}

/// Record batches as struct arrays, as the C stream interface wants them: one batch per
/// chunk (the `samples` table comes as one chunk per decoded batch).
fn stream_of(df: &mut DataFrame) -> ArrowArrayStream {
    let compat = CompatLevel::newest();
    chunk_scalars_like_the_rest(df);
    // iter_chunks needs aligned chunks (a no-op when they are, as built here).
    df.align_chunks();
    let fields: Vec<Field> = df
        .columns()
        .iter()
        .map(|c| c.field().to_arrow(compat))
        .collect();
    let dtype = ArrowDataType::Struct(fields);
    let batches: Vec<PolarsResult<ArrayRef>> = df
        .iter_chunks(compat, false)
        .map(|rb| {
            let len = rb.height();
            Ok(Box::new(StructArray::new(dtype.clone(), len, rb.into_arrays(), None)) as ArrayRef)
        })
        .collect();
    export_iterator(
        Box::new(batches.into_iter()),
        Field::new("".into(), dtype, false),
    )
}

/// A scalar column (the `file` column: one value for every row) materializes as one
/// chunk, which would make `align_chunks` copy every other column into one chunk too.
/// Materialize it chunk by chunk like the first series column instead.
fn chunk_scalars_like_the_rest(df: &mut DataFrame) {
    let lengths: Vec<usize> = match df.columns().iter().find_map(|c| c.as_series()) {
        Some(s) if s.n_chunks() > 1 => s.chunk_lengths().collect(),
        _ => return,
    };
    let height = df.height();
    // Columns are Arc'd: the copy is cheap, and the frame stays whole if this fails.
    let mut cols: Vec<Column> = df.columns().to_vec();
    for c in cols.iter_mut() {
        let Some(sc) = c.as_scalar_column() else {
            continue;
        };
        let (name, scalar) = (sc.name().clone(), sc.scalar().clone());
        let mut chunks = lengths.iter().map(|&n| {
            Column::new_scalar(name.clone(), scalar.clone(), n).take_materialized_series()
        });
        let Some(mut series) = chunks.next() else {
            continue;
        };
        // Appending keeps each piece as its own chunk (no copy); the lengths add up to
        // the height, so a failure here leaves the column as it was.
        if chunks
            .try_for_each(|s| series.append_owned(s).map(|_| ()))
            .is_ok()
        {
            *c = series.into_column();
        }
    }
    if let Ok(chunked) = DataFrame::new(height, cols) {
        *df = chunked;
    }
}

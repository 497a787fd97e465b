//! polars DataFrames handed to Python through the Arrow C stream interface: an object
//! with `__arrow_c_stream__` that `polars.DataFrame(obj)` (and `pyarrow.table(obj)`)
//! import without copying. This works with any polars wheel from PyPI, unlike
//! pyo3-polars, which ties the Rust and Python polars versions together (docs/python.md).

use std::sync::Mutex;

use polars::prelude::{CompatLevel, DataFrame, PolarsResult};
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

/// Record batches as struct arrays, as the C stream interface wants them.
fn stream_of(df: &mut DataFrame) -> ArrowArrayStream {
    let compat = CompatLevel::newest();
    // iter_chunks needs aligned chunks.
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

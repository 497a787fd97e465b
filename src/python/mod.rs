//! The `tach._native` extension module. Each area registers its own functions.

use pyo3::prelude::*;

mod record;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    record::register(m)
}

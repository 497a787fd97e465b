//! The `tach._native` extension module. Each area registers its own functions.

use pyo3::prelude::*;

mod api;
mod arrow;
mod record;
mod report;
mod scan;
mod writer;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    record::register(m)?;
    report::register(m)?;
    api::register(m)
}

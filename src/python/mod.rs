//! The `tach._native` extension module. Each area registers its own functions.
//!
//! Two builds: the full package (feature `python`: reading, SQL, exports, DataFrames) and
//! the recorder alone (feature `python-record`, the `tach-record` wheel: no polars). The
//! Python side asks `HAS_QUERY` which one it runs on.

use std::ffi::OsString;

use pyo3::prelude::*;

#[cfg(feature = "query")]
mod api;
#[cfg(feature = "query")]
mod arrow;
mod convert;
#[cfg(feature = "query")]
mod errors;
mod record;
#[cfg(feature = "query")]
mod report;
#[cfg(feature = "query")]
mod scan;
#[cfg(feature = "query")]
mod writer;

/// `tach ARGS...` (the Rust command line, every subcommand this build has), without the
/// GIL; returns the exit status.
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| crate::cli::main(argv))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HAS_QUERY", cfg!(feature = "query"))?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    convert::register(m)?;
    record::register(m)?;
    #[cfg(feature = "query")]
    {
        report::register(m)?;
        api::register(m)?;
    }
    Ok(())
}

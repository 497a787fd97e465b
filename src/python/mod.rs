//! The `tach._native` extension module. Each area registers its own functions.
//!
//! Two builds: the full package (feature `python`: reading, SQL, exports, DataFrames) and
//! the recorder alone (feature `python-record`, the `tach-record` wheel: no polars). The
//! Python side asks `HAS_QUERY` which one it runs on.

//!
//! `run_args` (the command lines of `python -m tach run` and `%%tach`) is built in every
//! build: the CLI's and the docs' tests hold `tach record`'s flags against it.

#[cfg(feature = "python-record")]
use std::ffi::OsString;

#[cfg(feature = "python-record")]
use pyo3::prelude::*;

#[cfg(all(feature = "python-record", feature = "query"))]
mod api;
#[cfg(all(feature = "python-record", feature = "query"))]
mod arrow;
#[cfg(feature = "python-record")]
mod convert;
#[cfg(all(feature = "python-record", feature = "query"))]
mod errors;
#[cfg(feature = "python-record")]
mod record;
#[cfg(all(feature = "python-record", feature = "query"))]
mod report;
pub mod run_args;
#[cfg(all(feature = "python-record", feature = "query"))]
mod scan;
#[cfg(all(feature = "python-record", feature = "query"))]
mod writer;

/// `tach ARGS...` (the Rust command line, every subcommand this build has), without the
/// GIL; returns the exit status.
#[cfg(feature = "python-record")]
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| crate::cli::main(argv))
}

#[cfg(feature = "python-record")]
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

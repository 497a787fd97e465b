//! The Python exception of the reading side, `tach.TachError`, and the mapping of the
//! format's errors onto it: a leaf that every binding module imports.

use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::PyErr;

pyo3::create_exception!(
    tach,
    TachError,
    PyValueError,
    "A TACH file could not be read, written or converted (the CLI's message)."
);

/// A format error as Python sees it: FileNotFoundError for a missing file (as `open`
/// raises), TachError (a ValueError) with the CLI's message otherwise.
pub fn tach_error(e: crate::tach::TachError) -> PyErr {
    if let crate::tach::TachError::Io { source, .. } = &e {
        if source.kind() == std::io::ErrorKind::NotFound {
            return PyFileNotFoundError::new_err(e.to_string());
        }
    }
    TachError::new_err(e.to_string())
}

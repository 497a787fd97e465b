//! `Profile.top()` and `tach.diff()`: the reports of src/report/ as JSON rows, which
//! python/tach/_api.py turns into polars DataFrames.

use std::path::PathBuf;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use pyo3::types::PyDict;

use super::api::interruptible;
use super::convert;
use super::errors::{tach_error, TachError};
use crate::report::{self, DiffOptions, FilterSpec, ReportError, TopOptions};
use crate::tach::TachFile;

fn report_error(e: ReportError) -> PyErr {
    match e {
        ReportError::Read(e) => tach_error(e),
        ReportError::Usage(m) => PyValueError::new_err(m),
    }
}

fn open_all(paths: &[PathBuf]) -> report::Result<Vec<TachFile>> {
    crate::tach::reader::expand_dirs(paths)?
        .iter()
        .map(|p| TachFile::open(p).map_err(ReportError::from))
        .collect()
}

fn json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The sample filter's spec and the report's options from keyword arguments: `S`'s fields
/// and [`FilterSpec`]'s, each through the one converter.
fn options<S: serde::de::DeserializeOwned>(
    function: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<(S, FilterSpec)> {
    let known: Vec<&str> = report::field_names::<S>()
        .iter()
        .chain(report::field_names::<FilterSpec>())
        .copied()
        .collect();
    let given = convert::keywords(function, kwargs, &known)?;
    let options = convert::spec::<S>(function, &given)?;
    let filter = convert::spec::<FilterSpec>(function, &given)?;
    Ok((options, filter))
}

fn filter_error(e: crate::tach::filter::FilterError) -> PyErr {
    TachError::new_err(e.to_string())
}

/// The rows of `tach top` over `paths`, as a JSON list. The keywords: [`TopOptions`]'
/// fields and [`FilterSpec`]'s.
#[pyfunction]
#[pyo3(signature = (paths, **kwargs))]
fn top_json(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let (options, spec) = options::<TopOptions>("top()", kwargs)?;
    let filter = spec.build().map_err(filter_error)?;
    let report = interruptible(py, None, move || {
        report::top(&open_all(&paths)?, &filter, &options)
    })?
    .map_err(report_error)?;
    json(&report.rows)
}

/// The rows of `tach diff` of `base` against `new`, as a JSON list. The keywords:
/// [`DiffOptions`]' fields and [`FilterSpec`]'s.
#[pyfunction]
#[pyo3(signature = (base, new, **kwargs))]
fn diff_json(
    py: Python<'_>,
    base: Vec<PathBuf>,
    new: Vec<PathBuf>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let (options, spec) = options::<DiffOptions>("diff()", kwargs)?;
    let (base_filter, new_filter) = options.side_filters(&spec).map_err(filter_error)?;
    let report = interruptible(py, None, move || {
        report::diff(
            &open_all(&base)?,
            &open_all(&new)?,
            (&base_filter, &new_filter),
            &options,
        )
    })?
    .map_err(report_error)?;
    json(&report.rows)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(top_json, m)?)?;
    m.add_function(wrap_pyfunction!(diff_json, m)?)
}

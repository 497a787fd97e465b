//! `Profile.top()` and `tach.diff()`: the reports of src/report/ as JSON rows, which
//! python/tach/_api.py turns into polars DataFrames.

use std::path::PathBuf;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use super::api::{filter, interruptible, tach_error};
use crate::report::{self, GroupBy, ReportError};
use crate::tach::TachFile;

fn report_error(e: ReportError) -> PyErr {
    match e {
        ReportError::Read(e) => tach_error(e),
        ReportError::Usage(m) => PyValueError::new_err(m),
    }
}

fn open_all(paths: &[PathBuf]) -> report::Result<Vec<TachFile>> {
    paths
        .iter()
        .map(|p| TachFile::open(p).map_err(ReportError::from))
        .collect()
}

fn json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The rows of `tach top` over `paths`, as a JSON list.
#[pyfunction]
#[pyo3(signature = (paths, *, by="function", sort="self", limit=None, per_file=false,
                    threads=None, start=None, end=None, status=None))]
#[allow(clippy::too_many_arguments)]
fn top_json(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    by: &str,
    sort: &str,
    limit: Option<usize>,
    per_file: bool,
    threads: Option<Vec<u64>>,
    start: Option<f64>,
    end: Option<f64>,
    status: Option<Vec<String>>,
) -> PyResult<String> {
    let options = report::TopOptions {
        by: GroupBy::parse(by).map_err(report_error)?,
        sort: report::SortBy::parse(sort).map_err(report_error)?,
        limit,
        per_file,
    };
    let filter = filter(threads, start, end, status)?;
    let report = interruptible(py, None, move || {
        report::top(&open_all(&paths)?, &filter, &options)
    })?
    .map_err(report_error)?;
    json(&report.rows)
}

/// The rows of `tach diff` of `base` against `new`, as a JSON list.
#[pyfunction]
#[pyo3(signature = (base, new, *, by="function", metric="self", alpha=0.01, min_share=0.5,
                    min_change=0.5, threads=None, start=None, end=None, status=None))]
#[allow(clippy::too_many_arguments)]
fn diff_json(
    py: Python<'_>,
    base: Vec<PathBuf>,
    new: Vec<PathBuf>,
    by: &str,
    metric: &str,
    alpha: f64,
    min_share: f64,
    min_change: f64,
    threads: Option<Vec<u64>>,
    start: Option<f64>,
    end: Option<f64>,
    status: Option<Vec<String>>,
) -> PyResult<String> {
    let options = report::DiffOptions {
        by: GroupBy::parse(by).map_err(report_error)?,
        metric: report::Metric::parse(metric).map_err(report_error)?,
        alpha,
        min_share_pct: min_share,
        min_change_points: min_change,
        ..Default::default()
    };
    let filter = filter(threads, start, end, status)?;
    let report = interruptible(py, None, move || {
        report::diff(&open_all(&base)?, &open_all(&new)?, &filter, &options)
    })?
    .map_err(report_error)?;
    json(&report.rows)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(top_json, m)?)?;
    m.add_function(wrap_pyfunction!(diff_json, m)?)
}

//! The reading side of the Python package: open, tables as DataFrames, SQL, export,
//! the parallel batch converter and the CLI. `python/tach/_api.py` builds the friendly
//! classes (Profile, Info, Flamegraph) on these functions.
//!
//! Long work runs on a worker thread with the GIL released while the calling thread
//! polls for signals, so Ctrl-C raises KeyboardInterrupt at once; the abandoned work
//! finishes in the background (the batch converter stops starting new files).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use super::arrow::ArrowStream;
use super::convert::{keywords, spec};
use super::errors::{tach_error, TachError};
use crate::export::{self, batch, ExportError, ExportOptions, Exporter, OptionError};
use crate::query::{QueryEngine, QueryError};
use crate::report::FilterSpec;
use crate::tach::info::FileInfo;
use crate::tach::{SampleFilter, TachFile};

/// How often a waiting call checks for Ctrl-C.
const POLL: Duration = Duration::from_millis(50);

fn query_error(e: QueryError) -> PyErr {
    match e {
        QueryError::Read(e) => tach_error(e),
        QueryError::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        other => TachError::new_err(other.to_string()),
    }
}

fn export_error(e: ExportError) -> PyErr {
    match e {
        ExportError::Read(e) => tach_error(e),
        other => TachError::new_err(other.to_string()),
    }
}

/// Runs `work` on a worker thread without the GIL, raising KeyboardInterrupt (and
/// setting `cancel`) if a signal handler raises while it runs.
pub(super) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    cancel: Option<Arc<AtomicBool>>,
    work: impl FnOnce() -> T + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = mpsc::channel();
    // detach() wants Sync captures; only this thread ever locks it.
    let rx = std::sync::Mutex::new(rx);
    std::thread::Builder::new()
        .name("tach-work".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a worker thread: {e}")))?;
    loop {
        let got = py.detach(|| match rx.lock() {
            Ok(rx) => rx.recv_timeout(POLL),
            Err(_) => Err(RecvTimeoutError::Disconnected),
        });
        match got {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    if let Some(c) = &cancel {
                        c.store(true, Ordering::Relaxed);
                    }
                    return Err(e);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err("tach: the worker thread failed"))
            }
        }
    }
}

/// The sample filter of an export from its keyword arguments ([`FilterSpec`]'s fields,
/// through the one converter), checked as the CLI checks `--thread/--start/...`.
pub(super) fn filter(function: &str, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<SampleFilter> {
    let given = keywords(function, kwargs, crate::report::field_names::<FilterSpec>())?;
    spec::<FilterSpec>(function, &given)?
        .build()
        .map_err(|e| TachError::new_err(e.to_string()))
}

fn exporter(format: &str) -> PyResult<&'static dyn Exporter> {
    export::find(format).ok_or_else(|| {
        TachError::new_err(format!(
            "unknown format '{format}': use one of {}",
            export::names().join(", ")
        ))
    })
}

/// One opened file, with its query tables.
#[pyclass(module = "tach._native", name = "NativeProfile", frozen)]
pub struct NativeProfile {
    path: PathBuf,
    engine: Arc<QueryEngine>,
}

impl NativeProfile {
    /// The file (a profile's engine holds it open: this does not fail).
    fn file(&self) -> PyResult<&TachFile> {
        self.engine.sources()[0]
            .file()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}

/// Opens and validates `path` (header, footer, string and frame tables).
#[pyfunction]
fn open_profile(py: Python<'_>, path: PathBuf) -> PyResult<NativeProfile> {
    let name = path.display().to_string();
    let p = path.clone();
    let file = interruptible(py, None, move || TachFile::open(&p))?.map_err(tach_error)?;
    Ok(NativeProfile {
        path,
        engine: Arc::new(QueryEngine::from_file(&name, file)),
    })
}

/// `NativeProfile::info`'s answer: JSON, text, rows.
type InfoParts = (String, String, Vec<(String, String)>);

#[pymethods]
impl NativeProfile {
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Thread-samples, from the header.
    #[getter]
    fn sample_count(&self) -> PyResult<u64> {
        Ok(self.file()?.header().sample_count)
    }

    /// `tach info` for this file (decodes every sample): its `--json` document, its
    /// text (the same `Display` the CLI prints) and that text's (label, value) rows.
    fn info(&self, py: Python<'_>) -> PyResult<InfoParts> {
        let engine = self.engine.clone();
        interruptible(py, None, move || -> Result<_, String> {
            let info = FileInfo::gather(engine.sources()[0].file().map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            let json = serde_json::to_string(&info).map_err(|e| e.to_string())?;
            Ok((json, info.to_string(), info.rows()))
        })?
        .map_err(TachError::new_err)
    }

    /// A query table (samples, frames, stacks, stack_counts, sample_frames).
    fn table(&self, py: Python<'_>, name: String) -> PyResult<ArrowStream> {
        let engine = self.engine.clone();
        let df = interruptible(py, None, move || {
            engine.table(&name).and_then(|lf| {
                lf.collect().map_err(|e| QueryError::Sql {
                    message: e.to_string(),
                })
            })
        })?
        .map_err(query_error)?;
        Ok(ArrowStream::new(df))
    }

    /// The `samples` table batch by batch, for `Profile.scan()`: `columns` (None: all)
    /// in that order, at most `limit` rows.
    #[pyo3(signature = (columns=None, limit=None))]
    fn sample_batches(
        &self,
        columns: Option<Vec<String>>,
        limit: Option<usize>,
    ) -> PyResult<super::scan::SampleBatches> {
        super::scan::start(self.engine.sources()[0].clone(), columns, limit)
    }

    /// One SELECT over this file's tables.
    fn query(&self, py: Python<'_>, sql: String) -> PyResult<ArrowStream> {
        let engine = self.engine.clone();
        let df = interruptible(py, None, move || engine.run(&sql))?.map_err(query_error)?;
        Ok(ArrowStream::new(df))
    }

    /// Exports into `path` (Parquet: a directory of tables), or returns the output:
    /// `bytes` for a binary format, `str` for the others ([`Exporter::binary`]).
    /// `options`: the format's own options by name, with their values as `tach export`
    /// takes them, applied and checked by the registry as there.
    #[pyo3(signature = (format, path=None, *, title=None, options=Vec::new(), **filters))]
    fn export<'py>(
        &self,
        py: Python<'py>,
        format: &str,
        path: Option<PathBuf>,
        title: Option<String>,
        options: Vec<(String, Vec<String>)>,
        filters: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let exporter = exporter(format)?;
        let filter = filter("export()", filters)?;
        let options = export_options(exporter, title, &options)?;
        let engine = self.engine.clone();
        let input = self.path.clone();
        let out = interruptible(py, None, move || -> export::Result<Option<Vec<u8>>> {
            match path {
                Some(out) => {
                    export::export_file(exporter, &input, &out, &filter, &options)?;
                    Ok(None)
                }
                None => {
                    let mut buf = Vec::new();
                    let file = engine.sources()[0]
                        .file()
                        .map_err(|e| export::ExportError::Unsupported(e.to_string()))?;
                    export::export_to(exporter, file, &filter, &options, &mut buf)?;
                    Ok(Some(buf))
                }
            }
        })?
        .map_err(export_error)?;
        let Some(bytes) = out else { return Ok(None) };
        if exporter.binary() {
            return Ok(Some(PyBytes::new(py, &bytes).into_any()));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            PyRuntimeError::new_err(format!("tach: {format} wrote invalid UTF-8: {e}"))
        })?;
        Ok(Some(PyString::new(py, &text).into_any()))
    }
}

/// The export options of a Python call: the title, and the formats' own options
/// applied by the registry ([`export::apply_options`], as for `tach export`): another
/// format's option and a bad value get the CLI's message (TachError, a ValueError); an
/// option no format has is a TypeError, as an unknown keyword is.
fn export_options(
    exporter: &dyn Exporter,
    title: Option<String>,
    given: &[(String, Vec<String>)],
) -> PyResult<ExportOptions> {
    let mut options = ExportOptions {
        title,
        ..ExportOptions::default()
    };
    let given = given.iter().map(|(name, v)| (name.as_str(), v.as_slice()));
    export::apply_options(exporter, given, &mut options).map_err(|e| match e {
        OptionError::Unknown { name } => {
            let mut known: Vec<String> = crate::report::field_names::<FilterSpec>()
                .iter()
                .chain(&["title"])
                .map(|n| n.to_string())
                .collect();
            known.extend(export::option_names().iter().map(|n| n.replace('-', "_")));
            PyTypeError::new_err(format!("unknown filter {name}: use {}", known.join(", ")))
        }
        other => TachError::new_err(other.to_string()),
    })?;
    Ok(options)
}

/// SQL over several files (globs expanded as by the CLI).
#[pyfunction]
fn query(py: Python<'_>, sql: String, paths: Vec<PathBuf>) -> PyResult<ArrowStream> {
    let df = interruptible(py, None, move || {
        let files = crate::query::expand_inputs(&paths)?;
        QueryEngine::open(&files)?.run(&sql)
    })?
    .map_err(query_error)?;
    Ok(ArrowStream::new(df))
}

/// The batch converter: every input into `out_dir`, in parallel on `workers` threads
/// (default: all cores). Returns (input, output, error message or None) per input, in
/// input order; a bad file does not stop the others.
#[pyfunction]
#[pyo3(signature = (paths, format, out_dir, workers=None, *, title=None, options=Vec::new(),
                    **filters))]
#[allow(clippy::too_many_arguments)]
fn convert(
    py: Python<'_>,
    paths: Vec<PathBuf>,
    format: &str,
    out_dir: PathBuf,
    workers: Option<usize>,
    title: Option<String>,
    options: Vec<(String, Vec<String>)>,
    filters: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<(PathBuf, PathBuf, Option<String>)>> {
    let exporter = exporter(format)?;
    let filter = filter("convert()", filters)?;
    let options = export_options(exporter, title, &options)?;
    if workers == Some(0) {
        return Err(PyValueError::new_err("workers must be at least 1"));
    }
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| tach_error(crate::tach::TachError::io(&out_dir, e)))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let stop = cancel.clone();
    let results = interruptible(py, Some(cancel), move || {
        let workers = batch::Workers {
            count: workers.unwrap_or(0),
            stop: Some(&stop),
        };
        batch::convert_all(
            exporter,
            &paths,
            &out_dir,
            &filter,
            &options,
            workers,
            &|_| {},
        )
        .into_iter()
        .map(|c| (c.input, c.output, c.result.err().map(|e| e.to_string())))
        .collect::<Vec<_>>()
    })?;
    Ok(results)
}

/// (column, type name) of a query table, as `tach query --schema` shows them.
#[pyfunction]
fn table_columns(name: &str) -> PyResult<Vec<(&'static str, &'static str)>> {
    crate::query::schema_tables()
        .into_iter()
        .find(|t| t.name == name)
        .map(|t| t.columns.iter().map(|c| (c.name, c.ty.name())).collect())
        .ok_or_else(|| TachError::new_err(format!("no table {name}")))
}

/// (name, description, extension, binary) of every export format.
#[pyfunction]
fn export_formats() -> Vec<(&'static str, &'static str, &'static str, bool)> {
    export::REGISTRY
        .iter()
        .map(|e| (e.name(), e.description(), e.extension(), e.binary()))
        .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TachError", m.py().get_type::<TachError>())?;
    m.add_class::<ArrowStream>()?;
    m.add_class::<NativeProfile>()?;
    m.add_class::<super::scan::SampleBatches>()?;
    m.add_class::<super::writer::Writer>()?;
    m.add_function(wrap_pyfunction!(open_profile, m)?)?;
    m.add_function(wrap_pyfunction!(query, m)?)?;
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(export_formats, m)?)?;
    m.add_function(wrap_pyfunction!(table_columns, m)?)?;
    Ok(())
}

//! Python bindings of the recorder: `tach._native.start / stop / is_running / ...`.
//! The friendly API (`tach.start`, `tach.profile`, `python -m tach run`) is in
//! `python/tach/`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Mutex;

use clap::Parser;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use serde_json::Value;

use super::convert::{self, Data};
use super::run_args::CellArgs;
use crate::record::options::RecordSpec;
use crate::record::{this_process, RecordStats, Session, Types};
use crate::tach::TachFile;

/// The recording in progress, if any. Only Python threads (holding the GIL) lock it;
/// the sampling thread never does.
static SESSION: Mutex<Option<Session>> = Mutex::new(None);

fn interpreter_types(py: Python<'_>) -> PyResult<Types> {
    // `PyCode_Type` is not part of the stable ABI this extension is built for: the code
    // type's address comes from `types.CodeType`, which is that same static object.
    let code = py.import("types")?.getattr("CodeType")?;
    // SAFETY: taking the addresses of the interpreter's static type objects and of None;
    // nothing is read or written through them here.
    Ok(unsafe {
        Types {
            code: code.as_ptr() as u64,
            unicode: std::ptr::addr_of_mut!(ffi::PyUnicode_Type) as u64,
            bytes: std::ptr::addr_of_mut!(ffi::PyBytes_Type) as u64,
            none: ffi::Py_None() as u64,
        }
    })
}

fn version(py: Python<'_>) -> (u8, u8, u8) {
    let v = py.version_info();
    (v.major, v.minor, v.patch)
}

fn lock() -> std::sync::MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(|p| p.into_inner())
}

/// `tach.start()`'s spellings of [`RecordSpec`] fields: the file is the positional
/// `path` (not `output`), `gc=False` is `--no-gc`, and `blocking` is `True`
/// (`--blocking`), `False` (`--no-blocking`) or `None` (by the rate). Every other
/// field is a keyword of its own name.
const START_NOT_KEYWORDS: [&str; 3] = ["output", "no_gc", "no_blocking"];
const START_OWN_KEYWORDS: [&str; 2] = ["gc", "hidden"];

/// `tach.start()`'s keywords: [`RecordSpec`]'s fields as [`START_NOT_KEYWORDS`] spells
/// them, and `hidden`.
fn start_keywords() -> Vec<&'static str> {
    let fields = crate::report::field_names::<RecordSpec>();
    let mut known: Vec<&str> = fields
        .iter()
        .copied()
        .filter(|f| !START_NOT_KEYWORDS.contains(f))
        .collect();
    known.extend(START_OWN_KEYWORDS);
    known
}

/// Starts recording into `path` (default `tach_<pid>.tach`). The keywords are `tach
/// record`'s options: they fill the same [`RecordSpec`] through serde
/// ([`convert`]), so its names (the mode's, the compression's) and checks are every
/// front end's, with the same messages, and a field added to the spec is a keyword
/// here too. Raises TypeError for an unknown keyword, ValueError for a bad value,
/// RuntimeError if a recording is running or the interpreter cannot be sampled or the
/// file cannot be created.
#[pyfunction]
#[pyo3(signature = (path=None, **kwargs))]
fn start(
    py: Python<'_>,
    path: Option<PathBuf>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    const FUNCTION: &str = "tach.start()";
    let mut given = convert::keywords(FUNCTION, kwargs, &start_keywords())?;
    let hidden: Vec<String> = match convert::take(&mut given, "hidden") {
        None => Vec::new(),
        Some(data) => convert::value(FUNCTION, "hidden", data)?,
    };
    match convert::take(&mut given, "gc") {
        None => {}
        Some(Data::Bool(gc)) => given.push(("no_gc".into(), Data::Bool(!gc))),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "{FUNCTION}: gc must be True or False, not {other}"
            )))
        }
    }
    match convert::take(&mut given, "blocking") {
        None | Some(Data::None) => {}
        Some(Data::Bool(true)) => given.push(("blocking".into(), Data::Bool(true))),
        Some(Data::Bool(false)) => given.push(("no_blocking".into(), Data::Bool(true))),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "{FUNCTION}: blocking must be True, False or None, not {other}"
            )))
        }
    }
    let mut spec: RecordSpec = convert::spec(FUNCTION, &given)?;
    spec.output = path;
    start_spec(py, &spec, hidden)
}

/// `python -m tach ARGS` parsed by the clap definition `tach record` uses
/// ([`super::run_args::parse_python_main`]), and its options checked:
/// `(request, "", 0)`, or `(None, message, exit status)` with clap's own message (or
/// its help, with status 0) or the checks' (`tach: ...`, status 2).
#[pyfunction]
fn parse_main(argv: Vec<OsString>) -> (Option<RunRequest>, String, i32) {
    checked(super::run_args::parse_python_main(argv).map(|run| {
        let (module, program) = run.program();
        RunRequest {
            spec: run.spec,
            quiet: run.quiet,
            module,
            program,
        }
    }))
}

/// `%%tach`'s options (`argv` without the program name), as [`parse_main`] parses.
#[pyfunction]
fn parse_cell(argv: Vec<OsString>) -> (Option<RunRequest>, String, i32) {
    let words = std::iter::once(OsString::from("%%tach")).chain(argv);
    checked(CellArgs::try_parse_from(words).map(|cell| RunRequest {
        spec: cell.spec,
        quiet: cell.quiet,
        module: None,
        program: Vec::new(),
    }))
}

fn checked(parsed: Result<RunRequest, clap::Error>) -> (Option<RunRequest>, String, i32) {
    match parsed {
        Err(e) => (None, e.render().to_string(), e.exit_code()),
        Ok(request) => match request.spec.validate() {
            Err(e) => (None, format!("tach: {e}\n"), 2),
            Ok(()) => (Some(request), String::new(), 0),
        },
    }
}

/// A parsed `python -m tach run` or `%%tach`: the recording's options and the program.
#[pyclass(module = "tach._native", frozen)]
pub struct RunRequest {
    spec: RecordSpec,
    quiet: bool,
    module: Option<OsString>,
    program: Vec<OsString>,
}

#[pymethods]
impl RunRequest {
    /// No summary line at the end (`-q`).
    #[getter]
    fn quiet(&self) -> bool {
        self.quiet
    }

    /// The module to run (`-m MODULE`), or None for a script.
    #[getter]
    fn module(&self) -> Option<OsString> {
        self.module.clone()
    }

    /// The script and its arguments, or the module's arguments.
    #[getter]
    fn program(&self) -> Vec<OsString> {
        self.program.clone()
    }

    /// `-o`, if given.
    #[getter]
    fn output(&self) -> Option<PathBuf> {
        self.spec.output.clone()
    }
}

/// Starts recording as a parsed command line asks ([`parse_main`], [`parse_cell`]),
/// into `path` if given (instead of `-o`).
#[pyfunction]
#[pyo3(signature = (request, *, path=None, hidden=Vec::new()))]
fn start_request(
    py: Python<'_>,
    request: &RunRequest,
    path: Option<PathBuf>,
    hidden: Vec<String>,
) -> PyResult<()> {
    let mut spec = request.spec.clone();
    if path.is_some() {
        spec.output = path;
    }
    start_spec(py, &spec, hidden)
}

fn start_spec(py: Python<'_>, spec: &RecordSpec, hidden: Vec<String>) -> PyResult<()> {
    let mut opts = spec
        .record_options(std::process::id() as i32)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    opts.hidden_prefixes = hidden;
    let mut guard = lock();
    if let Some(s) = guard.as_ref() {
        if !s.is_finished() {
            return Err(PyRuntimeError::new_err(format!(
                "tach is already recording into {}",
                s.path().display()
            )));
        }
    }
    // A previous session that ran out its duration: collect it before starting anew.
    if let Some(old) = guard.take() {
        old.stop();
    }
    let target = this_process(version(py), interpreter_types(py)?, opts.opcodes)
        .map_err(PyRuntimeError::new_err)?;
    let session =
        Session::start(target, opts).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    *guard = Some(session);
    Ok(())
}

/// The statistics as a dict: every field of [`RecordStats`] (through serde, so a new
/// one reaches Python with no edit) and `summary`, the line `tach record` prints.
fn stats_dict<'py>(py: Python<'py>, s: &RecordStats) -> PyResult<Bound<'py, PyDict>> {
    let mut value = serde_json::to_value(s).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    if let Value::Object(map) = &mut value {
        map.insert("summary".into(), Value::String(s.summary_line()));
    }
    Ok(convert::to_python(py, &value)?.cast_into::<PyDict>()?)
}

/// Stops the recording, finishes the file and returns its statistics (a dict), or None
/// if nothing was recording.
#[pyfunction]
fn stop(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    let session = lock().take();
    let Some(session) = session else {
        return Ok(None);
    };
    // The sampler never needs the GIL; let other Python threads run while it finishes.
    let stats = py.detach(move || session.stop());
    stats_dict(py, &stats).map(Some)
}

/// Samples the recording in progress has written so far (None if there is none).
#[pyfunction]
fn samples_written() -> Option<u64> {
    lock().as_ref().map(|s| s.samples_written())
}

/// `python -m tach run`'s exit status: the program's (`program`, its `SystemExit`
/// code) unless the recording failed (`recorded` false), as `tach record`'s.
#[pyfunction]
fn exit_status(program: u8, recorded: bool) -> u8 {
    crate::record::exit_status(program, recorded)
}

/// Whether a recording is in progress (false once a duration has run out).
#[pyfunction]
fn is_running() -> bool {
    lock().as_ref().is_some_and(|s| !s.is_finished())
}

/// In a child after fork(): forget the parent's recording without touching its file
/// (the sampling thread does not exist in the child).
#[pyfunction]
fn _after_fork_child() {
    // The lock may have been held by a thread of the parent that does not exist here.
    if let Ok(mut g) = SESSION.try_lock() {
        if let Some(s) = g.take() {
            s.abandon();
        }
    }
}

/// Describes the layout the recorder would use here, or raises RuntimeError.
#[pyfunction]
fn describe(py: Python<'_>) -> PyResult<String> {
    let t = this_process(version(py), interpreter_types(py)?, false)
        .map_err(PyRuntimeError::new_err)?;
    Ok(t.layout.describe())
}

/// Opens and fully verifies a TACH file (as `tach verify` does) and returns its
/// contents as plain Python data: a dict with the header fields, the stats block,
/// `frames` (filename, funcname, lineno, end_lineno, column, end_column, opcode; lineno
/// None when there is no location, opcode None when not recorded) and `samples`
/// (thread_id, interpreter_id, timestamp_us, status, [frame index, innermost first]).
#[pyfunction]
fn load(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let (file, samples) = py
        .detach(|| -> crate::tach::Result<_> {
            let f = TachFile::open(&path)?;
            let samples = f.collect_samples()?;
            Ok((f, samples))
        })
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let h = file.header();
    let d = PyDict::new(py);
    d.set_item("python_version", h.python_version)?;
    d.set_item("start_time_us", h.start_time_us)?;
    d.set_item("interval_us", h.sample_interval_us)?;
    d.set_item("sample_count", h.sample_count)?;
    d.set_item("thread_count", h.thread_count)?;
    d.set_item("compression", h.compression.name())?;
    d.set_item("mode", h.config.mode.name())?;
    d.set_item("config", h.config.raw)?;
    d.set_item(
        "features",
        h.config.features.map(|f| f.names()).unwrap_or_default(),
    )?;
    match file.stats() {
        Some(st) => {
            let sd = PyDict::new(py);
            sd.set_item("duration_sec", st.duration_sec)?;
            sd.set_item("sample_rate", st.sample_rate)?;
            sd.set_item("error_rate", st.error_rate())?;
            sd.set_item("missed_samples", st.missed_samples())?;
            d.set_item("stats", sd)?;
        }
        None => d.set_item("stats", py.None())?,
    }
    let mut frames = Vec::with_capacity(file.frames().len());
    for f in file.frames() {
        let loc = f.location();
        frames.push((
            file.string(f.filename).to_string(),
            file.string(f.funcname).to_string(),
            loc.map(|l| l.lineno),
            loc.map(|l| l.end_lineno),
            loc.map(|l| l.column),
            loc.map(|l| l.end_column),
            f.opcode(),
        ));
    }
    d.set_item("frames", frames)?;
    let samples: Vec<_> = samples
        .into_iter()
        .map(|s| {
            (
                s.thread_id,
                s.interpreter_id,
                s.timestamp_us,
                s.status,
                s.stack,
            )
        })
        .collect();
    d.set_item("samples", samples)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Blocking by default at and below 1 kHz: one threshold for every front end.
    m.add(
        "BLOCKING_MIN_INTERVAL_US",
        crate::record::options::BLOCKING_MIN_INTERVAL_US,
    )?;
    // Overhead figures only mean something for an optimised build.
    m.add("DEBUG_BUILD", cfg!(debug_assertions))?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(parse_main, m)?)?;
    m.add_function(wrap_pyfunction!(parse_cell, m)?)?;
    m.add_function(wrap_pyfunction!(start_request, m)?)?;
    m.add_class::<RunRequest>()?;
    m.add_function(wrap_pyfunction!(stop, m)?)?;
    m.add_function(wrap_pyfunction!(is_running, m)?)?;
    m.add_function(wrap_pyfunction!(exit_status, m)?)?;
    m.add_function(wrap_pyfunction!(samples_written, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_child, m)?)?;
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    Ok(())
}

//! `tach.Writer`: CPython's binary writer (`_remote_debugging.BinaryWriter`) in shape,
//! so code that feeds CPython's collectors can write TACH through tach. Samples are
//! CPython's nesting, interpreters -> threads -> frames, as the structseq objects
//! `_remote_debugging` produces (InterpreterInfo, ThreadInfo, FrameInfo, LocationInfo,
//! all tuple subclasses) or as plain tuples/sequences in the same field order.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySequence, PyString, PyTuple};

use super::errors::{tach_error, TachError};
use crate::record::clock::monotonic_us;
use crate::tach::header::MAX_STACK_DEPTH;
use crate::tach::{CaptureFeatures, Compression, Location, ProfilingMode, Stats};

type Inner = crate::tach::Writer<BufWriter<File>>;

#[pyclass(module = "tach._native", name = "Writer", frozen)]
pub struct Writer {
    path: PathBuf,
    inner: Mutex<Option<Inner>>,
}

/// Field `i` of a structseq, tuple or other sequence.
fn field<'py>(obj: &Bound<'py, PyAny>, i: usize, what: &str) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        if let Ok(v) = t.get_item(i) {
            return Ok(v);
        }
    } else if let Ok(s) = obj.cast::<PySequence>() {
        if let Ok(v) = s.get_item(i) {
            return Ok(v);
        }
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected a sequence with at least {} fields, got {}",
        i + 1,
        obj.repr().map(|r| r.to_string()).unwrap_or_default()
    )))
}

fn string<'py>(obj: &'py Bound<'py, PyAny>, what: &str) -> PyResult<std::borrow::Cow<'py, str>> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a str")))?;
    s.to_cow()
}

/// LocationInfo(lineno, end_lineno, col_offset, end_col_offset), a 4-sequence, or None
/// (stored as -1s, as CPython does). A None field is -1.
fn location(obj: &Bound<'_, PyAny>) -> PyResult<Option<Location>> {
    if obj.is_none() {
        return Ok(None);
    }
    let mut v = [-1i32; 4];
    for (i, slot) in v.iter_mut().enumerate() {
        let f = field(obj, i, "location")?;
        if !f.is_none() {
            *slot = f.extract()?;
        }
    }
    Ok(Some(Location {
        lineno: v[0],
        end_lineno: v[1],
        column: v[2],
        end_column: v[3],
    }))
}

fn parse_mode(mode: Option<&Bound<'_, PyAny>>) -> PyResult<ProfilingMode> {
    let Some(mode) = mode.filter(|m| !m.is_none()) else {
        return Ok(ProfilingMode::Unknown);
    };
    if let Ok(name) = mode.extract::<String>() {
        return ProfilingMode::parse(&name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown mode {name:?} (expected wall, cpu, gil, all or exception)"
            ))
        });
    }
    // CPython's PROFILING_MODE_* constants: WALL = 0 ... EXCEPTION = 4, stored + 1.
    let code: i64 = mode.extract()?;
    u32::try_from(code + 1)
        .ok()
        .and_then(|c| ProfilingMode::from_code(c).ok())
        .ok_or_else(|| PyValueError::new_err(format!("unknown profiling mode {code}")))
}

fn parse_compression(c: &Bound<'_, PyAny>) -> PyResult<Compression> {
    if let Ok(code) = c.extract::<i64>() {
        return match code {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Zstd),
            _ => Err(PyValueError::new_err(format!(
                "unknown compression {code} (expected 0 or 1)"
            ))),
        };
    }
    let name: String = c.extract()?;
    crate::names::parse::<crate::record::options::CompressionChoice>(
        "compression",
        &name.to_lowercase(),
    )
    .map(Compression::from)
    .map_err(PyValueError::new_err)
}

/// CPython's capture_config mapping ({"all_threads": bool, ...}) or None.
fn parse_features(cfg: Option<&Bound<'_, PyDict>>) -> PyResult<Option<CaptureFeatures>> {
    let Some(cfg) = cfg else { return Ok(None) };
    let mut f = CaptureFeatures::default();
    for (k, v) in cfg.iter() {
        let key: String = k.extract()?;
        let on = v.is_truthy()?;
        match key.as_str() {
            "all_threads" => f.all_threads = on,
            "native" => f.native = on,
            "gc" => f.gc = on,
            "opcodes" => f.opcodes = on,
            "blocking" => f.blocking = on,
            _ => {
                return Err(PyValueError::new_err(format!(
                "unknown capture feature {key:?} (expected all_threads, native, gc, opcodes, blocking)"
            )))
            }
        }
    }
    Ok(Some(f))
}

impl Writer {
    fn lock(&self) -> PyResult<MutexGuard<'_, Option<Inner>>> {
        self.inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))
    }
}

fn finished(path: &std::path::Path) -> PyErr {
    TachError::new_err(format!("{}: the writer is finalized", path.display()))
}

#[pymethods]
impl Writer {
    /// `Writer(path, sample_interval_us, *, compression="auto", mode=None,
    /// capture_config=None, start_time_us=None, python_version=None)`. The start time
    /// defaults to now on the monotonic clock and the Python version to this
    /// interpreter's, as CPython's writer does.
    #[new]
    #[pyo3(signature = (path, sample_interval_us, *, compression=None, mode=None,
                        capture_config=None, start_time_us=None, python_version=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        sample_interval_us: u64,
        compression: Option<&Bound<'_, PyAny>>,
        mode: Option<&Bound<'_, PyAny>>,
        capture_config: Option<&Bound<'_, PyDict>>,
        start_time_us: Option<u64>,
        python_version: Option<(u8, u8, u8)>,
    ) -> PyResult<Self> {
        let compression = match compression {
            Some(c) if !c.is_none() => parse_compression(c)?,
            _ => Compression::Zstd,
        };
        let version = python_version.unwrap_or_else(|| {
            let v = py.version_info();
            (v.major, v.minor, v.patch)
        });
        let builder = crate::tach::Writer::builder(sample_interval_us)
            .start_time_us(start_time_us.unwrap_or_else(monotonic_us))
            .compression(compression)
            .mode(parse_mode(mode)?)
            .features(parse_features(capture_config)?)
            .python_version(version);
        let inner = builder.create(&path).map_err(tach_error)?;
        Ok(Writer {
            path,
            inner: Mutex::new(Some(inner)),
        })
    }

    /// Writes one sample: `stack_frames` is a list of InterpreterInfo(interpreter_id,
    /// threads), each thread ThreadInfo(thread_id, status, frame_info), each frame
    /// FrameInfo(filename, location, funcname, opcode), innermost first. Only the
    /// innermost 256 frames are kept, as by CPython.
    #[pyo3(signature = (stack_frames, timestamp_us=None))]
    fn write_sample(
        &self,
        stack_frames: &Bound<'_, PyAny>,
        timestamp_us: Option<u64>,
    ) -> PyResult<()> {
        let ts = timestamp_us.unwrap_or_else(monotonic_us);
        let mut guard = self.lock()?;
        let w = guard.as_mut().ok_or_else(|| finished(&self.path))?;
        let mut stack = Vec::with_capacity(64);
        for interp in stack_frames.try_iter()? {
            let interp = interp?;
            let iid: u32 = field(&interp, 0, "InterpreterInfo")?.extract()?;
            for thread in field(&interp, 1, "InterpreterInfo")?.try_iter()? {
                let thread = thread?;
                let tid: u64 = field(&thread, 0, "ThreadInfo")?.extract()?;
                let status: u8 = field(&thread, 1, "ThreadInfo")?.extract()?;
                stack.clear();
                for frame in field(&thread, 2, "ThreadInfo")?
                    .try_iter()?
                    .take(MAX_STACK_DEPTH)
                {
                    let frame = frame?;
                    let filename = field(&frame, 0, "FrameInfo")?;
                    let loc = location(&field(&frame, 1, "FrameInfo")?)?;
                    let funcname = field(&frame, 2, "FrameInfo")?;
                    let opcode = field(&frame, 3, "FrameInfo")?;
                    let opcode: Option<u8> = if opcode.is_none() {
                        None
                    } else {
                        Some(opcode.extract()?)
                    };
                    stack.push(w.frame(
                        &string(&filename, "FrameInfo.filename")?,
                        &string(&funcname, "FrameInfo.funcname")?,
                        loc,
                        opcode,
                    ));
                }
                w.write_sample(tid, iid, ts, status, &stack)
                    .map_err(tach_error)?;
            }
        }
        Ok(())
    }

    /// The stats block CPython's CLI records: duration (s), achieved sample rate (Hz),
    /// error rate and missed samples (percent, optional).
    #[pyo3(signature = (duration_sec, sample_rate, error_rate=None, missed_samples=None))]
    fn set_stats(
        &self,
        duration_sec: f64,
        sample_rate: f64,
        error_rate: Option<f64>,
        missed_samples: Option<f64>,
    ) -> PyResult<()> {
        let mut guard = self.lock()?;
        let w = guard.as_mut().ok_or_else(|| finished(&self.path))?;
        w.set_stats(Stats::new(
            duration_sec,
            sample_rate,
            error_rate,
            missed_samples,
        ));
        Ok(())
    }

    /// Samples written so far (thread-samples).
    #[getter]
    fn total_samples(&self) -> PyResult<u64> {
        Ok(self.lock()?.as_ref().map(|w| w.sample_count()).unwrap_or(0))
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Flushes pending records and writes the tables, stats, footer and header.
    /// Returns the file size. A second call raises TachError.
    fn finalize(&self, py: Python<'_>) -> PyResult<u64> {
        let w = self.lock()?.take().ok_or_else(|| finished(&self.path))?;
        let summary = py.detach(|| w.finish()).map_err(tach_error)?;
        Ok(summary.file_size)
    }

    /// Finalizes unless already done (so an explicit finalize() inside the block is fine).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let w = self.lock()?.take();
        if let Some(w) = w {
            py.detach(|| w.finish()).map_err(tach_error)?;
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = match self.inner.lock().ok().as_deref() {
            Some(Some(w)) => format!("{} samples", w.sample_count()),
            _ => "finalized".into(),
        };
        format!("<tach.Writer {} ({state})>", self.path.display())
    }
}

//! `Profile.scan()`'s native half: the `samples` table of one file as a stream of
//! DataFrames, one per decoded batch, for a polars IO plugin (`python/tach/_api.py`).
//!
//! A thread of its own runs the batch pipeline (decode on one core, columns built on
//! another) and keeps at most one finished batch waiting, so memory holds a few batches
//! whatever the file's size. Python pulls them with `next()`; dropping the iterator
//! stops the thread at its next batch.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use polars::prelude::*;
use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;

use super::arrow::ArrowStream;
use super::errors::TachError;
use crate::query::batches::BatchError;
use crate::query::tables::{for_each_samples_batch, samples_schema, Wanted};
use crate::query::Source;

/// How often a waiting `next()` checks for Ctrl-C.
const POLL: Duration = Duration::from_millis(50);

/// The batches of one scan.
#[pyclass(module = "tach._native", name = "SampleBatches", frozen)]
pub struct SampleBatches {
    rx: Mutex<Option<Receiver<Result<DataFrame, String>>>>,
}

/// Starts a scan of `src`'s `samples` table: `columns` (None: all) in that order, at
/// most `limit` rows.
pub fn start(
    src: Arc<Source>,
    columns: Option<Vec<String>>,
    limit: Option<usize>,
) -> PyResult<SampleBatches> {
    let schema = samples_schema();
    if let Some(cols) = &columns {
        if let Some(bad) = cols.iter().find(|c| !schema.contains(c)) {
            let names: Vec<&str> = schema.iter_names().map(|n| n.as_str()).collect();
            return Err(PyValueError::new_err(format!(
                "samples has no column {bad}: its columns are {}",
                names.join(", ")
            )));
        }
    }
    let wanted = Wanted(columns.map(|c| c.into_iter().map(PlSmallStr::from).collect()));
    let (tx, rx) = mpsc::sync_channel::<Result<DataFrame, String>>(1);
    std::thread::Builder::new()
        .name("tach-scan".into())
        .spawn(move || {
            let sent = for_each_samples_batch(&src, &wanted, limit, |df| {
                tx.send(Ok(df))
                    .map_err(|_| BatchError::Thread("the scan was dropped"))
            });
            if let Err(e) = sent {
                if !matches!(e, BatchError::Thread(_)) {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start a scan thread: {e}")))?;
    Ok(SampleBatches {
        rx: Mutex::new(Some(rx)),
    })
}

#[pymethods]
impl SampleBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next batch (an Arrow stream for `polars.DataFrame`); waits without the GIL
    /// and raises KeyboardInterrupt on Ctrl-C.
    fn __next__(&self, py: Python<'_>) -> PyResult<ArrowStream> {
        loop {
            let got = py.detach(|| match self.rx.lock() {
                Ok(guard) => match guard.as_ref() {
                    Some(rx) => rx.recv_timeout(POLL),
                    None => Err(RecvTimeoutError::Disconnected),
                },
                Err(_) => Err(RecvTimeoutError::Disconnected),
            });
            match got {
                Ok(Ok(df)) => return Ok(ArrowStream::new(df)),
                Ok(Err(message)) => {
                    self.close();
                    return Err(TachError::new_err(message));
                }
                Err(RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(RecvTimeoutError::Disconnected) => {
                    self.close();
                    return Err(PyStopIteration::new_err(()));
                }
            }
        }
    }

    /// Stops the scan (its thread ends at its next batch).
    fn close(&self) {
        if let Ok(mut guard) = self.rx.lock() {
            guard.take();
        }
    }
}

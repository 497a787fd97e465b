//! A recording in progress: the sampling thread started on its own, and the handle that
//! stops it and returns what was recorded.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::record::discovery::Target;
use crate::record::sampler::{RecordOptions, RecordStats, Sampler};
use crate::tach::TachError;

/// A recording in progress: the sampling thread and the flag that stops it.
pub struct Session {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<RecordStats>,
    path: PathBuf,
    progress: Arc<AtomicU64>,
}

impl Session {
    /// Creates the file and starts sampling.
    pub fn start(target: Target, opts: RecordOptions) -> Result<Session, TachError> {
        let path = opts.path.clone();
        let sampler = Sampler::new(target, opts)?;
        let progress = sampler.progress();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tach-sampler".into())
            .spawn(move || {
                let path = sampler.path().to_path_buf();
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sampler.run(&flag)))
                {
                    Ok(stats) => stats,
                    Err(_) => RecordStats {
                        path,
                        error: Some("the sampling thread failed; the file is incomplete".into()),
                        ..RecordStats::default()
                    },
                }
            })
            .map_err(|e| TachError::Usage(format!("cannot start the sampling thread: {e}")))?;
        Ok(Session {
            stop,
            thread,
            path,
            progress,
        })
    }

    pub fn path(&self) -> &PathBuf {
        &self.path
    }

    /// Samples written so far (after the last tick): what a crash test compares the
    /// recovered file against.
    pub fn samples_written(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// Whether the sampler has finished on its own (its duration ran out).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops sampling, finishes the file and returns what was recorded.
    pub fn stop(self) -> RecordStats {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let path = self.path.clone();
        self.thread.join().unwrap_or_else(|_| RecordStats {
            path,
            error: Some("the sampling thread failed".into()),
            ..RecordStats::default()
        })
    }

    /// Abandons the session without touching the file (in a forked child, where the
    /// sampling thread does not exist).
    pub fn abandon(self) {
        std::mem::forget(self);
    }
}

//! Sampling another process: attaching to it (waiting for a program tach just started
//! to load its interpreter) and starting a [`Session`] on it, for `tach record --pid`,
//! `tach record -- python app.py`, `--subprocesses`' children and `tach top --pid`.
//!
//! The sampler is the in-process one reading the target through `process_vm_readv` and
//! pausing it with ptrace (see `process::ptrace_pause`).

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::tach::{ProfilingMode, TachError, Writer};

use super::clock::monotonic_us;
use super::discovery::attach::{self, AttachError};
use super::process::running::{child_exited, Liveness};
use super::sampler::RecordOptions;
use super::session::Session;

/// Why an outside recording or dump failed.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(transparent)]
    Tach(#[from] TachError),
    #[error("{0}")]
    Recording(String),
}

/// The process being recorded: a pid, or tach's own child.
pub enum Recorded<'a> {
    Pid(i32),
    Child(&'a mut Child),
}

impl Recorded<'_> {
    pub(crate) fn pid(&self) -> i32 {
        match self {
            Recorded::Pid(p) => *p,
            Recorded::Child(c) => c.id() as i32,
        }
    }

    /// Whether the process still runs; `liveness` is the look kept for it (made by
    /// [`Recorded::liveness`]).
    pub(crate) fn running(&mut self, liveness: &mut Liveness) -> bool {
        match self {
            Recorded::Pid(_) => liveness.alive(),
            // Not try_wait: waitpid reports a traced child's ptrace stops as well, and
            // would take the sampler's pause for an exit. WNOWAIT leaves the exit status
            // for the caller's wait().
            Recorded::Child(c) => !child_exited(c.id() as i32, liveness),
        }
    }

    /// The look at the process that [`Recorded::running`] takes again and again.
    pub(crate) fn liveness(&self) -> Liveness {
        Liveness::new(self.pid())
    }
}

/// Attaches to `target` and starts sampling it (`record`, and `tach top --pid`'s live
/// view). A just-started child is waited for (up to `startup`) until its interpreter is
/// loaded.
pub(crate) fn start_session(
    target: &mut Recorded<'_>,
    opts: RecordOptions,
    startup: Duration,
) -> Result<Session, ExternalError> {
    let pid = target.pid();
    let began = Instant::now();
    let mut liveness = target.liveness();
    let attached = loop {
        match attach::attach(pid, opts.opcodes) {
            Ok(t) => break t,
            Err(e @ (AttachError::NotPython { .. } | AttachError::Starting { .. }))
                if matches!(target, Recorded::Child(_)) && began.elapsed() < startup =>
            {
                if !target.running(&mut liveness) {
                    return Err(e.into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e.into()),
        }
    };
    if opts.mode == ProfilingMode::Exception
        && attached.layout.offsets().thread.current_exception.is_none()
    {
        let (a, b, _) = attached.layout.version();
        return Err(AttachError::Layout {
            pid,
            what: format!(
                "--mode exception cannot be recorded on CPython {a}.{b}: this tach knows \
                 no offsets of its exception state"
            ),
        }
        .into());
    }
    Ok(Session::start(attached, opts)?)
}

/// A file that says a recording found nothing: for a target that could not be attached
/// to (gone before its interpreter loaded, not Python, an unsupported version), so that
/// whoever waits for the file finds a valid one beside the error.
pub fn write_empty(path: &Path, interval_us: u64, mode: ProfilingMode) -> Result<(), TachError> {
    let writer = Writer::builder(interval_us)
        .start_time_us(monotonic_us())
        .mode(mode)
        .create(path)?;
    writer.finish()?;
    Ok(())
}

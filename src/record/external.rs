//! Recording a process from outside: `tach record --pid PID`, `tach record -- python
//! app.py` (the program started by tach and attached to), and `tach dump PID`.
//!
//! The sampler is the in-process one ([`Session`]) reading the target through
//! `process_vm_readv` and pausing it with ptrace (see `ptrace_pause`). This module adds
//! what being outside needs: finding the interpreter ([`crate::record::discovery::attach`]), stopping on
//! Ctrl-C, SIGTERM or the target's exit, and one summary line.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::tach::{Compression, ProfilingMode, TachError, TachFile, Writer};

use super::children::Children;
use super::clock::monotonic_us;
use super::sampler::{RecordOptions, RecordStats, Sampler, Session};
use crate::record::discovery::attach::{self, AttachError};
use crate::record::interpreter::asyncio::AsyncMode;
use crate::record::process::ptrace_pause::wait_child;

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

/// The signal that asked us to stop (0: none yet).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::Relaxed);
}

/// The signal that asked us to stop since the last call (0: none).
pub(crate) fn take_stop_signal() -> i32 {
    STOP_SIGNAL.swap(0, Ordering::Relaxed)
}

/// Ctrl-C and SIGTERM stop the recording (and finish the file) instead of killing tach.
pub(crate) fn catch_stop_signals() {
    STOP_SIGNAL.store(0, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                note_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

/// Is `pid` still running (not gone, not a zombie)?
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next()),
            Some("Z") | Some("X") | None
        ),
        Err(_) => false,
    }
}

/// Has our child `pid` exited? Its exit is only looked at (WNOWAIT), not collected. A
/// traced child's ptrace stops are reported by `waitid` even without WSTOPPED (and left
/// for the sampler by WNOWAIT): only an exit counts. A child that is gone, or whose main
/// thread is a zombie, counts as exited too: the kernel reports a process's exit only
/// once every one of its threads is released, and a thread that exited while the
/// sampler traced it is released only when the sampler collects it (`ptrace_pause`) or
/// its thread ends. Stopping the recording when the main thread is a zombie means that
/// no thread left traced can keep tach waiting for a program that has exited.
fn child_exited(pid: i32) -> bool {
    let exited = matches!(
        wait_child(pid, libc::WEXITED | libc::WNOWAIT),
        Some((libc::CLD_EXITED | libc::CLD_KILLED | libc::CLD_DUMPED, _))
    );
    exited || !alive(pid)
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn size(n: u64) -> String {
    let mut v = n as f64;
    for unit in ["B", "KiB", "MiB"] {
        if v < 1024.0 {
            return if unit == "B" {
                format!("{v:.0} B")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1024.0;
    }
    format!("{v:.1} GiB")
}

impl RecordStats {
    /// The line printed when a recording ends, the same from Python and from the
    /// command line: samples, achieved rate, dropped samples, the sampler's CPU use, file
    /// size and path.
    pub fn summary_line(&self) -> String {
        let cpu = if self.duration_sec > 0.0 {
            100.0 * self.sampler_cpu_sec / self.duration_sec
        } else {
            0.0
        };
        format!(
            "tach: {} samples in {:.2} s ({:.1} Hz achieved), {} dropped ({:.2}% ticks with \
             errors, {:.2}% missed), sampler {:.1}% of a CPU, {} written to {}",
            thousands(self.samples),
            self.duration_sec,
            self.sample_rate,
            thousands(self.dropped),
            self.error_rate,
            self.missed_samples,
            cpu,
            size(self.file_size),
            self.path.display()
        ) + &match &self.native {
            Some(n) => {
                format!(
                    "; native: {} walks, {} cut short, {} not stopped, {} not spliced",
                    thousands(n.walks),
                    thousands(n.truncated),
                    thousands(n.no_registers),
                    thousands(n.mismatches)
                ) + &match n.threads_without_python {
                    0 => String::new(),
                    k => format!(
                        ", {k} thread{} without Python (native frames only)",
                        if k == 1 { "" } else { "s" }
                    ),
                }
            }
            None => String::new(),
        }
    }
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

    pub(crate) fn running(&mut self) -> bool {
        match self {
            Recorded::Pid(p) => alive(*p),
            // Not try_wait: waitpid reports a traced child's ptrace stops as well, and
            // would take the sampler's pause for an exit. WNOWAIT leaves the exit status
            // for the caller's wait().
            Recorded::Child(c) => !child_exited(c.id() as i32),
        }
    }
}

/// Attaches to `target` and records it until Ctrl-C, SIGTERM, `opts.duration` or the
/// target's exit, then finishes the file. A just-started child is waited for (up to
/// `startup`) until its interpreter is loaded. With `subprocesses`, the target's child
/// Python processes are recorded too, each into a file of its own (see `children`).
///
/// For a child, Ctrl-C reaches the child as well (one process group): the recording
/// goes on until the child exits, and a SIGTERM sent to tach alone is passed on to it.
pub fn record(
    mut target: Recorded<'_>,
    opts: RecordOptions,
    startup: Duration,
    subprocesses: bool,
) -> Result<RecordStats, ExternalError> {
    catch_stop_signals();
    let mut children = subprocesses.then(|| Children::new(target.pid(), opts.clone()));
    let session = start(&mut target, opts, startup)?;
    let mut stopped_by_signal = false;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        if session.is_finished() || !target.running() {
            break;
        }
        if let Some(c) = children.as_mut() {
            c.poll();
        }
        match (take_stop_signal(), &target) {
            (0, _) => {}
            (libc::SIGTERM, Recorded::Child(c)) => {
                // SAFETY: kill with a pid we spawned and a valid signal.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            }
            (_, Recorded::Child(_)) => {}
            (_, Recorded::Pid(_)) => {
                stopped_by_signal = true;
                break;
            }
        }
    }
    let stats = session.stop();
    if let Some(c) = children {
        c.finish(stopped_by_signal);
    }
    Ok(stats)
}

/// Attaches to `target` and starts sampling it (`record`, and `tach top --pid`'s live
/// view). A just-started child is waited for (up to `startup`) until its interpreter is
/// loaded.
pub(crate) fn start(
    target: &mut Recorded<'_>,
    opts: RecordOptions,
    startup: Duration,
) -> Result<Session, ExternalError> {
    let pid = target.pid();
    let began = Instant::now();
    let attached = loop {
        match attach::attach(pid, opts.opcodes) {
            Ok(t) => break t,
            Err(e @ (AttachError::NotPython { .. } | AttachError::Starting { .. }))
                if matches!(target, Recorded::Child(_)) && began.elapsed() < startup =>
            {
                if !target.running() {
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

/// One thread's stack at one moment, innermost frame first.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ThreadStack {
    pub thread_id: u64,
    pub interpreter_id: u32,
    pub main_thread: bool,
    pub has_gil: bool,
    pub on_cpu: bool,
    pub gil_requested: bool,
    pub has_exception: bool,
    pub frames: Vec<StackFrame>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct StackFrame {
    pub function: String,
    pub file: String,
    /// None where CPython records no location.
    pub line: Option<i32>,
}

/// Every thread's current stack in process `pid` (`tach dump`): one tick of the
/// sampler, written to a scratch file and read back, so that a dump shows exactly what
/// a recording would. With `async_mode`, async-aware (one stack per task with `all`,
/// what CPython 3.15's `dump --async-aware` shows by default); with `native`, each
/// thread's native stack with its Python frames spliced in.
pub fn dump(
    pid: i32,
    blocking: bool,
    async_mode: Option<AsyncMode>,
    native: bool,
) -> Result<Vec<ThreadStack>, ExternalError> {
    let target = attach::attach(pid, false)?;
    let scratch = std::env::temp_dir().join(format!("tach-dump-{pid}-{}.tach", std::process::id()));
    let mut opts = RecordOptions::new(&scratch);
    opts.all_threads = true;
    // `all`: every thread, with its CPU state looked up (wall mode leaves it unknown).
    opts.mode = ProfilingMode::All;
    opts.compression = Compression::None;
    opts.blocking = blocking || native;
    opts.async_mode = async_mode;
    opts.native = native;
    let result = (|| {
        let mut sampler = Sampler::new(target, opts)?;
        sampler.tick(monotonic_us());
        let stats = sampler.finish(monotonic_us());
        if let Some(e) = stats.error {
            return Err(ExternalError::Recording(e));
        }
        read_stacks(&scratch)
    })();
    let _ = std::fs::remove_file(&scratch);
    let _ = std::fs::remove_file(crate::tach::journal::journal_path(&scratch));
    result
}

fn read_stacks(path: &PathBuf) -> Result<Vec<ThreadStack>, ExternalError> {
    use super::sampler::{GIL_REQUESTED, HAS_EXCEPTION, HAS_GIL, MAIN_THREAD, ON_CPU};
    let file = TachFile::open(path)?;
    let mut stacks = Vec::new();
    file.for_each_sample(|s| {
        let frames = s
            .stack
            .iter()
            .filter_map(|&i| file.frames().get(i as usize))
            .map(|f| StackFrame {
                function: file.string(f.funcname).to_string(),
                file: file.string(f.filename).to_string(),
                line: (f.lineno >= 0).then_some(f.lineno),
            })
            .collect();
        stacks.push(ThreadStack {
            thread_id: s.thread_id,
            interpreter_id: s.interpreter_id,
            main_thread: s.status & MAIN_THREAD != 0,
            has_gil: s.status & HAS_GIL != 0,
            on_cpu: s.status & ON_CPU != 0,
            gil_requested: s.status & GIL_REQUESTED != 0,
            has_exception: s.status & HAS_EXCEPTION != 0,
            frames,
        });
    })?;
    // The main thread first, then by thread id, as a reader expects.
    stacks.sort_by_key(|t| (!t.main_thread, t.interpreter_id, t.thread_id));
    Ok(stacks)
}

/// `tach dump`'s text: per thread a header with its status, then its frames.
pub fn render_dump(pid: i32, stacks: &[ThreadStack]) -> String {
    // `--native` also shows the threads that run no Python (their native stack alone).
    let mut out = format!(
        "Process {pid}: {} thread{}\n",
        stacks.len(),
        if stacks.len() == 1 { "" } else { "s" }
    );
    for t in stacks {
        let mut flags = Vec::new();
        if t.main_thread {
            flags.push("main");
        }
        if t.has_gil {
            flags.push("has GIL");
        }
        if t.gil_requested {
            flags.push("waiting for GIL");
        }
        flags.push(if t.on_cpu { "on CPU" } else { "idle" });
        if t.has_exception {
            flags.push("exception");
        }
        out.push_str(&format!(
            "\nThread {} ({})\n",
            t.thread_id,
            flags.join(", ")
        ));
        if t.interpreter_id != 0 {
            out.push_str(&format!("  interpreter {}\n", t.interpreter_id));
        }
        for f in &t.frames {
            match f.line {
                Some(l) => out.push_str(&format!("    {} ({}:{l})\n", f.function, f.file)),
                None => out.push_str(&format!("    {} ({})\n", f.function, f.file)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_numbers_read_as_the_python_side_prints_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(2048), "2.0 KiB");
        assert_eq!(size(5 << 20), "5.0 MiB");
        let s = RecordStats {
            path: "out.tach".into(),
            samples: 12345,
            duration_sec: 2.0,
            sample_rate: 999.5,
            sampler_cpu_sec: 0.1,
            file_size: 4096,
            ..RecordStats::default()
        };
        assert_eq!(
            s.summary_line(),
            "tach: 12,345 samples in 2.00 s (999.5 Hz achieved), 0 dropped (0.00% ticks \
             with errors, 0.00% missed), sampler 5.0% of a CPU, 4.0 KiB written to out.tach"
        );
    }

    #[test]
    fn a_process_that_is_gone_is_not_alive() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }
}

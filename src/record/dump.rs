//! `tach dump PID`: every thread's current stack, from one tick of the sampler.

use std::path::PathBuf;

use crate::tach::{Compression, ProfilingMode, TachFile};

use super::clock::monotonic_us;
use super::discovery::attach;
use super::interpreter::asyncio::AsyncMode;
use super::outside::ExternalError;
use super::sampler::{RecordOptions, Sampler};

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

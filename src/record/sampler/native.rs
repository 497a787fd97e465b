//! `--native`: each sampled thread's native stack, walked while the thread is stopped,
//! with the Python frames read spliced in where the eval loop runs them (`native`);
//! with `-a`, also the threads that run no Python (their native stack alone).

use std::io::{Seek, Write};

use crate::record::native::splice::{self, NativeKind, Splice};
use crate::record::native::{NativeStats, NativeUnwinder, Registers};
use crate::tach::{Location, ProfilingMode, TachError, Writer, MAX_STACK_DEPTH};

use super::Sampler;
use crate::record::process::memory::{MemoryReader, ReadError};
use crate::tach::filter::status::{ON_CPU, UNKNOWN};

/// The sampler's native side: the unwinder, what a splice reuses from one thread to the
/// next, and whether a native stack of this tick went wrong (the tick counts as an error).
pub(super) struct NativeSide {
    unwinder: NativeUnwinder,
    kinds: Vec<NativeKind>,
    merged: Vec<u32>,
    /// Addresses of the eval loop's entry frames met in the Python chain just read.
    entry_frames: Vec<u64>,
    /// `-a`: the process's threads (`/proc/PID/task`), and when they were listed.
    threads: Vec<u64>,
    threads_listed: Option<std::time::Instant>,
    /// A native stack of this tick could not be read or spliced.
    tick_error: bool,
}

/// How often `-a --native` lists the process's threads again (a thread started since
/// is sampled from the next list on).
const THREAD_LIST_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// At most this many threads of the process are listed.
const MAX_LISTED_THREADS: usize = 1 << 14;

impl NativeSide {
    pub(super) fn new(pid: u64) -> Result<NativeSide, TachError> {
        let unwinder = NativeUnwinder::new(pid as i32)
            .map_err(|e| TachError::Usage(format!("--native: {e}")))?;
        Ok(NativeSide {
            unwinder,
            kinds: Vec::with_capacity(crate::record::native::MAX_NATIVE_FRAMES),
            merged: Vec::with_capacity(MAX_STACK_DEPTH),
            entry_frames: Vec::new(),
            threads: Vec::new(),
            threads_listed: None,
            tick_error: false,
        })
    }

    /// The process's threads, listed again when the list is older than
    /// [`THREAD_LIST_INTERVAL`].
    fn list_threads(&mut self) {
        if self
            .threads_listed
            .is_some_and(|t| t.elapsed() < THREAD_LIST_INTERVAL)
        {
            return;
        }
        self.threads_listed = Some(std::time::Instant::now());
        self.threads.clear();
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.unwinder.pid())) {
            // In-process, the sampler's own thread is in the list: it cannot pause itself.
            // SAFETY: gettid has no preconditions.
            let own = unsafe { libc::gettid() } as u64;
            self.threads.extend(
                tasks
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
                    .filter(|&t| t != own)
                    .take(MAX_LISTED_THREADS),
            );
            self.threads.sort_unstable();
        }
    }

    /// Walks the stopped thread whose registers are `regs` and classifies each native
    /// frame into `kinds`, interning the frames' names with `writer`. Whether the walk
    /// was cut short.
    fn walk_kinds<W: Write + Seek>(
        &mut self,
        regs: Registers,
        mem: &dyn MemoryReader,
        writer: &mut Writer<W>,
    ) -> bool {
        let truncated = self.unwinder.walk(regs, mem);
        let addrs = std::mem::take(&mut self.unwinder.addrs);
        self.kinds.clear();
        let mut intern = |file: &str, func: &str, line: i32| {
            let loc = (line >= 0).then_some(Location {
                lineno: line,
                end_lineno: line,
                column: -1,
                end_column: -1,
            });
            writer.frame(file, func, loc, None)
        };
        for (i, &a) in addrs.iter().enumerate() {
            if self.unwinder.holds_entry_frame(i, a, &self.entry_frames) {
                self.kinds.push(NativeKind::Eval);
                continue;
            }
            self.unwinder.kinds_of(a, &mut intern, &mut self.kinds);
        }
        self.unwinder.addrs = addrs;
        truncated
    }

    /// A new segment's writer: native frames are interned in its tables anew.
    pub(super) fn forget_frames(&mut self) {
        self.unwinder.forget_frames();
    }

    pub(super) fn clear_entry_frames(&mut self) {
        self.entry_frames.clear();
    }

    /// An entry frame of the chain at `addr` (bounded by the chain's depth limit).
    pub(super) fn entry_frame(&mut self, addr: u64) {
        if self.entry_frames.len() < MAX_STACK_DEPTH {
            self.entry_frames.push(addr);
        }
    }

    /// Whether a native stack of this tick went wrong; the next tick starts without.
    pub(super) fn take_tick_error(&mut self) -> bool {
        std::mem::take(&mut self.tick_error)
    }

    pub(super) fn stats(&self) -> &NativeStats {
        &self.unwinder.stats
    }
}

impl Sampler {
    /// Stops thread `tid` for its native walk (before its Python stack is read, so that
    /// both are of one moment), unless the GIL holder's pause holds it already: the one
    /// pauser stops each sampled thread in turn (releasing the GIL holder when another
    /// thread is sampled: that one's Python stack cannot change while it is stopped).
    /// Whether it is stopped.
    pub(super) fn native_stop(&mut self, tid: u64) -> bool {
        self.native.is_some() && self.pausing.stop(tid)
    }

    /// Replaces the Python stack just read (`self.stack.frames`, with its `frame_runs`)
    /// by the thread's native stack with the Python frames spliced in. A thread that
    /// could not be stopped, or whose stacks do not fit together, is dropped (as py-spy
    /// drops it): its Python frames alone would move its native time to their caller.
    pub(super) fn native_splice(&mut self, tid: u64, stopped: bool) -> Result<(), ReadError> {
        let Some(n) = self.native.as_deref_mut() else {
            return Ok(());
        };
        let regs = match stopped {
            true => self.pausing.registers(tid),
            false => None,
        };
        let Some(regs) = regs else {
            n.unwinder.stats.no_registers += 1;
            return Err(ReadError::Invalid(
                "thread not stopped for its native stack",
            ));
        };
        let truncated = n.walk_kinds(regs, &*self.target.mem, &mut self.writer);
        // `--async-aware`: the thread's own frames are spliced; the task frames above
        // them are no native stack's and go on top as they are.
        let stack = &self.stack;
        let at = stack.tasks_at.min(stack.frames.len());
        let (thread, tasks) = stack.frames.split_at(at);
        let runs = &stack.frame_runs[..at.min(stack.frame_runs.len())];
        let how = if stack.cut_under_task() {
            splice::splice_under_task
        } else {
            splice::splice
        };
        match how(
            &n.kinds,
            thread,
            runs,
            stack.thread_runs,
            truncated,
            &mut n.merged,
        ) {
            Ok(how) => {
                if how == Splice::Truncated || (how == Splice::PythonAfter && !thread.is_empty()) {
                    n.tick_error = true;
                }
                n.merged.extend_from_slice(tasks);
                n.merged.truncate(MAX_STACK_DEPTH);
                std::mem::swap(&mut self.stack.frames, &mut n.merged);
                Ok(())
            }
            Err(m) => {
                n.unwinder.stats.mismatches += 1;
                if self.diagnostics.debug() {
                    eprintln!(
                        "tach: thread {tid}: {} eval loops, {} Python runs",
                        m.eval_loops, m.python_runs
                    );
                }
                Err(ReadError::Invalid(
                    "native stack and Python frames do not fit together",
                ))
            }
        }
    }

    /// `-a --native`: the process's threads that have no Python thread state (OpenBLAS
    /// and OpenMP workers, Rust and C++ threads) each get a sample of their native stack
    /// alone, stopped in turn as the Python threads are (`--mode gil` and `exception`
    /// leave them out: they hold no GIL and raise nothing; `cpu` keeps those on a CPU).
    /// Called after the tick's Python threads. A thread that ended since the list was
    /// read is passed over; one that cannot be stopped or walked counts among the
    /// errors. Returns false when one did.
    pub(super) fn sample_threads_without_python(&mut self, now_us: u64) -> bool {
        if !self.opts.all_threads || self.native.is_none() {
            return true;
        }
        if matches!(
            self.opts.mode,
            ProfilingMode::Gil | ProfilingMode::Exception
        ) {
            return true;
        }
        let mut tids = Vec::new();
        if let Some(n) = self.native.as_deref_mut() {
            n.list_threads();
            tids.extend(n.threads.iter().copied());
        }
        tids.retain(|&t| !self.memo.seen(t));
        let mut ok = true;
        let mut sampled = 0u64;
        for tid in tids {
            let status = match self.opts.mode {
                ProfilingMode::Cpu | ProfilingMode::All => match self.on_cpu(tid) {
                    Some(true) => ON_CPU,
                    Some(false) if self.opts.mode == ProfilingMode::Cpu => continue,
                    Some(false) => 0,
                    None => UNKNOWN,
                },
                _ => UNKNOWN,
            };
            // Its /proc handle is kept from tick to tick, as a Python thread's is.
            self.memo.saw(tid);
            let stopped = self.pausing.stop(tid);
            let regs = match stopped {
                true => self.pausing.registers(tid),
                false => None,
            };
            let Some(n) = self.native.as_deref_mut() else {
                return ok;
            };
            let Some(regs) = regs else {
                // Ended since the list was read: not an error.
                if std::path::Path::new(&format!("/proc/{}/task/{tid}", self.target.pid)).exists() {
                    n.unwinder.stats.no_registers += 1;
                    self.stats.dropped += 1;
                    ok = false;
                }
                continue;
            };
            let truncated = n.walk_kinds(regs, &*self.target.mem, &mut self.writer);
            match splice::splice(&n.kinds, &[], &[], 0, truncated, &mut n.merged) {
                Ok(how) => {
                    if how == Splice::Truncated {
                        n.tick_error = true;
                    }
                    n.merged.truncate(MAX_STACK_DEPTH);
                    std::mem::swap(&mut self.stack.frames, &mut n.merged);
                    sampled += 1;
                    // The process's thread, not an interpreter's: the main interpreter's.
                    self.write_stack(tid, 0, now_us, status);
                }
                Err(_) => {
                    // An eval loop in a thread without a thread state (one being
                    // created or torn down): its Python frames cannot be known.
                    n.unwinder.stats.mismatches += 1;
                    self.stats.dropped += 1;
                    ok = false;
                }
            }
        }
        if let Some(n) = self.native.as_deref_mut() {
            let stats = &mut n.unwinder.stats;
            stats.threads_without_python = stats.threads_without_python.max(sampled);
        }
        ok
    }
}

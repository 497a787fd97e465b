//! `--native`: each sampled thread's native stack, walked while the thread is stopped,
//! with the Python frames read spliced in where the eval loop runs them (`native`).

use crate::record::native::splice::{self, NativeKind, Splice};
use crate::record::native::{registers, NativeStats, NativeUnwinder};
use crate::tach::{Location, TachError, MAX_STACK_DEPTH};

use super::super::memory::ReadError;
use super::Sampler;

/// The sampler's native side: the unwinder, what a splice reuses from one thread to the
/// next, and whether a native stack of this tick went wrong (the tick counts as an error).
pub(super) struct NativeSide {
    unwinder: NativeUnwinder,
    kinds: Vec<NativeKind>,
    merged: Vec<u32>,
    /// Addresses of the eval loop's entry frames met in the Python chain just read.
    entry_frames: Vec<u64>,
    /// Threads sampled so far (at most [`MAX_SEEN_THREADS`]), and when the process's
    /// threads were last counted against them.
    seen_threads: std::collections::HashSet<u64>,
    last_thread_count: std::time::Instant,
    /// A native stack of this tick could not be read or spliced.
    tick_error: bool,
}

/// Threads remembered for counting those without Python.
const MAX_SEEN_THREADS: usize = 1 << 16;
/// How often `-a --native` counts the process's threads.
const THREAD_COUNT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl NativeSide {
    pub(super) fn new(pid: u64) -> Result<NativeSide, TachError> {
        let unwinder = NativeUnwinder::new(pid as i32)
            .map_err(|e| TachError::Usage(format!("--native: {e}")))?;
        Ok(NativeSide {
            unwinder,
            kinds: Vec::with_capacity(crate::record::native::MAX_NATIVE_FRAMES),
            merged: Vec::with_capacity(MAX_STACK_DEPTH),
            entry_frames: Vec::new(),
            seen_threads: Default::default(),
            last_thread_count: std::time::Instant::now(),
            tick_error: false,
        })
    }

    /// Counts, once a second, the process's threads that were never sampled: with
    /// `-a`, the sampler reads every Python thread state, so these run no Python and
    /// have no stack in the file. A thread's native stack could be walked without
    /// Python frames, but the sampler finds threads by their thread states.
    fn count_threads_without_python(&mut self, tid: u64) {
        if self.seen_threads.len() < MAX_SEEN_THREADS {
            self.seen_threads.insert(tid);
        }
        if self.last_thread_count.elapsed() < THREAD_COUNT_INTERVAL {
            return;
        }
        self.last_thread_count = std::time::Instant::now();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.unwinder.pid())) else {
            return;
        };
        let without = tasks
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .filter(|t| !self.seen_threads.contains(t))
            .count() as u64;
        let stats = &mut self.unwinder.stats;
        stats.threads_without_python = stats.threads_without_python.max(without);
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
        if self.opts.all_threads {
            n.count_threads_without_python(tid);
        }
        let regs = match stopped {
            true => registers(tid as i32).ok(),
            false => None,
        };
        let Some(regs) = regs else {
            n.unwinder.stats.no_registers += 1;
            return Err(ReadError::Invalid(
                "thread not stopped for its native stack",
            ));
        };
        n.unwinder.refresh();
        let truncated = n.unwinder.walk(regs, &*self.target.mem);
        let addrs = std::mem::take(&mut n.unwinder.addrs);
        n.kinds.clear();
        let writer = &mut self.writer;
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
            if n.unwinder.holds_entry_frame(i, a, &n.entry_frames) {
                n.kinds.push(NativeKind::Eval);
                continue;
            }
            n.unwinder.kinds_of(a, &mut intern, &mut n.kinds);
        }
        n.unwinder.addrs = addrs;
        match splice::splice(
            &n.kinds,
            &self.stack.frames,
            &self.stack.frame_runs,
            self.stack.run_count,
            truncated,
            &mut n.merged,
        ) {
            Ok(how) => {
                if how == Splice::Truncated
                    || (how == Splice::PythonAfter && !self.stack.frames.is_empty())
                {
                    n.tick_error = true;
                }
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
}

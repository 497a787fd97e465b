//! `--native`: each sampled thread's native stack, walked while the thread is stopped,
//! with the Python frames read spliced in where the eval loop runs them (`native`);
//! with `-a`, also the threads that run no Python (their native stack alone).

use crate::record::native::splice::{self, Splice};
use crate::tach::{ProfilingMode, MAX_STACK_DEPTH};

use super::Sampler;
use crate::record::process::memory::ReadError;
use crate::tach::filter::status::{ON_CPU, UNKNOWN};

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

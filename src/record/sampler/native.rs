//! `--native`: each sampled thread's native stack, walked while the thread is stopped,
//! with the Python frames read spliced in where the eval loop runs them (`native`).

use super::*;
use crate::record::native::splice::{self, NativeKind, Splice};
use crate::record::native::{registers, NativeStats, NativeUnwinder};

/// The sampler's native side.
pub(super) struct NativeSide {
    unwinder: NativeUnwinder,
    kinds: Vec<NativeKind>,
    merged: Vec<u32>,
}

impl NativeSide {
    pub(super) fn new(pid: u64) -> Result<NativeSide, TachError> {
        let unwinder = NativeUnwinder::new(pid as i32)
            .map_err(|e| TachError::Usage(format!("--native: {e}")))?;
        Ok(NativeSide {
            unwinder,
            kinds: Vec::with_capacity(crate::record::native::MAX_NATIVE_FRAMES),
            merged: Vec::with_capacity(MAX_STACK_DEPTH),
        })
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
        if self.native.is_none() {
            return false;
        }
        let Some(pauser) = self.pauser.as_mut() else {
            return false;
        };
        if pauser.ptrace_stopped() == Some(tid) {
            return true;
        }
        let stopped = pauser.pause(tid);
        self.paused_on_cpu = None;
        stopped
    }

    /// Replaces the Python stack just read (`self.stack`, with `self.stack_runs`) by the
    /// thread's native stack with the Python frames spliced in. A thread that could not
    /// be stopped, or whose stacks do not fit together, is dropped (as py-spy drops it):
    /// its Python frames alone would move its native time to their caller.
    pub(super) fn native_splice(&mut self, tid: u64, stopped: bool) -> Result<(), ReadError> {
        let Some(n) = self.native.as_deref_mut() else {
            return Ok(());
        };
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
            let loc = (line >= 0).then_some(crate::tach::Location {
                lineno: line,
                end_lineno: line,
                column: -1,
                end_column: -1,
            });
            writer.frame(file, func, loc, None)
        };
        for &a in &addrs {
            n.unwinder.kinds_of(a, &mut intern, &mut n.kinds);
        }
        n.unwinder.addrs = addrs;
        match splice::splice(
            &n.kinds,
            &self.stack,
            &self.stack_runs,
            self.run_count,
            truncated,
            &mut n.merged,
        ) {
            Ok(how) => {
                if how == Splice::Truncated
                    || (how == Splice::PythonAfter && !self.stack.is_empty())
                {
                    self.native_error = true;
                }
                n.merged.truncate(MAX_STACK_DEPTH);
                std::mem::swap(&mut self.stack, &mut n.merged);
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

//! Async-aware stacks (`--async-aware`): per thread, what its asyncio loop is doing
//! (see `record::asyncio` for what is read and CPython's convention the stacks follow).
//!
//! - `running`: a thread whose loop runs a task gets its own frames up to that task's
//!   coroutine (all of them while the task's step runs outside its coroutine), then the
//!   `<task>` frame, then the tasks awaiting it; a thread whose loop
//!   is between tasks has no sample (CPython's sampler has none either); a thread with
//!   no loop gets its plain stack, as without the flag. 3.11-3.13 find the running task
//!   from the stack (`stack_tasks`), after the walk: its frames up to its coroutine,
//!   then its `<task>` frame, and no tasks above it; a stack that runs the loop's
//!   `_run_once` and no task's step has no sample.
//! - `all`: every task of every thread, waiting or not, one stack per task nobody
//!   awaits, each made of coroutine frames and `<task>` frames only (CPython's
//!   `get_all_awaited_by`); a thread with neither a loop nor tasks gets its plain stack.

use super::async_tasks::{AsyncPlan, MAX_TSTATE_IMAGE};
use super::Sampler;
use crate::record::interpreter::asyncio::{self, AsyncMode};
use crate::record::interpreter::layout::Offsets;
use crate::record::process::memory::ReadError;

impl Sampler {
    /// Whether the thread's own stack is read and written under `plan` (`plain`: the
    /// thread is sampled as without `--async-aware`); a sample the plan leaves out for
    /// want of a running task is counted as filtered.
    pub(super) fn sampled_under(&mut self, plan: AsyncPlan, plain: bool) -> bool {
        match plan {
            AsyncPlan::Cut(_) => true,
            AsyncPlan::Plain => plain,
            // Whether it runs a task is known once its stack is read.
            AsyncPlan::FromStack => true,
            AsyncPlan::Skip => {
                self.stats.filtered += 1;
                false
            }
            AsyncPlan::Collected => false,
        }
    }

    /// Decides what the thread's sample is, reading its asyncio state (and, running,
    /// the chain of tasks awaiting the running one into the tasks' `items`).
    ///
    /// `from_image`: the thread state image read this tick (`bufs.tstate`) still holds
    /// the asyncio fields (false when the stack is read again: the task may have
    /// changed).
    pub(super) fn async_plan(
        &mut self,
        tstate: u64,
        tid: u64,
        status: u8,
        now_us: u64,
        from_image: bool,
    ) -> Result<AsyncPlan, ReadError> {
        let Some(mode) = self.opts.async_mode else {
            return Ok(AsyncPlan::Plain);
        };
        if self.tasks.stack_tasks.is_some() {
            return Ok(AsyncPlan::FromStack);
        }
        let Some(reader) = self.tasks.reader.as_mut() else {
            return Ok(AsyncPlan::Plain);
        };
        let mem = &*self.target.mem;
        let image = from_image.then_some(self.bufs.tstate.as_slice());
        let Some(thread) = reader.thread(mem, tstate, image, now_us)? else {
            return Ok(AsyncPlan::Plain);
        };
        // The next ticks' thread state images hold the asyncio fields (they follow
        // `PyThreadState` in the interpreter's own thread state structure).
        if let Some(len) = reader.tstate_len() {
            if len as usize > self.bufs.tstate.len() && len <= MAX_TSTATE_IMAGE {
                self.bufs.tstate.resize(len as usize, 0);
            }
        }
        match mode {
            AsyncMode::Running => {
                if thread.running_loop == 0 {
                    return Ok(AsyncPlan::Plain);
                }
                if thread.running_task == 0 {
                    return Ok(AsyncPlan::Skip);
                }
                let frame = self
                    .tasks
                    .running_chain(&self.target, thread.running_task)?;
                Ok(AsyncPlan::Cut(frame))
            }
            AsyncMode::All => {
                if thread.running_loop == 0 && !thread.has_tasks {
                    return Ok(AsyncPlan::Plain);
                }
                self.collect_tasks(thread.tasks_head, tid, status);
                Ok(AsyncPlan::Collected)
            }
        }
    }

    /// `all`: reads the tasks of the list at `head` into this tick's tasks, as the
    /// thread `tid`'s. A task that cannot be read (created or finished under the read, a
    /// name that is not a str) is left out and counted.
    fn collect_tasks(&mut self, head: u64, tid: u64, status: u8) {
        let Some(reader) = self.tasks.reader.as_mut() else {
            return;
        };
        let (mem, types, o) = (
            &*self.target.mem,
            &self.target.types,
            self.target.layout.offsets(),
        );
        let mut addrs = Vec::new();
        if let Err(e) = reader.list_tasks(mem, head, &mut addrs) {
            self.diagnostics.dropped(e);
            self.stats.dropped += 1;
        }
        for addr in addrs {
            if self.tasks.tick_tasks.contains_key(&addr) {
                continue;
            }
            match reader.task(mem, types, o, addr, true) {
                Ok(task) => {
                    self.tasks.tick_tasks.insert(addr, task);
                    self.tasks.task_threads.insert(addr, (tid, status));
                }
                Err(e) => {
                    self.diagnostics.dropped(e);
                    self.stats.dropped += 1;
                }
            }
        }
    }

    /// `all`: after an interpreter's threads, its list of tasks whose thread finished
    /// (as thread 0, as CPython reports them), then one sample per task nobody awaits.
    /// Returns false when something could not be read here (a task left out while the
    /// threads' lists were read is counted in `stats.dropped`, which the caller checks).
    pub(super) fn write_all_tasks(
        &mut self,
        o: &Offsets,
        interp: u64,
        interp_id: u32,
        now_us: u64,
    ) -> bool {
        let dropped = self.stats.dropped;
        if let Some(head) = self
            .tasks
            .reader
            .as_ref()
            .and_then(|r| r.interpreter_tasks_head(interp))
        {
            self.collect_tasks(head, 0, 0);
        }
        let tasks = std::mem::take(&mut self.tasks.tick_tasks);
        let threads = std::mem::take(&mut self.tasks.task_threads);
        for leaf in asyncio::leaves(&tasks) {
            let (tid, status) = threads.get(&leaf).copied().unwrap_or((0, 0));
            self.tasks.items.clear();
            asyncio::linear_stack(leaf, &tasks, &mut self.tasks.items);
            self.stack.raw.clear();
            self.stack.tasks_raw = None;
            self.tasks.append_items(&mut self.stack.raw);
            if let Err(e) = self.resolve_stack(o) {
                self.diagnostics.dropped(e);
                self.stats.dropped += 1;
                continue;
            }
            self.write_stack(tid, interp_id, now_us, status);
        }
        self.stats.dropped == dropped
    }
}

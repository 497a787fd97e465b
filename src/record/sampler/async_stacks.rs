//! Async-aware stacks (`--async-aware`): per thread, what its asyncio loop is doing
//! (see `record::asyncio` for what is read and CPython's convention the stacks follow).
//!
//! - `running`: a thread whose loop runs a task gets its own frames up to that task's
//!   coroutine (all of them while the task's step runs outside its coroutine), then the
//!   `<task>` frame, then the tasks awaiting it; a thread whose loop
//!   is between tasks has no sample (CPython's sampler has none either); a thread with
//!   no loop gets its plain stack, as without the flag.
//! - `all`: every task of every thread, waiting or not, one stack per task nobody
//!   awaits, each made of coroutine frames and `<task>` frames only (CPython's
//!   `get_all_awaited_by`); a thread with neither a loop nor tasks gets its plain stack.

use super::*;

/// What a thread's sample is, async-aware.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum AsyncPlan {
    /// Its plain stack, as without `--async-aware`.
    Plain,
    /// No sample: the loop runs but no task does.
    Skip,
    /// Its tasks were collected for this tick's `all` stacks.
    Collected,
    /// Its stack, cut at this frame (the running task's coroutine), then
    /// `async_items`.
    Cut(u64),
}

impl Sampler {
    /// Whether the thread's own stack is read and written under `plan` (`plain`: the
    /// thread is sampled as without `--async-aware`); a sample the plan leaves out for
    /// want of a running task is counted as filtered.
    pub(super) fn sampled_under(&mut self, plan: AsyncPlan, plain: bool) -> bool {
        match plan {
            AsyncPlan::Cut(_) => true,
            AsyncPlan::Plain => plain,
            AsyncPlan::Skip => {
                self.stats.filtered += 1;
                false
            }
            AsyncPlan::Collected => false,
        }
    }

    /// Decides what the thread's sample is, reading its asyncio state (and, running,
    /// the chain of tasks awaiting the running one into `async_items`).
    pub(super) fn async_plan(
        &mut self,
        tstate: u64,
        tid: u64,
        status: u8,
        now_us: u64,
    ) -> Result<AsyncPlan, ReadError> {
        let Some(mode) = self.opts.async_mode else {
            return Ok(AsyncPlan::Plain);
        };
        let Some(reader) = self.tasks.as_mut() else {
            return Ok(AsyncPlan::Plain);
        };
        let mem = &*self.target.mem;
        let Some(thread) = reader.thread(mem, tstate, now_us)? else {
            return Ok(AsyncPlan::Plain);
        };
        match mode {
            AsyncMode::Running => {
                if thread.running_loop == 0 {
                    return Ok(AsyncPlan::Plain);
                }
                if thread.running_task == 0 {
                    return Ok(AsyncPlan::Skip);
                }
                let frame = reader.task_frame(mem, thread.running_task)?;
                self.running_chain(thread.running_task)?;
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

    /// The running task's `<task>` frame and the tasks above it into `async_items`
    /// (the running task's own frames are the thread's).
    fn running_chain(&mut self, running: u64) -> Result<(), ReadError> {
        let Some(reader) = self.tasks.as_mut() else {
            return Ok(());
        };
        let (mem, types, o) = (
            &*self.target.mem,
            &self.target.types,
            self.target.layout.offsets(),
        );
        let mut chain = HashMap::new();
        let mut current = Some(running);
        let mut depth = 0;
        while let Some(addr) = current {
            depth += 1;
            if chain.contains_key(&addr) || depth > super::super::asyncio::MAX_TASK_DEPTH {
                break;
            }
            let task = reader.task(mem, types, o, addr, addr != running)?;
            current = task.parents.iter().copied().min();
            chain.insert(addr, task);
        }
        self.async_items.clear();
        super::super::asyncio::linear_stack(running, &chain, &mut self.async_items);
        Ok(())
    }

    /// Appends `async_items` to the raw frames: coroutine frames and `<task>` marks.
    pub(super) fn append_async_items(&mut self) {
        self.task_names.clear();
        for item in &self.async_items {
            if self.raw.len() >= MAX_STACK_DEPTH {
                break;
            }
            let frame = match item {
                StackItem::Code(code, instr) => RawFrame {
                    code: *code,
                    instr: *instr,
                    owner: FRAME_OWNED_BY_GENERATOR,
                    called_python: false,
                },
                StackItem::Task(name) => {
                    self.task_names.push(name.clone());
                    RawFrame {
                        code: TASK_MARK,
                        instr: (self.task_names.len() - 1) as u64,
                        owner: 0,
                        called_python: false,
                    }
                }
            };
            self.raw.push(frame);
        }
    }

    /// `all`: reads the tasks of the list at `head` into this tick's tasks, as the
    /// thread `tid`'s. A task that cannot be read (created or finished under the read, a
    /// name that is not a str) is left out and counted.
    fn collect_tasks(&mut self, head: u64, tid: u64, status: u8) {
        let Some(reader) = self.tasks.as_mut() else {
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
            if self.tick_tasks.contains_key(&addr) {
                continue;
            }
            match reader.task(mem, types, o, addr, true) {
                Ok(task) => {
                    self.tick_tasks.insert(addr, task);
                    self.task_threads.insert(addr, (tid, status));
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
            .as_ref()
            .and_then(|r| r.interpreter_tasks_head(interp))
        {
            self.collect_tasks(head, 0, 0);
        }
        let tasks = std::mem::take(&mut self.tick_tasks);
        let threads = std::mem::take(&mut self.task_threads);
        for leaf in super::super::asyncio::leaves(&tasks) {
            let (tid, status) = threads.get(&leaf).copied().unwrap_or((0, 0));
            self.async_items.clear();
            super::super::asyncio::linear_stack(leaf, &tasks, &mut self.async_items);
            self.raw.clear();
            self.append_async_items();
            if let Err(e) = self.resolve_stack(o) {
                self.diagnostics.dropped(e);
                self.stats.dropped += 1;
                continue;
            }
            self.write_stack(tid, interp_id, now_us, status);
        }
        self.stats.dropped == dropped
    }

    /// Writes `self.stack` as a sample of thread `tid`.
    pub(super) fn write_stack(&mut self, tid: u64, interp_id: u32, now_us: u64, status: u8) {
        match self
            .writer
            .write_sample(tid, interp_id, now_us, status, &self.stack)
        {
            Ok(()) => {
                self.stats.samples += 1;
                if let Some(sink) = &self.opts.sink {
                    let (frames, strings) = (self.writer.frames(), self.writer.strings());
                    sink.sample(tid, status, &self.stack, frames, strings);
                }
            }
            Err(e) => {
                if self.write_error.is_none() {
                    self.write_error = Some(e.to_string());
                }
            }
        }
    }
}

//! `--async-aware`: the sampler's reader of the target's asyncio tasks and what it read
//! for the sample being made, and what a thread's sample is ([`AsyncPlan`]).

use std::collections::HashMap;
use std::io::{Seek, Write};

use crate::tach::{TachError, Writer, MAX_STACK_DEPTH};

use super::stack::{RawFrame, FRAME_OWNED_BY_GENERATOR, TASK_MARK};
use crate::record::discovery::Target;
use crate::record::interpreter::asyncio::{
    self, AsyncError, AsyncMode, StackItem, Task, TaskReader, MAX_TASK_DEPTH,
};
use crate::record::interpreter::layout::DEBUG_OFFSETS_READ;
use crate::record::interpreter::stack_tasks::{StackTasks, StepFrames};
use crate::record::process::memory::{MemoryReader, Prefetched, ReadError};

/// `--async-aware`: the reader of the target's asyncio tasks, and what it read for the
/// sample being made (the tasks above the running one, the `<task>` frames' names) or,
/// `all`, for this tick. Without the flag it has no reader and stays empty.
#[derive(Default)]
pub(super) struct AsyncTasks {
    /// Reads the target's asyncio tasks (`None`: not async-aware).
    pub(super) reader: Option<TaskReader>,
    /// What goes above the running task's frames in this sample: its `<task>` frame and
    /// the tasks awaiting it, innermost first.
    pub(super) items: Vec<StackItem>,
    /// Names of the `<task>` frames of the sample being resolved.
    task_names: Vec<String>,
    /// Writer index of each `<task>` frame, by task name.
    task_frame_ids: HashMap<String, u32>,
    /// Where the walk met the frame the stack is cut at (the running task's coroutine):
    /// how many frames it had then.
    pub(super) cut_found: Option<usize>,
    /// `all`: the tasks read this tick, with the thread they belong to and its status.
    pub(super) tick_tasks: HashMap<u64, Task>,
    pub(super) task_threads: HashMap<u64, (u64, u8)>,
    /// `running`: per running task, the ranges its chain's walk read last time.
    read_ahead: HashMap<u64, Vec<(u64, usize)>>,
    /// 3.11-3.13: finds the running task from the stack (`None`: not async-aware, or a
    /// version whose tasks `reader` reads).
    pub(super) stack_tasks: Option<StackTasks>,
    /// 3.11-3.13: where the walk saw a task's step may run, innermost first.
    pub(super) steps: Vec<StepFrames>,
    /// 3.11-3.13: the stack read holds no running task.
    pub(super) no_task: bool,
    /// Writer frames by index: whether each is the event loop's `_run_once`.
    loop_frames: HashMap<u32, bool>,
}

/// Places a task's step may run that a walk keeps (a generator entered from C, each).
pub(super) const MAX_STEPS: usize = 32;

/// The longest thread state image read for its asyncio fields.
pub(super) const MAX_TSTATE_IMAGE: u64 = 64 * 1024;

/// Running tasks whose reads are kept for the next tick; past it the map starts again
/// (a server with more tasks than this running in turn reads them as before).
const MAX_READ_AHEAD_TASKS: usize = 1024;

impl AsyncTasks {
    /// A new segment's writer: the `<task>` frames and the event loop's are looked up
    /// in its tables anew.
    pub(super) fn forget_frames(&mut self) {
        self.task_frame_ids.clear();
        self.loop_frames.clear();
    }

    /// The task reader for `--async-aware` (`mode`): CPython 3.14 and 3.15 (from
    /// outside or in-process: the reader reads the target's memory either way), 3.11-3.13
    /// (`running` only, from the stack), the others refused by name.
    pub(super) fn new(target: &Target, mode: Option<AsyncMode>) -> Result<Self, TachError> {
        if mode.is_none() {
            return Ok(AsyncTasks::default());
        }
        let (major, minor, _) = target.layout.version();
        if major == 3 && (11..=13).contains(&minor) {
            if mode == Some(AsyncMode::All) {
                return Err(TachError::Usage(
                    AsyncError::AllNeedsDebugOffsets(minor).to_string(),
                ));
            }
            return Ok(AsyncTasks {
                stack_tasks: StackTasks::new(minor, target.layout.offsets()),
                ..AsyncTasks::default()
            });
        }
        if major != 3 || !(14..=15).contains(&minor) {
            return Err(TachError::Usage(
                AsyncError::Unsupported(major, minor).to_string(),
            ));
        }
        let mut raw = vec![0u8; DEBUG_OFFSETS_READ];
        target
            .mem
            .read(target.runtime, &mut raw)
            .map_err(|e| TachError::Usage(format!("reading _Py_DebugOffsets: {e}")))?;
        let reader = TaskReader::new(target.pid as i32, &raw, minor, target.layout.offsets())
            .map_err(|e| TachError::Usage(e.to_string()))?;
        Ok(AsyncTasks {
            reader: Some(reader),
            ..AsyncTasks::default()
        })
    }

    /// Whether stacks are async-aware.
    pub(super) fn enabled(&self) -> bool {
        self.reader.is_some() || self.stack_tasks.is_some()
    }

    /// Whether the walk keeps the places a task's step may run (3.11-3.13).
    pub(super) fn finds_steps(&self) -> bool {
        self.stack_tasks.is_some()
    }

    /// 3.11-3.13, after the walk: the running task, found from the places its step may
    /// run (innermost first: a loop run inside a task's step, as nest_asyncio does, runs
    /// the inner task). Its `<task>` frame goes into `items`, and the index of its
    /// coroutine's frame among the walked frames is returned; `None`: no task runs.
    pub(super) fn task_from_stack(&mut self, target: &Target) -> Result<Option<usize>, ReadError> {
        let Some(finder) = self.stack_tasks.as_mut() else {
            return Ok(None);
        };
        let (mem, types, o) = (&*target.mem, &target.types, target.layout.offsets());
        for at in &self.steps {
            if let Some(name) = finder.running_task(mem, types, o, at)? {
                self.items.clear();
                self.items.push(StackItem::Task(name));
                return Ok(Some(at.index));
            }
        }
        Ok(None)
    }

    /// Whether the resolved stack `frames` runs the event loop (`BaseEventLoop._run_once`
    /// of asyncio/base_events.py): a loop between tasks, whose sample is left out.
    pub(super) fn runs_loop<W: Write + Seek>(
        &mut self,
        frames: &[u32],
        writer: &Writer<W>,
    ) -> bool {
        frames.iter().any(|&id| {
            *self.loop_frames.entry(id).or_insert_with(|| {
                let (table, strings) = (writer.frames(), writer.strings());
                let text = |i: u32| strings.get(i as usize).map_or(&[][..], |s| &s[..]);
                table.get(id as usize).is_some_and(|f| {
                    text(f.funcname) == b"BaseEventLoop._run_once"
                        && text(f.filename).ends_with(b"asyncio/base_events.py")
                })
            })
        })
    }

    /// Where the running task's coroutine frame is (the thread's stack is cut there),
    /// and its `<task>` frame and the tasks above it into `items` (the running task's
    /// own frames are the thread's).
    ///
    /// The thread is stopped while this reads (blocking), and the chain of a task is
    /// the same from tick to tick while it runs: the ranges read for this running task
    /// last time are read first in one batch ([`Prefetched`]), and the walk is answered
    /// from it where it asks for the same ranges (about a dozen reads become one).
    pub(super) fn running_chain(
        &mut self,
        target: &Target,
        running: u64,
    ) -> Result<u64, ReadError> {
        let ahead = self.read_ahead.remove(&running).unwrap_or_default();
        let mem = Prefetched::new(&*target.mem, &ahead);
        let frame = self.walk_running_chain(&mem, target, running)?;
        if self.read_ahead.len() >= MAX_READ_AHEAD_TASKS {
            self.read_ahead.clear();
        }
        self.read_ahead.insert(running, mem.asked());
        Ok(frame)
    }

    fn walk_running_chain(
        &mut self,
        mem: &dyn MemoryReader,
        target: &Target,
        running: u64,
    ) -> Result<u64, ReadError> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(0);
        };
        let (types, o) = (&target.types, target.layout.offsets());
        let frame = reader.task_frame(mem, running)?;
        let mut chain = HashMap::new();
        let mut current = Some(running);
        let mut depth = 0;
        while let Some(addr) = current {
            depth += 1;
            if chain.contains_key(&addr) || depth > MAX_TASK_DEPTH {
                break;
            }
            let task = reader.task(mem, types, o, addr, addr != running)?;
            current = task.parents.iter().copied().min();
            chain.insert(addr, task);
        }
        self.items.clear();
        asyncio::linear_stack(running, &chain, &mut self.items);
        Ok(frame)
    }

    /// Appends `items` to the raw frames: coroutine frames and `<task>` marks.
    pub(super) fn append_items(&mut self, raw: &mut Vec<RawFrame>) {
        self.task_names.clear();
        for item in &self.items {
            if raw.len() >= MAX_STACK_DEPTH {
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
            raw.push(frame);
        }
    }

    /// The writer's index of the `<task>` frame named by the `index`-th name of the
    /// sample, interned the first time.
    pub(super) fn task_frame<W: Write + Seek>(
        &mut self,
        index: u64,
        writer: &mut Writer<W>,
    ) -> u32 {
        let name = self
            .task_names
            .get(index as usize)
            .map_or("", |n| n.as_str());
        match self.task_frame_ids.get(name) {
            Some(&id) => id,
            None => {
                // As CPython's collector makes it: file `<task>`, no location.
                let id = writer.frame("<task>", name, None, None);
                self.task_frame_ids.insert(name.to_string(), id);
                id
            }
        }
    }
}
/// What a thread's sample is, async-aware.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum AsyncPlan {
    /// Its plain stack, as without `--async-aware`.
    Plain,
    /// No sample: the loop runs but no task does.
    Skip,
    /// Its tasks were collected for this tick's `all` stacks.
    Collected,
    /// Its stack, cut at this frame (the running task's coroutine), then the tasks'
    /// `items`.
    Cut(u64),
    /// 3.11-3.13: its stack, and the running task found in it after the walk.
    FromStack,
}

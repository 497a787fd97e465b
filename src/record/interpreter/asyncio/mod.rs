//! asyncio tasks read from outside the target (`--async-aware`, CPython 3.14 and 3.15;
//! 3.11-3.13 find the running task from the stack instead, `stack_tasks`).
//!
//! From 3.14 the `_asyncio` C module publishes `_Py_AsyncioModuleDebugOffsets` in a
//! section of its own, `.AsyncioDebug`, of the file it is built into: the `_asyncio`
//! extension, or libpython / the executable when it is built in (Debian's 3.15). The
//! section has no symbol a stripped file keeps, so it is found by name in the section
//! headers, and looked for again while the target has not imported asyncio yet. With it:
//! the thread state's running loop and running task, each thread's list of its tasks
//! (and the interpreter's list, for tasks of threads that finished), and in a task its
//! name, its coroutine and the tasks that await it (`awaited_by`: one task, or a set).
//!
//! The objects the offsets lead to (sets, ints, coroutines and their frames) are read
//! with the layout of `_Py_DebugOffsets`, whose fields this module locates by their
//! place in the structure of the version (checked against the fields the sampler's
//! layout already parsed).
//!
//! Stacks follow CPython 3.15's sampler (`profiling.sampling --async-aware`,
//! `collector.py`'s `_build_linear_stacks`), so that its tools read them the same way:
//! a task is a frame of file `<task>` named after the task (no line), under the frames
//! of its coroutine chain; above it the task awaiting it, up to a task nobody awaits.
//! A task awaited by several picks the one at the lowest address and is named
//! `NAME (N parents)`; a task with an empty name is `Task-ADDRESS`.
//!
//! Everything read is untrusted: every list, set and chain is walked to a bound, and a
//! task read while it is created or finished, a name that is not a `str` or an `int`, or
//! a loop closed under the read is a read error the sampler counts, never a panic or a
//! loop without end.

use std::collections::{HashMap, HashSet};

use crate::record::interpreter::layout::{field_u64, Offsets};
use crate::record::interpreter::resolve::{read_unicode, Types};
use crate::record::process::elf::open_mapped;
use crate::record::process::maps::mapped_files;
use crate::record::process::memory::{MemoryReader, ReadError};

/// Which tasks a sample shows (CPython's `--async-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AsyncMode {
    /// The task running on each thread, under the tasks that await it.
    Running,
    /// Every task, waiting ones included: one stack per task nobody else awaits.
    All,
}

/// Why async-aware stacks cannot be read from an interpreter.
#[derive(Debug, thiserror::Error)]
pub enum AsyncError {
    #[error(
        "--async-aware needs CPython 3.11 or later: 3.11-3.13 show the running task (found \
         from the stack), 3.14 and 3.15 also the tasks awaiting it (asyncio's debug offsets); \
         CPython {0}.{1} has neither, and tach does not guess"
    )]
    Unsupported(u8, u8),
    #[error(
        "--async-mode all needs CPython 3.14 or 3.15, whose asyncio publishes its tasks \
         (_Py_AsyncioModuleDebugOffsets); on CPython 3.{0} tach shows the running task only \
         (--async-mode running): the waiting tasks are in no stack"
    )]
    AllNeedsDebugOffsets(u8),
    #[error("_Py_DebugOffsets of CPython 3.{minor}: {what}")]
    DebugOffsets { minor: u8, what: String },
}

/// Tasks followed in one list, set or chain before giving up (CPython's own bound on a
/// thread's task list).
pub const MAX_TASKS: usize = 1 << 16;
/// Tasks from a running task up to its root.
pub const MAX_TASK_DEPTH: usize = 1024;
/// Coroutines in one chain (`await` inside `await`).
const MAX_CORO_DEPTH: usize = 256;
/// Largest task object and coroutine image read (a `TaskObj` is under 200 bytes).
const MAX_OBJECT: u64 = 4096;
/// Task names cached, by (task, name object); cleared when full.
const MAX_NAMES: usize = 1 << 14;
/// How often a target that has not imported asyncio is looked at again, microseconds:
/// the tasks its loop runs until then are recorded as plain stacks. A look reads the
/// target's memory map and opens only the files mapped since the last one.
const LOOK_AGAIN_US: u64 = 50_000;

const PY_TPFLAGS_LONG_SUBCLASS: u64 = 1 << 24;
const PY_TPFLAGS_UNICODE_SUBCLASS: u64 = 1 << 28;

/// `_Py_AsyncioModuleDebugOffsets` (the same 13 fields in 3.14 and 3.15).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AsyncioOffsets {
    pub task_size: u64,
    pub task_name: u64,
    pub task_awaited_by: u64,
    pub task_is_task: u64,
    pub task_awaited_by_is_set: u64,
    pub task_coro: u64,
    pub task_node: u64,
    pub interp_tasks_head: u64,
    pub tstate_running_loop: u64,
    pub tstate_running_task: u64,
    pub tstate_tasks_head: u64,
}

/// Bytes of `_Py_AsyncioModuleDebugOffsets`.
pub const ASYNCIO_OFFSETS_SIZE: usize = 13 * 8;

impl AsyncioOffsets {
    pub fn parse(raw: &[u8]) -> Result<AsyncioOffsets, String> {
        let w = |i: u64| field_u64(raw, 8 * i).ok_or("_AsyncioDebug is cut short");
        let o = AsyncioOffsets {
            task_size: w(0)?,
            task_name: w(1)?,
            task_awaited_by: w(2)?,
            task_is_task: w(3)?,
            task_awaited_by_is_set: w(4)?,
            task_coro: w(5)?,
            task_node: w(6)?,
            interp_tasks_head: w(8)?,
            tstate_running_loop: w(10)?,
            tstate_running_task: w(11)?,
            tstate_tasks_head: w(12)?,
        };
        let (interp_size, tstate_size) = (w(7)?, w(9)?);
        let task_fields = [
            o.task_name + 8,
            o.task_awaited_by + 8,
            o.task_is_task + 1,
            o.task_awaited_by_is_set + 1,
            o.task_coro + 8,
            o.task_node + 16,
        ];
        let sane = o.task_size > 0
            && o.task_size <= MAX_OBJECT
            && task_fields.iter().all(|&end| end <= o.task_size)
            && o.interp_tasks_head + 16 <= interp_size
            && interp_size < 1 << 24
            && tstate_size < 1 << 20
            && [
                o.tstate_running_loop + 8,
                o.tstate_running_task + 8,
                o.tstate_tasks_head + 16,
            ]
            .iter()
            .all(|&end| end <= tstate_size);
        if !sane {
            return Err(format!("_AsyncioDebug looks inconsistent: {o:?}"));
        }
        Ok(o)
    }
}

/// What reading tasks needs from `_Py_DebugOffsets` beyond the sampler's layout.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectOffsets {
    pub ob_type: u64,
    pub tp_flags: u64,
    pub set_used: u64,
    pub set_table: u64,
    pub set_mask: u64,
    pub long_lv_tag: u64,
    pub long_ob_digit: u64,
    pub gen_iframe: u64,
    pub gen_frame_state: u64,
    pub frame_stackpointer: u64,
    /// `gi_frame_state` of a coroutine whose frame is gone, and of one suspended in an
    /// `await` of another awaitable (3.15 adds a locked variant of the latter).
    pub frame_cleared: i8,
    pub frame_yield_from: [i8; 2],
    /// How far below the frame's stack pointer the awaited object is: 3.15 keeps one
    /// more value above it (the same distance as CPython's unwinder of each version).
    pub awaited_below_sp: u64,
}

impl ObjectOffsets {
    /// The fields of `_Py_DebugOffsets` (read from the start of `_PyRuntime`) by their
    /// word index in the structure of CPython 3.`minor`, checked against the fields the
    /// sampler's layout `o` parsed from the same bytes.
    pub fn parse(raw: &[u8], minor: u8, o: &Offsets) -> Result<ObjectOffsets, AsyncError> {
        // Word indices (the cookie is word 0) in pycore_debug_offsets.h of 3.14 and 3.15.
        struct At {
            frame_owner: u64,
            frame_stackpointer: u64,
            ob_type: u64,
            tp_flags: u64,
            set: u64,
            long: u64,
            gen: u64,
        }
        let at = match minor {
            14 => At {
                frame_owner: 36,
                frame_stackpointer: 37,
                ob_type: 51,
                tp_flags: 55,
                set: 62,
                long: 71,
                gen: 83,
            },
            15 => At {
                frame_owner: 44,
                frame_stackpointer: 45,
                ob_type: 59,
                tp_flags: 63,
                set: 74,
                long: 83,
                gen: 99,
            },
            _ => return Err(AsyncError::Unsupported(3, minor)),
        };
        let bad = |what: &str| AsyncError::DebugOffsets {
            minor,
            what: what.to_string(),
        };
        let w = |i: u64| field_u64(raw, 8 * i).ok_or_else(|| bad("cut short"));
        let objs = ObjectOffsets {
            ob_type: w(at.ob_type)?,
            tp_flags: w(at.tp_flags)?,
            set_used: w(at.set + 1)?,
            set_table: w(at.set + 2)?,
            set_mask: w(at.set + 3)?,
            long_lv_tag: w(at.long + 1)?,
            long_ob_digit: w(at.long + 2)?,
            gen_iframe: w(at.gen + 2)?,
            gen_frame_state: w(at.gen + 3)?,
            frame_stackpointer: w(at.frame_stackpointer)?,
            frame_cleared: if minor >= 15 { 5 } else { 4 },
            frame_yield_from: if minor >= 15 { [2, 3] } else { [-1, -1] },
            awaited_below_sp: if minor >= 15 { 16 } else { 8 },
        };
        // The fields both parsers read must agree, or the indices are not this version's.
        if w(at.frame_owner)? != o.frame.owner || objs.ob_type != o.object.ob_type {
            return Err(bad(
                "the structure is not the one of this version (fields disagree)",
            ));
        }
        let small = |v: u64| v < MAX_OBJECT;
        let sane = [
            objs.tp_flags,
            objs.set_used,
            objs.set_table,
            objs.set_mask,
            objs.long_lv_tag,
            objs.long_ob_digit,
            objs.gen_iframe,
            objs.gen_frame_state,
        ]
        .into_iter()
        .all(small)
            && objs.frame_stackpointer + 8 <= o.frame.size;
        if !sane {
            return Err(bad("asyncio's object fields look inconsistent"));
        }
        Ok(objs)
    }
}

/// One task as read: its name, the tasks awaiting it, and (when asked for) its
/// coroutine chain's frames, innermost first, as (code object, instruction pointer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Task {
    pub name: String,
    pub parents: Vec<u64>,
    pub frames: Vec<(u64, u64)>,
}

/// One element of an async stack, innermost first.
#[derive(Debug, Clone, PartialEq)]
pub enum StackItem {
    /// A coroutine's frame: (code object, instruction pointer).
    Code(u64, u64),
    /// A `<task>` frame with this name.
    Task(String),
}

/// The stack of `leaf` and the tasks above it, innermost first: each task's coroutine
/// frames then its `<task>` frame, then the task awaiting it (the lowest address of
/// several, the name then saying how many), to a task nobody awaits, one missing from
/// `tasks`, or one already seen (a cycle).
pub fn linear_stack(leaf: u64, tasks: &HashMap<u64, Task>, out: &mut Vec<StackItem>) {
    let mut seen = HashSet::new();
    let mut current = Some(leaf);
    while let Some(id) = current {
        if !seen.insert(id) || seen.len() > MAX_TASK_DEPTH {
            break;
        }
        let Some(task) = tasks.get(&id) else {
            break;
        };
        out.extend(task.frames.iter().map(|&(c, i)| StackItem::Code(c, i)));
        let mut name = if task.name.is_empty() {
            format!("Task-{id}")
        } else {
            task.name.clone()
        };
        if task.parents.len() > 1 {
            name = format!("{name} ({} parents)", task.parents.len());
        }
        out.push(StackItem::Task(name));
        current = task.parents.iter().copied().min();
    }
}

/// The tasks nobody among `tasks` awaits (each is the leaf of one stack), by address.
pub fn leaves(tasks: &HashMap<u64, Task>) -> Vec<u64> {
    let parents: HashSet<u64> = tasks
        .values()
        .flat_map(|t| t.parents.iter().copied())
        .collect();
    let mut leaves: Vec<u64> = tasks
        .keys()
        .copied()
        .filter(|t| !parents.contains(t))
        .collect();
    leaves.sort_unstable();
    leaves
}

/// A task's name object as text: a `str`, or (`ints`: 3.12 and later) an `int` shown
/// as `Task-N` (asyncio's counter, kept as a number until asked for); anything else is
/// an error. `objs` says where an object's type, a type's flags and an int's digits are.
pub(crate) fn task_name_text(
    mem: &dyn MemoryReader,
    types: &Types,
    o: &Offsets,
    objs: &ObjectOffsets,
    name: u64,
    ints: bool,
) -> Result<String, ReadError> {
    if name == 0 {
        return Err(ReadError::Invalid("task without a name"));
    }
    let ty = mem.read_u64(name.wrapping_add(objs.ob_type))?;
    let flags = mem.read_u64(ty.wrapping_add(objs.tp_flags))?;
    if ints && flags & PY_TPFLAGS_LONG_SUBCLASS != 0 {
        Ok(format!("Task-{}", read_int(mem, objs, name)?))
    } else if flags & PY_TPFLAGS_UNICODE_SUBCLASS != 0 {
        read_unicode(mem, o, types, name)
    } else {
        Err(ReadError::Invalid("task name is neither a str nor an int"))
    }
}

/// Task names read, by (task, name object): a name is read once per task while it keeps
/// it. Cleared when full.
#[derive(Default)]
pub(crate) struct TaskNames(HashMap<(u64, u64), String>);

impl TaskNames {
    /// The name of `task`, whose name object is `name` ([`task_name_text`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get(
        &mut self,
        mem: &dyn MemoryReader,
        types: &Types,
        o: &Offsets,
        objs: &ObjectOffsets,
        task: u64,
        name: u64,
        ints: bool,
    ) -> Result<String, ReadError> {
        if let Some(n) = self.0.get(&(task, name)) {
            return Ok(n.clone());
        }
        let text = task_name_text(mem, types, o, objs, name, ints)?;
        if self.0.len() >= MAX_NAMES {
            self.0.clear();
        }
        self.0.insert((task, name), text.clone());
        Ok(text)
    }
}

/// A compact `int` (3.12+: `lv_tag` holds the digit count and the sign), up to two
/// 30-bit digits.
fn read_int(mem: &dyn MemoryReader, objs: &ObjectOffsets, addr: u64) -> Result<i64, ReadError> {
    let tag = mem.read_u64(addr.wrapping_add(objs.long_lv_tag))?;
    let ndigits = tag >> 3;
    if ndigits > 2 {
        return Err(ReadError::Invalid("task number too large"));
    }
    let mut digits = [0u8; 8];
    let len = 4 * ndigits as usize;
    mem.read(addr.wrapping_add(objs.long_ob_digit), &mut digits[..len])?;
    let lo = u32::from_ne_bytes([digits[0], digits[1], digits[2], digits[3]]) as i64;
    let hi = u32::from_ne_bytes([digits[4], digits[5], digits[6], digits[7]]) as i64;
    let value = lo | (hi << 30);
    Ok(match tag & 3 {
        2 => -value,
        _ => value,
    })
}

/// A thread's asyncio state, as read at one tick.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadAsync {
    /// The loop running in the thread (0: none).
    pub running_loop: u64,
    /// The task running in it (0: none; the loop is between tasks).
    pub running_task: u64,
    /// Address of the head of the thread's task list.
    pub tasks_head: u64,
    /// The thread's task list is not empty.
    pub has_tasks: bool,
}

/// Reads tasks from one process.
pub struct TaskReader {
    pid: i32,
    objs: ObjectOffsets,
    tag_mask: u64,
    frame_size: u64,
    frame_executable: u64,
    frame_instr: u64,
    asyncio: Option<AsyncioOffsets>,
    next_look_us: u64,
    /// Mapped files (path, address) already looked in and found without the offsets.
    examined: HashSet<(String, u64)>,
    names: TaskNames,
    buf: Vec<u8>,
}

impl TaskReader {
    /// A reader for process `pid`, whose `_Py_DebugOffsets` (the start of its
    /// `_PyRuntime`) is `raw` and whose sampler layout is `o`, CPython 3.`minor`.
    pub fn new(pid: i32, raw: &[u8], minor: u8, o: &Offsets) -> Result<TaskReader, AsyncError> {
        let objs = ObjectOffsets::parse(raw, minor, o)?;
        Ok(TaskReader {
            pid,
            objs,
            tag_mask: o.frame.executable_tag_mask,
            frame_size: o.frame.size,
            frame_executable: o.frame.executable,
            frame_instr: o.frame.instr,
            asyncio: None,
            next_look_us: 0,
            examined: HashSet::new(),
            names: TaskNames::default(),
            buf: Vec::new(),
        })
    }

    /// The asyncio offsets, looked for in the target's mapped files (at most every
    /// [`LOOK_AGAIN_US`] while they are not found: asyncio is imported lazily).
    pub fn asyncio(&mut self, mem: &dyn MemoryReader, now_us: u64) -> Option<&AsyncioOffsets> {
        if self.asyncio.is_none() && now_us >= self.next_look_us {
            self.next_look_us = now_us + LOOK_AGAIN_US;
            self.asyncio = find_asyncio_offsets(self.pid, mem, &mut self.examined);
        }
        self.asyncio.as_ref()
    }

    /// How many bytes of a thread state hold its asyncio fields (once asyncio is
    /// loaded): a thread state image this long answers [`Self::thread`] without a read.
    pub fn tstate_len(&self) -> Option<u64> {
        let a = self.asyncio.as_ref()?;
        [
            a.tstate_running_loop,
            a.tstate_running_task,
            a.tstate_tasks_head,
        ]
        .into_iter()
        .max()
        .map(|off| off.saturating_add(8))
    }

    /// The thread's loop, running task and whether it has tasks, from its state at
    /// `tstate`: from `image` (the thread state's bytes, read under the same pause)
    /// where it holds the fields, else read now. `None` while asyncio is not loaded.
    pub fn thread(
        &mut self,
        mem: &dyn MemoryReader,
        tstate: u64,
        image: Option<&[u8]>,
        now_us: u64,
    ) -> Result<Option<ThreadAsync>, ReadError> {
        let Some(a) = self.asyncio(mem, now_us) else {
            return Ok(None);
        };
        let head = tstate.wrapping_add(a.tstate_tasks_head);
        let in_image = |off| image.and_then(|i| field_u64(i, off));
        let fields = match (
            in_image(a.tstate_running_loop),
            in_image(a.tstate_running_task),
            in_image(a.tstate_tasks_head),
        ) {
            (Some(l), Some(t), Some(n)) => [l, t, n],
            _ => {
                let ranges = [
                    (tstate.wrapping_add(a.tstate_running_loop), 8),
                    (tstate.wrapping_add(a.tstate_running_task), 8),
                    (head, 8),
                ];
                let mut b = [0u8; 24];
                if mem.read_many(&ranges, &mut b) < ranges.len() {
                    return Err(ReadError::Invalid(
                        "thread state's asyncio fields unreadable",
                    ));
                }
                let w = |at| field_u64(&b, at).unwrap_or(0);
                [w(0), w(8), w(16)]
            }
        };
        let [running_loop, running_task, next] = fields;
        Ok(Some(ThreadAsync {
            running_loop,
            running_task: running_task & !self.tag_mask,
            tasks_head: head,
            // An empty list points at itself (a list never initialised, at null).
            has_tasks: next != head && next != 0,
        }))
    }

    /// The interpreter's list of tasks whose thread finished.
    pub fn interpreter_tasks_head(&self, interp: u64) -> Option<u64> {
        let a = self.asyncio.as_ref()?;
        Some(interp.wrapping_add(a.interp_tasks_head))
    }

    /// The tasks of the list whose head is at `head`, appended to `out` (at most
    /// [`MAX_TASKS`]).
    pub fn list_tasks(
        &self,
        mem: &dyn MemoryReader,
        head: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), ReadError> {
        let Some(a) = &self.asyncio else {
            return Ok(());
        };
        let mut node = mem.read_u64(head)?;
        let mut n = 0;
        while node != head {
            if node == 0 {
                return Err(ReadError::Invalid("task list broken (a null link)"));
            }
            n += 1;
            if n > MAX_TASKS {
                return Err(ReadError::Invalid("task list too long (a cycle?)"));
            }
            out.push(node.wrapping_sub(a.task_node));
            node = mem.read_u64(node)?;
        }
        Ok(())
    }

    /// Where the frame of the task's coroutine is (the frame the thread's stack is cut
    /// at, its callers belong to the event loop).
    pub fn task_frame(&self, mem: &dyn MemoryReader, task: u64) -> Result<u64, ReadError> {
        let a = self.asyncio.as_ref().ok_or(ReadError::Null)?;
        let coro = mem.read_u64(task.wrapping_add(a.task_coro))? & !self.tag_mask;
        if coro == 0 {
            return Err(ReadError::Invalid("the running task has no coroutine"));
        }
        Ok(coro.wrapping_add(self.objs.gen_iframe))
    }

    /// Reads the task at `addr`: its name, who awaits it, and with `coro_frames` its
    /// coroutine chain.
    pub fn task(
        &mut self,
        mem: &dyn MemoryReader,
        types: &Types,
        o: &Offsets,
        addr: u64,
        coro_frames: bool,
    ) -> Result<Task, ReadError> {
        let a = self.asyncio.clone().ok_or(ReadError::Null)?;
        let mut obj = std::mem::take(&mut self.buf);
        obj.resize(a.task_size as usize, 0);
        let read = mem.read(addr, &mut obj);
        let fields = read.map(|()| {
            let ptr = |off| field_u64(&obj, off).unwrap_or(0) & !self.tag_mask;
            let byte = |off: u64| obj.get(off as usize).copied().unwrap_or(0);
            (
                ptr(a.task_name),
                ptr(a.task_awaited_by),
                byte(a.task_awaited_by_is_set) != 0,
                byte(a.task_is_task) != 0,
                ptr(a.task_coro),
            )
        });
        self.buf = obj;
        let (name_obj, awaited_by, is_set, is_task, coro) = fields?;
        let name = self
            .names
            .get(mem, types, o, &self.objs, addr, name_obj, true)?;
        let mut parents = Vec::new();
        if awaited_by != 0 {
            if is_set {
                self.set_members(mem, awaited_by, &mut parents)?;
            } else {
                parents.push(awaited_by);
            }
        }
        let mut frames = Vec::new();
        // A future that is not a task has no coroutine (CPython shows it with none).
        if coro_frames && is_task && coro != 0 {
            self.coro_chain(mem, coro, &mut frames)?;
        }
        Ok(Task {
            name,
            parents,
            frames,
        })
    }

    /// The members of the set at `set` (the tasks awaiting a task awaited by several),
    /// deleted entries left out.
    fn set_members(
        &self,
        mem: &dyn MemoryReader,
        set: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), ReadError> {
        let o = &self.objs;
        let used = mem.read_u64(set.wrapping_add(o.set_used))? as i64;
        let mask = mem.read_u64(set.wrapping_add(o.set_mask))? as i64;
        let table = mem.read_u64(set.wrapping_add(o.set_table))?;
        if mask < 0 || mask >= MAX_TASKS as i64 || used < 0 || used > mask + 1 {
            return Err(ReadError::Invalid("awaited_by set looks corrupt"));
        }
        let mut entries = vec![0u8; 16 * (mask as usize + 1)];
        mem.read(table, &mut entries)?;
        for entry in entries.chunks_exact(16) {
            let key = field_u64(entry, 0).unwrap_or(0);
            let hash = field_u64(entry, 8).unwrap_or(0) as i64;
            // A deleted entry keeps a dummy key with hash -1.
            if key != 0 && hash != -1 {
                out.push(key);
            }
        }
        if out.len() as i64 != used {
            return Err(ReadError::Invalid("awaited_by set changed during the read"));
        }
        Ok(())
    }

    /// The frames of the coroutine at `coro` and of the coroutines it awaits in turn,
    /// innermost first.
    fn coro_chain(
        &mut self,
        mem: &dyn MemoryReader,
        mut coro: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ReadError> {
        let o = self.objs.clone();
        let start = out.len();
        let len = o.gen_iframe + self.frame_size;
        if len > MAX_OBJECT {
            return Err(ReadError::Invalid("coroutine larger than expected"));
        }
        let mut img = std::mem::take(&mut self.buf);
        img.resize(len as usize, 0);
        let mut result = Ok(());
        for _ in 0..MAX_CORO_DEPTH {
            if let Err(e) = mem.read(coro, &mut img) {
                result = Err(e);
                break;
            }
            let state = img.get(o.gen_frame_state as usize).map_or(0, |&b| b as i8);
            if state == o.frame_cleared {
                break;
            }
            let ty = field_u64(&img, o.ob_type).unwrap_or(0);
            let frame = &img[o.gen_iframe as usize..];
            let code = field_u64(frame, self.frame_executable).unwrap_or(0) & !self.tag_mask;
            let instr = field_u64(frame, self.frame_instr).unwrap_or(0);
            if code == 0 {
                break;
            }
            out.push((code, instr));
            if !o.frame_yield_from.contains(&state) {
                break;
            }
            // Suspended in `await x`: x is near the top of the value stack.
            let sp = field_u64(frame, o.frame_stackpointer).unwrap_or(0) & !self.tag_mask;
            if sp < o.awaited_below_sp {
                break;
            }
            let awaited = match mem.read_u64(sp - o.awaited_below_sp) {
                Ok(p) => p & !self.tag_mask,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            // Only a coroutine of the same type continues the chain (an iterator, a
            // future or a generator-based awaitable ends it, as in CPython).
            if awaited == 0 || mem.read_u64(awaited.wrapping_add(o.ob_type)) != Ok(ty) {
                break;
            }
            coro = awaited;
        }
        self.buf = img;
        result?;
        out[start..].reverse();
        Ok(())
    }
}

/// `_Py_AsyncioModuleDebugOffsets` of process `pid`, from the `.AsyncioDebug` section
/// of the first mapped file that has one (an interpreter or an `_asyncio` extension).
/// The files in `examined` were looked in before; those without the section are added.
fn find_asyncio_offsets(
    pid: i32,
    mem: &dyn MemoryReader,
    examined: &mut HashSet<(String, u64)>,
) -> Option<AsyncioOffsets> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    for file in mapped_files(&maps) {
        let name = file.path.rsplit('/').next().unwrap_or(&file.path);
        if !(name.contains("python") || name.starts_with("_asyncio") || file.path == exe) {
            continue;
        }
        let key = (file.path.clone(), file.lowest);
        if examined.contains(&key) {
            continue;
        }
        let Ok(Some(elf)) = open_mapped(pid, &file) else {
            continue;
        };
        let Some(at) = elf.runtime_section_address(".AsyncioDebug", file.lowest) else {
            if examined.len() < MAX_NAMES {
                examined.insert(key);
            }
            continue;
        };
        let mut raw = [0u8; ASYNCIO_OFFSETS_SIZE];
        if mem.read(at, &mut raw).is_ok() {
            if let Ok(o) = AsyncioOffsets::parse(&raw) {
                return Some(o);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;

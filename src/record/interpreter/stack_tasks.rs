//! The running asyncio task, found from the thread's own stack: `--async-aware` on
//! CPython 3.11, 3.12 and 3.13, which publish no asyncio debug offsets (3.14 and 3.15
//! are read through theirs, `asyncio`).
//!
//! A task runs one step at a time, and a step has one shape on these versions: the event
//! loop's `Handle._run` (asyncio/events.py) calls the handle's callback, the task's
//! step, which sends into the task's coroutine from C. So while a task runs, the root
//! frame of its coroutine, entered from C, lies just inside a Python frame whose first
//! local (`self`) is a `Handle`, and from that Handle:
//!
//! - its `_callback` is the step: a `TaskStepMethWrapper` (the task in `sw_task`), or the
//!   builtin method `task_wakeup` of the task (`m_self`) when a future it awaited is done;
//! - the task (`_asyncio.Task`, or a class derived from it) holds its coroutine in
//!   `task_coro` and its name in the next field, `task_name` (`TaskObj` of 3.11-3.13's
//!   `_asynciomodule.c`). The coroutine must be the object the root frame is embedded in
//!   (the frame's address less `gi_iframe`): the task found is the one whose coroutine
//!   runs, checked by identity.
//!
//! Each hop is checked by its type's name, and the last by identity: a stack that is not
//! a task's step gives no task, never another task. The offsets are the structures'
//! own (measured on 3.11.7, 3.12.1, 3.13.0 and 3.13.18); the tests record named tasks on
//! each version.
//!
//! These versions do not show which tasks await the running one: a task keeps no link to
//! them before 3.14's `awaited_by` (a waiter is one of the callbacks a task calls when it
//! is done, and those of `gather` and `TaskGroup` are closures of their own making), so
//! the `<task>` frame is the stack's root. Nor the waiting tasks (`--async-mode all`):
//! they are in no stack, and their list is the `_asyncio` module's private state.

use std::collections::HashMap;

use crate::record::interpreter::asyncio::{ObjectOffsets, TaskNames};
use crate::record::interpreter::layout::{field_u64, Offsets};
use crate::record::interpreter::resolve::Types;
use crate::record::process::memory::{MemoryReader, ReadError};

/// `_PyInterpreterFrame.localsplus` on 3.11-3.13 (after the fixed fields).
pub const LOCALSPLUS: u64 = 72;
/// `Handle._callback`: `Handle`'s `__slots__` are laid out in sorted order after the
/// object header (`_args` at 16, `_callback` at 24).
const HANDLE_CALLBACK: u64 = 24;
/// `TaskStepMethWrapper.sw_task`.
const STEP_TASK: u64 = 16;
/// `PyCFunctionObject.m_ml` and `m_self`.
const CFUNCTION_DEF: u64 = 16;
const CFUNCTION_SELF: u64 = 24;
/// `PyTypeObject.tp_name`, `tp_basicsize`, `tp_flags` and `tp_base` (64-bit).
const TP_NAME: u64 = 24;
const TP_BASICSIZE: u64 = 32;
const TP_FLAGS: u64 = 168;
const TP_BASE: u64 = 256;
/// `PyLongObject`'s `lv_tag` and first digit (3.12, 3.13; 3.11's task names are strs).
const LONG_LV_TAG: u64 = 16;
const LONG_DIGIT: u64 = 24;
/// Largest task object read (a `TaskObj` is 144-176 bytes; a subclass adds a few).
const MAX_TASK_OBJECT: u64 = 1024;
/// Base classes followed from a task's type to `_asyncio.Task`.
const MAX_BASES: usize = 16;
/// Longest type name compared (`_asyncio.TaskStepMethWrapper` and its NUL: 29 bytes).
const TYPE_NAME: usize = 32;
/// Types and method definitions remembered; cleared when full.
const MAX_KNOWN: usize = 256;

/// What a type is, for the hops from a handle to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Handle,
    StepWrapper,
    BuiltinMethod,
    Task,
    Other,
}

/// Where a task's step may run in a stack: the outermost generator frame entered from
/// C, and the first local of the Python frame that called into C for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepFrames {
    /// The generator's frame: its index among the walked frames (innermost first) and
    /// its address.
    pub index: usize,
    pub frame: u64,
    /// The calling frame's address, and its first local as the walk read it (0: not in
    /// the bytes read).
    pub caller: u64,
    pub caller_self: u64,
}

/// Finds the running task of a stack, for one process.
pub struct StackTasks {
    /// `PyGenObject.gi_iframe` of the version.
    gi_iframe: u64,
    /// Task names may be ints (3.12+).
    int_names: bool,
    objs: ObjectOffsets,
    /// Kinds of the types seen, by address (only those of the hops: a type freed and
    /// another made at its address is checked again down the hops, and by identity).
    kinds: HashMap<u64, Kind>,
    /// Method definitions (`PyMethodDef`, static) by address: whether it is `task_wakeup`.
    wakeups: HashMap<u64, bool>,
    names: TaskNames,
    buf: Vec<u8>,
}

impl StackTasks {
    /// The finder for CPython 3.`minor` (11-13; `None` for the others), whose sampler
    /// layout is `o`.
    pub fn new(minor: u8, o: &Offsets) -> Option<StackTasks> {
        let gi_iframe = match minor {
            11 => 80,
            12 | 13 => 72,
            _ => return None,
        };
        let objs = ObjectOffsets {
            ob_type: o.object.ob_type,
            tp_flags: TP_FLAGS,
            long_lv_tag: LONG_LV_TAG,
            long_ob_digit: LONG_DIGIT,
            ..ObjectOffsets::default()
        };
        Some(StackTasks {
            gi_iframe,
            int_names: minor >= 12,
            objs,
            kinds: HashMap::new(),
            wakeups: HashMap::new(),
            names: TaskNames::default(),
            buf: Vec::new(),
        })
    }

    /// The name of the task whose step runs at `at`; `None` when the caller is not a
    /// `Handle` running a task's step. A step whose generator is not the task's coroutine
    /// is an error (a stack read across a switch of tasks): never another task's name.
    pub fn running_task(
        &mut self,
        mem: &dyn MemoryReader,
        types: &Types,
        o: &Offsets,
        at: &StepFrames,
    ) -> Result<Option<String>, ReadError> {
        let ob_type = self.objs.ob_type;
        let word = |b: &[u8], off: u64| field_u64(b, off).unwrap_or(0);
        // The caller's first slot is any frame's: an argument, a local not set yet, or a
        // value left on its stack, maybe freed. Unreadable there means no Handle, no task
        // (a Handle's own fields, below, must read).
        let mut head = [0u8; 32];
        let handle = match at.caller_self {
            0 => mem
                .read_u64(at.caller.wrapping_add(LOCALSPLUS))
                .unwrap_or(0),
            h => h,
        };
        if handle == 0
            || mem.read(handle, &mut head).is_err()
            || self.kind(mem, word(&head, ob_type)).ok() != Some(Kind::Handle)
        {
            return Ok(None);
        }
        let callback = word(&head, HANDLE_CALLBACK);
        if callback == 0 {
            return Ok(None);
        }
        let mut step = [0u8; 32];
        mem.read(callback, &mut step)?;
        let task = match self.kind(mem, word(&step, ob_type))? {
            Kind::StepWrapper => word(&step, STEP_TASK),
            Kind::BuiltinMethod if self.is_task_wakeup(mem, word(&step, CFUNCTION_DEF))? => {
                word(&step, CFUNCTION_SELF)
            }
            _ => return Ok(None),
        };
        if task == 0 {
            return Ok(None);
        }
        let task_type = mem.read_u64(task.wrapping_add(ob_type))?;
        if self.kind(mem, task_type)? != Kind::Task {
            return Err(ReadError::Invalid("a task's step whose task is not a Task"));
        }
        let size = mem
            .read_u64(task_type.wrapping_add(TP_BASICSIZE))?
            .min(MAX_TASK_OBJECT);
        let mut obj = std::mem::take(&mut self.buf);
        obj.resize(size as usize, 0);
        let read = mem.read(task, &mut obj);
        let coro = at.frame.wrapping_sub(self.gi_iframe);
        // `task_coro`, then `task_name`: the first field after the object header that
        // holds the coroutine (no other field of a task points to it), so the offsets of
        // `TaskObj`, which move between releases, are not needed.
        let fields = read.map(|()| {
            (16..size.saturating_sub(8))
                .step_by(8)
                .find(|&off| word(&obj, off) == coro)
                .map(|off| word(&obj, off + 8))
        });
        self.buf = obj;
        let Some(name_obj) = fields? else {
            return Err(ReadError::Invalid(
                "a task's step runs a coroutine that is not the task's",
            ));
        };
        let ints = self.int_names;
        self.names
            .get(mem, types, o, &self.objs, task, name_obj, ints)
            .map(Some)
    }

    /// What the type at `ty` is. Only the kinds of the hops are remembered: any other
    /// type is looked at again each time (a type made later at its address may be one).
    fn kind(&mut self, mem: &dyn MemoryReader, ty: u64) -> Result<Kind, ReadError> {
        if let Some(&k) = self.kinds.get(&ty) {
            return Ok(k);
        }
        if ty == 0 {
            return Ok(Kind::Other);
        }
        let mut kind = match type_name(mem, ty)?.as_slice() {
            b"Handle" => Kind::Handle,
            b"TaskStepMethWrapper" | b"_asyncio.TaskStepMethWrapper" => Kind::StepWrapper,
            b"builtin_function_or_method" => Kind::BuiltinMethod,
            b"_asyncio.Task" => Kind::Task,
            _ => Kind::Other,
        };
        if kind == Kind::Other {
            // A class derived from asyncio's Task is a Task with the same fields first.
            let mut base = mem.read_u64(ty.wrapping_add(TP_BASE))?;
            for _ in 0..MAX_BASES {
                if base == 0 {
                    break;
                }
                if type_name(mem, base)? == b"_asyncio.Task" {
                    kind = Kind::Task;
                    break;
                }
                base = mem.read_u64(base.wrapping_add(TP_BASE))?;
            }
        }
        if kind != Kind::Other {
            if self.kinds.len() >= MAX_KNOWN {
                self.kinds.clear();
            }
            self.kinds.insert(ty, kind);
        }
        Ok(kind)
    }

    /// Whether the method definition at `def` is `_asyncio`'s `task_wakeup`.
    fn is_task_wakeup(&mut self, mem: &dyn MemoryReader, def: u64) -> Result<bool, ReadError> {
        if let Some(&yes) = self.wakeups.get(&def) {
            return Ok(yes);
        }
        let name = mem.read_u64(def)?;
        let yes = c_string(mem, name)? == b"task_wakeup";
        if self.wakeups.len() >= MAX_KNOWN {
            self.wakeups.clear();
        }
        self.wakeups.insert(def, yes);
        Ok(yes)
    }
}

/// The type's `tp_name`, up to [`TYPE_NAME`] bytes.
fn type_name(mem: &dyn MemoryReader, ty: u64) -> Result<Vec<u8>, ReadError> {
    c_string(mem, mem.read_u64(ty.wrapping_add(TP_NAME))?)
}

/// The NUL-terminated string at `addr`, up to [`TYPE_NAME`] bytes (longer ones are cut
/// and match no name compared). Read up to the end of its page first: a short string
/// may end just before an unmapped page.
fn c_string(mem: &dyn MemoryReader, addr: u64) -> Result<Vec<u8>, ReadError> {
    const PAGE: u64 = 4096;
    let mut out = Vec::with_capacity(TYPE_NAME);
    let mut at = addr;
    while out.len() < TYPE_NAME {
        let room = (PAGE - at % PAGE).min((TYPE_NAME - out.len()) as u64) as usize;
        let mut chunk = [0u8; TYPE_NAME];
        mem.read(at, &mut chunk[..room])?;
        if let Some(end) = chunk[..room].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..room]);
        at += room as u64;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::interpreter::layout::generated;
    use crate::record::process::memory::FakeMemory;

    const STR: u64 = 0x1000;
    const INT: u64 = 0x1400;
    const HANDLE: u64 = 0x1800;
    const WRAPPER: u64 = 0x1c00;
    const BUILTIN: u64 = 0x2000;
    const TASK: u64 = 0x2400;
    const MY_TASK: u64 = 0x2800;
    const OTHER: u64 = 0x2c00;
    const NAMES: u64 = 0x8000;
    const WAKEUP_DEF: u64 = 0x9000;

    /// A process image: the types, a handle at 0x10000 whose step is `step`, the task at
    /// 0x11000 (type `task_type`) with its coroutine at 0x12000 and the name at 0x13000.
    struct Image {
        mem: FakeMemory,
        o: Offsets,
        types: Types,
    }

    const HANDLE_OBJ: u64 = 0x10000;
    const STEP_OBJ: u64 = 0x10800;
    const TASK_OBJ: u64 = 0x11000;
    const CORO: u64 = 0x12000;
    const NAME_OBJ: u64 = 0x13000;
    const TASK_CORO: u64 = 120;

    fn image(minor: u8) -> Image {
        let o = generated(3, 12).unwrap().offsets.clone();
        let mut mem = FakeMemory::default();
        mem.map(0x1000, vec![0; 0x7000]);
        mem.map(NAMES, vec![0; 0x1000]);
        mem.map(WAKEUP_DEF, vec![0; 0x100]);
        mem.map(0x10000, vec![0; 0x4000]);
        let mut name_at = NAMES;
        let mut ty = |mem: &mut FakeMemory, at: u64, name: &str, base: u64, size: u64| {
            mem.put(name_at, name.as_bytes());
            mem.put_u64(at + TP_NAME, name_at);
            mem.put_u64(at + TP_BASICSIZE, size);
            mem.put_u64(at + TP_BASE, base);
            name_at += 64;
        };
        ty(&mut mem, STR, "str", 0, 0);
        mem.put_u64(STR + TP_FLAGS, 1 << 28);
        ty(&mut mem, INT, "int", 0, 0);
        mem.put_u64(INT + TP_FLAGS, 1 << 24);
        ty(&mut mem, HANDLE, "Handle", 0, 72);
        let wrapper = if minor == 11 {
            "TaskStepMethWrapper"
        } else {
            "_asyncio.TaskStepMethWrapper"
        };
        ty(&mut mem, WRAPPER, wrapper, 0, 32);
        ty(&mut mem, BUILTIN, "builtin_function_or_method", 0, 56);
        ty(&mut mem, TASK, "_asyncio.Task", 0, 144);
        ty(&mut mem, MY_TASK, "MyTask", TASK, 160);
        ty(&mut mem, OTHER, "Frobnicator", 0, 64);
        mem.put(WAKEUP_DEF + 0x80, b"task_wakeup\0");
        mem.put_u64(WAKEUP_DEF, WAKEUP_DEF + 0x80);
        // The handle, its step (a TaskStepMethWrapper), the task and its coroutine.
        mem.put_u64(HANDLE_OBJ + 8, HANDLE);
        mem.put_u64(HANDLE_OBJ + HANDLE_CALLBACK, STEP_OBJ);
        mem.put_u64(STEP_OBJ + 8, WRAPPER);
        mem.put_u64(STEP_OBJ + STEP_TASK, TASK_OBJ);
        mem.put_u64(TASK_OBJ + 8, TASK);
        mem.put_u64(TASK_OBJ + TASK_CORO, CORO);
        mem.put_u64(TASK_OBJ + TASK_CORO + 8, NAME_OBJ);
        // The name: the int 7 (3.12, 3.13: `Task-7`).
        mem.put_u64(NAME_OBJ + 8, INT);
        mem.put_u64(NAME_OBJ + LONG_LV_TAG, 1 << 3);
        mem.put(NAME_OBJ + LONG_DIGIT, &7u32.to_ne_bytes());
        let types = Types {
            code: 0,
            unicode: STR,
            bytes: 0,
            none: 0,
        };
        Image { mem, o, types }
    }

    fn step(minor: u8) -> StepFrames {
        let gi_iframe = if minor == 11 { 80 } else { 72 };
        StepFrames {
            index: 3,
            frame: CORO + gi_iframe,
            caller: 0x7000_0000,
            caller_self: HANDLE_OBJ,
        }
    }

    fn find(img: &Image, minor: u8, at: &StepFrames) -> Result<Option<String>, ReadError> {
        let mut finder = StackTasks::new(minor, &img.o).unwrap();
        finder.running_task(&img.mem, &img.types, &img.o, at)
    }

    #[test]
    fn a_step_wrapper_leads_to_the_task_whose_coroutine_runs() {
        let img = image(12);
        assert_eq!(find(&img, 12, &step(12)), Ok(Some("Task-7".into())));
        // The same through a class derived from asyncio's Task, with a longer object.
        let mut img = image(13);
        img.mem.put_u64(TASK_OBJ + 8, MY_TASK);
        assert_eq!(find(&img, 13, &step(13)), Ok(Some("Task-7".into())));
    }

    #[test]
    fn a_wakeup_callback_leads_to_the_task_too() {
        let mut img = image(12);
        img.mem.put_u64(STEP_OBJ + 8, BUILTIN);
        img.mem.put_u64(STEP_OBJ + CFUNCTION_DEF, WAKEUP_DEF);
        img.mem.put_u64(STEP_OBJ + CFUNCTION_SELF, TASK_OBJ);
        assert_eq!(find(&img, 12, &step(12)), Ok(Some("Task-7".into())));
        // Another builtin method (not `task_wakeup`) is not a task's step.
        img.mem.put(WAKEUP_DEF + 0x80, b"call_soon\0\0\0");
        assert_eq!(find(&img, 12, &step(12)), Ok(None));
    }

    #[test]
    fn a_str_name_is_read_and_3_11_reads_no_int() {
        let mut img = image(11);
        // 3.11: an int name is not a name.
        assert!(find(&img, 11, &step(11)).is_err());
        let (o, s) = (&img.o, NAME_OBJ);
        img.mem.put_u64(s + 8, STR);
        img.mem.put_u64(s + o.unicode.length, 5);
        img.mem.put(
            s + o.unicode.state,
            &((1u32 << 2) | (1 << 5) | (1 << 6)).to_ne_bytes(),
        );
        let data = s + o.unicode.ascii_size;
        img.mem.put(data, b"alpha");
        assert_eq!(find(&img, 11, &step(11)), Ok(Some("alpha".into())));
    }

    #[test]
    fn anything_else_is_no_task_or_an_error_never_another_task() {
        // The caller's first local is not a Handle.
        let mut img = image(12);
        img.mem.put_u64(HANDLE_OBJ + 8, OTHER);
        assert_eq!(find(&img, 12, &step(12)), Ok(None));
        // A Handle whose callback is not a task's step.
        let mut img = image(12);
        img.mem.put_u64(STEP_OBJ + 8, OTHER);
        assert_eq!(find(&img, 12, &step(12)), Ok(None));
        // A step whose task is not a Task.
        let mut img = image(12);
        img.mem.put_u64(TASK_OBJ + 8, OTHER);
        assert!(find(&img, 12, &step(12)).is_err());
        // The running generator is not the task's coroutine (read across a switch).
        let img = image(12);
        let mut other = step(12);
        other.frame += 0x100;
        assert!(find(&img, 12, &other).is_err());
        // 3.11's coroutines embed their frame 8 bytes further: 3.12's offset misses.
        assert!(find(&img, 11, &step(12)).is_err());
        // No first local in the bytes the walk read: read from the caller's frame.
        let mut img = image(12);
        let mut at = step(12);
        at.caller_self = 0;
        at.caller = 0x14000 - LOCALSPLUS;
        img.mem.map(0x14000, HANDLE_OBJ.to_ne_bytes().to_vec());
        assert_eq!(find(&img, 12, &at), Ok(Some("Task-7".into())));
        // A first local that cannot be read is no Handle (any frame's first slot may
        // hold a freed object); past the Handle, unreadable memory is an error.
        let img = image(12);
        let mut at = step(12);
        at.caller_self = 0xdead_0000;
        assert_eq!(find(&img, 12, &at), Ok(None));
        let mut img = image(12);
        img.mem.put_u64(HANDLE_OBJ + HANDLE_CALLBACK, 0xdead_0000);
        assert!(find(&img, 12, &step(12)).is_err());
    }

    #[test]
    fn only_3_11_to_3_13_find_tasks_from_the_stack() {
        let o = generated(3, 12).unwrap().offsets.clone();
        for minor in [9, 10, 14, 15] {
            assert!(StackTasks::new(minor, &o).is_none(), "3.{minor}");
        }
    }
}

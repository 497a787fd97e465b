//! The offsets the sampler reads, grouped by the CPython object they lie in, and the
//! per-version records `scripts/gen-layouts` writes with them (`generated.rs`).
//!
//! One [`Offsets`] serves every version: the generated tables of 3.9-3.12 hold it whole,
//! the `_Py_DebugOffsets` reader of 3.13+ fills it in; nothing is copied field by field.
//! This file imports nothing of the recorder (the bottom of the graph in `mod.rs`).

/// Structure offsets and sizes the sampler needs, whatever the version, per CPython object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offsets {
    pub runtime: RuntimeOffsets,
    pub interp: InterpreterOffsets,
    pub gil: GilOffsets,
    pub thread: ThreadOffsets,
    pub frame: FrameOffsets,
    pub code: CodeOffsets,
    pub object: PyObjectOffsets,
    pub bytes: BytesOffsets,
    pub unicode: UnicodeOffsets,
}

/// `_PyRuntimeState` (`_PyRuntime`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeOffsets {
    pub interpreters_head: u64,
    /// `main_thread`, the main thread's `pthread_t` (3.9-3.12: checked when attaching,
    /// and how 3.9 and 3.10 find where glibc keeps thread ids); not in the debug offsets.
    pub main_thread: Option<u64>,
}

/// `PyInterpreterState`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterpreterOffsets {
    pub next: u64,
    pub threads_head: u64,
    pub id: u64,
    /// `gc.collecting`, when known.
    pub gc_collecting: Option<u64>,
    /// `gc.frame` (3.15): the frame that triggered a collection.
    pub gc_frame: Option<u64>,
}

/// The GIL (`_gil_runtime_state`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GilOffsets {
    /// Address offsets of `locked` and `last_holder`: from `_PyRuntime` (up to 3.11)
    /// or from the interpreter state (3.12+), as `in_runtime` says.
    pub locked: Option<u64>,
    pub holder: Option<u64>,
    pub in_runtime: bool,
}

/// `PyThreadState` (and the `_PyErr_StackItem` and glibc `struct pthread` it points at).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadOffsets {
    pub size: u64,
    pub next: u64,
    pub interp: u64,
    /// 3.11, 3.12: offset of `cframe` (a pointer to a struct holding `current_frame`);
    /// 3.9, 3.10: `frame`; 3.13+: offset of `current_frame` itself.
    pub frame: u64,
    pub cframe_current_frame: Option<u64>,
    /// 3.15: offset of `base_frame`, the pointer to the frame where every complete frame
    /// chain ends.
    pub base_frame: Option<u64>,
    pub thread_id: u64,
    /// 3.9 and 3.10 have none: `thread_id`'s offset, replaced by the read through
    /// `pthread_tid`.
    pub native_thread_id: u64,
    pub holds_gil: Option<u64>,
    pub gil_requested: Option<u64>,
    /// The exception being raised (`curexc_type` up to 3.11, `current_exception` later).
    pub current_exception: Option<u64>,
    /// The exception being handled: `exc_info` is a pointer before 3.15
    /// (`exc_info_is_pointer`), the inline `exc_state` item from 3.15's debug offsets.
    pub exc_info: Option<u64>,
    pub exc_info_is_pointer: bool,
    /// `_PyErr_StackItem.exc_value`.
    pub stackitem_exc_value: u64,
    /// 3.9 and 3.10 keep no native thread id in the thread state, only `thread_id`
    /// (glibc's `pthread_t`, the address of its `struct pthread`): the offset of the
    /// kernel thread id in that struct, found when attaching.
    pub pthread_tid: Option<u64>,
}

/// `_PyInterpreterFrame` (3.11+) or `PyFrameObject` (3.9, 3.10).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameOffsets {
    pub size: u64,
    pub previous: u64,
    /// `f_executable` (3.13+) or `f_code`.
    pub executable: u64,
    /// 3.11, 3.12: `prev_instr`; 3.13+: `instr_ptr`; 3.9, 3.10: `f_lasti`.
    pub instr: u64,
    /// 3.11's and 3.13's `stacktop`: -1 while the eval loop runs the frame, set when it
    /// calls a Python function. A frame below another Python frame of the chain that
    /// reads -1 is running: the frames above it are gone.
    pub stacktop: Option<u64>,
    /// 3.11's `is_entry`: the first frame of an eval loop, called from C (3.13+ put an
    /// entry frame of their own below it).
    pub is_entry: Option<u64>,
    /// The raw opcodes of RETURN_VALUE and RETURN_CONST (0xFFFF: none), from the
    /// headers: a frame executing one has unlinked its callees already, so frames above
    /// it in a chain are gone. The instrumented forms are left out on purpose: they call
    /// monitoring callbacks before the frame returns.
    pub return_opcodes: Option<[u16; 2]>,
    pub owner: u64,
    /// Low bits to clear from `f_executable` (a tagged `_PyStackRef` from 3.14).
    pub executable_tag_mask: u64,
    /// 3.11, 3.12: `prev_instr` (the unit before the next instruction); 3.13+: `instr_ptr`.
    pub instr_is_prev: bool,
    /// 3.9 and 3.10: frames are `PyFrameObject`s on the heap, linked by `f_back`, with
    /// no owner byte, and `instr` is `f_lasti`, a 32-bit instruction offset.
    pub is_object: bool,
}

/// `PyCodeObject`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeOffsets {
    /// Bytes of the code object read per frame (every field below lies inside).
    pub header_size: u64,
    pub filename: u64,
    /// `co_qualname` (3.11+) or `co_name` (what tracebacks showed before).
    pub qualname: u64,
    pub linetable: u64,
    pub firstlineno: u64,
    pub firsttraceable: Option<u64>,
    /// `co_code_adaptive` (0 before 3.11).
    pub adaptive: u64,
    /// 3.9 and 3.10: `co_code`, the bytes object whose size gives the code units (the
    /// code object is not a variable-size object there).
    pub code: Option<u64>,
    /// The format of `co_linetable` (or 3.9's `co_lnotab`).
    pub line_table: LineTableFormat,
}

/// `PyObject` and `PyVarObject`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PyObjectOffsets {
    pub ob_type: u64,
    pub ob_size: u64,
}

/// `PyBytesObject`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BytesOffsets {
    pub ob_sval: u64,
}

/// `PyASCIIObject` and `PyCompactUnicodeObject`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnicodeOffsets {
    pub state: u64,
    pub length: u64,
    /// `sizeof(PyASCIIObject)`: where an ASCII string's characters start.
    pub ascii_size: u64,
    /// `sizeof(PyCompactUnicodeObject)`: where a compact string's characters start.
    pub compact_size: u64,
}

/// How a code object maps instructions to lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LineTableFormat {
    /// 3.11+: `co_linetable`, the location table (lines and columns).
    #[default]
    Locations,
    /// 3.10: `co_linetable` as (byte delta, signed line delta) pairs.
    Linetable310,
    /// 3.9 and earlier: `co_lnotab` as (byte delta, signed line delta) pairs.
    Lnotab,
}

/// How to map opcodes: the de-specialisation table and, for 3.11, inline cache sizes.
#[derive(Debug, Clone)]
pub struct OpcodeTables {
    pub deopt: [u8; 256],
    /// `Some` when an instruction pointer may point into an instruction's caches (3.11).
    pub caches: Option<[u8; 256]>,
}

/// One CPython 3.9-3.12 version's layout, as `scripts/gen-layouts.c` prints it.
#[derive(Debug, Clone)]
pub struct GeneratedLayout {
    pub version: (u8, u8),
    /// The version whose headers the table was measured in.
    pub headers: &'static str,
    pub offsets: Offsets,
    /// 3.11, 3.12: the de-specialisation and inline cache tables.
    pub opcodes: Option<OpcodeTables>,
}

/// What CPython 3.13+'s `_Py_DebugOffsets` do not publish, as `scripts/gen-layouts.c`
/// prints it from that version's headers.
#[derive(Debug, Clone, Copy)]
pub struct GeneratedExtras {
    pub version: (u8, u8),
    /// The version whose headers the table was measured in.
    pub headers: &'static str,
    /// `tstate->current_exception`: the exception being raised.
    pub tstate_current_exception: u64,
    /// `tstate->exc_info`: a pointer to the `_PyErr_StackItem` being handled.
    pub tstate_exc_info: u64,
    pub err_stackitem_exc_value: u64,
    /// 3.13's `_PyInterpreterFrame.stacktop`.
    pub frame_stacktop: Option<u64>,
    pub op_return_value: Option<u16>,
    pub op_return_const: Option<u16>,
    /// `_PyOpcode_Deopt` (specialised opcode -> base opcode), which not every
    /// interpreter exports.
    pub deopt: Option<[u8; 256]>,
}

/// The 8-byte field at `off` of an image, if it lies inside.
pub(crate) fn field_u64(buf: &[u8], off: u64) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    buf.get(off..off.checked_add(8)?)
        .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

/// The 4-byte signed field at `off` of an image, if it lies inside.
pub(crate) fn field_i32(buf: &[u8], off: u64) -> Option<i32> {
    let off = usize::try_from(off).ok()?;
    buf.get(off..off.checked_add(4)?)
        .map(|b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])))
}

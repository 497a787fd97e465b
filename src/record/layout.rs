//! Interpreter layouts: where CPython keeps thread states, frames and code objects.
//!
//! One implementation per version family, behind [`InterpreterLayout`]:
//! - `StaticLayout` (`static_layout.rs`): CPython 3.9 to 3.12, whose offsets are data in
//!   the repository, generated from each version's own headers;
//! - [`DebugOffsetsLayout`]: CPython 3.13, 3.14 and 3.15, which publish their offsets in
//!   `_Py_DebugOffsets` at the start of `_PyRuntime`; read from the running interpreter,
//!   with the few fields it lacks from the generated tables.
//!
//! Both produce the same [`Offsets`]; the walker in `sampler/unwind.rs` only sees those and the
//! few behaviours that differ (how to find the current frame, frame ownership, tags).

use super::memory::{MemoryReader, ReadError};
use super::static_layout::GeneratedExtras;

/// Structure offsets and sizes the sampler needs, whatever the version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offsets {
    pub runtime_interpreters_head: u64,
    pub interp_next: u64,
    pub interp_threads_head: u64,
    pub interp_id: u64,
    /// `PyInterpreterState.gc.collecting`, when known.
    pub interp_gc_collecting: Option<u64>,
    /// `PyInterpreterState.gc.frame` (3.15): the frame that triggered a collection.
    pub interp_gc_frame: Option<u64>,
    /// Address offsets of the GIL's `locked` and `last_holder`: from `_PyRuntime` (3.11)
    /// or from the interpreter state (3.12+).
    pub gil_locked: Option<u64>,
    pub gil_holder: Option<u64>,
    pub gil_in_runtime: bool,

    pub tstate_size: u64,
    pub tstate_next: u64,
    pub tstate_interp: u64,
    /// 3.11: offset of `cframe` (a pointer to a struct holding `current_frame`);
    /// 3.13+: offset of `current_frame` itself.
    pub tstate_frame: u64,
    pub cframe_current_frame: Option<u64>,
    /// 3.15: offset of `tstate->base_frame`, the pointer to the frame where every
    /// complete frame chain ends.
    pub tstate_base_frame: Option<u64>,
    pub tstate_thread_id: u64,
    pub tstate_native_thread_id: u64,
    pub tstate_holds_gil: Option<u64>,
    pub tstate_gil_requested: Option<u64>,
    /// The exception being raised (`curexc_type` in 3.11, `current_exception` later).
    pub tstate_current_exception: Option<u64>,
    /// The exception being handled: `exc_info` is a pointer in 3.11
    /// (`exc_info_is_pointer`), the inline `exc_state` item from the debug offsets.
    pub tstate_exc_info: Option<u64>,
    pub exc_info_is_pointer: bool,
    pub err_stackitem_exc_value: u64,

    pub frame_size: u64,
    pub frame_previous: u64,
    pub frame_executable: u64,
    pub frame_instr: u64,
    /// 3.11's and 3.13's `_PyInterpreterFrame.stacktop`: -1 while the eval loop runs the frame,
    /// set when it calls a Python function. A frame below another Python frame of the
    /// chain that reads -1 is running: the frames above it are gone.
    pub frame_stacktop: Option<u64>,
    /// 3.11's `_PyInterpreterFrame.is_entry`: the first frame of an eval loop, called
    /// from C (3.13+ put an entry frame of their own below it).
    pub frame_is_entry: Option<u64>,
    /// The raw opcodes of RETURN_VALUE and RETURN_CONST (0xFFFF: none), from the
    /// headers: a frame executing one has unlinked its callees already, so frames above
    /// it in a chain are gone. The instrumented forms are left out on purpose: they call
    /// monitoring callbacks before the frame returns.
    pub return_opcodes: Option<[u16; 2]>,
    pub frame_owner: u64,
    /// Low bits to clear from `f_executable` (a tagged `_PyStackRef` from 3.14).
    pub executable_tag_mask: u64,
    /// 3.11: `prev_instr` (the unit before the next instruction); 3.13+: `instr_ptr`.
    pub instr_is_prev: bool,
    /// 3.9 and 3.10: frames are `PyFrameObject`s on the heap, linked by `f_back`, with
    /// no owner byte, and `frame_instr` is `f_lasti`, a 32-bit instruction offset.
    pub frame_object: bool,
    /// The format of `co_linetable` (or 3.9's `co_lnotab`).
    pub line_table: LineTableFormat,
    /// 3.9 and 3.10: `co_code`, the bytes object whose size gives the code units (the
    /// code object is not a variable-size object there).
    pub code_code: Option<u64>,
    /// 3.9 and 3.10 keep no native thread id in the thread state, only `thread_id`
    /// (glibc's `pthread_t`, the address of its `struct pthread`): the offset of the
    /// kernel thread id in that struct, found when attaching.
    pub pthread_tid: Option<u64>,

    /// Bytes of the code object read per frame (every field below lies inside).
    pub code_header_size: u64,
    pub code_filename: u64,
    pub code_qualname: u64,
    pub code_linetable: u64,
    pub code_firstlineno: u64,
    pub code_firsttraceable: Option<u64>,
    pub code_adaptive: u64,

    pub ob_type: u64,
    pub var_ob_size: u64,
    pub bytes_sval: u64,
    pub unicode_state: u64,
    pub unicode_length: u64,
    pub unicode_ascii_size: u64,
    pub unicode_compact_size: u64,
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

/// What a frame's `owner` byte says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOwner {
    /// A Python frame to report.
    Python,
    /// An interpreter-internal frame (entry shim, C-stack frame): skip it.
    Internal,
    /// A value no version uses: the frame chain changed under us.
    Invalid,
}

/// One CPython version family's layout.
pub trait InterpreterLayout: Send + Sync {
    /// The interpreter version this layout describes.
    fn version(&self) -> (u8, u8, u8);
    /// A human-readable description ("CPython 3.11.7 (offsets generated from the CPython
    /// 3.11.7 headers)").
    fn describe(&self) -> String;
    fn offsets(&self) -> &Offsets;
    /// The innermost frame of a thread, from the image of its thread state.
    fn current_frame(&self, mem: &dyn MemoryReader, tstate: &[u8]) -> Result<u64, ReadError>;
    /// Where the innermost-frame pointer of the thread state at `tstate_addr` lives (its
    /// image is `tstate`), so that it can be read again in the same system call as the
    /// frames; `None` when the thread has no frames.
    fn current_frame_slot(&self, tstate_addr: u64, tstate: &[u8])
        -> Result<Option<u64>, ReadError>;
    fn frame_owner(&self, owner: u8) -> FrameOwner;
}

pub(crate) fn field_u64(buf: &[u8], off: u64) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    buf.get(off..off.checked_add(8)?)
        .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

pub(crate) fn field_i32(buf: &[u8], off: u64) -> Option<i32> {
    let off = usize::try_from(off).ok()?;
    buf.get(off..off.checked_add(4)?)
        .map(|b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])))
}

/// CPython 3.13 to 3.15, from the `_Py_DebugOffsets` the interpreter publishes.
#[derive(Debug, Clone)]
pub struct DebugOffsetsLayout {
    version: (u8, u8, u8),
    offsets: Offsets,
    /// The headers the generated extras came from, once supplemented.
    extras_from: Option<&'static str>,
}

/// Reads consecutive u64 fields of `_Py_DebugOffsets`.
struct Fields<'a> {
    words: &'a [u8],
    at: usize,
}

impl Fields<'_> {
    fn next(&mut self) -> Result<u64, String> {
        let v = field_u64(self.words, self.at as u64)
            .ok_or_else(|| "_Py_DebugOffsets is shorter than expected".to_string())?;
        self.at += 8;
        Ok(v)
    }
    fn skip(&mut self, n: usize) {
        self.at += 8 * n;
    }
}

/// Bytes of `_Py_DebugOffsets` read from the interpreter (larger than any version's).
pub const DEBUG_OFFSETS_READ: usize = 1024;

impl DebugOffsetsLayout {
    /// Parses `_Py_DebugOffsets` (the first bytes of `_PyRuntime`).
    pub fn parse(raw: &[u8]) -> Result<Self, String> {
        if raw.len() < 24 || &raw[..8] != b"xdebugpy" {
            return Err("no _Py_DebugOffsets cookie at the start of _PyRuntime".into());
        }
        let hex = field_u64(raw, 8).unwrap_or(0);
        let version = ((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8);
        let minor = version.1;
        if version.0 != 3 || !(13..=15).contains(&minor) {
            return Err(format!(
                "CPython {}.{}.{} has no _Py_DebugOffsets this recorder reads (3.13, 3.14, 3.15)",
                version.0, version.1, version.2
            ));
        }
        if field_u64(raw, 16).unwrap_or(1) != 0 {
            return Err("free-threaded CPython builds are not supported by this recorder".into());
        }
        let mut f = Fields { words: raw, at: 24 };
        let mut o = Offsets::default();
        // runtime_state
        f.skip(2); // size, finalizing
        o.runtime_interpreters_head = f.next()?;
        // interpreter_state
        f.skip(1); // size
        o.interp_id = f.next()?;
        o.interp_next = f.next()?;
        o.interp_threads_head = f.next()?;
        if minor >= 14 {
            f.skip(1); // threads_main
        }
        let gc = f.next()?;
        f.skip(3); // imports_modules, sysdict, builtins
        f.skip(3); // ceval_gil, gil_runtime_state, gil_runtime_state_enabled
        o.gil_locked = Some(f.next()?);
        o.gil_holder = Some(f.next()?);
        o.gil_in_runtime = false;
        if minor >= 14 {
            f.skip(2); // code_object_generation, tlbc_generation
        }
        // thread_state
        o.tstate_size = f.next()?;
        f.skip(1); // prev
        o.tstate_next = f.next()?;
        o.tstate_interp = f.next()?;
        o.tstate_frame = f.next()?;
        if minor >= 15 {
            o.tstate_base_frame = Some(f.next()?);
            f.skip(2); // last_profiled_frame, last_profiled_frame_seq
        }
        o.tstate_thread_id = f.next()?;
        o.tstate_native_thread_id = f.next()?;
        f.skip(2); // datastack_chunk, status
        if minor >= 15 {
            o.tstate_holds_gil = Some(f.next()?);
            o.tstate_gil_requested = Some(f.next()?);
            o.tstate_current_exception = Some(f.next()?);
            o.tstate_exc_info = Some(f.next()?);
            o.exc_info_is_pointer = false;
            o.err_stackitem_exc_value = f.next()?;
        }
        // interpreter_frame
        o.frame_size = f.next()?;
        o.frame_previous = f.next()?;
        o.frame_executable = f.next()?;
        o.frame_instr = f.next()?;
        f.skip(1); // localsplus
        o.frame_owner = f.next()?;
        if minor >= 14 {
            f.skip(2); // stackpointer, tlbc_index
        }
        // code_object
        f.skip(1); // size
        o.code_filename = f.next()?;
        f.skip(1); // name
        o.code_qualname = f.next()?;
        o.code_linetable = f.next()?;
        o.code_firstlineno = f.next()?;
        f.skip(3); // argcount, localsplusnames, localspluskinds
        o.code_adaptive = f.next()?;
        if minor >= 14 {
            f.skip(1); // co_tlbc
        }
        o.code_header_size = o.code_adaptive;
        // pyobject
        f.skip(1);
        o.ob_type = f.next()?;
        // type_object
        f.skip(if minor >= 15 { 6 } else { 4 });
        if minor >= 15 {
            f.skip(2); // heap_type_object
        }
        f.skip(3); // tuple
        f.skip(3); // list
        if minor >= 14 {
            f.skip(4); // set
        }
        f.skip(3); // dict
        f.skip(2); // float
        f.skip(3); // long
                   // bytes_object
        f.skip(1);
        o.var_ob_size = f.next()?;
        o.bytes_sval = f.next()?;
        // unicode_object
        f.skip(1);
        o.unicode_state = f.next()?;
        o.unicode_length = f.next()?;
        o.unicode_ascii_size = f.next()?;
        o.unicode_compact_size = if minor >= 15 {
            f.next()?
        } else {
            // PyCompactUnicodeObject adds utf8_length and utf8 (3.12+).
            o.unicode_ascii_size + 16
        };
        // gc
        f.skip(1);
        let collecting = f.next()?;
        o.interp_gc_collecting = Some(gc + collecting);
        if minor >= 15 {
            o.interp_gc_frame = Some(gc + f.next()?);
        }
        o.executable_tag_mask = if minor >= 14 { 3 } else { 0 };
        o.instr_is_prev = false;
        let sane = o.tstate_size > 0
            && o.tstate_size < 1 << 16
            && o.frame_size > 0
            && o.frame_size < 1 << 12
            && o.code_header_size > 0
            && o.code_header_size < 1 << 12
            && o.tstate_native_thread_id < o.tstate_size
            && o.tstate_frame < o.tstate_size
            && o.frame_owner < o.frame_size;
        if !sane {
            return Err(format!(
                "_Py_DebugOffsets of CPython {}.{}.{} look inconsistent; refusing to sample",
                version.0, version.1, version.2
            ));
        }
        Ok(DebugOffsetsLayout {
            version,
            offsets: o,
            extras_from: None,
        })
    }
}

impl DebugOffsetsLayout {
    /// Fills in what `_Py_DebugOffsets` lacks (the exception state before 3.15, 3.13's
    /// frame `stacktop`, the return opcodes) from the generated table of the same version
    /// (`tstate->exc_info` is a pointer).
    pub fn supplement(&mut self, extras: &GeneratedExtras) {
        if extras.version != (self.version.0, self.version.1) {
            return;
        }
        self.extras_from = Some(extras.headers);
        let o = &mut self.offsets;
        if self.version.1 == 13 {
            o.frame_stacktop = extras.frame_stacktop;
        }
        o.return_opcodes = extras
            .op_return_value
            .map(|r| [r, extras.op_return_const.unwrap_or(0xFFFF)]);
        if o.tstate_current_exception.is_none() {
            o.tstate_current_exception = Some(extras.tstate_current_exception);
            o.tstate_exc_info = Some(extras.tstate_exc_info);
            o.exc_info_is_pointer = true;
            o.err_stackitem_exc_value = extras.err_stackitem_exc_value;
        }
    }
}

impl InterpreterLayout for DebugOffsetsLayout {
    fn version(&self) -> (u8, u8, u8) {
        self.version
    }
    fn describe(&self) -> String {
        let (a, b, c) = self.version;
        match self.extras_from {
            Some(h) => format!(
                "CPython {a}.{b}.{c} (offsets from its _Py_DebugOffsets, the rest generated \
                 from the CPython {h} headers)"
            ),
            None => format!("CPython {a}.{b}.{c} (offsets from its _Py_DebugOffsets)"),
        }
    }
    fn offsets(&self) -> &Offsets {
        &self.offsets
    }
    fn current_frame(&self, _mem: &dyn MemoryReader, tstate: &[u8]) -> Result<u64, ReadError> {
        field_u64(tstate, self.offsets.tstate_frame)
            .ok_or(ReadError::Invalid("thread state shorter than its layout"))
    }
    fn current_frame_slot(&self, tstate_addr: u64, _: &[u8]) -> Result<Option<u64>, ReadError> {
        Ok(Some(tstate_addr.wrapping_add(self.offsets.tstate_frame)))
    }
    fn frame_owner(&self, owner: u8) -> FrameOwner {
        match (self.version.1, owner) {
            (_, 0..=2) => FrameOwner::Python,
            // 3.13: FRAME_OWNED_BY_CSTACK = 3.
            // 3.14+: FRAME_OWNED_BY_INTERPRETER = 3, FRAME_OWNED_BY_CSTACK = 4.
            (13, 3) | (14.., 3..=4) => FrameOwner::Internal,
            _ => FrameOwner::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a `_Py_DebugOffsets` whose field i (after the header) is 300 - i, so that
    /// every struct's size is larger than its offsets.
    fn fake(minor: u8) -> Vec<u8> {
        let mut v = b"xdebugpy".to_vec();
        v.extend_from_slice(&(0x030f_0200u64 & !0x00ff_0000 | (minor as u64) << 16).to_ne_bytes());
        v.extend_from_slice(&0u64.to_ne_bytes());
        for i in 0..150u64 {
            v.extend_from_slice(&(300 - i).to_ne_bytes());
        }
        v
    }

    #[test]
    fn parses_every_supported_version_and_rejects_others() {
        for minor in 13..=15 {
            let l = DebugOffsetsLayout::parse(&fake(minor)).unwrap();
            assert_eq!(l.version(), (3, minor, 2));
            let o = l.offsets();
            // runtime_state.interpreters_head is the 3rd field after the header.
            assert_eq!(o.runtime_interpreters_head, 300 - 2);
            assert_eq!(o.interp_id, 300 - 4);
            assert_eq!(o.tstate_holds_gil.is_some(), minor >= 15);
            assert_eq!(o.executable_tag_mask, if minor >= 14 { 3 } else { 0 });
        }
        assert!(DebugOffsetsLayout::parse(&fake(12)).is_err());
        assert!(DebugOffsetsLayout::parse(b"nothing here").is_err());
        let mut ft = fake(14);
        ft[16] = 1;
        assert!(DebugOffsetsLayout::parse(&ft)
            .unwrap_err()
            .contains("free-threaded"));
    }

    #[test]
    fn owner_bytes_per_version() {
        let l13 = DebugOffsetsLayout::parse(&fake(13)).unwrap();
        let l14 = DebugOffsetsLayout::parse(&fake(14)).unwrap();
        assert_eq!(l13.frame_owner(3), FrameOwner::Internal);
        assert_eq!(l13.frame_owner(4), FrameOwner::Invalid);
        assert_eq!(l14.frame_owner(4), FrameOwner::Internal);
        assert_eq!(l14.frame_owner(1), FrameOwner::Python);
        assert_eq!(l14.frame_owner(9), FrameOwner::Invalid);
    }
}

//! CPython 3.9 to 3.12: layouts that are data in the repository, in-process and from
//! outside.
//!
//! These versions publish no `_Py_DebugOffsets`, so `scripts/gen-layouts` measures
//! every offset the sampler needs in each version's own headers and writes one
//! [`GeneratedLayout`] per version to `layouts_generated.rs` (and, for 3.13+, the few
//! fields their debug offsets lack: [`GeneratedExtras`]). The layout is picked by the
//! target's own version at run time; building tach never needs those headers, so one
//! build (one abi3 extension, one `tach` binary) serves every version.
//!
//! - 3.11, 3.12: `_PyInterpreterFrame`s reached through `tstate->cframe->current_frame`,
//!   walked alike (3.12 adds frames owned by the C stack,
//!   skipped). The GIL is `_PyRuntime.ceval.gil` in 3.11, the interpreter's own `_gil`
//!   in 3.12.
//! - 3.9, 3.10: `PyFrameObject`s on the heap, from `tstate->frame` along `f_back`, with
//!   `f_lasti` and the old line tables; the code object's `co_name` (there is no
//!   `co_qualname`). The thread state has no native thread id: it is read from glibc's
//!   `struct pthread` that `thread_id` points at (see [`find_pthread_tid`]).

pub use super::layout::LineTableFormat;
use super::layout::{field_u64, FrameOwner, InterpreterLayout, Offsets};
use super::layouts_generated::{EXTRAS, LAYOUTS};
use super::memory::{MemoryReader, ReadError};
use super::resolve::OpcodeTables;

/// One version's offsets and tables, as `scripts/gen-layouts.c` prints them.
#[derive(Debug, Clone, Copy)]
pub struct GeneratedLayout {
    pub version: (u8, u8),
    /// The version whose headers the table was measured in.
    pub headers: &'static str,
    pub runtime_interpreters_head: u64,
    pub runtime_main_thread: u64,
    pub interp_next: u64,
    pub interp_threads_head: u64,
    pub interp_id: u64,
    pub interp_gc_collecting: u64,
    /// From `_PyRuntime` when `gil_in_runtime`, else from the interpreter state.
    pub gil_locked: u64,
    pub gil_last_holder: u64,
    pub gil_in_runtime: bool,
    pub tstate_size: u64,
    pub tstate_next: u64,
    pub tstate_interp: u64,
    pub tstate_thread_id: u64,
    /// `cframe` (3.11+, with `cframe_current_frame`) or `frame` (3.9, 3.10).
    pub tstate_frame: u64,
    pub cframe_current_frame: Option<u64>,
    pub tstate_native_thread_id: Option<u64>,
    /// `curexc_type` up to 3.11, `current_exception` in 3.12.
    pub tstate_current_exception: u64,
    /// A pointer to the `_PyErr_StackItem` being handled.
    pub tstate_exc_info: u64,
    pub err_stackitem_exc_value: u64,
    /// `PyFrameObject` (3.9, 3.10) rather than `_PyInterpreterFrame`.
    pub frame_object: bool,
    pub frame_size: u64,
    pub frame_previous: u64,
    pub frame_code: u64,
    /// `prev_instr` (3.11+) or `f_lasti` (3.9, 3.10).
    pub frame_instr: u64,
    pub frame_owner: Option<u64>,
    pub frame_stacktop: Option<u64>,
    pub frame_is_entry: Option<u64>,
    pub code_size: u64,
    pub code_filename: u64,
    pub code_firstlineno: u64,
    /// `co_qualname` (3.11+) or `co_name`.
    pub code_name: u64,
    pub code_linetable: u64,
    pub code_firsttraceable: Option<u64>,
    pub code_adaptive: Option<u64>,
    pub code_code: Option<u64>,
    pub line_table: LineTableFormat,
    pub ob_type: u64,
    pub var_ob_size: u64,
    pub bytes_sval: u64,
    pub unicode_state: u64,
    pub unicode_length: u64,
    pub unicode_ascii_size: u64,
    pub unicode_compact_size: u64,
    pub op_return_value: Option<u16>,
    pub op_return_const: Option<u16>,
    pub deopt: Option<[u8; 256]>,
    pub caches: Option<[u8; 256]>,
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

/// The generated table of CPython `major.minor` (3.9-3.12), if the repository has one.
pub fn generated(major: u8, minor: u8) -> Option<&'static GeneratedLayout> {
    LAYOUTS.iter().find(|l| l.version == (major, minor))
}

/// The opcode tables generated for CPython `major.minor` (3.11, 3.12: de-specialisation
/// and inline cache sizes).
pub fn generated_opcode_tables(major: u8, minor: u8) -> Option<OpcodeTables> {
    let g = generated(major, minor)?;
    Some(OpcodeTables {
        deopt: g.deopt?,
        caches: Some(g.caches?),
    })
}

/// The generated extras of CPython `major.minor` (3.13+), if the repository has them.
pub fn extras(major: u8, minor: u8) -> Option<&'static GeneratedExtras> {
    EXTRAS.iter().find(|l| l.version == (major, minor))
}

/// Why a generated layout cannot sample a process.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error("{what}: {source}")]
    Read {
        what: &'static str,
        source: ReadError,
    },
    /// The runtime has no main thread yet (a program just started): worth trying again.
    #[error("its CPython runtime is not initialised yet")]
    NotStarted,
    #[error("{0}")]
    Mismatch(String),
}

/// A layout from a generated table.
#[derive(Debug, Clone)]
pub struct StaticLayout {
    version: (u8, u8, u8),
    headers: &'static str,
    offsets: Offsets,
    owned_by_cstack: Option<u8>,
    /// 3.11, 3.12: the opcode tables, whose cache sizes tell an instruction's start from
    /// its inline caches (where a caller's `prev_instr` rests).
    tables: Option<OpcodeTables>,
    /// `_PyRuntime.main_thread`'s offset (the main thread's `pthread_t`).
    pub runtime_main_thread: u64,
}

impl StaticLayout {
    /// The layout of CPython `version`, from the generated tables.
    pub fn for_version(version: (u8, u8, u8)) -> Result<StaticLayout, String> {
        let g = generated(version.0, version.1).ok_or_else(|| {
            format!(
                "CPython {}.{}.{} has no layout table in this tach",
                version.0, version.1, version.2
            )
        })?;
        let o = Offsets {
            runtime_interpreters_head: g.runtime_interpreters_head,
            interp_next: g.interp_next,
            interp_threads_head: g.interp_threads_head,
            interp_id: g.interp_id,
            interp_gc_collecting: Some(g.interp_gc_collecting),
            interp_gc_frame: None,
            gil_locked: Some(g.gil_locked),
            gil_holder: Some(g.gil_last_holder),
            gil_in_runtime: g.gil_in_runtime,
            tstate_size: g.tstate_size,
            tstate_next: g.tstate_next,
            tstate_interp: g.tstate_interp,
            tstate_frame: g.tstate_frame,
            cframe_current_frame: g.cframe_current_frame,
            tstate_base_frame: None,
            tstate_thread_id: g.tstate_thread_id,
            // 3.9, 3.10: replaced by the read through `pthread_tid` (set when attaching).
            tstate_native_thread_id: g.tstate_native_thread_id.unwrap_or(g.tstate_thread_id),
            tstate_holds_gil: None,
            tstate_gil_requested: None,
            tstate_current_exception: Some(g.tstate_current_exception),
            tstate_exc_info: Some(g.tstate_exc_info),
            exc_info_is_pointer: true,
            err_stackitem_exc_value: g.err_stackitem_exc_value,
            frame_size: g.frame_size,
            frame_previous: g.frame_previous,
            frame_executable: g.frame_code,
            frame_instr: g.frame_instr,
            frame_stacktop: g.frame_stacktop,
            frame_is_entry: g.frame_is_entry,
            return_opcodes: g
                .op_return_value
                .map(|r| [r, g.op_return_const.unwrap_or(0xFFFF)]),
            frame_owner: g.frame_owner.unwrap_or(0),
            executable_tag_mask: 0,
            instr_is_prev: !g.frame_object,
            frame_object: g.frame_object,
            line_table: g.line_table,
            code_code: g.code_code,
            pthread_tid: None,
            code_header_size: g.code_adaptive.unwrap_or(g.code_size),
            code_filename: g.code_filename,
            code_qualname: g.code_name,
            code_linetable: g.code_linetable,
            code_firstlineno: g.code_firstlineno,
            code_firsttraceable: g.code_firsttraceable,
            code_adaptive: g.code_adaptive.unwrap_or(0),
            ob_type: g.ob_type,
            var_ob_size: g.var_ob_size,
            bytes_sval: g.bytes_sval,
            unicode_state: g.unicode_state,
            unicode_length: g.unicode_length,
            unicode_ascii_size: g.unicode_ascii_size,
            unicode_compact_size: g.unicode_compact_size,
        };
        let tables = generated_opcode_tables(version.0, version.1);
        Ok(StaticLayout {
            version,
            headers: g.headers,
            offsets: o,
            // FRAME_OWNED_BY_CSTACK, 3.12's entry frames.
            owned_by_cstack: (version.1 >= 12).then_some(3),
            tables,
            runtime_main_thread: g.runtime_main_thread,
        })
    }

    /// The layout of CPython `version` for the process `pid` (`file` names its
    /// interpreter in messages), whose `_PyRuntime` is at `runtime`: finds where 3.9 and
    /// 3.10 keep native thread ids, then checks the layout against the process once
    /// before any sample is taken.
    pub fn for_process(
        version: (u8, u8, u8),
        mem: &dyn MemoryReader,
        runtime: u64,
        pid: i32,
        file: &str,
    ) -> Result<StaticLayout, FitError> {
        let (major, minor, _) = version;
        let mut layout = StaticLayout::for_version(version).map_err(FitError::Mismatch)?;
        let o = layout.offsets().clone();
        let read = |what: &'static str| move |source| FitError::Read { what, source };
        // The main thread's pthread_t, which is also how 3.9 and 3.10 name threads.
        let main_pthread = mem
            .read_u64(runtime.wrapping_add(layout.runtime_main_thread))
            .map_err(read("reading _PyRuntime.main_thread"))?;
        if main_pthread == 0 {
            return Err(FitError::NotStarted);
        }
        if layout.needs_pthread_tid() {
            let off = find_pthread_tid(mem, main_pthread, pid).ok_or_else(|| {
                FitError::Mismatch(format!(
                    "CPython {major}.{minor} keeps no native thread ids, and the C library's \
                     thread structure of the main thread (at {main_pthread:#x}) does not hold \
                     its id"
                ))
            })?;
            layout.set_pthread_tid(off);
        }
        // The first interpreter's first thread state points back at it. A build whose
        // layout differs from the headers the table came from (a debug build, a patched
        // interpreter) fails here, not with garbage samples.
        let interp = mem
            .read_u64(runtime.wrapping_add(o.runtime_interpreters_head))
            .map_err(read("reading the interpreter list"))?;
        if interp != 0 {
            let tstate = mem
                .read_u64(interp.wrapping_add(o.interp_threads_head))
                .map_err(read("reading the thread list"))?;
            let back = match tstate {
                0 => interp,
                t => mem.read_u64(t.wrapping_add(o.tstate_interp)).unwrap_or(0),
            };
            if back != interp {
                return Err(FitError::Mismatch(format!(
                    "the CPython {major}.{minor} layout tach has does not fit this \
                     interpreter ({file}): its thread state does not point back at its \
                     interpreter"
                )));
            }
        }
        Ok(layout)
    }

    /// The opcode tables measured with the layout (3.11, 3.12).
    pub fn opcode_tables(&self) -> Option<OpcodeTables> {
        self.tables.clone()
    }

    /// Sets where glibc's `struct pthread` keeps the kernel thread id (3.9, 3.10).
    pub fn set_pthread_tid(&mut self, off: u64) {
        self.offsets.pthread_tid = Some(off);
    }

    /// Whether the thread state has no native thread id (3.9, 3.10).
    pub fn needs_pthread_tid(&self) -> bool {
        self.offsets.frame_object
    }
}

impl InterpreterLayout for StaticLayout {
    fn version(&self) -> (u8, u8, u8) {
        self.version
    }
    fn describe(&self) -> String {
        let (a, b, c) = self.version;
        format!(
            "CPython {a}.{b}.{c} (offsets generated from the CPython {} headers)",
            self.headers
        )
    }
    fn offsets(&self) -> &Offsets {
        &self.offsets
    }
    fn current_frame(&self, mem: &dyn MemoryReader, tstate: &[u8]) -> Result<u64, ReadError> {
        let at = field_u64(tstate, self.offsets.tstate_frame)
            .ok_or(ReadError::Invalid("thread state shorter than its layout"))?;
        match self.offsets.cframe_current_frame {
            // 3.11+: the thread state points at the running eval loop's C frame.
            Some(off) if at != 0 => mem.read_u64(at.wrapping_add(off)),
            _ => Ok(at),
        }
    }
    fn current_frame_slot(
        &self,
        tstate_addr: u64,
        tstate: &[u8],
    ) -> Result<Option<u64>, ReadError> {
        match self.offsets.cframe_current_frame {
            Some(off) => {
                let cframe = field_u64(tstate, self.offsets.tstate_frame)
                    .ok_or(ReadError::Invalid("thread state shorter than its layout"))?;
                Ok((cframe != 0).then(|| cframe.wrapping_add(off)))
            }
            None => Ok(Some(tstate_addr.wrapping_add(self.offsets.tstate_frame))),
        }
    }
    fn frame_owner(&self, owner: u8) -> FrameOwner {
        if self.offsets.frame_object {
            // A frame object has no owner byte (the walk passes 0).
            return FrameOwner::Python;
        }
        match owner {
            // FRAME_OWNED_BY_THREAD, _GENERATOR, _FRAME_OBJECT.
            0..=2 => FrameOwner::Python,
            o if Some(o) == self.owned_by_cstack => FrameOwner::Internal,
            _ => FrameOwner::Invalid,
        }
    }
}

/// Bytes of the main thread's `struct pthread` searched for its kernel thread id.
const PTHREAD_SEARCH: usize = 2048;
/// Where x86-64 glibc keeps `struct pthread.tid` (after the 704-byte TCB header and the
/// list links), tried first.
const GLIBC_X86_64_TID: usize = 0x2d0;

/// The offset of the kernel thread id in the C library's thread structure, found in the
/// main thread's (`main_pthread`, whose thread id is the pid): glibc's known place
/// first, else the first 4-byte-aligned word in its first 2 KiB that equals the pid.
pub fn find_pthread_tid(mem: &dyn MemoryReader, main_pthread: u64, pid: i32) -> Option<u64> {
    if main_pthread == 0 {
        return None;
    }
    let mut buf = vec![0u8; PTHREAD_SEARCH];
    mem.read(main_pthread, &mut buf).ok()?;
    let word = |at: usize| {
        buf.get(at..at + 4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
    };
    if word(GLIBC_X86_64_TID) == Some(pid) {
        return Some(GLIBC_X86_64_TID as u64);
    }
    (0..PTHREAD_SEARCH / 4)
        .map(|k| k * 4)
        .find(|&at| word(at) == Some(pid))
        .map(|at| at as u64)
}

#[cfg(test)]
mod tests {
    use super::super::memory::FakeMemory;
    use super::*;

    #[test]
    fn every_generated_version_makes_a_sane_layout() {
        for minor in 9..=12 {
            let l = StaticLayout::for_version((3, minor, 1)).unwrap();
            let o = l.offsets();
            assert!(o.tstate_frame < o.tstate_size, "3.{minor}");
            assert!(o.tstate_native_thread_id < o.tstate_size, "3.{minor}");
            assert!(o.frame_previous < o.frame_size && o.frame_instr < o.frame_size);
            assert!(o.code_qualname < o.code_header_size && o.code_linetable < o.code_header_size);
            assert_eq!(o.frame_object, minor < 11);
            assert_eq!(l.opcode_tables().is_some(), minor >= 11);
            assert_eq!(o.gil_in_runtime, minor < 12);
            assert_eq!(
                l.frame_owner(3),
                if minor == 12 {
                    FrameOwner::Internal
                } else if minor < 11 {
                    FrameOwner::Python
                } else {
                    FrameOwner::Invalid
                }
            );
        }
        assert!(StaticLayout::for_version((3, 8, 18)).is_err());
        assert!(StaticLayout::for_version((3, 13, 0)).is_err());
    }

    #[test]
    fn every_debug_offsets_version_has_its_extras() {
        for minor in 13..=15 {
            let e = extras(3, minor).unwrap();
            assert!(e.headers.starts_with(&format!("3.{minor}.")));
            assert_eq!(e.frame_stacktop.is_some(), minor == 13, "3.{minor}");
            assert!(e.tstate_exc_info > e.tstate_current_exception);
            let deopt = e.deopt.unwrap();
            // A base opcode de-specialises to itself; RETURN_VALUE is one.
            let ret = e.op_return_value.unwrap() as usize;
            assert_eq!(deopt[ret] as usize, ret, "3.{minor}");
        }
        assert!(extras(3, 12).is_none() && extras(3, 16).is_none());
    }

    #[test]
    fn the_thread_id_is_found_in_the_pthread_struct() {
        let mut m = FakeMemory::new();
        let mut s = vec![0u8; PTHREAD_SEARCH];
        s[0x40..0x44].copy_from_slice(&4242i32.to_ne_bytes());
        m.map(0x10000, s.clone());
        assert_eq!(find_pthread_tid(&m, 0x10000, 4242), Some(0x40));
        s[GLIBC_X86_64_TID..GLIBC_X86_64_TID + 4].copy_from_slice(&4242i32.to_ne_bytes());
        m.map(0x20000, s);
        assert_eq!(
            find_pthread_tid(&m, 0x20000, 4242),
            Some(GLIBC_X86_64_TID as u64)
        );
        assert_eq!(find_pthread_tid(&m, 0x20000, 77), None);
        assert_eq!(find_pthread_tid(&m, 0, 4242), None);
    }
}

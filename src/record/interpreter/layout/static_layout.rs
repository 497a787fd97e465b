//! CPython 3.9 to 3.12: layouts that are data in the repository, in-process and from
//! outside.
//!
//! These versions publish no `_Py_DebugOffsets`, so `scripts/gen-layouts` measures
//! every offset the sampler needs in each version's own headers and writes one
//! [`GeneratedLayout`] per version, holding the sampler's very [`Offsets`], to
//! `generated.rs` (and, for 3.13+, the few fields their debug offsets lack, read by
//! `debug_offsets.rs`). The layout is picked by the
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

use super::generated::LAYOUTS;
use super::interpreter_layout::{FrameOwner, InterpreterLayout};
use super::offsets::{field_u64, GeneratedLayout, Offsets, OpcodeTables};
use crate::record::process::memory::{MemoryReader, ReadError};

/// The generated table of CPython `major.minor` (3.9-3.12), if the repository has one.
pub fn generated(major: u8, minor: u8) -> Option<&'static GeneratedLayout> {
    LAYOUTS.iter().find(|l| l.version == (major, minor))
}

/// The opcode tables generated for CPython `major.minor` (3.11, 3.12: de-specialisation
/// and inline cache sizes).
pub fn generated_opcode_tables(major: u8, minor: u8) -> Option<OpcodeTables> {
    generated(major, minor)?.opcodes.clone()
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
        Ok(StaticLayout {
            version,
            headers: g.headers,
            offsets: g.offsets.clone(),
            // FRAME_OWNED_BY_CSTACK, 3.12's entry frames.
            owned_by_cstack: (version.1 >= 12).then_some(3),
            tables: g.opcodes.clone(),
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
        let main_thread = o.runtime.main_thread.ok_or_else(|| {
            FitError::Mismatch(format!(
                "the CPython {major}.{minor} table has no _PyRuntime.main_thread"
            ))
        })?;
        let main_pthread = mem
            .read_u64(runtime.wrapping_add(main_thread))
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
            .read_u64(runtime.wrapping_add(o.runtime.interpreters_head))
            .map_err(read("reading the interpreter list"))?;
        if interp != 0 {
            let tstate = mem
                .read_u64(interp.wrapping_add(o.interp.threads_head))
                .map_err(read("reading the thread list"))?;
            let back = match tstate {
                0 => interp,
                t => mem.read_u64(t.wrapping_add(o.thread.interp)).unwrap_or(0),
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
        self.offsets.thread.pthread_tid = Some(off);
    }

    /// Whether the thread state has no native thread id (3.9, 3.10).
    pub fn needs_pthread_tid(&self) -> bool {
        self.offsets.frame.is_object
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
        let at = field_u64(tstate, self.offsets.thread.frame)
            .ok_or(ReadError::Invalid("thread state shorter than its layout"))?;
        match self.offsets.thread.cframe_current_frame {
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
        match self.offsets.thread.cframe_current_frame {
            Some(off) => {
                let cframe = field_u64(tstate, self.offsets.thread.frame)
                    .ok_or(ReadError::Invalid("thread state shorter than its layout"))?;
                Ok((cframe != 0).then(|| cframe.wrapping_add(off)))
            }
            None => Ok(Some(tstate_addr.wrapping_add(self.offsets.thread.frame))),
        }
    }
    fn frame_owner(&self, owner: u8) -> FrameOwner {
        if self.offsets.frame.is_object {
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
    use super::*;
    use crate::record::process::memory::FakeMemory;

    #[test]
    fn every_generated_version_makes_a_sane_layout() {
        for minor in 9..=12 {
            let l = StaticLayout::for_version((3, minor, 1)).unwrap();
            let o = l.offsets();
            assert!(o.thread.frame < o.thread.size, "3.{minor}");
            assert!(o.thread.native_thread_id < o.thread.size, "3.{minor}");
            assert!(o.frame.previous < o.frame.size && o.frame.instr < o.frame.size);
            assert!(o.code.qualname < o.code.header_size && o.code.linetable < o.code.header_size);
            assert_eq!(o.frame.is_object, minor < 11);
            assert_eq!(l.opcode_tables().is_some(), minor >= 11);
            assert_eq!(o.gil.in_runtime, minor < 12);
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

//! CPython 3.13 to 3.15: the offsets the interpreter publishes in `_Py_DebugOffsets` at
//! the start of `_PyRuntime`, read into the same [`Offsets`] the generated tables of
//! 3.9-3.12 hold, completed by the few fields they lack ([`GeneratedExtras`]).

use super::generated::EXTRAS;
use super::interpreter_layout::{FrameOwner, InterpreterLayout};
use super::offsets::{field_u64, GeneratedExtras, Offsets};
use crate::record::process::memory::{MemoryReader, ReadError};

/// The generated extras of CPython `major.minor` (3.13+), if the repository has them.
pub fn extras(major: u8, minor: u8) -> Option<&'static GeneratedExtras> {
    EXTRAS.iter().find(|l| l.version == (major, minor))
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
        o.runtime.interpreters_head = f.next()?;
        // interpreter_state
        f.skip(1); // size
        o.interp.id = f.next()?;
        o.interp.next = f.next()?;
        o.interp.threads_head = f.next()?;
        if minor >= 14 {
            f.skip(1); // threads_main
        }
        let gc = f.next()?;
        f.skip(3); // imports_modules, sysdict, builtins
        f.skip(3); // ceval_gil, gil_runtime_state, gil_runtime_state_enabled
        o.gil.locked = Some(f.next()?);
        o.gil.holder = Some(f.next()?);
        o.gil.in_runtime = false;
        if minor >= 14 {
            f.skip(2); // code_object_generation, tlbc_generation
        }
        // thread_state
        o.thread.size = f.next()?;
        f.skip(1); // prev
        o.thread.next = f.next()?;
        o.thread.interp = f.next()?;
        o.thread.frame = f.next()?;
        if minor >= 15 {
            o.thread.base_frame = Some(f.next()?);
            f.skip(2); // last_profiled_frame, last_profiled_frame_seq
        }
        o.thread.thread_id = f.next()?;
        o.thread.native_thread_id = f.next()?;
        f.skip(2); // datastack_chunk, status
        if minor >= 15 {
            o.thread.holds_gil = Some(f.next()?);
            o.thread.gil_requested = Some(f.next()?);
            o.thread.current_exception = Some(f.next()?);
            o.thread.exc_info = Some(f.next()?);
            o.thread.exc_info_is_pointer = false;
            o.thread.stackitem_exc_value = f.next()?;
        }
        // interpreter_frame
        o.frame.size = f.next()?;
        o.frame.previous = f.next()?;
        o.frame.executable = f.next()?;
        o.frame.instr = f.next()?;
        f.skip(1); // localsplus
        o.frame.owner = f.next()?;
        if minor >= 14 {
            f.skip(2); // stackpointer, tlbc_index
        }
        // code_object
        f.skip(1); // size
        o.code.filename = f.next()?;
        f.skip(1); // name
        o.code.qualname = f.next()?;
        o.code.linetable = f.next()?;
        o.code.firstlineno = f.next()?;
        f.skip(3); // argcount, localsplusnames, localspluskinds
        o.code.adaptive = f.next()?;
        if minor >= 14 {
            f.skip(1); // co_tlbc
        }
        o.code.header_size = o.code.adaptive;
        // pyobject
        f.skip(1);
        o.object.ob_type = f.next()?;
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
        o.object.ob_size = f.next()?;
        o.bytes.ob_sval = f.next()?;
        // unicode_object
        f.skip(1);
        o.unicode.state = f.next()?;
        o.unicode.length = f.next()?;
        o.unicode.ascii_size = f.next()?;
        o.unicode.compact_size = if minor >= 15 {
            f.next()?
        } else {
            // PyCompactUnicodeObject adds utf8_length and utf8 (3.12+).
            o.unicode.ascii_size + 16
        };
        // gc
        f.skip(1);
        let collecting = f.next()?;
        o.interp.gc_collecting = Some(gc + collecting);
        if minor >= 15 {
            o.interp.gc_frame = Some(gc + f.next()?);
        }
        o.frame.executable_tag_mask = if minor >= 14 { 3 } else { 0 };
        o.frame.instr_is_prev = false;
        let sane = o.thread.size > 0
            && o.thread.size < 1 << 16
            && o.frame.size > 0
            && o.frame.size < 1 << 12
            && o.code.header_size > 0
            && o.code.header_size < 1 << 12
            && o.thread.native_thread_id < o.thread.size
            && o.thread.frame < o.thread.size
            && o.frame.owner < o.frame.size;
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
            o.frame.stacktop = extras.frame_stacktop;
        }
        o.frame.return_opcodes = extras
            .op_return_value
            .map(|r| [r, extras.op_return_const.unwrap_or(0xFFFF)]);
        if o.thread.current_exception.is_none() {
            o.thread.current_exception = Some(extras.tstate_current_exception);
            o.thread.exc_info = Some(extras.tstate_exc_info);
            o.thread.exc_info_is_pointer = true;
            o.thread.stackitem_exc_value = extras.err_stackitem_exc_value;
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
        field_u64(tstate, self.offsets.thread.frame)
            .ok_or(ReadError::Invalid("thread state shorter than its layout"))
    }
    fn current_frame_slot(&self, tstate_addr: u64, _: &[u8]) -> Result<Option<u64>, ReadError> {
        Ok(Some(tstate_addr.wrapping_add(self.offsets.thread.frame)))
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
            assert_eq!(o.runtime.interpreters_head, 300 - 2);
            assert_eq!(o.interp.id, 300 - 4);
            assert_eq!(o.thread.holds_gil.is_some(), minor >= 15);
            assert_eq!(o.frame.executable_tag_mask, if minor >= 14 { 3 } else { 0 });
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

//! Finding the running interpreter's layout, in-process.
//!
//! - `_PyRuntime` is found with `dlsym` (it is exported by `libpython` and by statically
//!   linked interpreters alike).
//! - 3.13 and later: its first bytes are `_Py_DebugOffsets`.
//! - 3.11: the offsets measured at build time (`layout.c`), if the extension was built
//!   against 3.11's headers.
//! - Anything else: a clear error.

use std::ffi::CString;

use super::layout::{DebugOffsetsLayout, InterpreterLayout, Py311Layout, DEBUG_OFFSETS_READ};
use super::memory::{MemoryReader, ProcessVmReader};
use super::resolve::{OpcodeTables, Types};
use super::sampler::Target;

#[cfg(tach_layout)]
mod build {
    use super::super::layout::BuildLayout;
    extern "C" {
        static tach_build_layout: BuildLayout;
        fn tach_copy_deopt(out: *mut u8);
        fn tach_copy_caches(out: *mut u8);
    }

    pub fn layout() -> Option<BuildLayout> {
        // SAFETY: a constant table defined in layout.c, never written.
        Some(unsafe { tach_build_layout })
    }

    pub fn deopt() -> Option<[u8; 256]> {
        let l = layout()?;
        if l.has_deopt == 0 {
            return None;
        }
        let mut t = [0u8; 256];
        // SAFETY: writes exactly 256 bytes into t.
        unsafe { tach_copy_deopt(t.as_mut_ptr()) };
        Some(t)
    }

    pub fn caches() -> [u8; 256] {
        let mut t = [0u8; 256];
        // SAFETY: writes exactly 256 bytes into t.
        unsafe { tach_copy_caches(t.as_mut_ptr()) };
        t
    }
}

#[cfg(not(tach_layout))]
mod build {
    use super::super::layout::BuildLayout;
    pub fn layout() -> Option<BuildLayout> {
        None
    }
    pub fn deopt() -> Option<[u8; 256]> {
        None
    }
    pub fn caches() -> [u8; 256] {
        [0; 256]
    }
}

/// The CPython version the extension's build-time layout describes, if any.
pub fn build_version() -> Option<(u8, u8)> {
    build::layout().map(|l| {
        (
            (l.py_version_hex >> 24) as u8,
            (l.py_version_hex >> 16) as u8,
        )
    })
}

/// Looks a symbol up in the process (the executable and every loaded library).
pub fn symbol(name: &str) -> Option<u64> {
    let c = CString::new(name).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a valid C string only looks the name up.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    (!p.is_null()).then_some(p as u64)
}

/// Picks the layout of the interpreter running this process.
pub fn detect_layout(
    mem: &dyn MemoryReader,
    runtime: u64,
    version: (u8, u8, u8),
) -> Result<Box<dyn InterpreterLayout>, String> {
    match (version.0, version.1) {
        (3, 11) => match build::layout() {
            Some(b) => Py311Layout::from_build(&b, version).map(|l| Box::new(l) as Box<_>),
            None => Err(
                "this tach extension was built without CPython 3.11 headers, so it \
                         cannot sample CPython 3.11"
                    .into(),
            ),
        },
        (3, 13..=15) => {
            let mut raw = vec![0u8; DEBUG_OFFSETS_READ];
            mem.read(runtime, &mut raw)
                .map_err(|e| format!("cannot read _Py_DebugOffsets: {e}"))?;
            let mut l = DebugOffsetsLayout::parse(&raw)?;
            if let Some(b) = build::layout() {
                l.supplement_exceptions(&b);
            }
            let got = l.version();
            if (got.0, got.1) != (version.0, version.1) {
                return Err(format!(
                    "_Py_DebugOffsets says CPython {}.{}, but this is {}.{}",
                    got.0, got.1, version.0, version.1
                ));
            }
            Ok(Box::new(l))
        }
        (a, b) => Err(format!(
            "CPython {a}.{b} is not supported by the tach recorder (3.11, 3.13, 3.14 and \
             3.15 are)"
        )),
    }
}

/// Opcode tables for `--opcodes`: built in, or the interpreter's exported
/// `_PyOpcode_Deopt` (3.15).
pub fn opcode_tables(mem: &dyn MemoryReader, version: (u8, u8, u8)) -> Option<OpcodeTables> {
    opcode_tables_from(mem, version, symbol("_PyOpcode_Deopt"))
}

/// Opcode tables, with `_PyOpcode_Deopt` at `exported_deopt` when the interpreter exports
/// it (found by `dlsym` in-process, in its ELF symbols from outside).
pub fn opcode_tables_from(
    mem: &dyn MemoryReader,
    version: (u8, u8, u8),
    exported_deopt: Option<u64>,
) -> Option<OpcodeTables> {
    let built_for_this = build_version() == Some((version.0, version.1));
    let deopt = if built_for_this { build::deopt() } else { None };
    let deopt = deopt.or_else(|| {
        let mut t = [0u8; 256];
        mem.read(exported_deopt?, &mut t).ok()?;
        Some(t)
    })?;
    let caches = (version.1 == 11 && built_for_this).then(build::caches);
    if version.1 == 11 && caches.is_none() {
        return None;
    }
    Some(OpcodeTables { deopt, caches })
}

/// Everything needed to sample this process. `version` is `sys.version_info`; `types`
/// the addresses of the interpreter's type objects and `None`.
pub fn this_process(
    version: (u8, u8, u8),
    types: Types,
    want_opcodes: bool,
) -> Result<Target, String> {
    let mem = ProcessVmReader::this_process();
    mem.probe().map_err(|e| {
        format!("process_vm_readv is not usable here ({e}); the recorder needs it to read memory safely")
    })?;
    let runtime = symbol("_PyRuntime").ok_or("cannot find the _PyRuntime symbol")?;
    let layout = detect_layout(&mem, runtime, version)?;
    let opcodes = if want_opcodes {
        Some(opcode_tables(&mem, version).ok_or_else(|| {
            format!(
                "opcodes cannot be recorded on CPython {}.{}: this build has no \
                 de-specialisation table for it",
                version.0, version.1
            )
        })?)
    } else if version.1 == 11 {
        // 3.11 without --opcodes still needs the cache sizes: a caller's instruction
        // pointer rests in the caches of its call instruction, whose bytes may look like
        // a return instruction (see `CodeInfo::instr_starts`).
        opcode_tables(&mem, version)
    } else {
        None
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    Ok(Target {
        mem: Box::new(mem),
        layout,
        runtime,
        types,
        pid,
        opcodes,
    })
}

#[cfg(test)]
mod tests {
    use super::super::memory::FakeMemory;
    use super::*;

    #[test]
    fn unsupported_versions_get_a_clear_error() {
        let mem = FakeMemory::new();
        for v in [(3, 10, 0), (3, 12, 4), (3, 16, 0), (2, 7, 18)] {
            let e = detect_layout(&mem, 0x1000, v).err().expect("must refuse");
            assert!(e.contains("not supported"), "{v:?}: {e}");
        }
        // 3.13+: no readable _Py_DebugOffsets is an error, not a crash.
        let e = detect_layout(&mem, 0x1000, (3, 14, 0)).err().unwrap();
        assert!(e.contains("_Py_DebugOffsets"), "{e}");
    }
}

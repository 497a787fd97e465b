//! Finding the running interpreter's layout, in-process.
//!
//! - `_PyRuntime` is found with `dlsym` (it is exported by `libpython` and by statically
//!   linked interpreters alike).
//! - 3.13 and later: its first bytes are `_Py_DebugOffsets`; the few fields they lack
//!   come from the tables generated from each version's headers.
//! - 3.9 to 3.12: the generated layout of the version (`layout/static_layout.rs`).
//! - Anything else: a clear error.
//!
//! Nothing here depends on the headers of the interpreter tach was built against, so one
//! extension (abi3) records on every version.

// `detect_layout` and `opcode_tables_from` serve the attach from outside too; the rest
// finds this process's interpreter, for the Python extension (feature `python-record`).
#[cfg(feature = "python-record")]
use std::ffi::CString;

#[cfg(feature = "python-record")]
use super::target::Target;
#[cfg(any(test, feature = "python-record"))]
use crate::record::interpreter::layout::StaticLayout;
use crate::record::interpreter::layout::{
    extras, generated_opcode_tables, DebugOffsetsLayout, InterpreterLayout, OpcodeTables,
    DEBUG_OFFSETS_READ,
};
#[cfg(feature = "python-record")]
use crate::record::interpreter::resolve::Types;
use crate::record::process::memory::MemoryReader;
#[cfg(feature = "python-record")]
use crate::record::process::memory::ProcessVmReader;

/// Looks a symbol up in the process (the executable and every loaded library).
#[cfg(feature = "python-record")]
pub fn symbol(name: &str) -> Option<u64> {
    let c = CString::new(name).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a valid C string only looks the name up.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
    (!p.is_null()).then_some(p as u64)
}

/// The layout of a CPython 3.13+ interpreter whose `_PyRuntime` is at `runtime`: its
/// `_Py_DebugOffsets`, completed from the generated extras of its version.
pub fn detect_layout(
    mem: &dyn MemoryReader,
    runtime: u64,
    version: (u8, u8, u8),
) -> Result<Box<dyn InterpreterLayout>, String> {
    match (version.0, version.1) {
        (3, 13..=15) => {
            let mut raw = vec![0u8; DEBUG_OFFSETS_READ];
            mem.read(runtime, &mut raw)
                .map_err(|e| format!("cannot read _Py_DebugOffsets: {e}"))?;
            let mut l = DebugOffsetsLayout::parse(&raw)?;
            let got = l.version();
            if (got.0, got.1) != (version.0, version.1) {
                return Err(format!(
                    "_Py_DebugOffsets says CPython {}.{}, but this is {}.{}",
                    got.0, got.1, version.0, version.1
                ));
            }
            if let Some(e) = extras(version.0, version.1) {
                l.supplement(e);
            }
            Ok(Box::new(l))
        }
        (a, b) => Err(format!(
            "CPython {a}.{b} is not supported by the tach recorder (3.9 to 3.15 are)"
        )),
    }
}

/// The layout of the interpreter running this process.
#[cfg(any(test, feature = "python-record"))]
fn this_layout(
    mem: &dyn MemoryReader,
    runtime: u64,
    version: (u8, u8, u8),
    pid: i32,
) -> Result<Box<dyn InterpreterLayout>, String> {
    match (version.0, version.1) {
        (3, 9..=12) => StaticLayout::for_process(version, mem, runtime, pid, "this process")
            .map(|l| Box::new(l) as Box<_>)
            .map_err(|e| e.to_string()),
        _ => detect_layout(mem, runtime, version),
    }
}

/// Opcode tables for `--opcodes`, and for 3.11's and 3.12's inline caches.
#[cfg(feature = "python-record")]
pub fn opcode_tables(mem: &dyn MemoryReader, version: (u8, u8, u8)) -> Option<OpcodeTables> {
    opcode_tables_from(mem, version, symbol("_PyOpcode_Deopt"))
}

/// Opcode tables of CPython `version`: generated from its headers (3.11+), else the
/// interpreter's own `_PyOpcode_Deopt` at `exported_deopt` (found by `dlsym` in-process,
/// in its ELF symbols from outside). None for 3.9 and 3.10.
pub fn opcode_tables_from(
    mem: &dyn MemoryReader,
    version: (u8, u8, u8),
    exported_deopt: Option<u64>,
) -> Option<OpcodeTables> {
    match (version.0, version.1) {
        (3, 11..=12) => generated_opcode_tables(version.0, version.1),
        (3, 13..) => {
            let deopt = extras(version.0, version.1)
                .and_then(|e| e.deopt)
                .or_else(|| {
                    let mut t = [0u8; 256];
                    mem.read(exported_deopt?, &mut t).ok()?;
                    Some(t)
                })?;
            Some(OpcodeTables {
                deopt,
                caches: None,
            })
        }
        _ => None,
    }
}

/// Everything needed to sample this process. `version` is `sys.version_info`; `types`
/// the addresses of the interpreter's type objects and `None`.
#[cfg(feature = "python-record")]
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
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let layout = this_layout(&mem, runtime, version, pid)?;
    // Also without --opcodes: 3.11's and 3.12's cache sizes tell an instruction from its
    // inline caches, where a caller's instruction pointer rests (`CodeInfo::instr_starts`).
    let opcodes = opcode_tables(&mem, version);
    if want_opcodes && opcodes.is_none() {
        return Err(format!(
            "opcodes cannot be recorded on CPython {}.{}: tach reads instructions from \
             3.11 on (record without --opcodes)",
            version.0, version.1
        ));
    }
    Ok(Target {
        mem: Box::new(mem),
        layout,
        runtime,
        types,
        pid: pid as u64,
        opcodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::process::memory::FakeMemory;

    #[test]
    fn unsupported_versions_get_a_clear_error() {
        let mem = FakeMemory::new();
        for v in [(3, 8, 18), (3, 16, 0), (2, 7, 18)] {
            let e = this_layout(&mem, 0x1000, v, 1).err().expect("must refuse");
            assert!(e.contains("not supported"), "{v:?}: {e}");
        }
        // 3.9-3.12: the generated layout, checked against the process: unreadable
        // memory is an error, not a crash.
        for minor in 9..=12 {
            let e = this_layout(&mem, 0x1000, (3, minor, 0), 1).err().unwrap();
            assert!(e.contains("_PyRuntime.main_thread"), "3.{minor}: {e}");
        }
        // 3.13+: no readable _Py_DebugOffsets is an error, not a crash.
        let e = detect_layout(&mem, 0x1000, (3, 14, 0)).err().unwrap();
        assert!(e.contains("_Py_DebugOffsets"), "{e}");
    }
}

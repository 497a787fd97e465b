//! Finding the interpreter of another process: `tach record --pid`, `tach dump`.
//!
//! - `/proc/PID/maps` lists the files the process mapped. The one exporting `_PyRuntime`
//!   (`libpython3.X.so`, or the executable of a statically linked interpreter) is read
//!   by its path, or through `/proc/PID/root` for a process in a container.
//! - Its dynamic symbols give `_PyRuntime`, `Py_Version` and the type objects the sampler
//!   validates with, relocated by where the file is mapped.
//! - 3.13 and later: the layout is the target's own `_Py_DebugOffsets`
//!   ([`crate::record::discovery::in_process::detect_layout`]), with the few fields it lacks generated from
//!   that version's headers.
//! - 3.9 to 3.12: the layout generated from that version's headers
//!   ([`crate::record::interpreter::layout::StaticLayout`]), picked by the target's version: `Py_Version` from 3.11,
//!   the `PY_VERSION` string in the interpreter's file before.
//! - Other versions and free-threaded builds get a clear error.
//!
//! Reading another process needs the permission `ptrace` needs; a refusal names the
//! ways to get it.

use super::target::Target;
use crate::record::discovery::in_process::{detect_layout, opcode_tables_from};
use crate::record::interpreter::layout::{FitError, StaticLayout};
use crate::record::interpreter::resolve::Types;
use crate::record::process::elf::{open_mapped, ElfError};
use crate::record::process::maps::mapped_files;
use crate::record::process::memory::{MemoryReader, ProcessVmReader, ReadError};

/// What to do when the kernel refuses to let us read a process.
pub const PERMISSION_HELP: &str = "Reading another process's memory needs the permission \
ptrace needs: run tach as the same user with ptrace allowed \
(/proc/sys/kernel/yama/ptrace_scope 0, or 1 for a child of tach: `tach record -- python app.py`), \
as root, or with CAP_SYS_PTRACE (in a container: docker run --cap-add SYS_PTRACE). \
Or record in-process: python -m tach run app.py";

/// Why a process could not be attached to.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no process {pid} (it has exited, or never existed)")]
    NoProcess { pid: i32 },
    #[error("cannot read process {pid}: {detail}.\n{PERMISSION_HELP}")]
    Permission { pid: i32, detail: String },
    #[error(
        "process {pid} ({exe}) is not a Python process: none of its mapped files exports \
         _PyRuntime"
    )]
    NotPython { pid: i32, exe: String },
    #[error(
        "process {pid} runs CPython {version}, which tach cannot record from outside \
         (it can: 3.9 to 3.15, not free-threaded)"
    )]
    Unsupported { pid: i32, version: String },
    #[error("process {pid}: {what}")]
    Layout { pid: i32, what: String },
    /// The interpreter is mapped but has not initialised its runtime yet (a program
    /// tach has just started): worth trying again.
    #[error("process {pid}: its CPython {version} runtime is not initialised yet")]
    Starting { pid: i32, version: String },
    #[error("process {pid}: {source}")]
    Elf {
        pid: i32,
        #[source]
        source: ElfError,
    },
}

impl AttachError {
    /// The process is gone (or never was): what a recording that outlived its target
    /// sees, not a failure of tach.
    pub fn is_gone(&self) -> bool {
        matches!(self, AttachError::NoProcess { .. })
    }
}

/// Is this file name one an interpreter's runtime may live in?
fn may_hold_python(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.contains("python")
}

/// `3.12` from `libpython3.12.so.1.0`, `python3.12` or `python3.12d`, for versions too old
/// to export `Py_Version`.
fn version_from_name(path: &str) -> Option<(u8, u8)> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let at = name.find("python")? + "python".len();
    let rest = &name[at..];
    let (major, rest) = rest.split_once('.')?;
    let minor: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((major.parse().ok()?, minor.parse().ok()?))
}

fn os_error(pid: i32, e: std::io::Error) -> AttachError {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => AttachError::NoProcess { pid },
        Some(libc::EPERM) | Some(libc::EACCES) => AttachError::Permission {
            pid,
            detail: e.to_string(),
        },
        _ => AttachError::Layout {
            pid,
            what: e.to_string(),
        },
    }
}

fn read_error(pid: i32, what: &str, e: ReadError) -> AttachError {
    match e {
        ReadError::Os(libc::ESRCH) => AttachError::NoProcess { pid },
        ReadError::Os(libc::EPERM) | ReadError::Os(libc::EACCES) => AttachError::Permission {
            pid,
            detail: format!("{what}: {e}"),
        },
        _ => AttachError::Layout {
            pid,
            what: format!("{what}: {e}"),
        },
    }
}

/// The interpreter found in a process: where its runtime is, and its version.
#[derive(Debug, Clone)]
pub struct Found {
    /// The file that exports `_PyRuntime`, as the process names it.
    pub file: String,
    pub runtime: u64,
    /// Major, minor, micro.
    pub version: (u8, u8, u8),
    pub types: Types,
    /// `_PyOpcode_Deopt`, where the interpreter exports it (3.15).
    pub deopt: Option<u64>,
}

/// Finds the interpreter in process `pid`. `NotPython` while a just-started process has
/// not mapped it yet.
pub fn find(pid: i32) -> Result<Found, AttachError> {
    let maps =
        std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| os_error(pid, e))?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mem = ProcessVmReader::new(pid);
    for file in mapped_files(&maps) {
        if !may_hold_python(&file.path) && file.path != exe {
            continue;
        }
        let Some(elf) = open_mapped(pid, &file).map_err(|e| os_error(pid, e))? else {
            continue;
        };
        let at = |name: &str| elf.runtime_address(name, file.lowest);
        let Some(runtime) = at("_PyRuntime") else {
            continue;
        };
        let version = match at("Py_Version") {
            Some(addr) => {
                let hex = mem
                    .read_u64(addr)
                    .map_err(|e| read_error(pid, "reading Py_Version", e))?;
                ((hex >> 24) as u8, (hex >> 16) as u8, (hex >> 8) as u8)
            }
            // Before 3.11: the minor version from the file's name, the micro one
            // from the PY_VERSION string compiled into it.
            None => match version_from_name(&file.path) {
                Some((a, b)) => (a, b, elf.version_micro(a, b).unwrap_or(0)),
                None => (0, 0, 0),
            },
        };
        let types = Types {
            code: at("PyCode_Type").unwrap_or(0),
            unicode: at("PyUnicode_Type").unwrap_or(0),
            bytes: at("PyBytes_Type").unwrap_or(0),
            none: at("_Py_NoneStruct").unwrap_or(0),
        };
        return Ok(Found {
            file: file.path,
            runtime,
            version,
            types,
            deopt: at("_PyOpcode_Deopt"),
        });
    }
    Err(AttachError::NotPython { pid, exe })
}

/// Everything needed to sample process `pid` from outside.
pub fn attach(pid: i32, want_opcodes: bool) -> Result<Target, AttachError> {
    let found = find(pid)?;
    let mem = ProcessVmReader::new(pid);
    // A read of the runtime tells a permission problem from a missing process.
    mem.read_u64(found.runtime)
        .map_err(|e| read_error(pid, "reading _PyRuntime", e))?;
    let (major, minor, micro) = found.version;
    let free_threaded = found.file.rsplit('/').next().is_some_and(|n| {
        n.strip_prefix("libpython")
            .or_else(|| n.strip_prefix("python"))
            .is_some_and(|v| v.split(".so").next().is_some_and(|v| v.ends_with('t')))
    });
    if !(major == 3 && (9..=15).contains(&minor)) || free_threaded {
        let version = if found.version == (0, 0, 0) {
            "of unknown version".to_string()
        } else {
            format!(
                "{major}.{minor}.{micro}{}",
                if free_threaded {
                    " (free-threaded)"
                } else {
                    ""
                }
            )
        };
        return Err(AttachError::Unsupported { pid, version });
    }
    if found.types.code == 0 || found.types.none == 0 {
        return Err(AttachError::Layout {
            pid,
            what: format!(
                "{} does not export PyCode_Type and _Py_NoneStruct",
                found.file
            ),
        });
    }
    if minor <= 12 {
        return legacy_target(pid, mem, found, want_opcodes);
    }
    let layout = detect_layout(&mem, found.runtime, found.version)
        .map_err(|what| AttachError::Layout { pid, what })?;
    // The generated table of the version, else the interpreter's exported one.
    let opcodes = opcode_tables_from(&mem, found.version, found.deopt);
    if want_opcodes && opcodes.is_none() {
        return Err(AttachError::Layout {
            pid,
            what: format!(
                "opcodes cannot be recorded on CPython {major}.{minor}: this tach has no \
                 de-specialisation table for it and the interpreter exports no \
                 _PyOpcode_Deopt"
            ),
        });
    }
    Ok(Target {
        mem: Box::new(mem),
        layout,
        runtime: found.runtime,
        types: found.types,
        pid: pid as u64,
        opcodes,
    })
}

/// The target of a CPython 3.9-3.12 process, from the generated layout of its version,
/// checked against the process before any sample is taken.
fn legacy_target(
    pid: i32,
    mem: ProcessVmReader,
    found: Found,
    want_opcodes: bool,
) -> Result<Target, AttachError> {
    let (major, minor, _) = found.version;
    let layout = StaticLayout::for_process(found.version, &mem, found.runtime, pid, &found.file)
        .map_err(|e| match e {
            FitError::Read { what, source } => read_error(pid, what, source),
            FitError::NotStarted => AttachError::Starting {
                pid,
                version: format!("{major}.{minor}"),
            },
            FitError::Mismatch(what) => AttachError::Layout { pid, what },
        })?;
    // 3.11 and 3.12 carry their tables (also needed without --opcodes: a caller's
    // instruction pointer may rest in inline caches); 3.9 and 3.10 have none.
    let opcodes = layout.opcode_tables();
    if want_opcodes && opcodes.is_none() {
        return Err(AttachError::Layout {
            pid,
            what: format!(
                "opcodes cannot be recorded on CPython {major}.{minor}: tach reads \
                 instructions from 3.11 on (record without --opcodes)"
            ),
        });
    }
    Ok(Target {
        mem: Box::new(mem),
        layout: Box::new(layout),
        runtime: found.runtime,
        types: found.types,
        pid: pid as u64,
        opcodes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_file_names() {
        assert_eq!(
            version_from_name("/usr/lib/libpython3.10.so.1.0"),
            Some((3, 10))
        );
        assert_eq!(version_from_name("/usr/bin/python3.9"), Some((3, 9)));
        assert_eq!(version_from_name("/usr/bin/python3.13t"), Some((3, 13)));
        assert_eq!(version_from_name("/usr/bin/python3"), None);
        assert!(may_hold_python("/x/libpython3.12.so.1.0"));
        assert!(!may_hold_python("/python/lib/libc.so.6"));
    }

    #[test]
    fn a_process_that_is_not_python_is_named() {
        // This test binary is not Python.
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        match find(pid) {
            Err(AttachError::NotPython { pid: p, exe }) => {
                assert_eq!(p, pid);
                assert!(!exe.is_empty());
            }
            other => panic!("{other:?}"),
        }
        // A pid that cannot exist (above the kernel's limit).
        assert!(find(i32::MAX).unwrap_err().is_gone());
    }
}

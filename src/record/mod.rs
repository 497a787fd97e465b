//! The recorder: samples a Python interpreter and streams TACH. The `tach` binary
//! attaches from outside (`process_vm_readv`, ptrace to pause); the Python extension
//! (feature `python-record`) samples its own interpreter in-process. The same sampler
//! does both.
//!
//! From Rust: [`attach()`] finds a running interpreter's layout, [`Session::start`]
//! records it into a file with [`RecordOptions`], and [`options::RecordCommand`] does
//! what `tach record` does (start or attach, stop on a signal or the program's exit).
//!
//! - `memory`: fault-tolerant reads behind `memory::MemoryReader` (`process_vm_readv`).
//! - `layout`: interpreter layouts behind `layout::InterpreterLayout`, one per
//!   version family (3.9-3.12 from tables generated from their headers, 3.13+ from
//!   `_Py_DebugOffsets` completed by generated extras), all filling one `layout::Offsets`
//!   grouped per CPython object.
//! - `resolve`: code objects to names and locations, cached by address with a
//!   fingerprint that notices reused addresses.
//! - `linetable`: CPython's location table.
//! - `sampler`: the native sampling thread, the statistics and the TACH writer, split by
//!   concern (`window`, `threads`, `unwind`, `resolution`, `session`).
//! - `clock`: the monotonic and thread CPU clocks (shared with the Python writer).
//! - `pause`: pausing the thread that holds the GIL while a tick reads the stacks
//!   (`ptrace_pause` when it is another process's).
//! - `target`: finding this process's interpreter and its layout.
//! - `attach` (with `elf`): finding another process's interpreter, for `tach record
//!   --pid` and `tach dump`.
//! - `maps`: `/proc/PID/maps`, parsed once for `attach`, `asyncio` and `native`.
//! - `asyncio`: the target's asyncio tasks, for async-aware stacks (`--async-aware`);
//!   `stack_tasks`: the running task found from the stack on 3.11-3.13.
//! - `native`: native stacks of another process's threads (`--native`), walked with
//!   framehop and spliced with the Python frames.
//! - `children`: `--subprocesses`, recording the target's child Python processes.
//! - `options`: how to record (one typed spec for every front end) and `tach record`.
//!
//! See `docs/recorder.md` for the design.

pub(crate) mod asyncio;
pub(crate) mod attach;
mod children;
pub(crate) mod clock;
mod elf;
// `tach dump` lives here and is reached only from the command line.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub(crate) mod external;
mod layout;
mod linetable;
mod maps;
mod memory;
mod native;
#[cfg(fuzzing)]
pub(crate) use native::fuzzing::walk as native_fuzz_walk;
pub mod options;
mod pause;
mod ptrace_pause;
pub(crate) mod resolve;
mod sampler;
mod stack_tasks;
pub(crate) mod target;

pub use attach::{attach, AttachError};
pub use sampler::{RecordOptions, RecordStats, SampleSink, Session, Target};

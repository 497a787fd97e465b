//! The recorder: samples a Python interpreter, in-process or from outside, and streams
//! TACH.
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
//! - `asyncio`: the target's asyncio tasks, for async-aware stacks (`--async-aware`).
//! - `native`: native stacks of another process's threads (`--native`), walked with
//!   framehop and spliced with the Python frames.
//! - `children`: `--subprocesses`, recording the target's child Python processes.
//! - `options`: how to record (one typed spec for every front end) and `tach record`.
//!
//! See `docs/recorder.md` for the design.

// The sampler runs inside the Python extension (feature `python-record`) and, attached from
// outside, in the `tach` binary. What only the in-process side calls is allowed to be
// unused in a build without the extension.
pub(crate) mod asyncio;
pub(crate) mod attach;
mod children;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
pub(crate) mod clock;
mod elf;
pub(crate) mod external;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
mod layout;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
mod linetable;
mod maps;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
mod memory;
mod native;
pub mod options;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
mod pause;
mod ptrace_pause;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
pub(crate) mod resolve;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
mod sampler;
#[cfg_attr(not(feature = "python-record"), allow(dead_code))]
pub(crate) mod target;

pub use sampler::{RecordOptions, RecordStats, SampleSink, Session};

//! The in-process recorder: samples the Python interpreter it runs in and streams TACH.
//!
//! - `memory`: fault-tolerant reads behind `memory::MemoryReader` (`process_vm_readv`).
//! - `layout`: interpreter layouts behind `layout::InterpreterLayout`, one per
//!   version family (3.11 from build-time headers, 3.13+ from `_Py_DebugOffsets`).
//! - `resolve`: code objects to names and locations, cached by address with a
//!   fingerprint that notices reused addresses.
//! - `linetable`: CPython's location table.
//! - `sampler`: the native sampling thread, the statistics and the TACH writer, split by
//!   concern (`window`, `threads`, `unwind`, `resolution`, `session`).
//! - `clock`: the monotonic and thread CPU clocks (shared with the Python writer).
//! - `pause`: pausing the thread that holds the GIL while a tick reads the stacks.
//! - `target`: finding this process's interpreter and its layout.
//! - `cli`: the command line that runs a Python program under the recorder.
//!
//! See `docs/recorder.md` for the design.

// The sampler runs inside the Python extension (feature `python`) today; the `tach`
// binary alone only starts `python -m tach run`. Built without the extension, the
// sampling half of this module is compiled (and checked) but not called.
pub(crate) mod cli;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) mod clock;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod layout;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod linetable;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod memory;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod pause;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) mod resolve;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
mod sampler;
#[cfg_attr(not(feature = "python"), allow(dead_code))]
pub(crate) mod target;

pub use sampler::{RecordOptions, RecordStats, Session};

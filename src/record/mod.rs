//! The recorder: samples a Python interpreter and streams TACH. The `tach` binary
//! attaches from outside (`process_vm_readv`, ptrace to pause); the Python extension
//! (feature `python-record`) samples its own interpreter in-process. The same sampler
//! does both.
//!
//! From Rust: [`attach()`] finds a running interpreter's layout, [`Session::start`]
//! records it into a file with [`RecordOptions`], and [`RecordCommand`] does what
//! `tach record` does (start or attach, stop on a signal or the program's exit).
//!
//! The parts, by what each knows; each imports only the ones above it in this list
//! (but for the pausers in `process/`, which hand `native/` the registers of the threads
//! they stop, as `native::Registers`):
//! - `process/`: another process and its memory, nothing of CPython: fault-tolerant
//!   reads (`memory`), `/proc/PID/maps` (`maps`), the ELF files it mapped (`elf`),
//!   whether it still runs (`running`), and pausing its threads while a tick reads them
//!   (`pause` in-process, `ptrace_pause` from outside).
//! - `native/`: native stacks of another process's threads (`--native`), walked with
//!   framehop and spliced with the Python frames.
//! - `interpreter/`: CPython's objects: the layouts per version family (`layout`: 3.9-3.12
//!   from tables generated from their headers, 3.13+ from `_Py_DebugOffsets` completed by
//!   generated extras, all filling one `layout::Offsets`), code objects to names and
//!   locations (`resolve`, `linetable`), asyncio's tasks (`asyncio`, `stack_tasks`).
//! - `discovery/`: finding an interpreter in a process and building the [`Target`] the
//!   sampler reads: `attach` from outside (`tach record --pid`, `tach dump`),
//!   `in_process` for the Python extension.
//! - `sampler/`: the sampling thread, the statistics and the TACH writer, split by
//!   concern (`window`, `threads`, `unwind`, `resolution`, `session`, ...).
//! - The front door, what the commands use: `options` (the [`options::RecordSpec`] every
//!   front end parses, and its validation), `command` (`tach record`), `outside`
//!   (starting a session on another process), `recording` (the loop of a recording
//!   from outside), `children` (`--subprocesses`), `signals` (Ctrl-C and SIGTERM),
//!   `segments` (`--rotate`: naming, retention, the hook, the finishing thread),
//!   `summary` (the line printed at the end), `dump` (`tach dump`) and `clock` (the
//!   monotonic and thread CPU clocks, shared with the Python writer).
//!
//! The Python front ends' own command lines (`python -m tach run`, `%%tach`) are beside
//! the extension, in `python::run_args`. See `docs/recorder.md` for the design.

mod children;
pub(crate) mod clock;
mod command;
mod discovery;
// `tach dump` is reached only from the command line.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
mod dump;
mod interpreter;
mod native;
#[cfg(fuzzing)]
pub(crate) use native::fuzzing::walk as native_fuzz_walk;
pub mod options;
mod outside;
mod process;
mod recording;
mod sampler;
pub mod segments;
mod session;
mod signals;
mod summary;

#[cfg(feature = "cli")]
pub(crate) use command::{exit_code, STARTUP};
pub use command::{exit_status, RecordCommand, RecordCommandError, RECORDING_FAILED};
pub use discovery::attach::{attach, AttachError};
#[cfg(feature = "python-record")]
pub(crate) use discovery::in_process::this_process;
pub use discovery::Target;
#[cfg(feature = "cli")]
pub(crate) use dump::{dump, render_dump};
#[cfg(feature = "python-record")]
pub(crate) use interpreter::resolve::Types;
#[cfg(feature = "cli")]
pub(crate) use outside::{start_session, write_empty, ExternalError, Recorded};
pub use sampler::{RecordOptions, RecordStats, SampleSink};
pub use session::Session;
#[cfg(feature = "cli")]
pub(crate) use signals::{catch_stop_signals, take_stop_signal};

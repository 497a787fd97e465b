//! What a recording samples: an interpreter found in a process, with everything needed
//! to read it. Built by `attach` (another process) and `in_process` (this one).

use crate::record::interpreter::layout::{InterpreterLayout, OpcodeTables};
use crate::record::interpreter::resolve::Types;
use crate::record::process::memory::MemoryReader;

/// Everything the sampler needs to know about the interpreter it samples.
pub struct Target {
    pub mem: Box<dyn MemoryReader>,
    pub layout: Box<dyn InterpreterLayout>,
    /// Address of `_PyRuntime`.
    pub runtime: u64,
    pub types: Types,
    /// The pid whose main thread gets MAIN_THREAD (its tid equals the pid on Linux).
    pub pid: u64,
    pub opcodes: Option<OpcodeTables>,
}

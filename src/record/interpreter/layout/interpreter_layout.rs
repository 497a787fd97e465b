//! The trait each version family's layout implements, and what a frame's owner byte says.

use super::offsets::Offsets;
use crate::record::process::memory::{MemoryReader, ReadError};

/// What a frame's `owner` byte says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameOwner {
    /// A Python frame to report.
    Python,
    /// An interpreter-internal frame (entry shim, C-stack frame): skip it.
    Internal,
    /// A value no version uses: the frame chain changed under us.
    Invalid,
}

/// One CPython version family's layout.
pub trait InterpreterLayout: Send + Sync {
    /// The interpreter version this layout describes.
    fn version(&self) -> (u8, u8, u8);
    /// A human-readable description ("CPython 3.11.7 (offsets generated from the CPython
    /// 3.11.7 headers)").
    fn describe(&self) -> String;
    fn offsets(&self) -> &Offsets;
    /// The innermost frame of a thread, from the image of its thread state.
    fn current_frame(&self, mem: &dyn MemoryReader, tstate: &[u8]) -> Result<u64, ReadError>;
    /// Where the innermost-frame pointer of the thread state at `tstate_addr` lives (its
    /// image is `tstate`), so that it can be read again in the same system call as the
    /// frames; `None` when the thread has no frames.
    fn current_frame_slot(&self, tstate_addr: u64, tstate: &[u8])
        -> Result<Option<u64>, ReadError>;
    fn frame_owner(&self, owner: u8) -> FrameOwner;
}

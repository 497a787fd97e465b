//! The garbage collector of the interpreter being sampled, and the `<GC>` frame.

use std::io::{Seek, Write};

use crate::tach::Writer;

/// The garbage collector of the interpreter being sampled, as this tick read it, and the
/// `<GC>` frame that marks a collection in the stacks.
#[derive(Debug, Default)]
pub(super) struct GcState {
    /// A collection runs.
    pub collecting: bool,
    /// 3.15: the frame that triggered it (0: not known).
    pub trigger: u64,
    /// Writer index of the `<GC>` frame, once interned.
    frame_id: Option<u32>,
}

impl GcState {
    /// A new segment's writer: the `<GC>` frame is interned again when next needed.
    pub(super) fn forget_frame(&mut self) {
        self.frame_id = None;
    }

    /// The `<GC>` frame's writer index, if it was interned.
    pub(super) fn frame_id(&self) -> Option<u32> {
        self.frame_id
    }

    /// The `<GC>` frame's writer index, interned the first time.
    pub(super) fn intern<W: Write + Seek>(&mut self, writer: &mut Writer<W>) -> u32 {
        *self
            .frame_id
            .get_or_insert_with(|| writer.frame("~", "<GC>", None, None))
    }
}

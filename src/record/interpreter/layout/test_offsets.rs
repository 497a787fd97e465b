//! The hand-written layout of the unit tests' fake interpreters (small round offsets,
//! in the shape of 3.11's objects), written once for every test that lays one out in
//! fake memory.

use super::offsets::{
    BytesOffsets, CodeOffsets, FrameOffsets, GilOffsets, InterpreterOffsets, Offsets,
    PyObjectOffsets, RuntimeOffsets, ThreadOffsets, UnicodeOffsets,
};

/// The fake interpreter's offsets.
pub(crate) fn offsets() -> Offsets {
    Offsets {
        runtime: RuntimeOffsets {
            interpreters_head: 8,
            ..RuntimeOffsets::default()
        },
        interp: InterpreterOffsets {
            next: 0,
            threads_head: 16,
            id: 24,
            ..InterpreterOffsets::default()
        },
        gil: GilOffsets {
            locked: Some(32),
            holder: Some(40),
            in_runtime: true,
        },
        thread: ThreadOffsets {
            size: 96,
            next: 8,
            interp: 16,
            frame: 24,
            native_thread_id: 32,
            current_exception: Some(40),
            exc_info: Some(48),
            exc_info_is_pointer: true,
            ..ThreadOffsets::default()
        },
        frame: FrameOffsets {
            size: 64,
            previous: 0,
            executable: 8,
            instr: 16,
            owner: 24,
            executable_tag_mask: 3,
            ..FrameOffsets::default()
        },
        code: CodeOffsets {
            header_size: 64,
            filename: 24,
            qualname: 32,
            linetable: 40,
            firstlineno: 48,
            adaptive: 64,
            ..CodeOffsets::default()
        },
        object: PyObjectOffsets {
            ob_type: 8,
            ob_size: 16,
        },
        bytes: BytesOffsets { ob_sval: 32 },
        unicode: UnicodeOffsets {
            state: 32,
            length: 16,
            ascii_size: 40,
            compact_size: 56,
        },
    }
}

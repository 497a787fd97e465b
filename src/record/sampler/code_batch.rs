//! The batched read of a stack's code objects, in one system call.

use crate::tach::MAX_STACK_DEPTH;

use super::stack::{is_mark, RawFrame};
use crate::record::interpreter::layout::Offsets;
use crate::record::interpreter::resolve::CodeCache;
use crate::record::process::memory::{MemoryReader, ReadError};

/// Bytecode read along with a code object's header, at most (longer functions are read
/// in part: the check for a return instruction is skipped past it).
const MAX_BYTECODE_UNITS: u64 = 4096;

/// The batched read of a stack's code objects: each distinct one's header (and bytecode)
/// and the code units at the frames' instruction pointers, in one system call. Kept from
/// one sample to the next so that resolving a stack allocates nothing.
pub(super) struct CodeBatch {
    /// The distinct code objects of the stack.
    codes: Vec<u64>,
    /// Per raw frame, its code object's index in `codes` (`usize::MAX`: a mark).
    code_slot: Vec<usize>,
    /// Where each of `codes` was read in `header`: (start, length).
    code_at: Vec<(usize, usize)>,
    /// The ranges read, and what they read.
    ranges: Vec<(u64, usize)>,
    pub(super) header: Vec<u8>,
}

impl Default for CodeBatch {
    fn default() -> Self {
        CodeBatch {
            codes: Vec::with_capacity(64),
            code_slot: Vec::with_capacity(MAX_STACK_DEPTH),
            code_at: Vec::with_capacity(64),
            ranges: Vec::with_capacity(2 * MAX_STACK_DEPTH),
            header: Vec::new(),
        }
    }
}

impl CodeBatch {
    /// Reads the code objects of the frames `raw`, in one system call: each distinct
    /// one's header once (a recursion repeats the same one), with its bytecode when the
    /// cache knows its size (to tell a caller already on its return instruction), then
    /// the code unit at each frame's instruction pointer when `read_units`. Returns where
    /// those code units start in the bytes read.
    pub(super) fn read(
        &mut self,
        raw: &[RawFrame],
        o: &Offsets,
        cache: &CodeCache,
        mem: &dyn MemoryReader,
        read_units: bool,
    ) -> Result<usize, ReadError> {
        let hsize = o.code.header_size as usize;
        self.codes.clear();
        self.code_slot.clear();
        for f in raw {
            if is_mark(f.code) {
                self.code_slot.push(usize::MAX);
                continue;
            }
            let slot = match self.codes.iter().position(|&c| c == f.code) {
                Some(k) => k,
                None => {
                    self.codes.push(f.code);
                    self.codes.len() - 1
                }
            };
            self.code_slot.push(slot);
        }
        // Each code object's header, and its bytecode when its size is known from an
        // earlier sample: to tell a caller already on its return instruction.
        self.ranges.clear();
        self.code_at.clear();
        let mut at = 0;
        for &c in &self.codes {
            let units = match o.frame.return_opcodes {
                Some(_) => cache.units_of(c).unwrap_or(0).min(MAX_BYTECODE_UNITS),
                None => 0,
            };
            let len = hsize + 2 * units as usize;
            self.ranges.push((c, len));
            self.code_at.push((at, len));
            at += len;
        }
        if read_units {
            for f in raw {
                if !is_mark(f.code) {
                    self.ranges.push((f.instr, 2));
                }
            }
        }
        let units_at = at;
        let units_len = if read_units { 2 * raw.len() } else { 0 };
        if self.header.len() < units_at + units_len {
            self.header.resize(units_at + units_len, 0);
        }
        if mem.read_many(&self.ranges, &mut self.header) != self.ranges.len() {
            return Err(ReadError::Invalid("code object unreadable"));
        }
        Ok(units_at)
    }

    /// Where the code object of the `i`-th raw frame was read: (start, length).
    pub(super) fn code_of(&self, i: usize) -> (usize, usize) {
        self.code_at[self.code_slot[i]]
    }
}

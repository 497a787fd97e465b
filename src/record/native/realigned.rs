//! Frames of functions that realign their stack (GCC's "DRAP" prologue, which numpy's
//! AVX-512 sort kernels use to get 64-byte aligned locals).
//!
//! Such a function saves the address of its caller's stack (the CFA) in its own frame
//! and ANDs `rsp` down to the alignment, so its CFA cannot be an offset from a register:
//! the CFI gives it as the expression `DW_OP_breg6 (rbp): N; DW_OP_deref` (the CFA is the
//! word at `rbp + N`). framehop evaluates no CFI expressions and walks such a frame by
//! its frame pointer, which finds the return address (the prologue pushes a copy of it
//! beside the saved `rbp`) and the caller's `rbp`, but gives the caller `rbp + 16` as
//! its stack pointer, which is inside the realigned frame, not the caller's: the
//! caller's own CFI (an offset from `rsp`) then reads garbage, and the walk ends there
//! (numpy's recursive `qsort_` walks ended so; the Python frames of the sort then went
//! after the native ones).
//!
//! So, where a frame's CFA is that expression, the walk corrects framehop's step: the
//! caller's stack pointer is the word at `rbp + N`, and its return address is the word
//! below it. Only that exact expression is read; anything else is left to framehop.

use std::collections::HashMap;

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, Operation, UnwindContext,
    UnwindSection,
};

use super::module::LoadedFile;

/// Lookup addresses whose rule is remembered (a process has only so much code).
const MAX_CACHED: usize = 1 << 16;

/// The rule of each lookup address asked about: `Some(N)` where the CFA is the word at
/// `rbp + N`.
#[derive(Default)]
pub(super) struct RealignedFrames {
    rules: HashMap<u64, Option<i64>>,
    context: Option<Box<UnwindContext<usize>>>,
}

impl RealignedFrames {
    /// The offset N from `rbp` of the word holding the CFA, where the frame at file
    /// address `svma` of `file` (lookup address `addr`) realigns its stack.
    pub(super) fn cfa_slot(&mut self, addr: u64, file: &LoadedFile, svma: u64) -> Option<i64> {
        if let Some(&rule) = self.rules.get(&addr) {
            return rule;
        }
        let context = self
            .context
            .get_or_insert_with(|| Box::new(UnwindContext::new()));
        let rule = rbp_deref_cfa(file, svma, context);
        if self.rules.len() >= MAX_CACHED {
            self.rules.clear();
        }
        self.rules.insert(addr, rule);
        rule
    }

    pub(super) fn clear(&mut self) {
        self.rules.clear();
    }
}

/// N where the CFA at `svma` is `DW_OP_breg6 (rbp): N; DW_OP_deref`; None for every other
/// rule, or where the tables cannot be read (they are untrusted: gimli bounds each read).
fn rbp_deref_cfa(file: &LoadedFile, svma: u64, context: &mut UnwindContext<usize>) -> Option<i64> {
    let eh = file.eh_frame.as_ref()?;
    let mut bases = BaseAddresses::default().set_eh_frame(eh.svma.start);
    if let Some(text) = &file.text {
        bases = bases.set_text(text.svma.start);
    }
    let eh_frame = EhFrame::new(&eh.data[..], LittleEndian);
    let fde = match &file.eh_frame_hdr {
        Some(hdr) => {
            bases = bases.set_eh_frame_hdr(hdr.svma.start);
            let parsed = EhFrameHdr::new(&hdr.data[..], LittleEndian)
                .parse(&bases, 8)
                .ok()?;
            parsed
                .table()?
                .fde_for_address(&eh_frame, &bases, svma, EhFrame::cie_from_offset)
                .ok()?
        }
        None => eh_frame
            .fde_for_address(&bases, svma, EhFrame::cie_from_offset)
            .ok()?,
    };
    let row = fde
        .unwind_info_for_address(&eh_frame, &bases, context, svma)
        .ok()?;
    let CfaRule::Expression(expression) = row.cfa() else {
        return None;
    };
    let mut ops = expression.get(&eh_frame).ok()?.operations(gimli::Encoding {
        address_size: 8,
        format: gimli::Format::Dwarf32,
        version: 4,
    });
    let offset = match ops.next().ok()?? {
        Operation::RegisterOffset {
            register: gimli::X86_64::RBP,
            offset,
            base_type,
        } if base_type.0 == 0 => offset,
        _ => return None,
    };
    match ops.next().ok()?? {
        Operation::Deref {
            size: 8,
            space: false,
            ..
        } => {}
        _ => return None,
    }
    match ops.next() {
        Ok(None) => Some(offset),
        _ => None,
    }
}

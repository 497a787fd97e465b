//! The unwinder's fuzz entry (`fuzz/fuzz_targets/native.rs`; built only with
//! `--cfg fuzzing`, which cargo-fuzz passes): registers and a stack from the fuzzer's
//! bytes, walked with this process's own modules and unwind tables.
//!
//! Each 8-byte word of the input becomes an address by its low two bits: into this
//! process's code, into the fake stack, zero, or the word itself. So the fuzzer reaches
//! real unwind rules and stacks that point into themselves without having to guess
//! addresses. Every walk must end within its frame and page limits, without a panic.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{module_at, NativeUnwinder, Registers, MAX_NATIVE_FRAMES, MAX_STACK_PAGES};
use crate::record::process::memory::{MemoryReader, ReadError};

/// Where the fake stack lies (an address this process does not map).
const STACK_BASE: u64 = 0x7ff0_0000_0000;
/// The largest fake stack, in bytes.
const MAX_STACK: usize = 64 * 4096;

/// One stack region; every other address is unreadable. Counts its reads.
struct StackImage {
    bytes: Vec<u8>,
    reads: AtomicUsize,
}

impl MemoryReader for StackImage {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let at = addr.wrapping_sub(STACK_BASE) as usize;
        match self.bytes.get(at..at.saturating_add(buf.len())) {
            Some(src) if addr >= STACK_BASE => {
                buf.copy_from_slice(src);
                Ok(())
            }
            _ => Err(ReadError::Os(libc::EFAULT)),
        }
    }
}

thread_local! {
    /// This process's modules, loaded once (each input walks with them).
    static UNWINDER: RefCell<Option<NativeUnwinder>> = const { RefCell::new(None) };
}

/// Walks the stack `data` describes (see the module doc). Panics on a broken bound.
pub fn walk(data: &[u8]) {
    UNWINDER.with(|cell| {
        let mut cell = cell.borrow_mut();
        let unwinder = cell.get_or_insert_with(|| {
            NativeUnwinder::new(std::process::id() as i32).expect("own maps readable")
        });
        // This function's own module: the code words point into.
        let here = walk as *const () as u64;
        let code = module_at(&unwinder.modules, here)
            .map(|m| m.range.clone())
            .unwrap_or(here..here + 1);
        let stack_len = (data.len().saturating_sub(24) & !7).min(MAX_STACK);
        let address = |w: u64| -> u64 {
            let v = w >> 2;
            match w & 3 {
                0 => code.start + v % (code.end - code.start),
                1 => STACK_BASE + v % (stack_len.max(8) as u64),
                2 => 0,
                _ => w,
            }
        };
        let word = |i: usize| -> u64 {
            let mut b = [0u8; 8];
            if let Some(src) = data.get(i * 8..i * 8 + 8) {
                b.copy_from_slice(src);
            }
            u64::from_le_bytes(b)
        };
        let regs = Registers {
            ip: address(word(0)),
            sp: address(word(1)),
            bp: address(word(2)),
        };
        let mut bytes = Vec::with_capacity(stack_len);
        for i in 0..stack_len / 8 {
            bytes.extend_from_slice(&address(word(3 + i)).to_le_bytes());
        }
        let mem = StackImage {
            bytes,
            reads: Default::default(),
        };
        unwinder.walk(regs, &mem);
        assert!(unwinder.addrs.len() <= MAX_NATIVE_FRAMES);
        assert!(unwinder.sps.len() <= unwinder.addrs.len() + 1);
        // A walk reads a page at a time, and may walk twice (once more after reading
        // the maps again).
        let reads = mem.reads.load(Ordering::Relaxed);
        assert!(reads <= 2 * MAX_STACK_PAGES + 4, "{reads} reads");
    });
}

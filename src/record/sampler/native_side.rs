//! `--native`: the sampler's native side, the unwinder and what a splice reuses from one
//! thread to the next.

use std::io::{Seek, Write};

use crate::record::native::splice::NativeKind;
use crate::record::native::{NativeStats, NativeUnwinder, Registers};
use crate::tach::{Location, TachError, Writer, MAX_STACK_DEPTH};

use crate::record::process::memory::MemoryReader;

/// The sampler's native side: the unwinder, what a splice reuses from one thread to the
/// next, and whether a native stack of this tick went wrong (the tick counts as an error).
pub(super) struct NativeSide {
    pub(super) unwinder: NativeUnwinder,
    pub(super) kinds: Vec<NativeKind>,
    pub(super) merged: Vec<u32>,
    /// Addresses of the eval loop's entry frames met in the Python chain just read.
    entry_frames: Vec<u64>,
    /// `-a`: the process's threads (`/proc/PID/task`), and when they were listed.
    pub(super) threads: Vec<u64>,
    threads_listed: Option<std::time::Instant>,
    /// A native stack of this tick could not be read or spliced.
    pub(super) tick_error: bool,
}

/// How often `-a --native` lists the process's threads again (a thread started since
/// is sampled from the next list on).
const THREAD_LIST_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// At most this many threads of the process are listed.
const MAX_LISTED_THREADS: usize = 1 << 14;

impl NativeSide {
    pub(super) fn new(pid: u64) -> Result<NativeSide, TachError> {
        let unwinder = NativeUnwinder::new(pid as i32)
            .map_err(|e| TachError::Usage(format!("--native: {e}")))?;
        Ok(NativeSide {
            unwinder,
            kinds: Vec::with_capacity(crate::record::native::MAX_NATIVE_FRAMES),
            merged: Vec::with_capacity(MAX_STACK_DEPTH),
            entry_frames: Vec::new(),
            threads: Vec::new(),
            threads_listed: None,
            tick_error: false,
        })
    }

    /// The process's threads, listed again when the list is older than
    /// [`THREAD_LIST_INTERVAL`].
    pub(super) fn list_threads(&mut self) {
        if self
            .threads_listed
            .is_some_and(|t| t.elapsed() < THREAD_LIST_INTERVAL)
        {
            return;
        }
        self.threads_listed = Some(std::time::Instant::now());
        self.threads.clear();
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.unwinder.pid())) {
            // In-process, the sampler's own thread is in the list: it cannot pause itself.
            // SAFETY: gettid has no preconditions.
            let own = unsafe { libc::gettid() } as u64;
            self.threads.extend(
                tasks
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
                    .filter(|&t| t != own)
                    .take(MAX_LISTED_THREADS),
            );
            self.threads.sort_unstable();
        }
    }

    /// Walks the stopped thread whose registers are `regs` and classifies each native
    /// frame into `kinds`, interning the frames' names with `writer`. Whether the walk
    /// was cut short.
    pub(super) fn walk_kinds<W: Write + Seek>(
        &mut self,
        regs: Registers,
        mem: &dyn MemoryReader,
        writer: &mut Writer<W>,
    ) -> bool {
        let truncated = self.unwinder.walk(regs, mem);
        let addrs = std::mem::take(&mut self.unwinder.addrs);
        self.kinds.clear();
        let mut intern = |file: &str, func: &str, line: i32| {
            let loc = (line >= 0).then_some(Location {
                lineno: line,
                end_lineno: line,
                column: -1,
                end_column: -1,
            });
            writer.frame(file, func, loc, None)
        };
        for (i, &a) in addrs.iter().enumerate() {
            if self.unwinder.holds_entry_frame(i, a, &self.entry_frames) {
                self.kinds.push(NativeKind::Eval);
                continue;
            }
            self.unwinder.kinds_of(a, &mut intern, &mut self.kinds);
        }
        self.unwinder.addrs = addrs;
        truncated
    }

    /// A new segment's writer: native frames are interned in its tables anew.
    pub(super) fn forget_frames(&mut self) {
        self.unwinder.forget_frames();
    }

    pub(super) fn clear_entry_frames(&mut self) {
        self.entry_frames.clear();
    }

    /// An entry frame of the chain at `addr` (bounded by the chain's depth limit).
    pub(super) fn entry_frame(&mut self, addr: u64) {
        if self.entry_frames.len() < MAX_STACK_DEPTH {
            self.entry_frames.push(addr);
        }
    }

    /// Whether a native stack of this tick went wrong; the next tick starts without.
    pub(super) fn take_tick_error(&mut self) -> bool {
        std::mem::take(&mut self.tick_error)
    }

    pub(super) fn stats(&self) -> &NativeStats {
        &self.unwinder.stats
    }
}

//! The page window: one read of the pages just below a thread's innermost frame (its
//! data stack) holds the whole chain of frames, and the snapshot reads the frame pointer
//! and the thread's other fields in the same system call.

use crate::record::interpreter::layout::field_u64;
use crate::record::process::memory::MemoryReader;

pub(super) const PAGE: u64 = 4096;
/// Pages read at the first frame of a walk; doubled at each miss, up to the maximum.
pub(super) const WINDOW_MIN_PAGES: u64 = 1;
pub(super) const WINDOW_MAX_PAGES: u64 = 16;

/// A copy of the memory just below (and including) a frame.
///
/// Frames of a thread live in its data stack, each caller just below its callee, so
/// one read of the pages below the innermost frame usually holds the whole chain: one
/// system call per stack instead of one per frame. Pages are read from the top down,
/// so that the read stops at the bottom of the mapped region rather than failing.
#[derive(Debug)]
pub(super) struct Window {
    pub(super) base: u64,
    /// Bytes of `buf` in use (from `base`).
    pub(super) len: usize,
    /// Both buffers are allocated once, at the largest window.
    pub(super) buf: Vec<u8>,
    pub(super) scratch: Vec<u8>,
    pub(super) ranges: Vec<(u64, usize)>,
    pub(super) pages: u64,
    /// Pages of data stack the last walk spanned: what the next snapshot reads.
    pub(super) span_pages: u64,
    /// The fields a snapshot read with the stack.
    pub(super) fields: Vec<Option<u64>>,
    /// The last snapshot stopped at a page it could not read (the bottom of a mapping):
    /// asking for more pages would not help.
    pub(super) truncated: bool,
}

/// 8-byte fields a snapshot reads after the stack, at most.
pub(super) const MAX_SNAPSHOT_FIELDS: usize = 2;
/// Places the innermost-frame pointer may be that a snapshot reads, at most (3.11: the
/// C frames of the eval loops the thread was last seen in).
pub(super) const MAX_SLOTS: usize = 4;

impl Default for Window {
    fn default() -> Self {
        let max = (WINDOW_MAX_PAGES * PAGE) as usize;
        Window {
            base: 0,
            len: 0,
            buf: vec![0; max],
            // Room for the pages, the C frame pointer, the frame pointer's slots and
            // the fields of a snapshot.
            scratch: vec![0; max + 8 * (1 + MAX_SLOTS + MAX_SNAPSHOT_FIELDS)],
            fields: Vec::with_capacity(MAX_SNAPSHOT_FIELDS),
            truncated: false,
            ranges: Vec::with_capacity(WINDOW_MAX_PAGES as usize),
            pages: 0,
            span_pages: WINDOW_MIN_PAGES,
        }
    }
}

impl Window {
    pub(super) fn clear(&mut self) {
        self.len = 0;
        self.pages = 0;
        self.fields.clear();
    }

    pub(super) fn get(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let off = addr.checked_sub(self.base)? as usize;
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        self.buf.get(off..end)
    }

    /// Reads the pages that hold [addr, addr + len) and some below them.
    pub(super) fn load(&mut self, mem: &dyn MemoryReader, addr: u64, len: usize) {
        self.len = 0;
        self.pages = (self.pages * 2).clamp(WINDOW_MIN_PAGES, WINDOW_MAX_PAGES);
        let Some(end) = addr.checked_add(len as u64 + PAGE - 1) else {
            return;
        };
        let top = end & !(PAGE - 1);
        if top < PAGE {
            return;
        }
        let top_page = top - PAGE;
        self.ranges.clear();
        for k in 0..self.pages {
            match top_page.checked_sub(k * PAGE) {
                Some(p) if p > 0 => self.ranges.push((p, PAGE as usize)),
                _ => break,
            }
        }
        let n = mem.read_many(&self.ranges, &mut self.scratch);
        let mut page_at = [0usize; WINDOW_MAX_PAGES as usize];
        for (k, at) in page_at[..n].iter_mut().enumerate() {
            *at = k * PAGE as usize;
        }
        self.assemble(top, &page_at[..n]);
    }

    /// Copies pages read top first (at `page_at` in `scratch`; the first one ends at
    /// `top`) into `buf` in address order.
    fn assemble(&mut self, top: u64, page_at: &[usize]) {
        let page = PAGE as usize;
        let pages = page_at.len();
        for (k, &src) in page_at.iter().enumerate() {
            let dst = (pages - 1 - k) * page;
            self.buf[dst..dst + page].copy_from_slice(&self.scratch[src..src + page]);
        }
        self.len = pages * page;
        self.base = top - pages as u64 * PAGE;
    }

    /// Reads, in one system call: the innermost-frame pointer at `slot`, the page that
    /// holds the frame at `guess`, the 8-byte `fields` (the thread's status, into
    /// `self.fields`, `None` if unread) and the pages below. When
    /// the pointer lands in the pages, the innermost frames were copied right after it
    /// was read (the kernel copies the ranges in order), not a system call or two
    /// later, and the status belongs to the same moment: far fewer callees already gone
    /// and callers already past their call. The fields come right after the top page so
    /// that a lower page that cannot be read (the bottom of the data stack's mapping)
    /// stops the read after them, not before.
    ///
    /// 3.11 keeps the pointer in the running eval loop's C frame, which changes when
    /// the thread resumes a generator or calls Python from C: `check` is where the
    /// thread state points at its C frame, and the C frames the slots belong to. That
    /// pointer is read first, and the slot of the C frame it names is taken; none of
    /// them: [`Snapshot::Stale`] with the C frame, for a snapshot from its slot.
    pub(super) fn snapshot(
        &mut self,
        mem: &dyn MemoryReader,
        slots: &[u64],
        guess: u64,
        fsize: usize,
        fields: &[u64],
        check: Option<(u64, &[u64])>,
    ) -> Snapshot {
        let slots = &slots[..slots.len().min(MAX_SLOTS)];
        self.len = 0;
        self.pages = self.pages.clamp(WINDOW_MIN_PAGES, WINDOW_MAX_PAGES);
        let page = PAGE as usize;
        let fields = &fields[..fields.len().min(MAX_SNAPSHOT_FIELDS)];
        let top = guess
            .checked_add(fsize as u64 + PAGE - 1)
            .map_or(0, |end| end & !(PAGE - 1));
        let mut pages_asked = 0;
        self.ranges.clear();
        if let Some((addr, _)) = check {
            self.ranges.push((addr, 8));
        }
        self.ranges.extend(slots.iter().map(|&slot| (slot, 8)));
        if top >= 2 * PAGE {
            self.ranges.push((top - PAGE, page));
            pages_asked = 1;
        }
        self.ranges.extend(fields.iter().map(|&f| (f, 8)));
        if pages_asked == 1 {
            for k in 1..self.pages {
                match (top - PAGE).checked_sub(k * PAGE) {
                    Some(p) if p > 0 => self.ranges.push((p, page)),
                    _ => break,
                }
                pages_asked += 1;
            }
        }
        let n = mem.read_many(&self.ranges, &mut self.scratch);
        // Walk the ranges in order: those before the n-th were read in full.
        let (mut at, mut i) = (0usize, 0usize);
        let mut next = |len: usize| {
            let read = i < n;
            let range = at..at + len;
            at += len;
            i += 1;
            read.then_some(range)
        };
        let current_cframe = check.map(|_| next(8).and_then(|r| field_u64(&self.scratch[r], 0)));
        let mut pointers: [Option<std::ops::Range<usize>>; MAX_SLOTS] = Default::default();
        for p in pointers.iter_mut().take(slots.len()) {
            *p = next(8);
        }
        let mut first = pointers[0].clone();
        let top_page = (pages_asked > 0).then(|| next(page)).flatten();
        self.fields.clear();
        for _ in fields {
            let value = next(8).and_then(|r| field_u64(&self.scratch[r], 0));
            self.fields.push(value);
        }
        // Where the pages read are, top first. The kernel stops at the first range it
        // cannot read, so they are the top page and those just below it.
        let mut page_at = [0usize; WINDOW_MAX_PAGES as usize];
        let mut pages = 0;
        if let Some(r) = top_page {
            page_at[0] = r.start;
            pages = 1;
        }
        for _ in 1..pages_asked {
            if let Some(r) = next(page) {
                page_at[pages] = r.start;
                pages += 1;
            }
        }
        if let (Some(current), Some((_, cframes))) = (current_cframe, check) {
            let Some(current) = current else {
                return Snapshot::Unreadable;
            };
            match cframes.iter().take(slots.len()).position(|&c| c == current) {
                Some(k) => first = pointers[k].clone(),
                None => return Snapshot::Stale(current),
            }
        }
        let Some(first) = first else {
            return Snapshot::Unreadable;
        };
        let pointer = field_u64(&self.scratch[first], 0).unwrap_or(0);
        if pointer == 0 {
            return Snapshot::At(0);
        }
        self.assemble(top, &page_at[..pages]);
        self.truncated = pages < pages_asked;
        if self.get(pointer, fsize).is_none() {
            // No page at the guess (the first read of a thread), or the stack moved
            // out of it.
            return Snapshot::Moved(pointer);
        }
        Snapshot::At(pointer)
    }
}

/// The thread's exception state as fields of a snapshot: the exception being raised
/// (`tstate->current_exception`, 3.11's `curexc_type`), then the one being handled.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ExceptionFields {
    pub(super) addrs: [u64; MAX_SNAPSHOT_FIELDS],
    pub(super) len: usize,
    pub(super) current: bool,
    pub(super) handled_at: Option<usize>,
}

impl ExceptionFields {
    pub(super) fn addrs(&self) -> &[u64] {
        &self.addrs[..self.len]
    }

    /// Whether the thread has an exception, from the values read; `None` if one of them
    /// could not be read.
    pub(super) fn decide(&self, values: &[Option<u64>], none: u64) -> Option<bool> {
        if values.len() != self.len {
            return None;
        }
        let mut any = false;
        if self.current {
            any |= values[0]? != 0;
        }
        if let Some(k) = self.handled_at {
            let v = values[k]?;
            any |= v != 0 && v != none;
        }
        Some(any)
    }
}

/// What [`Window::snapshot`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Snapshot {
    /// The innermost frame is here (0: the thread has none) and the window holds it.
    /// The sample is the stack at the moment this pointer was read. (The pointer was
    /// once read again after the pages, and the frames above the one it then named
    /// trimmed as left: evidence from a later moment that only ever moves a sample from
    /// a callee to its caller, never back, and took about a third of the time of short
    /// calls; see docs/recorder.md.)
    At(u64),
    /// The innermost frame is here, outside the pages read: read again there.
    Moved(u64),
    /// 3.11: the thread runs in another eval loop's C frame (this one; 0: none) than
    /// those whose slots were read.
    Stale(u64),
    /// The frame pointer itself could not be read.
    Unreadable,
}

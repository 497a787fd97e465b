//! The `tach` binary's allocator: the system allocator, with every big block backed by
//! transparent huge pages where the kernel offers them on request (`madvise` mode, the
//! default of many distributions).
//!
//! Why: an export touches tens of megabytes once (a flamegraph's folded lines, the SVG
//! text, the tables of a big profile). With 4 KiB pages that is a page fault per 4 KiB,
//! ~16% of a flamegraph export's time on the synthetic 380-thread profile; with 2 MiB
//! pages it is a fault per 2 MiB. If the kernel refuses (THP off or not built in),
//! `madvise` fails and nothing changes.
//!
//! Small blocks are not advised one by one (that would split the heap into many
//! mappings): they get huge pages through the heap. [`HugePageAlloc::reserve_heap`]
//! (called first thing by `main`) has glibc's heap grow once by a reserve advised onto
//! huge pages, and has every thread allocate from it. A page fault costs about 2 us on
//! the virtual machines tach is measured on, so the faults of the 10 MB of fresh memory
//! a big recording's collapsed export touches (the zstd window, the decoder's buffers,
//! the stack tables) were a tenth of its time; the reserve takes them from about 2,500
//! a run to about 250 (benches/HISTORY.md, "collapsed").

use std::alloc::{GlobalAlloc, Layout, System};

/// The size of a transparent huge page on x86-64 and of the smallest block advised.
const HUGE_PAGE: usize = 2 << 20;

/// `System`, plus `madvise(MADV_HUGEPAGE)` on the whole huge pages inside blocks of
/// at least 2 MiB.
pub struct HugePageAlloc;

fn advise(ptr: *mut u8, size: usize) {
    if ptr.is_null() || size < HUGE_PAGE {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the range lies inside a block we own; MADV_HUGEPAGE only changes how
        // the kernel backs it, never its contents. Failure (THP unavailable) is ignored.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// The heap reserve advised onto huge pages: what an export of a big recording touches
/// (about 15 MB for 2.8 M samples), with room. Only touched pages are memory. Below
/// glibc's largest mmap threshold (32 MiB), so that it comes from the heap.
const HEAP_RESERVE: usize = 24 << 20;
/// Blocks from this size up are mapped on their own (and advised by [`advise`]); below
/// it they come from the heap. glibc's own threshold starts at 128 KiB and moves with
/// what is freed.
const OWN_MAPPING_FROM: usize = 4 << 20;

impl HugePageAlloc {
    /// Makes glibc's heap grow by [`HEAP_RESERVE`], advises that onto huge pages, and has
    /// all threads allocate from it (one arena: the binary's few threads allocate little
    /// and seldom, while a second arena's fresh 4 KiB pages are what this is against).
    /// The reserve is never trimmed away. Call it before any thread starts. Elsewhere
    /// than glibc on Linux it does nothing.
    pub fn reserve_heap() {
        Self::reserve(true);
    }

    /// [`HugePageAlloc::reserve_heap`] for work on every core (`tach query`: polars'
    /// threads allocate and free all the time). glibc keeps its arenas, one a thread up
    /// to its limit: with a single arena those threads wait on its lock, a third of a
    /// fleet query's time (benches/HISTORY.md, "fleet"). Only the main thread's
    /// allocations then come from the reserve.
    pub fn reserve_heap_threaded() {
        Self::reserve(false);
    }

    fn reserve(one_arena: bool) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes glibc's allocation policy; the blocks are
        // allocated and freed here (the filler is never freed); advise is as above.
        unsafe {
            if one_arena {
                libc::mallopt(libc::M_ARENA_MAX, 1);
            }
            libc::mallopt(libc::M_TRIM_THRESHOLD, (2 * HEAP_RESERVE) as libc::c_int);
            // One block of the reserve's size: the heap grows by it, and glibc writes
            // only outside it (its header before, the free rest's header after).
            libc::mallopt(libc::M_MMAP_THRESHOLD, (32 << 20) as libc::c_int);
            let reserve = libc::malloc(HEAP_RESERVE) as usize;
            libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_FROM as libc::c_int);
            if reserve == 0 {
                return;
            }
            // Advised before anything is written inside: a 2 MiB range with one 4 KiB
            // page in it stays on 4 KiB pages.
            advise(reserve as *mut u8, HEAP_RESERVE);
            libc::free(reserve as *mut libc::c_void);
            // The heap's next blocks start where the reserve did, before the first
            // huge page boundary: a block that is never freed takes that stretch (it is
            // address space: nothing writes past its header). A block of n bytes takes
            // n + 8 rounded up to 16 (glibc's chunk header).
            let boundary = reserve.next_multiple_of(HUGE_PAGE);
            if boundary - reserve >= 64 {
                let _filler = libc::malloc(boundary - reserve - 8);
            }
        }
    }
}

// SAFETY: every call is forwarded to `System` unchanged; `advise` does not touch memory.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc_zeroed(layout);
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        advise(new, new_size);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` of the mapping that holds `addr`, from /proc/self/smaps.
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.trim().to_string());
                }
            }
        }
        None
    }

    #[test]
    fn big_blocks_keep_their_contents_and_are_advised() {
        let alloc = HugePageAlloc;
        let small = Layout::from_size_align(8 << 20, 8).unwrap();
        let big = 32 << 20;
        // SAFETY: the blocks are used within their sizes and freed with their layouts.
        unsafe {
            let ptr = alloc.alloc(small);
            assert!(!ptr.is_null());
            for i in (0..small.size()).step_by(4096) {
                *ptr.add(i) = (i / 4096) as u8;
            }
            let ptr = alloc.realloc(ptr, small, big);
            assert!(!ptr.is_null());
            for i in (0..small.size()).step_by(4096) {
                assert_eq!(*ptr.add(i), (i / 4096) as u8, "byte {i} after growing");
            }
            *ptr.add(big - 1) = 7;
            // With transparent huge pages in the kernel, the block's mapping is marked
            // `hg` (MADV_HUGEPAGE), whatever the system-wide mode.
            if std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists() {
                let inner = (ptr as usize).next_multiple_of(HUGE_PAGE) + HUGE_PAGE;
                let flags = vm_flags(inner).expect("the block is mapped");
                assert!(flags.split(' ').any(|f| f == "hg"), "VmFlags: {flags}");
            }
            alloc.dealloc(ptr, Layout::from_size_align(big, 8).unwrap());

            let zeroed = Layout::from_size_align(4 << 20, 4096).unwrap();
            let ptr = alloc.alloc_zeroed(zeroed);
            assert!(!ptr.is_null());
            assert!((0..zeroed.size()).step_by(997).all(|i| *ptr.add(i) == 0));
            alloc.dealloc(ptr, zeroed);
        }
    }
}

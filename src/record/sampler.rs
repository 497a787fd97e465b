//! The sampling thread: every interval, read each thread's Python stack through the
//! [`MemoryReader`] and the [`InterpreterLayout`], and stream it to a TACH [`Writer`].
//!
//! It is a plain native thread. It never takes the GIL, never runs Python code and never
//! calls into the C API; everything it knows comes from fault-tolerant reads, validated
//! before use. A sample that does not validate is dropped and counted.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::tach::{
    CaptureFeatures, Compression, ProfilingMode, Stats, TachError, Writer, MAX_STACK_DEPTH,
};

use super::layout::{field_i32, field_u64, FrameOwner, InterpreterLayout, Offsets};
use super::linetable;
use super::memory::{MemoryReader, ReadError};
use super::pause::Pauser;
use super::resolve::{CodeCache, Fingerprint, OpcodeTables, Types};

/// Status byte bits, with CPython's meanings.
pub use crate::tach::filter::status::{
    GIL_REQUESTED, HAS_EXCEPTION, HAS_GIL, MAIN_THREAD, ON_CPU, UNKNOWN,
};

/// Frames walked per thread before giving up on a chain (a cycle or a corrupt list).
const MAX_WALK: usize = 4096;
/// Thread states followed per interpreter before giving up.
const MAX_THREADS: usize = 1 << 16;
/// How many intervals behind schedule the sampler catches up before skipping ticks.
/// Catching up samples back to back, and a burst of samples taken microseconds apart
/// all land in the same function: that would skew attribution, so the backlog is kept
/// to two ticks and older ones are skipped (and reported as missed).
const MAX_BACKLOG_TICKS: u64 = 2;
/// How often the crash journal is appended to: what a killed process loses, at most.
const JOURNAL_SYNC_US: u64 = 250_000;
/// Interpreters followed before giving up.
const MAX_INTERPRETERS: usize = 256;

/// What to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub path: PathBuf,
    pub interval_us: u64,
    pub mode: ProfilingMode,
    pub all_threads: bool,
    pub opcodes: bool,
    /// Mark garbage collection with a `<GC>` frame (CPython's default; `--no-gc`).
    pub gc: bool,
    pub compression: Compression,
    /// Stop sampling (and finish the file) after this long.
    pub duration: Option<Duration>,
    /// Frames whose file name starts with one of these are left out (the recorder's
    /// own harness).
    pub hidden_prefixes: Vec<String>,
    /// Pause the thread holding the GIL while a tick reads the stacks, so that every
    /// sample describes one moment (see `pause`).
    pub blocking: bool,
}

impl RecordOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        RecordOptions {
            path: path.into(),
            interval_us: 1000,
            mode: ProfilingMode::Wall,
            all_threads: false,
            opcodes: false,
            gc: true,
            compression: Compression::Zstd,
            duration: None,
            hidden_prefixes: Vec::new(),
            blocking: true,
        }
    }

    /// The capture features written in the header's config word.
    pub fn features(&self) -> CaptureFeatures {
        CaptureFeatures {
            all_threads: self.all_threads,
            opcodes: self.opcodes,
            gc: self.gc,
            ..CaptureFeatures::default()
        }
    }
}

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

/// What a recording did, returned by [`Session::stop`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordStats {
    pub path: PathBuf,
    /// Sampling ticks (one per interval, each sampling every thread).
    pub ticks: u64,
    /// Ticks where at least one thread's sample was dropped, or the thread list was
    /// unreadable.
    pub error_ticks: u64,
    /// Thread samples written.
    pub samples: u64,
    /// Thread samples dropped because what was read did not validate.
    pub dropped: u64,
    /// Thread samples left out by the mode (cpu, gil, exception).
    pub filtered: u64,
    pub duration_sec: f64,
    pub sample_rate: f64,
    pub error_rate: f64,
    pub missed_samples: f64,
    pub expected_ticks: u64,
    pub threads: u32,
    pub frames: u32,
    pub strings: u32,
    pub file_size: u64,
    pub code_objects: u64,
    pub reused_addresses: u64,
    /// CPU time the sampling thread used, in seconds (what the recording cost the
    /// machine, whichever core it ran on).
    pub sampler_cpu_sec: f64,
    /// Blocking: ticks read with the GIL holder paused, and pauses that were asked for
    /// and did not take effect within the wait (those ticks read running threads).
    pub paused_ticks: u64,
    pub pause_timeouts: u64,
    /// Set when the file could not be written or the sampler failed.
    pub error: Option<String>,
}

/// `RawFrame::code` of the synthetic `<GC>` frame.
const GC_MARK: u64 = u64::MAX;

/// A raw frame: where its code object is, and its instruction pointer.
#[derive(Debug, Clone, Copy)]
struct RawFrame {
    code: u64,
    instr: u64,
    owner: u8,
    /// The frame above it in the chain is a Python frame it called (not a C call).
    called_python: bool,
}

/// The sampler's state, owned by its thread.
pub struct Sampler {
    target: Target,
    opts: RecordOptions,
    writer: Writer<BufWriter<File>>,
    cache: CodeCache,
    start_us: u64,
    tstate_buf: Vec<u8>,
    frame_buf: Vec<u8>,
    raw: Vec<RawFrame>,
    ranges: Vec<(u64, usize)>,
    header_buf: Vec<u8>,
    stack: Vec<u32>,
    proc_stat: HashMap<u64, File>,
    /// Per thread id: where its innermost frame was at the last sample, the guess that
    /// picks the pages of the next snapshot (3.11 would need a read to find it).
    last_frame: HashMap<u64, u64>,
    /// Per thread id (3.11): the C frames of the eval loops it was last seen in, most
    /// recent first.
    cframes: HashMap<u64, [u64; MAX_SLOTS]>,
    seen_tids: HashSet<u64>,
    stats: RecordStats,
    /// The first error writing the file; sampling stops when set.
    write_error: Option<String>,
    window: Window,
    codes: Vec<u64>,
    code_slot: Vec<usize>,
    /// Where each of `codes` was read in `header_buf`: (start, length).
    code_at: Vec<(usize, usize)>,
    small_buf: Vec<u8>,
    /// (interpreter, thread state) of the main thread, once found.
    main_tstate: Option<(u64, u64)>,
    /// The current interpreter's garbage collector: (collecting, triggering frame).
    gc_state: (bool, u64),
    /// Writer index of the `<GC>` frame, once interned.
    gc_frame_id: Option<u32>,
    /// Why samples were dropped, by reason (a handful of distinct ones).
    drop_reasons: Vec<(ReadError, u64)>,
    /// Pages of data stack the last walk spanned: what the next snapshot reads.
    stack_pages: u64,
    /// Stack reads taken again because the first did not validate, and (with
    /// `TACH_RECORD_DEBUG`) why.
    retries: u64,
    retry_reasons: Vec<(ReadError, u64)>,
    debug: bool,
    /// Samples written so far, for [`Session::samples_written`].
    progress: Arc<AtomicU64>,
    /// Pauses the GIL holder during a tick (`RecordOptions::blocking`, in-process).
    pauser: Option<Pauser>,
}

/// Bytecode read along with a code object's header, at most (longer functions are read
/// in part: the check for a return instruction is skipped past it).
const MAX_BYTECODE_UNITS: u64 = 4096;

/// `_PyInterpreterFrame.owner` of a generator's or coroutine's frame (3.11 to 3.15).
const FRAME_OWNED_BY_GENERATOR: u8 = 1;

/// Reads of one thread's stack before its sample is dropped.
const READ_ATTEMPTS: u32 = 4;

const PAGE: u64 = 4096;
/// Pages read at the first frame of a walk; doubled at each miss, up to the maximum.
const WINDOW_MIN_PAGES: u64 = 1;
const WINDOW_MAX_PAGES: u64 = 16;

/// A copy of the memory just below (and including) a frame.
///
/// Frames of a thread live in its data stack, each caller just below its callee, so
/// one read of the pages below the innermost frame usually holds the whole chain: one
/// system call per stack instead of one per frame. Pages are read from the top down,
/// so that the read stops at the bottom of the mapped region rather than failing.
#[derive(Debug)]
struct Window {
    base: u64,
    /// Bytes of `buf` in use (from `base`).
    len: usize,
    /// Both buffers are allocated once, at the largest window.
    buf: Vec<u8>,
    scratch: Vec<u8>,
    ranges: Vec<(u64, usize)>,
    pages: u64,
    /// The fields a snapshot read with the stack.
    fields: Vec<Option<u64>>,
    /// The last snapshot stopped at a page it could not read (the bottom of a mapping):
    /// asking for more pages would not help.
    truncated: bool,
}

/// 8-byte fields a snapshot reads after the stack, at most.
const MAX_SNAPSHOT_FIELDS: usize = 2;
/// Places the innermost-frame pointer may be that a snapshot reads, at most (3.11: the
/// C frames of the eval loops the thread was last seen in).
const MAX_SLOTS: usize = 4;

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
        }
    }
}

impl Window {
    fn clear(&mut self) {
        self.len = 0;
        self.pages = 0;
        self.fields.clear();
    }

    fn get(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let off = addr.checked_sub(self.base)? as usize;
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        self.buf.get(off..end)
    }

    /// Reads the pages that hold [addr, addr + len) and some below them.
    fn load(&mut self, mem: &dyn MemoryReader, addr: u64, len: usize) {
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
    fn snapshot(
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
struct ExceptionFields {
    addrs: [u64; MAX_SNAPSHOT_FIELDS],
    len: usize,
    current: bool,
    handled_at: Option<usize>,
}

impl ExceptionFields {
    fn addrs(&self) -> &[u64] {
        &self.addrs[..self.len]
    }

    /// Whether the thread has an exception, from the values read; `None` if one of them
    /// could not be read.
    fn decide(&self, values: &[Option<u64>], none: u64) -> Option<bool> {
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
enum Snapshot {
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

/// Offset and length of the interpreter fields a tick reads (id, next, threads head).
fn interp_span(o: &Offsets) -> (u64, usize) {
    let lo = o.interp_id.min(o.interp_next).min(o.interp_threads_head);
    let hi = o.interp_id.max(o.interp_next).max(o.interp_threads_head) + 8;
    (lo, (hi - lo) as usize)
}

/// Offset (from the runtime or the interpreter) and length of the GIL's `locked` flag
/// and `last_holder`, when known.
fn gil_span(o: &Offsets) -> Option<(u64, usize)> {
    let (l, h) = (o.gil_locked?, o.gil_holder?);
    let lo = l.min(h);
    let hi = (l + 4).max(h + 8);
    Some((lo, (hi - lo) as usize))
}

/// (locked, holder) from the bytes of [`gil_span`] starting at offset `lo`.
fn gil_fields(o: &Offsets, bytes: &[u8], lo: u64) -> (bool, u64) {
    let locked = o
        .gil_locked
        .and_then(|off| field_i32(bytes, off - lo))
        .unwrap_or(0);
    let holder = o
        .gil_holder
        .and_then(|off| field_u64(bytes, off - lo))
        .unwrap_or(0);
    (locked != 0, holder)
}

/// Monotonic clock in microseconds (CPython's `time.perf_counter` on Linux).
pub fn monotonic_us() -> u64 {
    let ts = clock_now(libc::CLOCK_MONOTONIC);
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_sec() -> f64 {
    let ts = clock_now(libc::CLOCK_THREAD_CPUTIME_ID);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn clock_now(clock: libc::clockid_t) -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts
}

impl Sampler {
    /// Creates the output file (so that a bad path fails at start, in the caller).
    pub fn new(target: Target, opts: RecordOptions) -> Result<Sampler, TachError> {
        let start_us = monotonic_us();
        let version = target.layout.version();
        let writer = Writer::builder(opts.interval_us)
            .start_time_us(start_us)
            .compression(opts.compression)
            .mode(opts.mode)
            .features(Some(opts.features()))
            .python_version(version)
            .journal(Some(crate::tach::journal::journal_path(&opts.path)))
            .create(&opts.path)?;
        let o = target.layout.offsets();
        let tstate_buf = vec![0u8; o.tstate_size as usize];
        let frame_buf = vec![0u8; o.frame_size as usize];
        let stats = RecordStats {
            path: opts.path.clone(),
            ..RecordStats::default()
        };
        let (opts_blocking, target_pid) = (opts.blocking, target.pid);
        Ok(Sampler {
            target,
            opts,
            writer,
            cache: CodeCache::new(),
            start_us,
            tstate_buf,
            frame_buf,
            raw: Vec::with_capacity(MAX_STACK_DEPTH),
            ranges: Vec::with_capacity(2 * MAX_STACK_DEPTH),
            header_buf: Vec::new(),
            stack: Vec::with_capacity(MAX_STACK_DEPTH),
            proc_stat: HashMap::new(),
            last_frame: HashMap::new(),
            cframes: HashMap::new(),
            seen_tids: HashSet::new(),
            stats,
            write_error: None,
            window: Window::default(),
            codes: Vec::with_capacity(64),
            code_slot: Vec::with_capacity(MAX_STACK_DEPTH),
            code_at: Vec::with_capacity(64),
            small_buf: Vec::with_capacity(256),
            main_tstate: None,
            gc_state: (false, 0),
            gc_frame_id: None,
            drop_reasons: Vec::new(),
            stack_pages: WINDOW_MIN_PAGES,
            retries: 0,
            retry_reasons: Vec::new(),
            debug: std::env::var_os("TACH_RECORD_DEBUG").is_some(),
            progress: Arc::new(AtomicU64::new(0)),
            // Only our own threads can be paused with a signal.
            // SAFETY: getpid has no preconditions.
            pauser: (opts_blocking && target_pid == unsafe { libc::getpid() } as u64)
                .then(Pauser::new)
                .flatten(),
        })
    }

    /// Samples every thread once, at `now_us`. Returns false if the tick had errors.
    pub fn tick(&mut self, now_us: u64) -> bool {
        self.stats.ticks += 1;
        let ok = self.sample_all(now_us).unwrap_or(false);
        if !ok {
            self.stats.error_ticks += 1;
        }
        ok
    }

    fn sample_all(&mut self, now_us: u64) -> Result<bool, ReadError> {
        let o = self.target.layout.offsets().clone();
        let mut ok = true;
        // One read for the runtime's fields (and 3.11's GIL, which lives there), one per
        // interpreter for its fields (and the GIL from 3.12): system calls are the cost.
        let runtime = self.target.runtime;
        let gil = gil_span(&o);
        let mut ranges = vec![(runtime.wrapping_add(o.runtime_interpreters_head), 8)];
        if let (true, Some((lo, len))) = (o.gil_in_runtime, gil) {
            ranges.push((runtime.wrapping_add(lo), len));
        }
        let mut buf = std::mem::take(&mut self.small_buf);
        buf.resize(ranges.iter().map(|r| r.1).sum(), 0);
        if self.target.mem.read_many(&ranges, &mut buf) < ranges.len() {
            self.small_buf = buf;
            return Err(ReadError::Invalid("runtime unreadable"));
        }
        let mut interp = field_u64(&buf, 0).unwrap_or(0);
        let mut gil_state = match (o.gil_in_runtime, gil) {
            (true, Some((lo, _))) => Some(gil_fields(&o, &buf[8..], lo)),
            _ => None,
        };
        self.seen_tids.clear();
        let (ilo, ilen) = interp_span(&o);
        let mut n_interp = 0;
        while interp != 0 && n_interp < MAX_INTERPRETERS {
            n_interp += 1;
            ranges.clear();
            ranges.push((interp.wrapping_add(ilo), ilen));
            if let (false, Some((lo, len))) = (o.gil_in_runtime, gil) {
                ranges.push((interp.wrapping_add(lo), len));
            }
            let gc_at = ranges.iter().map(|r| r.1).sum::<usize>();
            let gc_fields = match (self.opts.gc, o.interp_gc_collecting) {
                (true, Some(c)) => {
                    ranges.push((interp.wrapping_add(c), 4));
                    if let Some(f) = o.interp_gc_frame {
                        ranges.push((interp.wrapping_add(f), 8));
                    }
                    true
                }
                _ => false,
            };
            buf.resize(ranges.iter().map(|r| r.1).sum(), 0);
            if self.target.mem.read_many(&ranges, &mut buf) < ranges.len() {
                ok = false;
                break;
            }
            self.gc_state = if gc_fields {
                (
                    field_i32(&buf, gc_at as u64).unwrap_or(0) != 0,
                    field_u64(&buf, gc_at as u64 + 4).unwrap_or(0),
                )
            } else {
                (false, 0)
            };
            let field = |off: u64| field_u64(&buf, off - ilo).unwrap_or(0);
            let interp_id = field(o.interp_id) as u32;
            let mut tstate = field(o.interp_threads_head);
            let next_interp = field(o.interp_next);
            if let (false, Some((lo, _))) = (o.gil_in_runtime, gil) {
                gil_state = Some(gil_fields(&o, &buf[ilen..], lo));
            }
            if let (Some(_), Some(state)) = (&self.pauser, gil_state) {
                if n_interp == 1 {
                    gil_state = Some(self.pause_gil_holder(&o, interp, state));
                }
            }
            let (gil_locked, gil_holder) = gil_state.unwrap_or((false, 0));
            // Main thread only: go straight to the main thread's state found at an
            // earlier tick (it lives as long as the interpreter), checking that it still
            // is what it was, rather than reading every thread state to find it again.
            if !self.opts.all_threads {
                if let Some((i, ts)) = self.main_tstate {
                    let still = i == interp
                        && self.target.mem.read(ts, &mut self.tstate_buf).is_ok()
                        && field_u64(&self.tstate_buf, o.tstate_interp) == Some(interp)
                        && field_u64(&self.tstate_buf, o.tstate_native_thread_id)
                            == Some(self.target.pid);
                    if still {
                        let tid = self.target.pid;
                        if self
                            .sample_thread(
                                &o, ts, tid, interp_id, now_us, true, gil_locked, gil_holder,
                            )
                            .map_err(|e| self.note_drop(e))
                            .is_err()
                        {
                            self.stats.dropped += 1;
                            ok = false;
                        }
                        interp = next_interp;
                        continue;
                    }
                    if i == interp {
                        self.main_tstate = None;
                    }
                }
            }
            let mut n = 0;
            while tstate != 0 && n < MAX_THREADS {
                n += 1;
                if self.target.mem.read(tstate, &mut self.tstate_buf).is_err() {
                    // A thread state freed while we walked the list: stop here.
                    ok = false;
                    break;
                }
                if field_u64(&self.tstate_buf, o.tstate_interp) != Some(interp) {
                    ok = false;
                    break;
                }
                let next = field_u64(&self.tstate_buf, o.tstate_next).unwrap_or(0);
                let tid = field_u64(&self.tstate_buf, o.tstate_native_thread_id).unwrap_or(0);
                let is_main = tid == self.target.pid;
                // tid 0: a thread state created for a thread that has not started yet
                // (3.13+ create it in the parent); it has no frames and no identity.
                if tid != 0 && (self.opts.all_threads || is_main) {
                    match self.sample_thread(
                        &o, tstate, tid, interp_id, now_us, is_main, gil_locked, gil_holder,
                    ) {
                        Ok(()) => {}
                        Err(e) => {
                            self.note_drop(e);
                            self.stats.dropped += 1;
                            ok = false;
                        }
                    }
                    if !self.opts.all_threads {
                        if self.main_tstate.is_none() {
                            self.main_tstate = Some((interp, tstate));
                        }
                        break;
                    }
                }
                tstate = next;
            }
            interp = next_interp;
        }
        self.small_buf = buf;
        if let Some(p) = &mut self.pauser {
            p.resume();
        }
        // Forget /proc handles of threads that are gone.
        let seen = &self.seen_tids;
        if self.proc_stat.len() > seen.len() {
            self.proc_stat.retain(|tid, _| seen.contains(tid));
        }
        if self.last_frame.len() > seen.len() {
            self.last_frame.retain(|tid, _| seen.contains(tid));
        }
        Ok(ok)
    }

    /// Pauses the thread that holds the main interpreter's GIL, so that no thread's
    /// Python stack changes while the tick reads them, and returns the GIL state that
    /// holds while it is paused. The holder can drop the GIL between the read of the
    /// state and the pause; the state is read again once paused, and a new holder is
    /// paused instead (a few times at most). With no holder, or a thread that cannot be
    /// paused in time, the tick reads running threads as without the pause.
    fn pause_gil_holder(
        &mut self,
        o: &Offsets,
        interp: u64,
        mut state: (bool, u64),
    ) -> (bool, u64) {
        let Some((lo, len)) = gil_span(o) else {
            return state;
        };
        let base = if o.gil_in_runtime {
            self.target.runtime
        } else {
            interp
        };
        let mut gil = [0u8; 64];
        let Some(gil) = gil.get_mut(..len) else {
            return state;
        };
        let mut tid_bytes = [0u8; 8];
        for _ in 0..3 {
            let (locked, holder) = state;
            if !locked || holder == 0 {
                return state;
            }
            if self
                .target
                .mem
                .read(
                    holder.wrapping_add(o.tstate_native_thread_id),
                    &mut tid_bytes,
                )
                .is_err()
            {
                return state;
            }
            let tid = u64::from_ne_bytes(tid_bytes);
            let Some(pauser) = self.pauser.as_mut() else {
                return state;
            };
            if tid == 0 || !pauser.pause(tid) {
                return state;
            }
            if self.target.mem.read(base.wrapping_add(lo), gil).is_err() {
                return state;
            }
            let now = gil_fields(o, gil, lo);
            if now == state {
                return state;
            }
            state = now;
        }
        if let Some(p) = &mut self.pauser {
            p.resume();
        }
        state
    }

    /// Is the thread running on a CPU right now (`R` in /proc/self/task/TID/stat, as
    /// CPython checks)? `None` when it cannot tell.
    fn on_cpu(&mut self, tid: u64) -> Option<bool> {
        if !self.proc_stat.contains_key(&tid) {
            let f = File::open(format!("/proc/{}/task/{tid}/stat", self.target.pid)).ok()?;
            self.proc_stat.insert(tid, f);
        }
        let f = self.proc_stat.get(&tid)?;
        let mut buf = [0u8; 512];
        let n = f.read_at(&mut buf, 0).ok()?;
        let text = &buf[..n];
        let close = text.iter().rposition(|&b| b == b')')?;
        let state = *text.get(close + 2)?;
        Some(state == b'R')
    }

    /// Where the thread's exception state lives, to be read with its stack.
    fn exception_fields(&self, o: &Offsets, tstate: u64) -> ExceptionFields {
        let current = o
            .tstate_current_exception
            .map(|off| tstate.wrapping_add(off));
        let handled = o.tstate_exc_info.and_then(|off| {
            if o.exc_info_is_pointer {
                // The pointer from the thread state image: it changes only when the
                // thread enters or leaves a generator.
                field_u64(&self.tstate_buf, off)
                    .filter(|&p| p != 0)
                    .map(|p| p.wrapping_add(o.err_stackitem_exc_value))
            } else {
                Some(
                    tstate
                        .wrapping_add(off)
                        .wrapping_add(o.err_stackitem_exc_value),
                )
            }
        });
        let mut f = ExceptionFields::default();
        if let Some(a) = current {
            f.addrs[f.len] = a;
            f.len += 1;
        }
        if let Some(a) = handled {
            f.addrs[f.len] = a;
            f.handled_at = Some(f.len);
            f.len += 1;
        }
        f.current = current.is_some();
        f
    }

    /// The exception state from the thread state image and a read (the fallback when
    /// no snapshot read it with the stack).
    fn exception_state(&self, o: &Offsets) -> bool {
        let ts = &self.tstate_buf;
        if let Some(off) = o.tstate_current_exception {
            if field_u64(ts, off).unwrap_or(0) != 0 {
                return true;
            }
        }
        if let Some(off) = o.tstate_exc_info {
            let value = if o.exc_info_is_pointer {
                match field_u64(ts, off) {
                    Some(p) if p != 0 => self
                        .target
                        .mem
                        .read_u64(p.wrapping_add(o.err_stackitem_exc_value))
                        .unwrap_or(0),
                    _ => 0,
                }
            } else {
                field_u64(ts, off.wrapping_add(o.err_stackitem_exc_value)).unwrap_or(0)
            };
            return value != 0 && value != self.target.types.none;
        }
        false
    }

    #[allow(clippy::too_many_arguments)]
    fn sample_thread(
        &mut self,
        o: &Offsets,
        tstate: u64,
        tid: u64,
        interp_id: u32,
        now_us: u64,
        is_main: bool,
        gil_locked: bool,
        gil_holder: u64,
    ) -> Result<(), ReadError> {
        self.seen_tids.insert(tid);
        let mut status = 0u8;
        let has_gil = match o.tstate_holds_gil {
            Some(off) => field_i32(&self.tstate_buf, off).unwrap_or(0) != 0,
            None => gil_locked && gil_holder == tstate,
        };
        if has_gil {
            status |= HAS_GIL;
        } else if let Some(off) = o.tstate_gil_requested {
            if field_i32(&self.tstate_buf, off).unwrap_or(0) != 0 {
                status |= GIL_REQUESTED;
            }
        }
        if is_main {
            status |= MAIN_THREAD;
        }
        // As CPython: the CPU state is only looked up when the mode needs it.
        if matches!(self.opts.mode, ProfilingMode::Cpu | ProfilingMode::All) {
            match self.on_cpu(tid) {
                Some(true) => status |= ON_CPU,
                Some(false) => {}
                None => status |= UNKNOWN,
            }
        } else {
            status |= UNKNOWN;
        }
        let keep = match self.opts.mode {
            ProfilingMode::Cpu => status & ON_CPU != 0,
            ProfilingMode::Gil => status & HAS_GIL != 0,
            // Decided below, from the exception state read with the stack.
            _ => true,
        };
        if !keep {
            self.stats.filtered += 1;
            return Ok(());
        }
        // The exception state is read in the same system call as the stack, just after
        // it: read before, it can belong to another moment than the stack.
        let exc_fields = self.exception_fields(o, tstate);
        let (collecting, gc_frame) = self.gc_state;
        // 3.15 says which frame triggered the collection: <GC> goes just inside it, as
        // CPython puts it. Earlier versions only say that a collection runs: the thread
        // running it holds the GIL, and the collection sits on top of its stack.
        let gc_at =
            (collecting && o.interp_gc_frame.is_some() && gc_frame != 0).then_some(gc_frame);
        let gc_on_top = collecting && o.interp_gc_frame.is_none() && has_gil;
        let layout = &self.target.layout;
        let slot = layout.current_frame_slot(tstate, &self.tstate_buf)?;
        let mut guess = match (slot, self.last_frame.get(&tid)) {
            (None, _) => 0,
            (Some(_), Some(&at)) => at,
            (Some(_), None) => layout.current_frame(&*self.target.mem, &self.tstate_buf)?,
        };
        // The thread runs on while we read it: a read that does not validate (the
        // innermost frame moved, a frame popped under us, a chain that does not end
        // where it should) is taken again, a few times, before the sample is dropped.
        let mut attempt = 1;
        loop {
            let may_retry = attempt < READ_ATTEMPTS;
            match self.read_stack(
                o,
                tstate,
                tid,
                slot,
                &mut guess,
                gc_at,
                gc_on_top,
                &exc_fields,
                may_retry,
            ) {
                Ok(()) => break,
                Err(e) if attempt < READ_ATTEMPTS => {
                    attempt += 1;
                    self.retries += 1;
                    if self.debug {
                        self.note_retry(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if slot.is_some() {
            self.last_frame.insert(tid, guess);
        }
        let has_exception = match exc_fields.decide(&self.window.fields, self.target.types.none) {
            Some(v) => v,
            None => self.exception_state(o),
        };
        if has_exception {
            status |= HAS_EXCEPTION;
        } else if self.opts.mode == ProfilingMode::Exception {
            self.stats.filtered += 1;
            return Ok(());
        }
        match self
            .writer
            .write_sample(tid, interp_id, now_us, status, &self.stack)
        {
            Ok(()) => self.stats.samples += 1,
            Err(e) => {
                if self.write_error.is_none() {
                    self.write_error = Some(e.to_string());
                }
            }
        }
        Ok(())
    }

    /// Whether the frame at `frame` (outside the pages read) belongs to a generator or
    /// coroutine, by its owner byte read now.
    fn is_generator_frame(&self, o: &Offsets, frame: u64) -> bool {
        let mut owner = [0u8; 1];
        self.target
            .mem
            .read(frame.wrapping_add(o.frame_owner), &mut owner)
            .is_ok()
            && owner[0] == FRAME_OWNED_BY_GENERATOR
    }

    /// A snapshot of the thread's innermost frames from the frame pointer at `slot`.
    ///
    /// 3.11: `slot` is in the C frame of the eval loop the thread ran when its state was
    /// read, a system call earlier. A thread that resumed a generator or called Python
    /// from C since then runs in another eval loop, and that slot still names the frame
    /// that made the call: the sample would go to the caller, while a thread that came
    /// back meanwhile leaves a dead C frame and a failed read. Both move time away from
    /// generators and callbacks, never towards them. So the C frame pointer is read
    /// again in the snapshot, with the slots of the C frames the thread was last seen
    /// in, and the slot of the one current at that moment is used; a C frame not among
    /// them takes one more snapshot from its own slot.
    fn snapshot(
        &mut self,
        o: &Offsets,
        tstate: u64,
        tid: u64,
        slot: u64,
        guess: u64,
        fields: &ExceptionFields,
    ) -> Snapshot {
        let fsize = o.frame_size as usize;
        let mem = &*self.target.mem;
        let Some(off) = o.cframe_current_frame else {
            return self
                .window
                .snapshot(mem, &[slot], guess, fsize, fields.addrs(), None);
        };
        let cframe_at = tstate.wrapping_add(o.tstate_frame);
        let read_cframe = slot.wrapping_sub(off);
        let mut cframes = [0u64; MAX_SLOTS];
        let mut slots = [0u64; MAX_SLOTS];
        cframes[0] = read_cframe;
        slots[0] = slot;
        let mut n = 1;
        for &seen in self.cframes.get(&tid).into_iter().flatten() {
            if n < MAX_SLOTS && seen != 0 && !cframes[..n].contains(&seen) {
                cframes[n] = seen;
                slots[n] = seen.wrapping_add(off);
                n += 1;
            }
        }
        let mut snap = self.window.snapshot(
            mem,
            &slots[..n],
            guess,
            fsize,
            fields.addrs(),
            Some((cframe_at, &cframes[..n])),
        );
        let mut current = read_cframe;
        if let Snapshot::Stale(c) = snap {
            current = c;
            snap = if c == 0 {
                Snapshot::At(0)
            } else {
                self.window.snapshot(
                    mem,
                    &[c.wrapping_add(off)],
                    guess,
                    fsize,
                    fields.addrs(),
                    Some((cframe_at, &[c])),
                )
            };
        }
        // Most recent first: the C frame the thread state named, and the one current
        // in the snapshot.
        let seen = self.cframes.entry(tid).or_insert([0; MAX_SLOTS]);
        for c in [read_cframe, current] {
            if c != 0 && seen[0] != c {
                if let Some(k) = seen.iter().position(|&s| s == c) {
                    seen[..=k].rotate_right(1);
                } else {
                    seen.rotate_right(1);
                    seen[0] = c;
                }
            }
        }
        snap
    }

    /// Reads the thread's stack into `self.stack`: a snapshot of its innermost frames,
    /// the walk down the chain, the code objects. `guess` is where the innermost frame
    /// was last seen, updated when the snapshot finds it elsewhere.
    #[allow(clippy::too_many_arguments)]
    fn read_stack(
        &mut self,
        o: &Offsets,
        tstate: u64,
        tid: u64,
        slot: Option<u64>,
        guess: &mut u64,
        gc_at: Option<u64>,
        gc_on_top: bool,
        fields: &ExceptionFields,
        may_retry: bool,
    ) -> Result<(), ReadError> {
        let frame = match slot {
            None => {
                self.window.clear();
                0
            }
            Some(slot) => {
                self.window.pages = self.stack_pages;
                match self.snapshot(o, tstate, tid, slot, *guess, fields) {
                    Snapshot::At(frame) => {
                        if frame != 0 {
                            *guess = frame;
                        }
                        frame
                    }
                    // A generator's or coroutine's frame lives in its object, not in
                    // the data stack, so pages read there would not hold its callers,
                    // and taking the read again picks a later moment, one where the
                    // thread is more likely out of the generator: walk from it here,
                    // its frame read alone, its callers from the pages read.
                    Snapshot::Moved(frame) if self.is_generator_frame(o, frame) => frame,
                    Snapshot::Moved(frame) => {
                        if frame == *guess {
                            // The frame straddles the pages read: take more next time.
                            self.stack_pages = (self.stack_pages * 2).min(WINDOW_MAX_PAGES);
                        }
                        *guess = frame;
                        return Err(ReadError::Invalid(
                            "the innermost frame moved out of the pages read",
                        ));
                    }
                    Snapshot::Unreadable => {
                        return Err(ReadError::Invalid("frame pointer unreadable"));
                    }
                    Snapshot::Stale(_) => {
                        return Err(ReadError::Invalid(
                            "the thread changed eval loops during the read",
                        ));
                    }
                }
            }
        };
        let complete = self.walk(o, frame, gc_at, may_retry)?;
        let base = o
            .tstate_base_frame
            .and_then(|off| field_u64(&self.tstate_buf, off))
            .filter(|&b| b != 0);
        if let (Some(base), Some(last)) = (base, complete) {
            // A chain that does not end at the thread's base frame was torn by a call
            // or return during the read (CPython's check too).
            if last != base {
                return Err(ReadError::Invalid(
                    "frame chain does not end at the base frame",
                ));
            }
        }
        if gc_on_top {
            self.raw.insert(
                0,
                RawFrame {
                    code: GC_MARK,
                    instr: 0,
                    owner: 0,
                    called_python: false,
                },
            );
            self.raw.truncate(MAX_STACK_DEPTH);
        }
        self.resolve_stack(o)
    }

    /// Collects the raw frames of a chain, innermost first, with a `<GC>` frame just
    /// inside `gc_frame`. Returns the last frame of the chain when it was walked to its
    /// end (not cut at the depth limit).
    fn walk(
        &mut self,
        o: &Offsets,
        mut frame: u64,
        gc_frame: Option<u64>,
        may_retry: bool,
    ) -> Result<Option<u64>, ReadError> {
        self.raw.clear();
        let fsize = o.frame_size as usize;
        let mut steps = 0;
        let mut last = 0;
        // The pages the chain spans in the snapshot: the next snapshot reads as many.
        let top = self.window.base + self.window.len as u64;
        let mut lowest = top;
        let mut reloaded = false;
        // Whether the frame just above in the chain was a Python frame of the same eval
        // loop (not an entry frame).
        let mut callee_python = false;
        while frame != 0 && self.raw.len() < MAX_STACK_DEPTH {
            last = frame;
            if gc_frame == Some(frame) {
                self.raw.push(RawFrame {
                    code: GC_MARK,
                    instr: 0,
                    owner: 0,
                    called_python: false,
                });
                if self.raw.len() >= MAX_STACK_DEPTH {
                    break;
                }
            }
            steps += 1;
            if steps > MAX_WALK {
                return Err(ReadError::Invalid("frame chain too long (a cycle?)"));
            }
            let img: &[u8] = match self.window.get(frame, fsize) {
                Some(img) => {
                    if !reloaded {
                        lowest = lowest.min(frame);
                    }
                    img
                }
                None => {
                    // Just below the pages read: the data stack goes on there. Anywhere
                    // else (an entry frame on the C stack, a generator's frame in its
                    // object): read that frame alone.
                    let below = self.window.base.wrapping_sub(frame);
                    let near = self.window.len > 0
                        && frame < self.window.base
                        && below <= WINDOW_MAX_PAGES * PAGE;
                    if near
                        && may_retry
                        && !reloaded
                        && !self.window.truncated
                        && self.stack_pages < WINDOW_MAX_PAGES
                    {
                        // Read later, those frames could be from another moment: take a
                        // snapshot deep enough instead.
                        self.stack_pages = ((top - frame).div_ceil(PAGE) + 1).min(WINDOW_MAX_PAGES);
                        return Err(ReadError::Invalid("the stack runs below the pages read"));
                    }
                    let mut img = None;
                    if near {
                        reloaded = true;
                        self.window.load(&*self.target.mem, frame, fsize);
                        img = self.window.get(frame, fsize);
                    }
                    match img {
                        Some(img) => img,
                        None => {
                            self.target.mem.read(frame, &mut self.frame_buf)?;
                            &self.frame_buf
                        }
                    }
                }
            };
            let owner = *img
                .get(o.frame_owner as usize)
                .ok_or(ReadError::Invalid("short frame"))?;
            let prev = field_u64(img, o.frame_previous).unwrap_or(0);
            let code = field_u64(img, o.frame_executable).unwrap_or(0) & !o.executable_tag_mask;
            let instr = field_u64(img, o.frame_instr).unwrap_or(0);
            match self.target.layout.frame_owner(owner) {
                FrameOwner::Invalid => return Err(ReadError::Invalid("bad frame owner")),
                FrameOwner::Internal => callee_python = false,
                FrameOwner::Python => {
                    if code == 0 {
                        // 3.14+ clear a frame's code when they pop it: the thread
                        // returned from its innermost frame while the snapshot was
                        // taken, and the caller is the innermost now (CPython's unwinder
                        // skips such a frame too). Deeper in the chain, the read is torn.
                        if self.raw.iter().all(|f| f.code == GC_MARK) {
                            frame = prev;
                            continue;
                        }
                        return Err(ReadError::Invalid("frame without code"));
                    }
                    if owner == FRAME_OWNED_BY_GENERATOR && prev == 0 {
                        // A generator or coroutine frame links to the frame that resumed
                        // it only while it runs: it yielded while the snapshot was taken.
                        return Err(ReadError::Invalid(
                            "a suspended generator frame in the chain",
                        ));
                    }
                    if callee_python {
                        if let Some(off) = o.frame_stacktop {
                            // 3.13: a frame the eval loop runs has stacktop -1, one that
                            // called a Python function has it set. A running frame with
                            // callees in the chain returned from them while the snapshot
                            // was taken: they are gone, and it is the innermost.
                            if field_i32(img, off) == Some(-1) {
                                self.raw.retain(|f| f.code == GC_MARK);
                            }
                        }
                    }
                    self.raw.push(RawFrame {
                        code,
                        instr,
                        owner,
                        called_python: callee_python,
                    });
                    // 3.11: the first frame of an eval loop was called from C.
                    let entry = o
                        .frame_is_entry
                        .is_some_and(|off| img.get(off as usize).is_some_and(|&b| b != 0));
                    callee_python = !entry;
                }
            }
            frame = prev;
        }
        self.stack_pages = if reloaded {
            self.window.pages
        } else {
            // One page more than the chain spans: its top moves up and down.
            ((top - lowest).div_ceil(PAGE) + 1).min(WINDOW_MAX_PAGES)
        };
        Ok((frame == 0).then_some(last))
    }

    /// Turns the raw frames into writer frame indices in `self.stack`.
    fn resolve_stack(&mut self, o: &Offsets) -> Result<(), ReadError> {
        self.stack.clear();
        if self.raw.is_empty() {
            return Ok(());
        }
        let hsize = o.code_header_size as usize;
        // Opcodes at the instruction pointer, when the version has no caches to skip.
        let read_units = self.opts.opcodes
            && self
                .target
                .opcodes
                .as_ref()
                .is_some_and(|t| t.caches.is_none());
        // One read for the whole stack: each distinct code object's header once (a
        // recursion repeats the same one), then the code unit at each frame's
        // instruction pointer when opcodes are read there.
        self.codes.clear();
        self.code_slot.clear();
        for f in &self.raw {
            if f.code == GC_MARK {
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
            let units = match o.return_opcodes {
                Some(_) => self.cache.units_of(c).unwrap_or(0).min(MAX_BYTECODE_UNITS),
                None => 0,
            };
            let len = hsize + 2 * units as usize;
            self.ranges.push((c, len));
            self.code_at.push((at, len));
            at += len;
        }
        if read_units {
            for f in &self.raw {
                if f.code != GC_MARK {
                    self.ranges.push((f.instr, 2));
                }
            }
        }
        let units_at = at;
        let units_len = if read_units { 2 * self.raw.len() } else { 0 };
        if self.header_buf.len() < units_at + units_len {
            self.header_buf.resize(units_at + units_len, 0);
        }
        let done = self
            .target
            .mem
            .read_many(&self.ranges, &mut self.header_buf);
        if done != self.ranges.len() {
            return Err(ReadError::Invalid("code object unreadable"));
        }
        let opcode_tables = if self.opts.opcodes {
            self.target.opcodes.as_ref()
        } else {
            None
        };
        // (code, instr, frame index or None if left out, on a return instruction) of the
        // previous frame: deep recursion repeats the same frame many times.
        let mut last: Option<(u64, u64, Option<u32>, bool)> = None;
        let gc_id = self.gc_frame_id;
        let returning = |stack: &mut Vec<u32>| {
            // A frame on its return instruction has unlinked its callees: the frames
            // above it in the chain were read after the thread had left them.
            stack.retain(|&id| Some(id) == gc_id);
        };
        // Index of the frame's code unit in the batched read (GC marks have none).
        let mut unit = 0usize;
        for (i, f) in self.raw.iter().enumerate() {
            if f.code == GC_MARK {
                let id = match self.gc_frame_id {
                    Some(id) => id,
                    None => {
                        let id = self.writer.frame("~", "<GC>", None, None);
                        self.gc_frame_id = Some(id);
                        id
                    }
                };
                self.stack.push(id);
                continue;
            }
            let unit_at = units_at + 2 * unit;
            unit += 1;
            if let Some((c, ip, id, on_return)) = last {
                if c == f.code && ip == f.instr && !read_units {
                    if on_return && f.called_python {
                        returning(&mut self.stack);
                    }
                    if let Some(id) = id {
                        self.stack.push(id);
                    }
                    continue;
                }
            }
            last = Some((f.code, f.instr, None, false));
            let slot = self.code_slot[i];
            let (code_start, code_len) = self.code_at[slot];
            let header = &self.header_buf[code_start..code_start + hsize];
            let fp = Fingerprint::from_header(o, &self.target.types, header)?;
            let entry = self.cache.get(
                &*self.target.mem,
                o,
                &self.target.types,
                f.code,
                header,
                fp,
                &self.opts.hidden_prefixes,
                // Always, where there are any: 3.11's instruction starts (below).
                self.target.opcodes.as_ref(),
            )?;
            let start = f.code.wrapping_add(o.code_adaptive);
            let index = (f.instr.wrapping_sub(start) as i64).div_euclid(2);
            if o.instr_is_prev {
                // 3.11: a frame not yet past RESUME is incomplete (the interpreter hides
                // it from tracebacks too); generator frames are always complete.
                let first = entry.first_traceable.unwrap_or(0) as i64;
                if f.owner != FRAME_OWNED_BY_GENERATOR && index < first {
                    continue;
                }
            }
            if index < 0 || index as u64 >= entry.code_units {
                return Err(ReadError::Invalid("instruction pointer outside its code"));
            }
            // The code unit at the instruction, when the bytecode was read with the header.
            let unit_byte = hsize + 2 * index as usize;
            // 3.11: a caller's instruction pointer rests on the last cache entry of its
            // call (CALL, or BINARY_SUBSCR calling a class's __getitem__), whose low byte
            // is data (a function version...) and may equal RETURN_VALUE's opcode: only
            // an instruction start can be a return instruction.
            let at_instruction = entry
                .instr_starts
                .as_ref()
                .and_then(|s| s.get(index as usize))
                .is_none_or(|&(start, _)| i64::from(start) == index);
            let on_return = match o.return_opcodes {
                Some(ops) if at_instruction && unit_byte < code_len => {
                    ops.contains(&u16::from(self.header_buf[code_start + unit_byte]))
                }
                _ => false,
            };
            if on_return && f.called_python {
                returning(&mut self.stack);
            }
            last = Some((f.code, f.instr, None, on_return));
            if entry.hidden {
                continue;
            }
            let index = index as u32;
            let opcode = match opcode_tables {
                None => 255u8,
                Some(t) => match &entry.instr_starts {
                    Some(starts) => starts.get(index as usize).map(|s| s.1).unwrap_or(255),
                    None => {
                        let unit = header_unit(&self.header_buf, unit_at);
                        t.deopt[unit as usize]
                    }
                },
            };
            let key = (index, opcode);
            let id = match entry.frames.get(&key) {
                Some(&id) => id,
                None => {
                    let loc =
                        linetable::locate(&entry.linetable, entry.fingerprint.firstlineno, index)
                            .filter(|l| l.lineno != -1);
                    let op = (opcode != 255).then_some(opcode);
                    let id = self.writer.frame(&entry.filename, &entry.qualname, loc, op);
                    entry.frames.insert(key, id);
                    id
                }
            };
            self.stack.push(id);
            last = Some((f.code, f.instr, Some(id), on_return));
        }
        Ok(())
    }

    /// Finishes the file: stats block, tables, footer, header.
    fn note_drop(&mut self, e: ReadError) {
        count_reason(&mut self.drop_reasons, e);
    }

    fn note_retry(&mut self, e: ReadError) {
        count_reason(&mut self.retry_reasons, e);
    }

    pub fn finish(mut self, end_us: u64) -> RecordStats {
        // TACH_RECORD_DEBUG=1: why samples were dropped, for diagnosing a recorder.
        if self.debug {
            eprintln!("tach: {} stack reads taken again", self.retries);
            if let Some(p) = &self.pauser {
                eprintln!("tach: {} pauses, {} timed out", p.paused, p.timeouts);
            }
            for (reason, n) in &self.retry_reasons {
                eprintln!("tach: read again {n} times: {reason}");
            }
            for (reason, n) in &self.drop_reasons {
                eprintln!("tach: dropped {n} samples: {reason}");
            }
        }
        let s = &mut self.stats;
        let duration = end_us.saturating_sub(self.start_us) as f64 / 1e6;
        let interval = self.opts.interval_us.max(1) as f64 / 1e6;
        s.duration_sec = duration;
        s.sample_rate = if duration > 0.0 {
            s.ticks as f64 / duration
        } else {
            0.0
        };
        s.error_rate = if s.ticks > 0 {
            s.error_ticks as f64 / s.ticks as f64 * 100.0
        } else {
            0.0
        };
        s.expected_ticks = (duration / interval) as u64;
        s.missed_samples = if s.expected_ticks > 0 && s.expected_ticks > s.ticks {
            (s.expected_ticks - s.ticks) as f64 / s.expected_ticks as f64 * 100.0
        } else {
            0.0
        };
        s.code_objects = self.cache.resolved;
        s.reused_addresses = self.cache.reused;
        s.sampler_cpu_sec = thread_cpu_sec();
        if let Some(p) = &self.pauser {
            s.paused_ticks = p.paused;
            s.pause_timeouts = p.timeouts;
        }
        self.writer.set_stats(Stats::new(
            s.duration_sec,
            s.sample_rate,
            Some(s.error_rate),
            Some(s.missed_samples),
        ));
        let mut stats = self.stats.clone();
        match self.writer.finish() {
            Ok(sum) => {
                stats.threads = sum.threads;
                stats.frames = sum.frames;
                stats.strings = sum.strings;
                stats.file_size = sum.file_size;
                stats.samples = sum.samples;
            }
            Err(e) => stats.error = Some(e.to_string()),
        }
        stats
    }

    /// Runs the sampling loop until `stop` is set or the duration has passed, then
    /// finishes the file.
    pub fn run(mut self, stop: &AtomicBool) -> RecordStats {
        let interval = self.opts.interval_us.max(1);
        let deadline = self
            .opts
            .duration
            .map(|d| self.start_us + d.as_micros() as u64);
        let mut next = self.start_us + interval;
        let mut next_sync = self.start_us + JOURNAL_SYNC_US;
        let mut failure = None;
        // Wake up on time: the default timer slack (50 us) is 5% of a 1 kHz interval.
        // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        // Best effort: a sampler that gets the CPU late samples the moments when the
        // profiled threads are descheduled, which skews attribution on a busy machine.
        // Raising its priority needs privileges; without them this silently fails.
        // SAFETY: gettid and setpriority on this thread only.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, -10);
        }
        while !stop.load(Ordering::Acquire) {
            let now = monotonic_us();
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            if now < next {
                std::thread::park_timeout(Duration::from_micros(next - now));
                continue;
            }
            self.tick(now);
            self.progress
                .store(self.writer.sample_count(), Ordering::Relaxed);
            if let Some(e) = self.write_error.take() {
                failure = Some(e);
                break;
            }
            if now >= next_sync {
                next_sync = now + JOURNAL_SYNC_US;
                if let Err(e) = self.writer.sync_journal(now) {
                    eprintln!("tach: {e}; recording on without a crash journal");
                }
            }
            next += interval;
            // Behind schedule (a late wake-up on a busy machine): catch up, but by at
            // most MAX_BACKLOG_TICKS; older ticks are skipped and show as missed.
            let backlog = MAX_BACKLOG_TICKS * interval;
            if now > next + backlog {
                next += (now - next - backlog) / interval * interval;
            }
        }
        let mut stats = self.finish(monotonic_us());
        if stats.error.is_none() {
            stats.error = failure;
        }
        stats
    }
}

fn count_reason(reasons: &mut Vec<(ReadError, u64)>, e: ReadError) {
    match reasons.iter_mut().find(|(r, _)| *r == e) {
        Some((_, n)) => *n += 1,
        None => reasons.push((e, 1)),
    }
}

fn header_unit(buf: &[u8], at: usize) -> u8 {
    buf.get(at).copied().unwrap_or(0)
}

/// A recording in progress: the sampling thread and the flag that stops it.
pub struct Session {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<RecordStats>,
    path: PathBuf,
    progress: Arc<AtomicU64>,
}

impl Session {
    /// Creates the file and starts sampling.
    pub fn start(target: Target, opts: RecordOptions) -> Result<Session, TachError> {
        let path = opts.path.clone();
        let sampler = Sampler::new(target, opts)?;
        let progress = sampler.progress.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tach-sampler".into())
            .spawn(move || {
                let path = sampler.opts.path.clone();
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sampler.run(&flag)))
                {
                    Ok(stats) => stats,
                    Err(_) => RecordStats {
                        path,
                        error: Some("the sampling thread failed; the file is incomplete".into()),
                        ..RecordStats::default()
                    },
                }
            })
            .map_err(|e| TachError::Usage(format!("cannot start the sampling thread: {e}")))?;
        Ok(Session {
            stop,
            thread,
            path,
            progress,
        })
    }

    pub fn path(&self) -> &PathBuf {
        &self.path
    }

    /// Samples written so far (after the last tick): what a crash test compares the
    /// recovered file against.
    pub fn samples_written(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// Whether the sampler has finished on its own (its duration ran out).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stops sampling, finishes the file and returns what was recorded.
    pub fn stop(self) -> RecordStats {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let path = self.path.clone();
        self.thread.join().unwrap_or_else(|_| RecordStats {
            path,
            error: Some("the sampling thread failed".into()),
            ..RecordStats::default()
        })
    }

    /// Abandons the session without touching the file (in a forked child, where the
    /// sampling thread does not exist).
    pub fn abandon(self) {
        std::mem::forget(self);
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::FrameOwner;
    use super::super::memory::FakeMemory;
    use super::*;

    struct TestLayout(Offsets);

    impl InterpreterLayout for TestLayout {
        fn version(&self) -> (u8, u8, u8) {
            (3, 99, 0)
        }
        fn describe(&self) -> String {
            "test".into()
        }
        fn offsets(&self) -> &Offsets {
            &self.0
        }
        fn current_frame(&self, _: &dyn MemoryReader, ts: &[u8]) -> Result<u64, ReadError> {
            field_u64(ts, self.0.tstate_frame).ok_or(ReadError::Null)
        }
        fn current_frame_slot(&self, ts: u64, _: &[u8]) -> Result<Option<u64>, ReadError> {
            Ok(Some(ts + self.0.tstate_frame))
        }
        fn frame_owner(&self, owner: u8) -> FrameOwner {
            match owner {
                0..=2 => FrameOwner::Python,
                3 => FrameOwner::Internal,
                _ => FrameOwner::Invalid,
            }
        }
    }

    fn offsets() -> Offsets {
        Offsets {
            runtime_interpreters_head: 8,
            interp_next: 0,
            interp_threads_head: 16,
            interp_id: 24,
            gil_locked: Some(32),
            gil_holder: Some(40),
            gil_in_runtime: true,
            tstate_size: 96,
            tstate_next: 8,
            tstate_interp: 16,
            tstate_frame: 24,
            tstate_native_thread_id: 32,
            tstate_current_exception: Some(40),
            tstate_exc_info: Some(48),
            exc_info_is_pointer: true,
            frame_size: 64,
            frame_previous: 0,
            frame_executable: 8,
            frame_instr: 16,
            frame_owner: 24,
            executable_tag_mask: 3,
            code_header_size: 64,
            code_filename: 24,
            code_qualname: 32,
            code_linetable: 40,
            code_firstlineno: 48,
            code_adaptive: 64,
            ob_type: 8,
            var_ob_size: 16,
            bytes_sval: 32,
            unicode_state: 32,
            unicode_length: 16,
            unicode_ascii_size: 40,
            unicode_compact_size: 56,
            ..Offsets::default()
        }
    }

    /// Bytes in each region of `fake_interpreter`.
    const SIZE: usize = 1 << 14;

    /// Regions of a fake interpreter (runtime, frames, code objects, strings), with
    /// the runtime's interpreter pointer, a filename, and four code objects `func0` to
    /// `func3` of 8 code units (unit 5: a return instruction, 0x53) with a location
    /// table. Returns the memory, the type pointers and the regions' addresses.
    fn fake_interpreter() -> (FakeMemory, Types, [u64; 4]) {
        let (ra, rb, rc, rd) = (0x10_0000u64, 0x20_0000u64, 0x30_0000u64, 0x40_0000u64);
        let types = Types {
            code: 0x50_0008,
            unicode: 0x50_0010,
            bytes: 0x50_0018,
            none: 0x50_0020,
        };
        let mut m = FakeMemory::new();
        for r in [ra, rb, rc, rd] {
            m.map(r, vec![0; SIZE]);
        }
        m.put_u64(ra + 8, ra + 0x100);
        let put_str = |m: &mut FakeMemory, at: u64, text: &[u8]| {
            m.put_u64(at + 8, types.unicode);
            m.put_u64(at + 16, text.len() as u64);
            m.put(at + 32, &((1u32 << 2) | (1 << 5) | (1 << 6)).to_ne_bytes());
            m.put(at + 40, text);
        };
        put_str(&mut m, rd, b"file.py");
        m.put_u64(rd + 0x800 + 8, types.bytes);
        m.put_u64(rd + 0x800 + 16, 2);
        m.put(rd + 0x800 + 32, &[0x80 | (13 << 3) | 7, 2]);
        for c in 0..4u64 {
            put_str(&mut m, rd + 0x100 * (c + 1), format!("func{c}").as_bytes());
            let code = rc + 0x200 * c;
            m.put_u64(code + 8, types.code);
            m.put_u64(code + 16, 8);
            m.put_u64(code + 24, rd);
            m.put_u64(code + 32, rd + 0x100 * (c + 1));
            m.put_u64(code + 40, rd + 0x800);
            m.put(code + 48, &1i32.to_ne_bytes());
            for unit in 0..8u64 {
                let op: u8 = if unit == 5 { 0x53 } else { 0x01 };
                m.put(code + 64 + 2 * unit, &[op, 0]);
            }
        }
        (m, types, [ra, rb, rc, rd])
    }

    /// A well-formed interpreter image (runtime, interpreter, 4 threads, frame chains,
    /// code objects, strings), then the same image with more and more words replaced
    /// by random values: whatever the sampler reads, it must neither panic nor loop,
    /// and the file must stay valid.
    #[test]
    fn corrupted_memory_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut image, types, [ra, rb, rc, rd]) = fake_interpreter();
        let interp = ra + 0x100;
        image.put_u64(ra + 32, 1); // GIL locked, by thread 0
        image.put_u64(ra + 40, ra + 0x200);
        image.put_u64(interp + 16, ra + 0x200);
        for t in 0..4u64 {
            let ts = ra + 0x200 + 0x100 * t;
            let next = if t < 3 { ts + 0x100 } else { 0 };
            image.put_u64(ts + 8, next);
            image.put_u64(ts + 16, interp);
            image.put_u64(ts + 32, 100 + t);
            // frames: a chain of 20 + 10t frames, each caller just below its callee
            let depth = 20 + 10 * t;
            let base = rb + 0x1000 * t;
            for j in 0..depth {
                let f = base + 64 * j;
                image.put_u64(f, if j == 0 { 0 } else { f - 64 });
                let code = rc + 0x200 * (j % 4);
                image.put_u64(f + 8, code);
                image.put_u64(f + 16, code + 64 + 2 * (j % 8));
            }
            image.put_u64(ts + 24, base + 64 * (depth - 1));
        }
        let dir = std::env::temp_dir().join(format!("tach-garbage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for round in 0..40u64 {
            let mut mem = image.clone();
            // round 0: intact; then up to 200 random words per region
            for _ in 0..round * 5 {
                let region = [ra, rb, rc, rd][(rand() % 4) as usize];
                let at = region + (rand() % (SIZE as u64 / 8)) * 8;
                let v = match rand() % 4 {
                    0 => [ra, rb, rc, rd][(rand() % 4) as usize] + rand() % SIZE as u64,
                    1 => rand() % 8,
                    2 => types.code,
                    _ => rand(),
                };
                mem.put_u64(at, v);
            }
            let target = Target {
                mem: Box::new(mem),
                layout: Box::new(TestLayout(offsets())),
                runtime: ra,
                types,
                pid: 100,
                opcodes: None,
            };
            let path = dir.join(format!("g{round}.tach"));
            let mut opts = RecordOptions::new(&path);
            // every fourth round: the main thread only (its cached thread state)
            opts.all_threads = round % 4 != 3;
            opts.mode = [
                ProfilingMode::Wall,
                ProfilingMode::Gil,
                ProfilingMode::Exception,
            ][(round % 3) as usize];
            let mut s = Sampler::new(target, opts).unwrap();
            for t in 0..50 {
                s.tick(1000 + t);
            }
            let stats = s.finish(1_000_000);
            assert_eq!(stats.ticks, 50);
            assert!(stats.error.is_none());
            if round == 0 {
                // the intact image: every thread sampled at every tick, full stacks
                assert_eq!(
                    (stats.samples, stats.dropped, stats.error_ticks),
                    (200, 0, 0)
                );
            }
            let f = crate::tach::TachFile::open(&path).unwrap();
            let samples = f.collect_samples().unwrap();
            if round == 0 {
                let depths: Vec<usize> = samples.iter().take(4).map(|s| s.stack.len()).collect();
                assert_eq!(depths, [20, 30, 40, 50]);
                assert_eq!(samples[0].status, HAS_GIL | UNKNOWN | MAIN_THREAD);
                assert_eq!(f.funcname(samples[0].stack[0]), "func3");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Records `ticks` samples of one thread whose frame chain is `frames`, innermost
    /// first: (code object 0-3, or `None` for a cleared code pointer; instruction index;
    /// stacktop). Code object `c` is `func{c}`; its unit 5 is a return instruction.
    fn record_chain(
        frames: &[(Option<u64>, u64, i32)],
        o: Offsets,
        ticks: u64,
    ) -> (RecordStats, Vec<Vec<String>>) {
        record_chain_owned(frames, 0, o, ticks)
    }

    /// As `record_chain`, with `owner` as the innermost frame's owner.
    fn record_chain_owned(
        frames: &[(Option<u64>, u64, i32)],
        owner: u8,
        o: Offsets,
        ticks: u64,
    ) -> (RecordStats, Vec<Vec<String>>) {
        record_chain_with(frames, owner, o, ticks, None)
    }

    /// As `record_chain_owned`, with the target's opcode tables.
    fn record_chain_with(
        frames: &[(Option<u64>, u64, i32)],
        owner: u8,
        o: Offsets,
        ticks: u64,
        opcodes: Option<OpcodeTables>,
    ) -> (RecordStats, Vec<Vec<String>>) {
        let (mut m, types, [ra, rb, rc, _]) = fake_interpreter();
        let interp = ra + 0x100;
        let ts = ra + 0x200;
        m.put_u64(interp + 16, ts);
        m.put_u64(ts + 16, interp);
        m.put_u64(ts + 32, 100);
        // Callers just below their callees, as in a data stack.
        let n = frames.len() as u64;
        let at = |j: u64| rb + 0x1000 + 64 * (n - 1 - j);
        for (j, &(code, instr, stacktop)) in frames.iter().enumerate() {
            let (j, f) = (j as u64, at(j as u64));
            m.put_u64(f, if j + 1 == n { 0 } else { at(j + 1) });
            let code = code.map_or(0, |c| rc + 0x200 * c);
            m.put_u64(f + 8, code);
            m.put_u64(f + 16, code + 64 + 2 * instr);
            m.put(f + 28, &stacktop.to_ne_bytes());
            if j == 0 {
                m.put(f + 24, &[owner]);
            }
        }
        m.put_u64(ts + 24, at(0));
        let target = Target {
            mem: Box::new(m),
            layout: Box::new(TestLayout(o)),
            runtime: ra,
            types,
            pid: 100,
            opcodes,
        };
        let dir = std::env::temp_dir().join(format!("tach-chain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.tach", unique_name()));
        let mut s = Sampler::new(target, RecordOptions::new(&path)).unwrap();
        for t in 0..ticks {
            s.tick(1000 + t);
        }
        let stats = s.finish(1_000_000);
        let f = crate::tach::TachFile::open(&path).unwrap();
        let stacks = f
            .collect_samples()
            .unwrap()
            .iter()
            .map(|s| s.stack.iter().map(|&i| f.funcname(i).to_string()).collect())
            .collect();
        let _ = std::fs::remove_file(&path);
        (stats, stacks)
    }

    /// A file name per recording, so that tests running at once do not share one.
    fn unique_name() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_snapshot_reads_its_fields_even_when_a_lower_page_is_unmapped() {
        // The data stack's mapping starts at `stack`; the pages below are unmapped.
        let (stack, ts) = (0x20_0000u64, 0x10_0000u64);
        let mut m = FakeMemory::new();
        m.map(stack, vec![0; 2 * PAGE as usize]);
        m.map(ts, vec![0; 256]);
        let frame = stack + PAGE + 128;
        m.put_u64(ts + 24, frame);
        m.put_u64(ts + 40, 7);
        m.put_u64(ts + 48, 9);
        let mut w = Window {
            pages: 4,
            ..Window::default()
        };
        let got = w.snapshot(&m, &[ts + 24], frame, 64, &[ts + 40, ts + 48], None);
        assert_eq!(got, Snapshot::At(frame));
        assert_eq!(w.fields, [Some(7), Some(9)]);
        // The two mapped pages were read, in address order; the read stopped below.
        assert_eq!(
            (w.base, w.len, w.truncated),
            (stack, 2 * PAGE as usize, true)
        );
        assert!(w.get(frame, 64).is_some());
        // A guess in another page: the pointer is reported where it is.
        let got = w.snapshot(&m, &[ts + 24], stack + 8, 64, &[], None);
        assert_eq!(got, Snapshot::Moved(frame));
    }

    #[test]
    fn an_intact_chain_is_recorded_whole() {
        let chain = [
            (Some(0), 2, -1),
            (Some(1), 3, 4),
            (Some(2), 3, 4),
            (Some(3), 3, 4),
        ];
        let o = Offsets {
            frame_stacktop: Some(28),
            return_opcodes: Some([0x53, 0xFFFF]),
            ..offsets()
        };
        let (stats, stacks) = record_chain(&chain, o, 3);
        assert_eq!((stats.samples, stats.dropped), (3, 0));
        for s in stacks {
            assert_eq!(s, names(&["func0", "func1", "func2", "func3"]));
        }
    }

    #[test]
    fn frames_above_a_running_frame_are_gone() {
        // func1 runs (stacktop -1) though func0 sits above it: the thread returned from
        // func0 while the snapshot was taken.
        let chain = [
            (Some(0), 2, 4),
            (Some(1), 3, -1),
            (Some(2), 3, 4),
            (Some(3), 3, 4),
        ];
        let with = Offsets {
            frame_stacktop: Some(28),
            ..offsets()
        };
        let (_, stacks) = record_chain(&chain, with, 2);
        assert_eq!(stacks[0], names(&["func1", "func2", "func3"]));
        // Without the field (3.14+), the chain is taken as it is.
        let (_, stacks) = record_chain(&chain, offsets(), 2);
        assert_eq!(stacks[0], names(&["func0", "func1", "func2", "func3"]));
    }

    /// func2 (and func1) on unit 5, whose byte is RETURN_VALUE's (0x53), with callees
    /// above them.
    const ON_UNIT_5: [(Option<u64>, u64, i32); 4] = [
        (Some(0), 2, -1),
        (Some(1), 5, 4),
        (Some(2), 5, 4),
        (Some(3), 3, 4),
    ];

    fn with_return_opcodes() -> Offsets {
        Offsets {
            return_opcodes: Some([0x53, 0xFFFF]),
            ..offsets()
        }
    }

    #[test]
    fn frames_above_a_returning_frame_are_gone() {
        // func2 is on its return instruction (unit 5) with callees above it.
        let (stats, stacks) = record_chain(&ON_UNIT_5, with_return_opcodes(), 3);
        assert_eq!(stats.dropped, 0);
        // The first sample learns the code objects' sizes; from the second, their
        // bytecode is read with their headers and the check applies.
        assert_eq!(stacks[0], names(&["func0", "func1", "func2", "func3"]));
        assert_eq!(stacks[1], names(&["func2", "func3"]));
        assert_eq!(stacks[2], names(&["func2", "func3"]));
        // The innermost frame on its return instruction is simply returning.
        let chain = [(Some(0), 5, -1), (Some(1), 3, 4)];
        let (_, stacks) = record_chain(&chain, with_return_opcodes(), 2);
        assert_eq!(stacks[1], names(&["func0", "func1"]));
    }

    #[test]
    fn a_return_opcode_byte_in_a_callers_caches_is_not_a_return() {
        // 3.11: a caller's instruction pointer rests on the last cache entry of its call,
        // whose low byte (data: a function version) may equal RETURN_VALUE's opcode. With
        // one cache entry after each instruction, unit 5 (0x53) is such an entry: the
        // callees stay.
        let mut deopt = [0u8; 256];
        for (i, d) in deopt.iter_mut().enumerate() {
            *d = i as u8;
        }
        let mut caches = [0u8; 256];
        caches[0x01] = 1;
        let tables = OpcodeTables {
            deopt,
            caches: Some(caches),
        };
        let (stats, stacks) =
            record_chain_with(&ON_UNIT_5, 0, with_return_opcodes(), 3, Some(tables));
        assert_eq!(stats.dropped, 0);
        for s in stacks {
            assert_eq!(s, names(&["func0", "func1", "func2", "func3"]));
        }
    }

    #[test]
    fn a_suspended_generator_frame_drops_the_sample() {
        // A coroutine frame with no caller: it yielded while the snapshot was taken.
        let chain = [(Some(0), 2, -1)];
        let (stats, _) = record_chain_owned(&chain, FRAME_OWNED_BY_GENERATOR, offsets(), 2);
        assert_eq!((stats.samples, stats.dropped), (0, 2));
        // Running, it links to the frame that resumed it.
        let chain = [(Some(0), 2, -1), (Some(1), 3, 4)];
        let (stats, stacks) = record_chain_owned(&chain, FRAME_OWNED_BY_GENERATOR, offsets(), 2);
        assert_eq!((stats.samples, stats.dropped), (2, 0));
        assert_eq!(stacks[0], names(&["func0", "func1"]));
    }

    #[test]
    fn a_cleared_innermost_frame_is_skipped_and_a_cleared_caller_drops_the_sample() {
        // 3.14+ clear the code of a frame they pop: innermost, its caller runs now.
        let chain = [(None, 2, 0), (Some(1), 3, 4), (Some(2), 3, 4)];
        let (stats, stacks) = record_chain(&chain, offsets(), 2);
        assert_eq!((stats.samples, stats.dropped), (2, 0));
        assert_eq!(stacks[0], names(&["func1", "func2"]));
        // Deeper in the chain, the read is torn: taken again, then dropped.
        let chain = [(Some(0), 2, 0), (None, 3, 4), (Some(2), 3, 4)];
        let (stats, stacks) = record_chain(&chain, offsets(), 2);
        assert_eq!((stats.samples, stats.dropped), (0, 2));
        assert!(stacks.is_empty());
    }
}

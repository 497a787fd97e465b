//! Samples per (stack, thread, status) over a whole file: what the `stacks`,
//! `stack_counts` and grouped sample scans of `tach query` read.
//!
//! Large files are counted on all cores. The decompressed sample stream is cut into
//! chunks; each chunk is decoded from a record boundary found by looking at its bytes,
//! with every thread's stack described relative to the (still unknown) stack that
//! thread had when the chunk began. The chunks are then joined in order, each from
//! where the records joined so far end (a true boundary: the first chunk starts at the
//! stream's start). A chunk's guessed start is used only if decoding on from that end
//! lands exactly on it; otherwise the chunk is decoded again from that end, so a wrong
//! guess costs time, never data. Each chunk's relative stacks are made whole with the
//! stacks the records before it left.
//!
//! Whatever the partial decode cannot decide, and everything wrong with the file,
//! sends the whole file through the ordinary decoder instead, which then reports the
//! error at the byte CPython would. The result is the same as that decoder's, down to
//! the order of stack ids, threads and groups (first seen); tests compare the two.
//!
//! Records are read through the one grammar in `grammar.rs`; what is here is the
//! partial-stack bookkeeping. It is one file because cutting, the boundary search, the
//! partial decode and the join share private types (`Chunk`, `Checks`, `Roots`,
//! `ChunkCounts`, `Joined`) whose invariants hold only together: split into files, those
//! types would have to open their fields to each other, and a step could then build a
//! chunk or a join the others do not expect.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use rustc_hash::FxHashMap;

use super::error::Result;
use super::grammar::{self, FrameCheck, SliceReader, Stop};
use super::header::{ByteOrder, Compression, MAX_STACK_DEPTH};
use super::reader::TachFile;
use super::records::{splice_top, RecordKind, RECORD_HEADER_SIZE};
use super::source::zstd_reader;
use super::stack_table::StackTable;
use super::varint;

/// Samples of one (stack, thread, status) group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCount {
    /// Stack id in [`StackCounts::stacks`].
    pub stack: u32,
    /// Index in [`StackCounts::threads`].
    pub thread: u32,
    pub status: u8,
    pub samples: u64,
}

/// A whole file counted: unique stacks, threads and groups, each in first-seen order.
/// Two counts are equal when they hold the same stacks under the same ids, the same
/// threads and the same groups, in the same order (how the chunked counter is checked
/// against the sequential one, in tests and by the `counts` fuzz target).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackCounts {
    pub stacks: StackTable,
    /// (thread id, interpreter id) of every thread with a record, in first-seen order.
    pub threads: Vec<(u64, u32)>,
    pub groups: Vec<GroupCount>,
}

/// How the stream is cut. Chunks overlap so that the record crossing a chunk's end,
/// and the bytes the next boundary is found in, are in the chunk's own buffer.
#[derive(Debug, Clone, Copy)]
pub struct Chunking {
    /// Distance between chunk starts: the least, used near the stream's end. While much
    /// is left, chunks take up to [`MAX_CHUNK_GROWTH`] times this (see [`next_length`]).
    pub chunk: usize,
    /// Bytes past the next chunk's start that a chunk also holds.
    pub overlap: usize,
    /// Where a boundary may be: the first `search` bytes of a chunk.
    pub search: usize,
    /// Threads decoding chunks.
    pub workers: usize,
}

impl Default for Chunking {
    fn default() -> Self {
        Chunking {
            chunk: 4 << 20,
            // CPython's longest records are REPEATs of about 90 KiB.
            overlap: 512 << 10,
            // Longer than most records: a chunk that starts in a longer one may guess
            // its start wrong, and is then decoded again.
            search: 4 << 10,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Sample regions (as stored) smaller than this are counted on the calling thread.
const SPLIT_MIN_STORED: usize = 64 << 10;

impl StackCounts {
    /// Counts `file`: in chunks on all cores when its region is large and
    /// uncompressed, where decoding is all the work. A zstd region goes through the
    /// ordinary decoder, whose source decompresses on a second thread: decompression
    /// is sequential whichever way the records are then decoded, and the run-aware
    /// decoder keeps up with it: on a 100 M-sample, 408-thread recording it takes the
    /// same CPU time as the chunked route and a third of its memory
    /// (benches/HISTORY.md).
    pub fn count(file: &TachFile) -> Result<Self> {
        let compressed = file.header().compression != Compression::None;
        if compressed || file.sample_region().len() < SPLIT_MIN_STORED {
            return Self::count_sequential(file);
        }
        Self::count_with(file, Chunking::default()).map(|(c, _)| c)
    }

    /// Counts with the given chunking; also says how.
    pub fn count_with(file: &TachFile, chunking: Chunking) -> Result<(Self, Route)> {
        count_chunked(file, chunking)
            .or_else(|why| Self::count_sequential(file).map(|c| (c, Route::Sequential(why))))
    }

    /// Counts with the ordinary decoder on the calling thread.
    pub fn count_sequential(file: &TachFile) -> Result<Self> {
        let mut stacks = StackTable::default();
        let mut index: FxHashMap<(u32, u32, u8), usize> = FxHashMap::default();
        let mut groups: Vec<GroupCount> = Vec::new();
        // Per thread: (stack id, status, group) of its previous sample, so runs of the
        // same stack and status cost no hashing.
        let mut current: Vec<Option<(u32, u8, usize)>> = Vec::new();
        let mut stream = file.samples().untimed();
        while let Some(run) = stream.next_run()? {
            let slot = run.thread as usize;
            if slot >= current.len() {
                current.resize(slot + 1, None);
            }
            // The run's stack: its thread's previous one unless it changed.
            let mut changed = run.stack_changed;
            // A REPEAT run is mostly one status: count each stretch of equal statuses
            // at once.
            let mut rest = run.statuses;
            while let Some(&status) = rest.first() {
                let n = equal_prefix(rest, status);
                rest = &rest[n..];
                let group = match current[slot] {
                    Some((_, st, g)) if !changed && st == status => g,
                    prev => {
                        let id = match prev {
                            Some((id, _, _)) if !changed => id,
                            _ => stacks.intern(run.stack),
                        };
                        changed = false;
                        let g = *index.entry((id, run.thread, status)).or_insert_with(|| {
                            groups.push(GroupCount {
                                stack: id,
                                thread: run.thread,
                                status,
                                samples: 0,
                            });
                            groups.len() - 1
                        });
                        current[slot] = Some((id, status, g));
                        g
                    }
                };
                groups[group].samples += n as u64;
            }
        }
        let threads = stream.threads().collect();
        Ok(StackCounts {
            stacks,
            threads,
            groups,
        })
    }
}

/// How many bytes at the start of `bytes` equal `b`, eight at a time.
fn equal_prefix(bytes: &[u8], b: u8) -> usize {
    let pattern = u64::from_ne_bytes([b; 8]);
    let mut chunks = bytes.chunks_exact(8);
    let mut n = 0;
    for c in &mut chunks {
        let diff = u64::from_le_bytes(c.try_into().unwrap()) ^ pattern;
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    n + chunks.remainder().iter().take_while(|&&x| x == b).count()
}

/// How a file was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// In chunks; `redone` of them were decoded again on the joining thread because
    /// their guessed start was not a record boundary.
    Chunked { chunks: usize, redone: usize },
    /// By the ordinary decoder, for this reason.
    Sequential(Fallback),
}

/// Why a file went through the ordinary decoder instead of the chunked one. Except
/// for a broken file, these are rare; offsets are in the decompressed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// More frames than a u32 counts.
    FrameTable,
    /// The zstd stream could not be read.
    Zstd,
    /// A record that is wrong, or runs past its chunk's bytes.
    Record(usize),
    /// The chunk before ended past this chunk's bytes (a record longer than the
    /// overlap).
    Overrun(usize),
    /// A stack rule broken, found once the stacks a chunk starts from were known.
    Stack(usize),
    TooManyThreads,
    SampleCount,
}

/// What the partial decoder checks records against.
struct Checks<'a> {
    byte_order: ByteOrder,
    frames: FrameCheck<'a>,
    declared_threads: u32,
}

/// One chunk of the decompressed stream: bytes from `offset`, and whether they run to
/// the end of the stream.
struct Chunk<'a> {
    index: usize,
    offset: usize,
    /// Distance to the next chunk's start: records starting before it are this chunk's.
    length: usize,
    bytes: ChunkBytes<'a>,
    last: bool,
}

enum ChunkBytes<'a> {
    Mapped(&'a [u8]),
    /// A reused buffer and how much of it this chunk filled (what lies past that is
    /// left over from an earlier chunk: not zeroed again, never read).
    Decompressed(Vec<u8>, usize),
}

impl ChunkBytes<'_> {
    fn get(&self) -> &[u8] {
        match self {
            ChunkBytes::Mapped(b) => b,
            ChunkBytes::Decompressed(v, filled) => &v[..*filled],
        }
    }
}

/// A decoded chunk on its way to the joining thread, with its bytes (kept in case
/// its start was guessed wrong and it must be decoded again).
struct Decoded<'a> {
    chunk: Chunk<'a>,
    /// None when no boundary was found near the chunk's start.
    counts: Option<std::result::Result<ChunkCounts, Fallback>>,
}

fn count_chunked(
    file: &TachFile,
    chunking: Chunking,
) -> std::result::Result<(StackCounts, Route), Fallback> {
    let header = file.header();
    u32::try_from(file.frames().len()).map_err(|_| Fallback::FrameTable)?;
    let checks = Checks {
        byte_order: header.byte_order,
        frames: file.frame_check(),
        declared_threads: header.thread_count,
    };
    let chunking = Chunking {
        chunk: chunking.chunk.max(1),
        overlap: chunking.overlap.max(1),
        search: chunking.search.clamp(1, chunking.overlap.max(1)),
        workers: chunking.workers.max(1),
    };
    let region = file.sample_region();
    let compression = header.compression;
    let declared_samples = header.sample_count;
    let abort = AtomicBool::new(false);
    let (job_tx, job_rx) = mpsc::sync_channel::<Chunk<'_>>(chunking.workers);
    let job_rx = Mutex::new(job_rx);
    let checks = &checks;
    let spare = &Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel::<Decoded<'_>>();
        let abort = &abort;
        scope.spawn(move || {
            let ok = match compression {
                Compression::None => cut_mapped(region, chunking, &job_tx, abort),
                Compression::Zstd => cut_zstd(region, chunking, &job_tx, spare, abort),
            };
            if !ok {
                abort.store(true, Ordering::Relaxed);
            }
        });
        for _ in 0..chunking.workers {
            let (job_rx, done_tx) = (&job_rx, done_tx.clone());
            scope.spawn(move || loop {
                let job = match job_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok(chunk) = job else { return };
                if abort.load(Ordering::Relaxed) {
                    continue;
                }
                let counts = decode_guessed(&chunk, chunking, checks);
                let _ = done_tx.send(Decoded { chunk, counts });
            });
        }
        drop(done_tx);
        let result = join_in_order(done_rx, checks, spare);
        abort.store(true, Ordering::Relaxed);
        let (joined, route) = result?;
        if joined.samples != declared_samples {
            return Err(Fallback::SampleCount);
        }
        Ok((joined.finish(), route))
    })
}

/// Joins the chunks in stream order as they come in. A chunk whose guessed start is
/// behind the previous chunk's end is joined after the records in between; one whose
/// start is not on the records the previous chunk ended at is decoded again from
/// where it ended, here.
fn join_in_order(
    done: mpsc::Receiver<Decoded<'_>>,
    checks: &Checks<'_>,
    spare: &Mutex<Vec<Vec<u8>>>,
) -> std::result::Result<(Joined, Route), Fallback> {
    let mut joined = Joined::default();
    let mut waiting: BTreeMap<usize, Decoded<'_>> = BTreeMap::new();
    let (mut next, mut redone) = (0, 0);
    for d in done {
        waiting.insert(d.chunk.index, d);
        while let Some(d) = waiting.remove(&next) {
            next += 1;
            let bytes = d.chunk.bytes.get();
            let offset = d.chunk.offset;
            let from = joined
                .end
                .checked_sub(offset)
                .filter(|&f| f <= bytes.len())
                .ok_or(Fallback::Overrun(joined.end))?;
            let stop = chunk_stop(&d.chunk);
            let mut ok = false;
            if let Some(Ok(counts)) = d.counts {
                let start = counts.start - offset;
                if start >= from {
                    // The records between, if any, decoded with the stacks now known.
                    let bridge = decode_range(bytes, offset, from, start, checks)?;
                    if bridge.end == counts.start {
                        joined.add(bridge, checks.declared_threads)?;
                        joined.add(counts, checks.declared_threads)?;
                        ok = true;
                    }
                }
            }
            if !ok {
                redone += 1;
                let counts = decode_range(bytes, offset, from, stop, checks)?;
                joined.add(counts, checks.declared_threads)?;
            }
            if d.chunk.last {
                if joined.end != offset + bytes.len() {
                    return Err(Fallback::Overrun(joined.end));
                }
                let route = Route::Chunked {
                    chunks: next,
                    redone,
                };
                return Ok((joined, route));
            }
            if let ChunkBytes::Decompressed(buf, _) = d.chunk.bytes {
                if let Ok(mut spare) = spare.lock() {
                    spare.push(buf);
                }
            }
        }
    }
    // The chunks stopped coming before the last: the zstd stream is broken.
    Err(Fallback::Zstd)
}

/// Sends chunks of an uncompressed region (no copies).
fn cut_mapped<'a>(
    region: &'a [u8],
    c: Chunking,
    jobs: &mpsc::SyncSender<Chunk<'a>>,
    abort: &AtomicBool,
) -> bool {
    let mut offset = 0;
    for index in 0.. {
        if abort.load(Ordering::Relaxed) {
            return true;
        }
        let length = next_length(c, Some(region.len() - offset));
        let end = region.len().min(offset + length + c.overlap);
        let last = end == region.len();
        let chunk = Chunk {
            index,
            offset,
            length,
            bytes: ChunkBytes::Mapped(&region[offset..end]),
            last,
        };
        if jobs.send(chunk).is_err() || last {
            return true;
        }
        offset += length;
    }
    true
}

/// A chunk's length is at most this many times [`Chunking::chunk`].
pub const MAX_CHUNK_GROWTH: usize = 4;

/// The next chunk's length, given about how many bytes are left (None: not known).
/// Every chunk learns its stacks and transitions afresh, so fewer, longer chunks cost
/// less; but the last ones must be short, or one worker finishes long after the other.
/// So a chunk takes its share of what is left, a `2 * workers`-th, within
/// `chunk..=MAX_CHUNK_GROWTH * chunk`.
fn next_length(c: Chunking, remaining: Option<usize>) -> usize {
    let Some(remaining) = remaining else {
        return c.chunk;
    };
    (remaining / (2 * c.workers)).clamp(c.chunk, c.chunk.saturating_mul(MAX_CHUNK_GROWTH))
}

/// Decompresses and sends chunks; false if the stream is broken (the ordinary decoder
/// then reports it). Buffers the joining thread is done with come back in `spare`, so
/// the chunks' memory is reused rather than mapped afresh.
fn cut_zstd(
    compressed: &[u8],
    c: Chunking,
    jobs: &mpsc::SyncSender<Chunk<'_>>,
    spare: &Mutex<Vec<Vec<u8>>>,
    abort: &AtomicBool,
) -> bool {
    let Ok(mut reader) = zstd_reader(compressed) else {
        return false;
    };
    let mut carried: Vec<u8> = Vec::new();
    let mut offset = 0;
    for index in 0.. {
        if abort.load(Ordering::Relaxed) {
            return true;
        }
        // What is left, estimated from the compression ratio so far.
        let consumed = compressed.len() - reader.get_ref().len();
        let remaining = (consumed > 0).then(|| {
            let ratio = (offset + carried.len()) as f64 / consumed as f64;
            (reader.get_ref().len() as f64 * ratio) as usize
        });
        let length = next_length(c, remaining);
        let want = length + c.overlap;
        let mut buf = spare
            .lock()
            .ok()
            .and_then(|mut s| s.pop())
            .unwrap_or_default();
        if buf.len() < want {
            buf.resize(want, 0);
        }
        buf[..carried.len()].copy_from_slice(&carried);
        let mut filled = carried.len();
        while filled < want {
            match reader.read(&mut buf[filled..want]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(_) => return false,
            }
        }
        // A stream that ends exactly at `want` sends one more chunk: the overlap alone.
        let last = filled < want;
        if !last {
            carried.clear();
            carried.extend_from_slice(&buf[length..want]);
        }
        let chunk = Chunk {
            index,
            offset,
            length,
            bytes: ChunkBytes::Decompressed(buf, filled),
            last,
        };
        if jobs.send(chunk).is_err() || last {
            return true;
        }
        offset += length;
    }
    true
}

/// Where the stack a chunk's thread had at the chunk's start continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Root {
    /// Nothing: the stack is all known.
    Empty,
    /// The thread's stack at the chunk's start, less its `k` innermost frames (all of
    /// them if it has fewer).
    Drop { slot: u32, k: u32 },
    /// The outermost `len` frames of partial stack `of` (an error, reported by the
    /// ordinary decoder, if it has fewer).
    Suffix { of: u32, len: u32 },
}

/// The roots of one chunk, numbered in creation order (0 is `Empty`).
struct Roots {
    list: Vec<Root>,
    index: FxHashMap<Root, u32>,
}

const EMPTY: u32 = 0;

impl Roots {
    fn new() -> Self {
        let mut r = Roots {
            list: Vec::new(),
            index: FxHashMap::default(),
        };
        r.id(Root::Empty);
        r
    }

    fn id(&mut self, root: Root) -> u32 {
        let root = match root {
            // A thread's stack is never deeper than MAX_STACK_DEPTH.
            Root::Drop { k, .. } if k as usize >= MAX_STACK_DEPTH => Root::Empty,
            Root::Suffix { len: 0, .. } => Root::Empty,
            r => r,
        };
        if let Some(&id) = self.index.get(&root) {
            return id;
        }
        let id = self.list.len() as u32;
        self.list.push(root);
        self.index.insert(root, id);
        id
    }

    /// `root` less `pop` more innermost frames (clamped, as CPython does).
    fn pop(&mut self, root: u32, pop: u32) -> u32 {
        match self.list[root as usize] {
            Root::Empty => EMPTY,
            Root::Drop { slot, k } => self.id(Root::Drop {
                slot,
                k: k.saturating_add(pop),
            }),
            Root::Suffix { of, len } => self.id(Root::Suffix {
                of,
                len: len.saturating_sub(pop),
            }),
        }
    }

    /// The depth of `root`'s frames, when known.
    fn depth(&self, root: u32) -> Option<u32> {
        match self.list[root as usize] {
            Root::Empty => Some(0),
            Root::Suffix { len, .. } => Some(len),
            Root::Drop { .. } => None,
        }
    }
}

/// A thread as one chunk sees it.
struct ChunkThread {
    thread_id: u64,
    interpreter_id: u32,
    /// Its stack now, a partial stack id.
    stack: u32,
    /// Its stack at the chunk's start can be at most this deep (deeper would have
    /// made a record of this chunk exceed MAX_STACK_DEPTH).
    max_start_depth: u32,
    /// (stack, status, group) of its previous sample.
    current: Option<(u32, u8, u32)>,
}

/// A (partial stack, chunk thread, status) group.
struct ChunkGroup {
    stack: u32,
    thread: u32,
    status: u8,
    samples: u64,
    /// The next group of the same stack (a short chain: `NO_GROUP` ends it).
    next: u32,
}

const NO_GROUP: u32 = u32::MAX;

/// Matches no transition (no stack has this id).
const NO_TRANSITION: Transition = Transition {
    from: u32::MAX,
    pop: 0,
    push: 0,
    frames: [0; CACHED_PUSH],
};

/// Longest push a POP_PUSH transition is remembered for.
const CACHED_PUSH: usize = 6;

/// A POP_PUSH record applied to a partial stack: the same record on the same stack
/// always gives the same stack.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Transition {
    from: u32,
    pop: u32,
    push: u32,
    /// The frames pushed, then zeros.
    frames: [u32; CACHED_PUSH],
}

impl std::hash::Hash for Transition {
    // Two fields per word, and only the frames pushed: this is hashed once per record.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_u64(self.from as u64 | (self.pop as u64) << 32);
        h.write_u64(self.push as u64 | (self.frames[0] as u64) << 32);
        for pair in self.frames[1..(self.push as usize).max(1)].chunks(2) {
            h.write_u64(pair[0] as u64 | (pair.get(1).copied().unwrap_or(0) as u64) << 32);
        }
    }
}

/// Records of one chunk decoded: their first and end offsets in the stream, and the
/// counts, with stacks as known frames on a root (partial stacks).
struct ChunkCounts {
    start: usize,
    end: usize,
    /// Partial stacks: known frames then a root id.
    stacks: StackTable,
    roots: Roots,
    threads: Vec<ChunkThread>,
    groups: Vec<ChunkGroup>,
    samples: u64,
}

/// Why [`skip_record`] stopped.
#[derive(Debug)]
enum Skip {
    /// The bytes ran out first.
    End,
    /// The bytes are not a valid record.
    Bad,
}

/// Skips one record, checking what needs no stack; the position after it.
fn skip_record(bytes: &[u8], pos: usize, checks: &Checks<'_>) -> std::result::Result<usize, Skip> {
    if bytes.len() - pos < RECORD_HEADER_SIZE {
        return Err(Skip::End);
    }
    let mut r = SliceReader { bytes, pos };
    match skip_record_at(&mut r, checks) {
        Ok(()) => Ok(r.pos),
        // A read that failed in the last ten bytes may be a varint cut short.
        Err(Stop::Read) if r.pos + varint::MAX_VARINT_LEN >= bytes.len() => Err(Skip::End),
        Err(_) => Err(Skip::Bad),
    }
}

/// [`skip_record`]'s body: `Stop::Read` for a read that failed (the caller tells a cut
/// from a malformed varint by where), `Stop::Broken` for values no record has.
fn skip_record_at(r: &mut SliceReader<'_>, checks: &Checks<'_>) -> std::result::Result<(), Stop> {
    let (thread_id, _, kind) = r.record_header(checks.byte_order)?;
    // No real thread has id 0, and runs of zero bytes (high bytes of ids and counts)
    // would otherwise read as endless records of thread 0.
    if thread_id == 0 {
        return Err(Stop::Broken);
    }
    if kind == RecordKind::Repeat {
        let n = grammar::read_repeat_count(r)?;
        // A count the bytes left cannot hold is taken as not a record: mostly it is
        // not, and the reading must not run to the window's end, which would stop the
        // search.
        grammar::repeat_fits(n, r.bytes.len() - r.pos).map_err(|_| Stop::Broken)?;
        for _ in 0..n {
            grammar::read_repeat_entry(r)?;
        }
        return Ok(());
    }
    let head = grammar::read_change_head(r, kind)?;
    if !head.edit.possible() {
        return Err(Stop::Broken);
    }
    for _ in 0..head.edit.fresh() {
        grammar::read_frame(r, &checks.frames)?;
    }
    Ok(())
}

/// A record boundary in `window`: the first position every reading that starts in
/// `window[..search]` and never faults passes through. Readings from the wrong bytes
/// die or fall in step with the true one within a few records, so when a true
/// boundary lies in `window[..search]` (`search` longer than any record) the position
/// found is one too. Only the window's bytes are looked at, so two chunks holding the
/// same bytes find the same boundary; and the join checks it anyway.
fn find_boundary(window: &[u8], search: usize, checks: &Checks<'_>) -> Option<usize> {
    let search = search.min(window.len());
    let mut live = vec![false; window.len()];
    live[..search].fill(true);
    let mut count = search;
    for p in 0..window.len() {
        if !live[p] {
            continue;
        }
        if count == 1 {
            return Some(p);
        }
        count -= 1;
        match skip_record(window, p, checks) {
            Ok(next) if next < window.len() => {
                if !live[next] {
                    live[next] = true;
                    count += 1;
                }
            }
            // A reading reached the window's end before all met: the true one may be
            // among those left, so none can be trusted.
            Ok(_) | Err(Skip::End) => return None,
            Err(Skip::Bad) => {}
        }
    }
    None
}

/// Where a chunk's own records end: those starting in its first `length` bytes are its
/// (the last chunk has all the rest).
fn chunk_stop(chunk: &Chunk<'_>) -> usize {
    if chunk.last {
        chunk.bytes.get().len()
    } else {
        chunk.length
    }
}

/// A worker's decode of a chunk from a boundary found by looking (the first chunk's
/// is the stream's start). None when no boundary was found.
fn decode_guessed(
    chunk: &Chunk<'_>,
    c: Chunking,
    checks: &Checks<'_>,
) -> Option<std::result::Result<ChunkCounts, Fallback>> {
    let bytes = chunk.bytes.get();
    let start = if chunk.index == 0 {
        0
    } else {
        find_boundary(&bytes[..bytes.len().min(c.overlap)], c.search, checks)?
    };
    Some(decode_range(
        bytes,
        chunk.offset,
        start,
        chunk_stop(chunk),
        checks,
    ))
}

/// Decodes the records of `bytes` from `start` while they start before `stop`.
/// `offset` is the stream offset of `bytes[0]`.
fn decode_range(
    bytes: &[u8],
    offset: usize,
    start: usize,
    stop: usize,
    checks: &Checks<'_>,
) -> std::result::Result<ChunkCounts, Fallback> {
    let mut d = ChunkDecoder {
        checks,
        cur: SliceReader { bytes, pos: start },
        stacks: StackTable::default(),
        start_limit: Vec::new(),
        first_group: Vec::new(),
        transitions: FxHashMap::default(),
        last_out: Vec::new(),
        roots: Roots::new(),
        threads: Vec::new(),
        thread_index: FxHashMap::default(),
        last_thread: None,
        groups: Vec::new(),
        samples: 0,
        fresh: [0; MAX_STACK_DEPTH],
        scratch: Vec::with_capacity(MAX_STACK_DEPTH + 1),
    };
    while d.cur.pos < stop {
        let at = d.cur.pos;
        d.record().ok_or(Fallback::Record(offset + at))?;
    }
    Ok(ChunkCounts {
        start: offset + start,
        end: offset + d.cur.pos,
        stacks: d.stacks,
        roots: d.roots,
        threads: d.threads,
        groups: d.groups,
        samples: d.samples,
    })
}

struct ChunkDecoder<'a, 'b> {
    checks: &'a Checks<'a>,
    cur: SliceReader<'b>,
    /// Partial stacks: known frames, innermost first, then a root id.
    stacks: StackTable,
    /// Per partial stack: how deep its thread's stack may have been at the chunk's
    /// start (u32::MAX when that does not matter).
    start_limit: Vec<u32>,
    /// Per partial stack: its first group in `groups`, or `NO_GROUP`.
    first_group: Vec<u32>,
    transitions: FxHashMap<Transition, u32>,
    /// Per partial stack: the last transition taken from it, and where it led.
    last_out: Vec<(Transition, u32)>,
    roots: Roots,
    threads: Vec<ChunkThread>,
    thread_index: FxHashMap<(u64, u32), u32>,
    last_thread: Option<(u64, u32, u32)>,
    groups: Vec<ChunkGroup>,
    samples: u64,
    fresh: [u32; MAX_STACK_DEPTH],
    /// The stack being built by a record.
    scratch: Vec<u32>,
}

impl ChunkDecoder<'_, '_> {
    #[inline(always)]
    fn thread(&mut self, thread_id: u64, interpreter_id: u32) -> Option<u32> {
        if let Some((t, i, slot)) = self.last_thread {
            if t == thread_id && i == interpreter_id {
                return Some(slot);
            }
        }
        let slot = match self.thread_index.get(&(thread_id, interpreter_id)) {
            Some(&s) => s,
            None => {
                if self.threads.len() >= self.checks.declared_threads as usize {
                    return None;
                }
                let slot = self.threads.len() as u32;
                let root = self.roots.id(Root::Drop { slot, k: 0 });
                self.scratch.clear();
                self.scratch.push(root);
                let stack = self.intern_scratch()?;
                self.threads.push(ChunkThread {
                    thread_id,
                    interpreter_id,
                    stack,
                    max_start_depth: MAX_STACK_DEPTH as u32,
                    current: None,
                });
                self.thread_index.insert((thread_id, interpreter_id), slot);
                slot
            }
        };
        self.last_thread = Some((thread_id, interpreter_id, slot));
        Some(slot)
    }

    /// Interns the stack in `scratch` after checking its depth; None if it is known
    /// to be too deep.
    fn intern_scratch(&mut self) -> Option<u32> {
        let known = self.scratch.len() as u32 - 1;
        let root = self.scratch[known as usize];
        let limit = match self.roots.list[root as usize] {
            // known + (start depth - k) <= MAX when the start stack is deeper than k.
            Root::Drop { k, .. } => (MAX_STACK_DEPTH as u32)
                .checked_sub(known)?
                .saturating_add(k),
            _ => {
                let base = self.roots.depth(root)?;
                if known + base > MAX_STACK_DEPTH as u32 {
                    return None;
                }
                u32::MAX
            }
        };
        let id = self.stacks.intern(&self.scratch);
        if id as usize == self.start_limit.len() {
            self.start_limit.push(limit);
            self.first_group.push(NO_GROUP);
            self.last_out.push((NO_TRANSITION, 0));
        }
        Some(id)
    }

    /// Thread `slot`'s stack, into `scratch`.
    fn load_scratch(&mut self, slot: u32) {
        self.scratch.clear();
        let id = self.threads[slot as usize].stack;
        self.scratch.extend_from_slice(self.stacks.get(id));
    }

    /// Counts one sample of thread `slot` with its current stack.
    #[inline(always)]
    fn sample(&mut self, slot: u32, status: u8) {
        self.samples += 1;
        let t = &mut self.threads[slot as usize];
        if let Some((stack, st, g)) = t.current {
            if stack == t.stack && st == status {
                self.groups[g as usize].samples += 1;
                return;
            }
        }
        let stack = t.stack;
        let mut g = self.first_group[stack as usize];
        while g != NO_GROUP {
            let group = &self.groups[g as usize];
            if group.thread == slot && group.status == status {
                break;
            }
            g = group.next;
        }
        if g == NO_GROUP {
            g = self.groups.len() as u32;
            self.groups.push(ChunkGroup {
                stack,
                thread: slot,
                status,
                samples: 0,
                next: self.first_group[stack as usize],
            });
            self.first_group[stack as usize] = g;
        }
        self.groups[g as usize].samples += 1;
        t.current = Some((stack, status, g));
    }

    fn record(&mut self) -> Option<()> {
        let (thread_id, interpreter_id, kind) =
            self.cur.record_header(self.checks.byte_order).ok()?;
        let slot = self.thread(thread_id, interpreter_id)?;
        if kind == RecordKind::Repeat {
            let count = grammar::read_repeat_count(&mut self.cur).ok()?;
            for _ in 0..count {
                let (_, status) = grammar::read_repeat_entry(&mut self.cur).ok()?;
                self.sample(slot, status);
            }
            return Some(());
        }
        let head = grammar::read_change_head(&mut self.cur, kind).ok()?;
        let status = head.status;
        let (first, count) = (head.edit.first, head.edit.fresh());
        // The rules that need the stack are checked against the partial stacks below,
        // and again when joining.
        if !head.edit.possible() {
            return None;
        }
        let fresh = &mut self.fresh[..count as usize];
        grammar::read_frames(&mut self.cur, &self.checks.frames, fresh).ok()?;
        let stack = match kind {
            RecordKind::Full => {
                self.scratch.clear();
                self.scratch
                    .extend_from_slice(&self.fresh[..count as usize]);
                self.scratch.push(EMPTY);
                self.intern_scratch()?
            }
            RecordKind::Suffix => {
                // `scratch` is cut to the frames kept, which stay under the new ones.
                self.keep_outermost(slot, first)?;
                let fresh = &self.fresh[..count as usize];
                splice_top(&mut self.scratch, 0, fresh);
                self.intern_scratch()?
            }
            RecordKind::PopPush => {
                let push = count;
                let from = self.threads[slot as usize].stack;
                let key = (push as usize <= CACHED_PUSH).then(|| {
                    // A fixed-size select, zeros past the frames pushed: no memcpy or
                    // memset call and no branch on the push count.
                    let mut frames = [0; CACHED_PUSH];
                    for (i, f) in frames.iter_mut().enumerate() {
                        // All ones when i < push (push is at most MAX_STACK_DEPTH).
                        let keep = 0u32.wrapping_sub((i as u32).wrapping_sub(push) >> 31);
                        *f = self.fresh[i] & keep;
                    }
                    Transition {
                        from,
                        pop: first,
                        push,
                        frames,
                    }
                });
                let cached = match key {
                    // A stack's last way out is often its next one (a thread going to
                    // and fro between two lines): try it before the table.
                    Some(k) if self.last_out[from as usize].0 == k => {
                        Some(self.last_out[from as usize].1)
                    }
                    Some(k) => {
                        let to = self.transitions.get(&k).copied();
                        if let Some(to) = to {
                            self.last_out[from as usize] = (k, to);
                        }
                        to
                    }
                    None => None,
                };
                match cached {
                    Some(to) => to,
                    None => {
                        self.load_scratch(slot);
                        let known = self.scratch.len() - 1;
                        let fresh = &self.fresh[..push as usize];
                        if first as usize <= known {
                            splice_top(&mut self.scratch, first as usize, fresh);
                        } else {
                            let root = self.roots.pop(self.scratch[known], first - known as u32);
                            self.scratch.clear();
                            self.scratch.extend_from_slice(fresh);
                            self.scratch.push(root);
                        }
                        let to = self.intern_scratch()?;
                        if let Some(k) = key {
                            self.transitions.insert(k, to);
                            self.last_out[from as usize] = (k, to);
                        }
                        to
                    }
                }
            }
            RecordKind::Repeat => unreachable!("handled above"),
        };
        let limit = self.start_limit[stack as usize];
        let t = &mut self.threads[slot as usize];
        t.stack = stack;
        t.max_start_depth = t.max_start_depth.min(limit);
        self.sample(slot, status);
        Some(())
    }

    /// Puts the outermost `shared` frames of thread `slot`'s stack in `scratch`, as
    /// a SUFFIX record keeps them. None when the stack is known to have fewer.
    fn keep_outermost(&mut self, slot: u32, shared: u32) -> Option<()> {
        self.load_scratch(slot);
        let known = self.scratch.len() as u32 - 1;
        let root = self.scratch[known as usize];
        let new_root = if shared == 0 {
            EMPTY
        } else {
            match self.roots.list[root as usize] {
                // The root's depth is not known yet: name the frames, check them when
                // joining.
                Root::Drop { .. } => {
                    let of = self.threads[slot as usize].stack;
                    self.roots.id(Root::Suffix { of, len: shared })
                }
                Root::Empty | Root::Suffix { .. } => {
                    let base = self.roots.depth(root)?;
                    if shared > known + base {
                        return None;
                    }
                    if shared > base {
                        // Keep the outermost `shared - base` known frames on the root.
                        let keep = (shared - base) as usize;
                        self.scratch.drain(..known as usize - keep);
                        return Some(());
                    }
                    let Root::Suffix { of, .. } = self.roots.list[root as usize] else {
                        unreachable!("an empty root has no frames to share")
                    };
                    self.roots.id(Root::Suffix { of, len: shared })
                }
            }
        };
        self.scratch.clear();
        self.scratch.push(new_root);
        Some(())
    }
}

/// The chunks joined so far.
#[derive(Default)]
struct Joined {
    stacks: StackTable,
    threads: Vec<(u64, u32)>,
    thread_index: FxHashMap<(u64, u32), u32>,
    /// Each thread's stack at the end of the chunks joined.
    stack_now: Vec<Vec<u32>>,
    groups: Vec<GroupCount>,
    group_index: FxHashMap<(u32, u32, u8), u32>,
    end: usize,
    samples: u64,
}

impl Joined {
    /// Adds the records that follow on; an error when something in them is wrong
    /// once the stacks they start from are known.
    fn add(&mut self, c: ChunkCounts, declared_threads: u32) -> std::result::Result<(), Fallback> {
        debug_assert_eq!(c.start, self.end);
        let mut slots = Vec::with_capacity(c.threads.len());
        for t in &c.threads {
            let key = (t.thread_id, t.interpreter_id);
            let slot = match self.thread_index.get(&key) {
                Some(&s) => s,
                None => {
                    if self.threads.len() >= declared_threads as usize {
                        return Err(Fallback::TooManyThreads);
                    }
                    self.threads.push(key);
                    self.stack_now.push(Vec::new());
                    self.thread_index.insert(key, self.threads.len() as u32 - 1);
                    self.threads.len() as u32 - 1
                }
            };
            if self.stack_now[slot as usize].len() > t.max_start_depth as usize {
                return Err(Fallback::Stack(c.start));
            }
            slots.push(slot);
        }
        // Every root's frames, in creation order: a Suffix root names a partial stack
        // interned before it, on an earlier root.
        let mut bases: Vec<Vec<u32>> = Vec::with_capacity(c.roots.list.len());
        let mut scratch = Vec::new();
        for root in &c.roots.list {
            let base = match *root {
                Root::Empty => Vec::new(),
                Root::Drop { slot, k } => {
                    let s = &self.stack_now[slots[slot as usize] as usize];
                    s[(k as usize).min(s.len())..].to_vec()
                }
                Root::Suffix { of, len } => {
                    scratch.clear();
                    whole_stack(c.stacks.get(of), &bases, &mut scratch);
                    let Some(from) = scratch.len().checked_sub(len as usize) else {
                        return Err(Fallback::Stack(c.start));
                    };
                    scratch[from..].to_vec()
                }
            };
            bases.push(base);
        }
        let mut stack_ids: Vec<Option<u32>> = vec![None; c.stacks.len()];
        for g in &c.groups {
            let stack = match stack_ids[g.stack as usize] {
                Some(id) => id,
                None => {
                    scratch.clear();
                    whole_stack(c.stacks.get(g.stack), &bases, &mut scratch);
                    let id = self.stacks.intern(&scratch);
                    stack_ids[g.stack as usize] = Some(id);
                    id
                }
            };
            let thread = slots[g.thread as usize];
            let groups = &mut self.groups;
            let i = *self
                .group_index
                .entry((stack, thread, g.status))
                .or_insert_with(|| {
                    groups.push(GroupCount {
                        stack,
                        thread,
                        status: g.status,
                        samples: 0,
                    });
                    groups.len() as u32 - 1
                });
            groups[i as usize].samples += g.samples;
        }
        let ends: Vec<Vec<u32>> = c
            .threads
            .iter()
            .map(|t| {
                let mut s = Vec::new();
                whole_stack(c.stacks.get(t.stack), &bases, &mut s);
                s
            })
            .collect();
        for (slot, stack) in slots.into_iter().zip(ends) {
            self.stack_now[slot as usize] = stack;
        }
        self.end = c.end;
        self.samples += c.samples;
        Ok(())
    }

    fn finish(self) -> StackCounts {
        StackCounts {
            stacks: self.stacks,
            threads: self.threads,
            groups: self.groups,
        }
    }
}

/// A partial stack (known frames, then a root id) made whole, innermost first.
fn whole_stack(partial: &[u32], bases: &[Vec<u32>], out: &mut Vec<u32>) {
    let (root, known) = partial
        .split_last()
        .expect("a partial stack ends with its root");
    out.extend_from_slice(known);
    out.extend_from_slice(&bases[*root as usize]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn equal_prefix_counts_the_leading_equal_bytes() {
        for len in 0..40 {
            for at in 0..=len {
                let mut v = vec![7u8; len];
                if at < len {
                    v[at] = 8;
                }
                assert_eq!(super::equal_prefix(&v, 7), at, "len {len} at {at}");
            }
        }
        assert_eq!(super::equal_prefix(&[1, 1, 2], 2), 0);
    }

    use super::*;

    fn same(a: &StackCounts, b: &StackCounts) -> bool {
        a == b
    }

    fn golden_files() -> Vec<std::path::PathBuf> {
        crate::golden_corpus::golden_bins()
    }

    #[test]
    fn chunks_are_long_while_much_is_left_and_short_at_the_end() {
        let c = Chunking {
            chunk: 100,
            overlap: 10,
            search: 5,
            workers: 2,
        };
        assert_eq!(next_length(c, None), 100);
        assert_eq!(next_length(c, Some(1_000_000)), 400);
        assert_eq!(next_length(c, Some(1000)), 250);
        assert_eq!(next_length(c, Some(400)), 100);
        assert_eq!(next_length(c, Some(0)), 100);
        // A stream cut as cut_mapped cuts it: lengths never grow again once shrinking.
        let (mut left, mut lengths) = (10_000usize, Vec::new());
        while left > 0 {
            let n = next_length(c, Some(left)).min(left);
            lengths.push(n);
            left -= n;
        }
        assert!(lengths.windows(2).all(|w| w[0] >= w[1]), "{lengths:?}");
        assert_eq!(lengths[0], 400);
        assert!(*lengths.last().unwrap() <= 100, "{lengths:?}");
    }

    #[test]
    fn chunked_counts_equal_the_ordinary_decoders() {
        for path in golden_files() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let file = TachFile::open(&path).unwrap();
            let expected = StackCounts::count_sequential(&file).unwrap();
            for (chunk, overlap, search) in [
                (16384, 40000, 1024),
                (4096, 40000, 1024),
                (1000, 40000, 300),
                (4096, 4096, 2048),
                (1024, 2048, 1024),
                (300, 1500, 750),
                (1 << 20, 4096, 2048),
            ] {
                for workers in [1, 3] {
                    let chunking = Chunking {
                        chunk,
                        overlap,
                        search,
                        workers,
                    };
                    let (got, route) = StackCounts::count_with(&file, chunking).unwrap();
                    assert!(same(&got, &expected), "{name} {chunking:?} {route:?}");
                    // Wide enough for every record but synthetic_rle's longest REPEAT
                    // (chunk 0 cannot hold it), so nothing may fall back.
                    if overlap == 40000 && name != "synthetic_rle.bin" {
                        assert!(
                            matches!(route, Route::Chunked { .. }),
                            "{name} {chunking:?} {route:?}"
                        );
                    }
                }
            }
        }
    }

    /// A file with one byte changed: Ok and equal, or the same error, whichever way
    /// it is counted.
    fn compare_corrupted(name: &str, positions: usize, values: &[u8], chunking: Chunking) {
        let path = crate::golden_corpus::golden_path(name);
        let bytes = std::fs::read(path).unwrap();
        let file = TachFile::from_bytes(name, bytes.clone()).unwrap();
        let region = 64..file.header().string_table_offset as usize;
        let step = (region.len() / positions).max(1);
        let (mut compared, mut failed, mut chunked) = (0, 0, 0);
        for at in region.step_by(step) {
            for &value in values {
                let mut copy = bytes.clone();
                copy[at] = value;
                let Ok(file) = TachFile::from_bytes(name, copy) else {
                    continue;
                };
                let expected = StackCounts::count_sequential(&file).map_err(|e| e.to_string());
                let got = StackCounts::count_with(&file, chunking);
                if let Ok((_, Route::Chunked { .. })) = &got {
                    chunked += 1;
                }
                match (&got, &expected) {
                    (Ok((g, _)), Ok(e)) => assert!(same(g, e), "byte {at} = {value:#x}"),
                    (Err(g), Err(e)) => assert_eq!(&g.to_string(), e, "byte {at} = {value:#x}"),
                    _ => panic!(
                        "byte {at} = {value:#x}: chunked {:?}, ordinary {:?}",
                        got.map(|(_, r)| r),
                        expected.map(|_| ())
                    ),
                }
                compared += 1;
                failed += usize::from(expected.is_err());
            }
        }
        assert!(
            compared > positions && failed > positions / 4 && chunked > positions / 4,
            "{name}: {compared} compared, {failed} failed, {chunked} chunked"
        );
    }

    #[test]
    fn corrupted_files_count_the_same_or_fail_the_same() {
        let chunking = Chunking {
            chunk: 8192,
            overlap: 40000,
            search: 1024,
            workers: 2,
        };
        compare_corrupted("cpu_recursive_none.bin", 400, &[0x00, 0x03, 0xff], chunking);
        let chunking = Chunking {
            chunk: 256 << 10,
            ..chunking
        };
        compare_corrupted(
            "synthetic_many_threads_none.bin",
            8,
            &[0x00, 0xff],
            chunking,
        );
    }

    const THREAD_A: u64 = 0x0a0a_0a0a_0a0a_0a0a;

    /// A valid file: thread A samples `first`, thread B fills about 40 KB, then A
    /// samples `second`. Also returns where A's last record starts.
    fn two_stacks_apart(first: &[u32], second: &[u32]) -> (Vec<u8>, usize) {
        use crate::tach::{Compression, Writer};
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut w = Writer::builder(1000)
            .start_time_us(1_000)
            .compression(Compression::None)
            .to_writer("memory", &mut buf)
            .unwrap();
        for i in 0..300 {
            w.frame("/app/m.py", &format!("f{i}"), None, None);
        }
        let mut t = 2_000;
        w.write_sample(THREAD_A, 0, t, 1, first).unwrap();
        for i in 0..2000u32 {
            t += 1000;
            let leaf = [280 + i % 7, 290, 291, 292];
            w.write_sample(0x0b0b, 0, t, 1, &leaf).unwrap();
        }
        w.write_sample(THREAD_A, 0, t + 1000, 1, second).unwrap();
        w.finish().unwrap();
        let bytes = buf.into_inner();
        let key: Vec<u8> = THREAD_A.to_le_bytes().into_iter().chain([0; 4]).collect();
        let last = bytes
            .windows(key.len())
            .rposition(|w| w == key.as_slice())
            .unwrap();
        (bytes, last)
    }

    /// The offset of the first count after a record's delta and status.
    fn first_count_at(bytes: &[u8], record: usize) -> usize {
        let mut p = record + RECORD_HEADER_SIZE;
        while bytes[p] & 0x80 != 0 {
            p += 1;
        }
        p + 2
    }

    fn count_both(
        bytes: Vec<u8>,
    ) -> (
        std::result::Result<StackCounts, String>,
        Result<StackCounts>,
    ) {
        let file = TachFile::from_bytes("crafted.bin", bytes).unwrap();
        let chunking = Chunking {
            chunk: 4096,
            overlap: 8192,
            search: 1024,
            workers: 2,
        };
        let chunked = StackCounts::count_with(&file, chunking).map(|(c, route)| {
            assert!(
                matches!(route, Route::Chunked { chunks, .. } if chunks > 5),
                "{route:?}"
            );
            c
        });
        (
            chunked.map_err(|e| e.to_string()),
            StackCounts::count_sequential(&file),
        )
    }

    /// Writes `first` then `second` apart (see [`two_stacks_apart`]), checks that A's
    /// last record is of `kind` and counts the same both ways, then sets its first
    /// count from `was` to `now`: both ways must then fail with the same message,
    /// which says `expected`.
    fn patched_fails_alike(
        first: &[u32],
        second: &[u32],
        kind: RecordKind,
        was: u8,
        now: u8,
        expected: &str,
    ) {
        let (mut bytes, at) = two_stacks_apart(first, second);
        assert_eq!(bytes[at + 12], kind as u8);
        let (chunked, ordinary) = count_both(bytes.clone());
        assert!(same(&chunked.unwrap(), &ordinary.unwrap()));
        let count = first_count_at(&bytes, at);
        assert_eq!(bytes[count], was);
        bytes[count] = now;
        let (chunked, ordinary) = count_both(bytes);
        let e = ordinary.err().unwrap().to_string();
        assert!(e.contains(expected), "{e}");
        assert_eq!(chunked.err().unwrap(), e);
    }

    #[test]
    fn stack_rules_across_chunks_are_checked_when_joining() {
        // A POP_PUSH that makes a stack deeper than 256 only with the depth the thread
        // had in an earlier chunk.
        let deep: Vec<u32> = (0..250).collect();
        let second: Vec<u32> = (250..260).chain(8..250).collect();
        patched_fails_alike(&deep, &second, RecordKind::PopPush, 8, 0, "260");
        // A SUFFIX sharing more frames than the thread has, from an earlier chunk.
        patched_fails_alike(
            &[1, 2],
            &[10, 11, 12, 13, 14, 1, 2],
            RecordKind::Suffix,
            2,
            4,
            "shared count 4 exceeds current stack depth 2",
        );
    }
}

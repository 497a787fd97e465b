//! Decoding the sample region: records -> per-thread stacks -> samples.
//!
//! The region is a sequence of records, each `u64 thread_id, u32 interpreter_id,
//! u8 encoding` then a body (REPEAT / FULL / SUFFIX / POP_PUSH). Stacks are rebuilt per
//! (thread_id, interpreter_id) exactly as CPython's reader does, including its edge
//! cases: the first timestamp delta is taken from the header's start time in wrapping
//! u64 arithmetic, a POP_PUSH that pops more than the depth is clamped, a REPEAT or
//! SUFFIX on an unseen thread starts from an empty stack, and no stack may exceed 256.
//!
//! The decoder pulls bytes from a [`ByteSource`] window, so a compressed region is
//! decoded as a stream with bounded memory.

use std::collections::HashMap;

use super::error::{FormatError, Located, Region, VarintReason};
use super::grammar::{self, Field, FieldReader, SliceReader, StackEdit};
use super::header::{ByteOrder, MAX_STACK_DEPTH};
use super::source::ByteSource;
use super::varint::{self, VarintError, MAX_VARINT_LEN};

pub use super::grammar::{FrameCheck, RecordKind, RECORD_HEADER_SIZE};

/// Counts of records of each kind and the samples they covered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecordMix {
    /// Indexed by `RecordKind as usize`.
    pub records: [u64; 4],
    pub samples: [u64; 4],
    /// Frame indices stored in FULL / SUFFIX / POP_PUSH bodies.
    pub frames_written: u64,
    /// Sum of the depths of every sample's stack.
    pub frames_in_samples: u64,
}

/// A decoded sample. `stack` holds frame-table indices, innermost first.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// Dense index of the (thread_id, interpreter_id) pair, in first-seen order.
    pub thread: u32,
    pub thread_id: u64,
    pub interpreter_id: u32,
    pub timestamp_us: u64,
    pub status: u8,
    pub stack: &'a [u32],
    /// False when this sample's stack is the same as the thread's previous sample's
    /// (a REPEAT record), so aggregators may reuse what they computed for it.
    pub stack_changed: bool,
    pub kind: RecordKind,
}

/// Most samples a [`Run`] holds: the buffers behind it stay small (13 bytes a sample).
pub const RUN_BATCH: u32 = 4096;

/// Samples of one thread in a row with one stack: one FULL / SUFFIX / POP_PUSH sample,
/// or entries of a REPEAT record. Consumers that aggregate take the stack once.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    /// Dense index of the (thread_id, interpreter_id) pair, in first-seen order.
    pub thread: u32,
    pub thread_id: u64,
    pub interpreter_id: u32,
    pub stack: &'a [u32],
    /// As [`Sample::stack_changed`], for the run's first sample; the others share its
    /// stack.
    pub stack_changed: bool,
    pub kind: RecordKind,
    /// Each sample's time, in order; never empty, except from a stream made
    /// [`untimed`](crate::tach::SampleStream::untimed), where it is always empty.
    pub timestamps_us: &'a [u64],
    /// Each sample's status byte, in the same order.
    pub statuses: &'a [u8],
}

impl<'a> Run<'a> {
    /// Samples in the run (at least one).
    pub fn len(&self) -> usize {
        self.statuses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
    }

    /// The run's samples one by one, as `SampleDecoder::next_sample` gives them.
    pub fn samples(&self) -> impl Iterator<Item = Sample<'a>> + '_ {
        self.timestamps_us
            .iter()
            .zip(self.statuses)
            .enumerate()
            .map(move |(i, (&timestamp_us, &status))| Sample {
                thread: self.thread,
                thread_id: self.thread_id,
                interpreter_id: self.interpreter_id,
                timestamp_us,
                status,
                stack: self.stack,
                stack_changed: self.stack_changed && i == 0,
                kind: self.kind,
            })
    }
}

/// An owned sample, for tests and small tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedSample {
    pub thread_id: u64,
    pub interpreter_id: u32,
    pub timestamp_us: u64,
    pub status: u8,
    pub stack: Vec<u32>,
}

impl Sample<'_> {
    pub fn to_owned(&self) -> OwnedSample {
        OwnedSample {
            thread_id: self.thread_id,
            interpreter_id: self.interpreter_id,
            timestamp_us: self.timestamp_us,
            status: self.status,
            stack: self.stack.to_vec(),
        }
    }
}

/// Per-thread reconstruction state.
#[derive(Debug, Clone)]
pub struct ThreadState {
    pub thread_id: u64,
    pub interpreter_id: u32,
    prev_timestamp: u64,
    stack: Vec<u32>,
    seen_sample: bool,
}

/// Pull decoder over the sample region.
pub struct SampleDecoder<'a, S: ByteSource> {
    src: S,
    /// Position in `src.window()`.
    pos: usize,
    /// Stream offset of `src.window()[0]`.
    base: u64,
    region: Region,
    /// Offset added to stream offsets in errors when the region is the file itself.
    file_offset: u64,
    bo: ByteOrder,
    start_time_us: u64,
    declared_threads: u32,
    declared_samples: u64,
    frames: FrameCheck<'a>,
    threads: Vec<ThreadState>,
    thread_index: HashMap<(u64, u32), u32>,
    last_thread: Option<(u64, u32, u32)>,
    /// Remaining entries of the REPEAT record being decoded, and its thread.
    repeat_left: u32,
    repeat_thread: u32,
    repeat_first: bool,
    decoded: u64,
    mix: RecordMix,
    finished: bool,
    /// Reused buffer for the frames a record carries, on the checked path.
    scratch: Vec<u32>,
    /// The same for the unchecked path: a fixed array needs no resizing per record.
    fresh: Box<[u32; MAX_STACK_DEPTH]>,
    /// The run [`Self::next_run`] hands out: its samples' times and statuses.
    run_timestamps: Box<[u64; RUN_BATCH as usize]>,
    run_statuses: Box<[u8; RUN_BATCH as usize]>,
    run_len: usize,
    /// False when the reader counts samples and never reads their times: REPEAT
    /// entries' deltas are then skipped, and runs carry no times.
    timed: bool,
}

/// Settings of a decoder taken from the header.
pub struct DecoderSetup<'a> {
    pub byte_order: ByteOrder,
    pub start_time_us: u64,
    pub thread_count: u32,
    pub sample_count: u64,
    pub frames: FrameCheck<'a>,
    pub region: Region,
    pub file_offset: u64,
}

impl<'a, S: ByteSource> SampleDecoder<'a, S> {
    pub fn new(src: S, setup: DecoderSetup<'a>) -> Self {
        SampleDecoder {
            src,
            pos: 0,
            base: 0,
            region: setup.region,
            file_offset: setup.file_offset,
            bo: setup.byte_order,
            start_time_us: setup.start_time_us,
            declared_threads: setup.thread_count,
            declared_samples: setup.sample_count,
            frames: setup.frames,
            // Bounded: the header's thread count is untrusted, so grow as threads appear.
            threads: Vec::new(),
            thread_index: HashMap::new(),
            last_thread: None,
            repeat_left: 0,
            repeat_thread: 0,
            repeat_first: false,
            decoded: 0,
            mix: RecordMix::default(),
            finished: false,
            scratch: Vec::with_capacity(MAX_STACK_DEPTH),
            fresh: Box::new([0; MAX_STACK_DEPTH]),
            run_timestamps: Box::new([0; RUN_BATCH as usize]),
            run_statuses: Box::new([0; RUN_BATCH as usize]),
            run_len: 0,
            timed: true,
        }
    }

    /// See [`crate::tach::SampleStream::untimed`].
    pub fn set_timed(&mut self, timed: bool) {
        self.timed = timed;
    }

    pub fn mix(&self) -> &RecordMix {
        &self.mix
    }

    pub fn threads(&self) -> &[ThreadState] {
        &self.threads
    }

    /// Samples decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Bytes of the (decompressed) sample stream consumed so far.
    pub fn bytes_consumed(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The stream offset of the next unread byte. Positions for error messages are
    /// taken with this, not as window positions: a refill between taking a position
    /// and reporting at it moves the window.
    #[inline(always)]
    fn here(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// An error at stream offset `at` (see [`Self::here`]).
    fn err(&self, at: u64, error: FormatError) -> Located {
        let offset = match self.region {
            Region::File => at + self.file_offset,
            Region::DecompressedSamples => at,
        };
        Located {
            offset,
            region: self.region,
            error,
        }
    }

    /// Makes sure at least `n` bytes are in the window after `pos`, unless the stream
    /// ends first. Returns the number of bytes available (may be less than `n`).
    #[inline]
    fn ensure(&mut self, n: usize) -> Result<usize, Located> {
        let avail = self.src.window().len() - self.pos;
        if avail >= n {
            return Ok(avail);
        }
        self.refill(n)
    }

    #[cold]
    fn refill(&mut self, n: usize) -> Result<usize, Located> {
        loop {
            let consumed = self.pos;
            let more = self
                .src
                .refill(consumed)
                .map_err(|e| self.err(self.here(), e))?;
            self.base += consumed as u64;
            self.pos = 0;
            let avail = self.src.window().len();
            if avail >= n || !more {
                return Ok(avail);
            }
        }
    }

    #[cold]
    fn end_error(&self, what: &'static str) -> Located {
        self.err(self.here(), FormatError::UnexpectedEnd(what))
    }

    #[cold]
    fn varint_error(&self, what: &'static str, e: VarintError) -> Located {
        self.err(
            self.here(),
            FormatError::MalformedVarint {
                what,
                reason: VarintReason(e),
            },
        )
    }

    #[inline(always)]
    fn thread_slot(
        &mut self,
        thread_id: u64,
        interpreter_id: u32,
        at: u64,
    ) -> Result<u32, Located> {
        if let Some((t, i, slot)) = self.last_thread {
            if t == thread_id && i == interpreter_id {
                return Ok(slot);
            }
        }
        self.thread_slot_lookup(thread_id, interpreter_id, at)
    }

    fn thread_slot_lookup(
        &mut self,
        thread_id: u64,
        interpreter_id: u32,
        at: u64,
    ) -> Result<u32, Located> {
        let slot = match self.thread_index.get(&(thread_id, interpreter_id)) {
            Some(&slot) => slot,
            None => {
                if self.threads.len() as u64 >= self.declared_threads as u64 {
                    return Err(self.err(
                        at,
                        FormatError::TooManyThreads {
                            declared: self.declared_threads,
                            found: self.threads.len() as u64 + 1,
                        },
                    ));
                }
                let slot = self.threads.len() as u32;
                self.threads.push(ThreadState {
                    thread_id,
                    interpreter_id,
                    prev_timestamp: self.start_time_us,
                    stack: Vec::with_capacity(16),
                    seen_sample: false,
                });
                self.thread_index.insert((thread_id, interpreter_id), slot);
                slot
            }
        };
        self.last_thread = Some((thread_id, interpreter_id, slot));
        Ok(slot)
    }

    /// Decodes the next sample; `Ok(None)` at the end of a valid region.
    #[inline(always)]
    pub fn next_sample(&mut self) -> Result<Option<Sample<'_>>, Located> {
        if self.repeat_left > 0 {
            return self.next_repeat_entry().map(Some);
        }
        match self.next_record()? {
            Next::End => Ok(None),
            Next::Change(change) => Ok(Some(self.commit_change(change))),
            Next::Repeat => self.next_repeat_entry().map(Some),
        }
    }

    /// Decodes the next run of samples with one stack: a FULL / SUFFIX / POP_PUSH
    /// sample, or a REPEAT record's entries (up to [`RUN_BATCH`] at a time, so a long
    /// record may come as several runs). `Ok(None)` at the end of a valid region. The
    /// same samples as [`Self::next_sample`] gives, without a step per sample.
    #[inline(always)]
    pub fn next_run(&mut self) -> Result<Option<Run<'_>>, Located> {
        if self.repeat_left == 0 {
            match self.next_record()? {
                Next::End => return Ok(None),
                Next::Change(change) => {
                    let (slot, kind) = (change.slot, change.kind);
                    let sample = self.commit_change(change);
                    let (timestamp, status) = (sample.timestamp_us, sample.status);
                    self.run_timestamps[0] = timestamp;
                    self.run_statuses[0] = status;
                    self.run_len = 1;
                    return Ok(Some(self.run(slot, true, kind)));
                }
                Next::Repeat => {}
            }
        }
        self.repeat_run().map(Some)
    }

    /// Decodes records up to the next sample: a FULL / SUFFIX / POP_PUSH record
    /// applied to its thread's stack (not yet counted), or a REPEAT record with
    /// entries, whose header is read (`repeat_left` is set).
    #[inline(always)]
    fn next_record(&mut self) -> Result<Next, Located> {
        loop {
            if self.finished {
                return Ok(Next::End);
            }
            match self.record_in_window() {
                Some(InWindow::Change(change)) => return Ok(Next::Change(change)),
                Some(InWindow::Repeat) => return Ok(Next::Repeat),
                Some(InWindow::EmptyRepeat) => continue,
                None => {}
            }
            let avail = self.ensure(RECORD_HEADER_SIZE)?;
            let record_at = self.here();
            if avail == 0 {
                self.finished = true;
                if self.decoded != self.declared_samples {
                    return Err(self.err(
                        self.here(),
                        FormatError::SampleCountMismatch {
                            declared: self.declared_samples,
                            decoded: self.decoded,
                        },
                    ));
                }
                return Ok(Next::End);
            }
            if avail < RECORD_HEADER_SIZE {
                self.finished = true;
                return Err(self.err(record_at, FormatError::TruncatedSamples(avail as u64)));
            }
            let (thread_id, interpreter_id, code) =
                grammar::record_header(self.bo, &self.src.window()[self.pos..]);
            self.pos += RECORD_HEADER_SIZE;
            let slot = self.thread_slot(thread_id, interpreter_id, record_at)?;
            let Some(kind) = RecordKind::from_code(code) else {
                return Err(self.err(record_at + 12, FormatError::UnknownEncoding(code)));
            };
            self.mix.records[kind as usize] += 1;
            if kind == RecordKind::Repeat {
                let count_at = self.here();
                let count = grammar::read_repeat_count(self)?;
                // When the whole region is in the window (raw files) the count can be
                // checked up front, as CPython does.
                if self.src.is_complete() {
                    let left = self.src.window().len() - self.pos;
                    grammar::repeat_fits(count, left).map_err(|e| self.err(count_at, e))?;
                }
                if count == 0 {
                    continue;
                }
                self.repeat_left = count;
                self.repeat_thread = slot;
                self.repeat_first = true;
                return Ok(Next::Repeat);
            }
            return self.decode_change(slot, kind).map(Next::Change);
        }
    }

    #[inline(always)]
    fn next_repeat_entry(&mut self) -> Result<Sample<'_>, Located> {
        let mut fast = SliceReader {
            bytes: self.src.window(),
            pos: self.pos,
        };
        let (delta, status) = match grammar::read_repeat_entry(&mut fast) {
            Ok(entry) => {
                self.pos = fast.pos;
                entry
            }
            Err(_) => grammar::read_repeat_entry(self)?,
        };
        self.repeat_left -= 1;
        let slot = self.repeat_thread;
        let first = std::mem::replace(&mut self.repeat_first, false);
        self.decoded += 1;
        self.mix.samples[RecordKind::Repeat as usize] += 1;
        let t = &mut self.threads[slot as usize];
        t.prev_timestamp = t.prev_timestamp.wrapping_add(delta);
        let stack_changed = first && !t.seen_sample;
        t.seen_sample = true;
        self.mix.frames_in_samples += t.stack.len() as u64;
        Ok(Sample {
            thread: slot,
            thread_id: t.thread_id,
            interpreter_id: t.interpreter_id,
            timestamp_us: t.prev_timestamp,
            status,
            stack: &t.stack,
            stack_changed,
            kind: RecordKind::Repeat,
        })
    }

    /// The checked path of a FULL / SUFFIX / POP_PUSH record: every error reported
    /// where CPython reports it.
    fn decode_change(&mut self, slot: u32, kind: RecordKind) -> Result<Change, Located> {
        let head = grammar::read_change_head(self, kind)?;
        let depth = self.threads[slot as usize].stack.len();
        let keep_from = head
            .edit
            .keep_from(depth)
            .map_err(|e| self.err(head.edit_at, e))?;
        // The count is at most MAX_STACK_DEPTH: keep_from checked the final depth.
        let count = head.edit.fresh();
        let mut fresh = std::mem::take(&mut self.scratch);
        fresh.clear();
        fresh.resize(count as usize, 0);
        let frames = self.frames;
        let read = grammar::read_frames(self, &frames, &mut fresh);
        if read.is_ok() {
            splice_top(&mut self.threads[slot as usize].stack, keep_from, &fresh);
        }
        self.scratch = fresh;
        read?;
        Ok(Change {
            slot,
            kind,
            delta: head.delta,
            status: head.status,
            written: count,
        })
    }

    /// Up to [`RUN_BATCH`] entries of the REPEAT record being decoded, as one run:
    /// those at hand in the window in one tight loop, or one through the checked path
    /// when the window ends first.
    fn repeat_run(&mut self) -> Result<Run<'_>, Located> {
        let slot = self.repeat_thread;
        let first = std::mem::replace(&mut self.repeat_first, false);
        let want = self.repeat_left.min(RUN_BATCH) as usize;
        let mut time = self.threads[slot as usize].prev_timestamp;
        let mut r = SliceReader {
            bytes: self.src.window(),
            pos: self.pos,
        };
        let mut n = if self.timed {
            grammar::read_repeat_entries(
                &mut r,
                &mut time,
                &mut self.run_timestamps[..want],
                &mut self.run_statuses[..want],
            )
        } else {
            grammar::read_repeat_statuses(&mut r, &mut self.run_statuses[..want])
        };
        self.pos = r.pos;
        if n == 0 {
            let (delta, status) = grammar::read_repeat_entry(self)?;
            time = time.wrapping_add(delta);
            self.run_timestamps[0] = time;
            self.run_statuses[0] = status;
            n = 1;
        }
        self.run_len = n;
        let n = n as u32;
        self.repeat_left -= n;
        self.decoded += n as u64;
        self.mix.samples[RecordKind::Repeat as usize] += n as u64;
        let t = &mut self.threads[slot as usize];
        t.prev_timestamp = time;
        let stack_changed = first && !t.seen_sample;
        t.seen_sample = true;
        self.mix.frames_in_samples += t.stack.len() as u64 * n as u64;
        Ok(self.run(slot, stack_changed, RecordKind::Repeat))
    }

    fn run(&self, slot: u32, stack_changed: bool, kind: RecordKind) -> Run<'_> {
        let t = &self.threads[slot as usize];
        Run {
            thread: slot,
            thread_id: t.thread_id,
            interpreter_id: t.interpreter_id,
            stack: &t.stack,
            stack_changed,
            kind,
            timestamps_us: if self.timed {
                &self.run_timestamps[..self.run_len]
            } else {
                &[]
            },
            statuses: &self.run_statuses[..self.run_len],
        }
    }

    /// Counts a FULL / SUFFIX / POP_PUSH sample whose stack is already rebuilt.
    #[inline(always)]
    fn commit_change(&mut self, c: Change) -> Sample<'_> {
        let t = &mut self.threads[c.slot as usize];
        t.prev_timestamp = t.prev_timestamp.wrapping_add(c.delta);
        t.seen_sample = true;
        self.decoded += 1;
        self.mix.samples[c.kind as usize] += 1;
        self.mix.frames_written += c.written as u64;
        self.mix.frames_in_samples += t.stack.len() as u64;
        Sample {
            thread: c.slot,
            thread_id: t.thread_id,
            interpreter_id: t.interpreter_id,
            timestamp_us: t.prev_timestamp,
            status: c.status,
            stack: &t.stack,
            stack_changed: true,
            kind: c.kind,
        }
    }

    /// Decodes the next record from the window without a refill check per field: a
    /// whole FULL / SUFFIX / POP_PUSH record (its stack rebuilt, not yet counted), or a
    /// REPEAT record's header. Returns None when the window may be too short or
    /// anything is wrong, having changed nothing but (possibly) registering the record's
    /// thread, which the checked path would do first too: it then decodes the same
    /// record again and reports the error where CPython does.
    #[inline(always)]
    fn record_in_window(&mut self) -> Option<InWindow> {
        let record_at = self.pos;
        let w = self.src.window().get(record_at..)?;
        if w.len() < FAST_RECORD_MIN {
            return None;
        }
        let mut r = SliceReader { bytes: w, pos: 0 };
        let (thread_id, interpreter_id, kind) = r.record_header(self.bo).ok()?;
        if kind == RecordKind::Repeat {
            let count = grammar::read_repeat_count(&mut r).ok()?;
            if self.src.is_complete() {
                grammar::repeat_fits(count, w.len() - r.pos).ok()?;
            }
            let end = record_at + r.pos;
            let slot = self
                .thread_slot(thread_id, interpreter_id, self.base + record_at as u64)
                .ok()?;
            self.mix.records[kind as usize] += 1;
            self.pos = end;
            if count == 0 {
                return Some(InWindow::EmptyRepeat);
            }
            self.repeat_left = count;
            self.repeat_thread = slot;
            self.repeat_first = true;
            return Some(InWindow::Repeat);
        }
        let head = grammar::read_change_head(&mut r, kind).ok()?;
        let frames_at = record_at + r.pos;
        let slot = self
            .thread_slot(thread_id, interpreter_id, self.base + record_at as u64)
            .ok()?;
        let (written, end) = self.rebuild_in_window(slot, head.edit, frames_at)?;
        self.pos = end;
        self.mix.records[kind as usize] += 1;
        Some(InWindow::Change(Change {
            slot,
            kind,
            delta: head.delta,
            status: head.status,
            written,
        }))
    }

    /// Applies a FULL / SUFFIX / POP_PUSH record's frames, read from the window at
    /// `pos`, to thread `slot`'s stack: the frames read and the position after them.
    /// Leaves the stack untouched and returns None on anything the checked path must
    /// report.
    #[inline(always)]
    fn rebuild_in_window(
        &mut self,
        slot: u32,
        edit: StackEdit,
        pos: usize,
    ) -> Option<(u32, usize)> {
        let stack = &mut self.threads[slot as usize].stack;
        let keep_from = edit.keep_from(stack.len()).ok()?;
        // At most MAX_STACK_DEPTH: keep_from checked the final depth.
        let count = edit.fresh();
        let fresh = &mut self.fresh[..count as usize];
        let mut r = SliceReader {
            bytes: self.src.window(),
            pos,
        };
        grammar::read_frames(&mut r, &self.frames, fresh).ok()?;
        splice_top(stack, keep_from, fresh);
        Some((count, r.pos))
    }
}

/// The checked path's reads: the window is refilled as needed, and failures are
/// reported at their stream offset with the field's name.
impl<S: ByteSource> FieldReader for SampleDecoder<'_, S> {
    type Error = Located;
    type Mark = u64;

    #[inline(always)]
    fn mark(&self) -> u64 {
        self.here()
    }

    #[inline]
    fn read_u64(&mut self, field: Field) -> Result<u64, Located> {
        self.ensure(MAX_VARINT_LEN)?;
        match varint::decode_u64(&self.src.window()[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => Err(self.varint_error(field.what(), e)),
        }
    }

    #[inline]
    fn read_u32(&mut self, field: Field) -> Result<u32, Located> {
        self.ensure(MAX_VARINT_LEN)?;
        match varint::decode_u32(&self.src.window()[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => Err(self.varint_error(field.what(), e)),
        }
    }

    #[inline]
    fn read_byte(&mut self, field: Field) -> Result<u8, Located> {
        if self.ensure(1)? == 0 {
            return Err(self.end_error(field.what()));
        }
        let b = self.src.window()[self.pos];
        self.pos += 1;
        Ok(b)
    }

    fn broken(&self, at: u64, rule: FormatError) -> Located {
        self.err(at, rule)
    }
}

/// `stack = fresh + stack[keep_from..]`, in place (a splice is much slower). A FULL
/// record is `keep_from == stack.len()`.
#[inline(always)]
pub(crate) fn splice_top(stack: &mut Vec<u32>, keep_from: usize, fresh: &[u32]) {
    // As many frames pushed as popped (the leaf moved to another line or call) leaves
    // the kept frames where they are.
    if fresh.len() != keep_from {
        let kept = stack.len() - keep_from;
        let new_len = fresh.len() + kept;
        if fresh.len() > keep_from {
            stack.resize(new_len, 0);
        }
        stack.copy_within(keep_from..keep_from + kept, fresh.len());
        stack.truncate(new_len);
    }
    stack[..fresh.len()].copy_from_slice(fresh);
}

/// A FULL / SUFFIX / POP_PUSH record decoded and applied to its thread's stack, not yet
/// counted.
struct Change {
    slot: u32,
    kind: RecordKind,
    delta: u64,
    status: u8,
    written: u32,
}

/// What [`SampleDecoder::next_record`] decoded.
enum Next {
    End,
    Change(Change),
    /// A REPEAT record with entries: they follow.
    Repeat,
}

/// What [`SampleDecoder::record_in_window`] decoded.
enum InWindow {
    Change(Change),
    /// A REPEAT record with entries: they follow.
    Repeat,
    EmptyRepeat,
}

/// The window must hold this many bytes after a record's start for the unchecked path:
/// the header, three varints and a status byte, plus room for a last varint read (a
/// varint decoded from a ten-byte chunk needs ten bytes at hand).
const FAST_RECORD_MIN: usize = RECORD_HEADER_SIZE + 4 * MAX_VARINT_LEN + 1;

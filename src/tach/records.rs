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
use super::header::{ByteOrder, MAX_STACK_DEPTH};
use super::source::ByteSource;
use super::varint::{self, VarintError, MAX_VARINT_LEN};

/// Bytes of a record header: thread_id, interpreter_id, encoding.
pub const RECORD_HEADER_SIZE: usize = 13;

/// The four record encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    Repeat = 0,
    Full = 1,
    Suffix = 2,
    PopPush = 3,
}

impl RecordKind {
    pub const ALL: [RecordKind; 4] = [
        RecordKind::Repeat,
        RecordKind::Full,
        RecordKind::Suffix,
        RecordKind::PopPush,
    ];
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => RecordKind::Repeat,
            1 => RecordKind::Full,
            2 => RecordKind::Suffix,
            3 => RecordKind::PopPush,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Repeat => "REPEAT",
            RecordKind::Full => "FULL",
            RecordKind::Suffix => "SUFFIX",
            RecordKind::PopPush => "POP_PUSH",
        }
    }
}

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

/// What the decoder needs to know about the tables to validate frame indices.
pub struct FrameCheck<'a> {
    pub frame_count: u32,
    /// For each frame, the string index that is out of range, if any.
    pub bad_string: &'a [Option<u32>],
    pub string_count: u32,
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
    /// Reused buffer for frames read by SUFFIX and POP_PUSH records.
    scratch: Vec<u32>,
    /// The same for the unchecked path: a fixed array needs no resizing per record.
    fresh: Box<[u32; MAX_STACK_DEPTH]>,
    /// No frame names an out-of-range string (the usual case): a frame index needs
    /// only its range check.
    strings_valid: bool,
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
        let strings_valid = setup.frames.bad_string.iter().all(Option::is_none);
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
            strings_valid,
        }
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

    #[inline]
    fn varint_u64(&mut self, what: &'static str) -> Result<u64, Located> {
        self.ensure(MAX_VARINT_LEN)?;
        match varint::decode_u64(&self.src.window()[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => Err(self.varint_error(what, e)),
        }
    }

    #[inline]
    fn varint_u32(&mut self, what: &'static str) -> Result<u32, Located> {
        self.ensure(MAX_VARINT_LEN)?;
        match varint::decode_u32(&self.src.window()[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(e) => Err(self.varint_error(what, e)),
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

    #[inline]
    fn status_byte(&mut self, what: &'static str) -> Result<u8, Located> {
        if self.ensure(1)? == 0 {
            return Err(self.end_error(what));
        }
        let b = self.src.window()[self.pos];
        self.pos += 1;
        Ok(b)
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

    /// Reads `count` frame indices into the front of the thread's stack buffer.
    fn read_frames(&mut self, out: &mut Vec<u32>, count: u32) -> Result<(), Located> {
        // Fast path: the window holds `count` varints of any length, so no refill check
        // per varint. Index checks are the same as below; any error is reported by the
        // slow path, which re-reads from the first frame of this call.
        let (start_len, start_pos) = (out.len(), self.pos);
        if let Some(end) = self.read_frames_in_window(out, count) {
            self.pos = end;
            return Ok(());
        }
        out.truncate(start_len);
        self.pos = start_pos;
        for _ in 0..count {
            let at = self.here();
            let idx = self.varint_u32("a frame index")?;
            if idx >= self.frames.frame_count {
                return Err(self.err(
                    at,
                    FormatError::FrameIndex {
                        index: idx,
                        count: self.frames.frame_count,
                    },
                ));
            }
            if let Some(bad) = self.frames.bad_string[idx as usize] {
                return Err(self.err(
                    at,
                    FormatError::StringIndex {
                        frame: idx,
                        index: bad,
                        count: self.frames.string_count,
                    },
                ));
            }
            out.push(idx);
        }
        Ok(())
    }

    /// [`Self::read_frames`] when the window surely holds all `count` varints: returns
    /// the position after them, or None (nothing is reported, and `out` may hold partial
    /// frames for the caller to drop) on any defect or when the window may be short.
    #[inline(always)]
    fn read_frames_in_window(&self, out: &mut Vec<u32>, count: u32) -> Option<usize> {
        let start = out.len();
        out.resize(start + count as usize, 0);
        frames_in_window(
            self.src.window(),
            self.pos,
            &self.frames,
            self.strings_valid,
            &mut out[start..],
        )
    }

    /// Decodes the next sample; `Ok(None)` at the end of a valid region.
    #[inline(always)]
    pub fn next_sample(&mut self) -> Result<Option<Sample<'_>>, Located> {
        if self.repeat_left > 0 {
            return self.next_repeat_entry().map(Some);
        }
        loop {
            if self.finished {
                return Ok(None);
            }
            match self.record_in_window() {
                Some(InWindow::Change(change)) => return Ok(Some(self.commit_change(change))),
                Some(InWindow::Repeat) => return self.next_repeat_entry().map(Some),
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
                return Ok(None);
            }
            if avail < RECORD_HEADER_SIZE {
                self.finished = true;
                return Err(self.err(record_at, FormatError::TruncatedSamples(avail as u64)));
            }
            let w = &self.src.window()[self.pos..];
            let thread_id = self.bo.u64(super::header::array(w, 0));
            let interpreter_id = self.bo.u32(super::header::array(w, 8));
            let code = w[12];
            self.pos += RECORD_HEADER_SIZE;
            let slot = self.thread_slot(thread_id, interpreter_id, record_at)?;
            let Some(kind) = RecordKind::from_code(code) else {
                return Err(self.err(record_at + 12, FormatError::UnknownEncoding(code)));
            };
            self.mix.records[kind as usize] += 1;
            if kind == RecordKind::Repeat {
                let count_at = self.here();
                let count = self.varint_u32("a REPEAT count")?;
                // Each entry takes at least two bytes; when the whole region is in the
                // window (raw files) the count can be checked up front, as CPython does.
                if self.src.is_complete() {
                    let max = (self.src.window().len() - self.pos) as u64 / 2;
                    if count as u64 > max {
                        return Err(self.err(count_at, FormatError::RleCount { count, max }));
                    }
                }
                if count == 0 {
                    continue;
                }
                self.repeat_left = count;
                self.repeat_thread = slot;
                self.repeat_first = true;
                return self.next_repeat_entry().map(Some);
            }
            return self.decode_change(slot, kind).map(Some);
        }
    }

    #[inline(always)]
    fn next_repeat_entry(&mut self) -> Result<Sample<'_>, Located> {
        let (delta, status) = match self.repeat_entry_in_window() {
            Some((delta, status, end)) => {
                self.pos = end;
                (delta, status)
            }
            None => (
                self.varint_u64("a REPEAT timestamp delta")?,
                self.status_byte("sample data in a REPEAT record")?,
            ),
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

    fn decode_change(&mut self, slot: u32, kind: RecordKind) -> Result<Sample<'_>, Located> {
        let delta = self.varint_u64("a timestamp delta")?;
        let status = self.status_byte("sample data")?;
        // Work on the thread's stack outside `self` so frame reads can borrow `self`.
        let mut stack = std::mem::take(&mut self.threads[slot as usize].stack);
        let result = self.rebuild_stack(&mut stack, kind);
        self.threads[slot as usize].stack = stack;
        let written = result?;
        Ok(self.commit_change(Change {
            slot,
            kind,
            delta,
            status,
            written,
        }))
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

    /// One REPEAT entry (delta, status, position after it) when the window surely holds
    /// it; None otherwise, and the checked path reads it.
    #[inline(always)]
    fn repeat_entry_in_window(&self) -> Option<(u64, u8, usize)> {
        let w = self
            .src
            .window()
            .get(self.pos..self.pos + MAX_VARINT_LEN + 1)?;
        let (delta, n) = varint::decode_u64(w).ok()?;
        Some((delta, w[n], self.pos + n + 1))
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
        let thread_id = self.bo.u64(super::header::array(w, 0));
        let interpreter_id = self.bo.u32(super::header::array(w, 8));
        let kind = RecordKind::from_code(w[12])?;
        let mut p = RECORD_HEADER_SIZE;
        // `w` holds FAST_RECORD_MIN bytes: every varint below has ten at hand.
        #[inline(always)]
        fn next(w: &[u8], p: &mut usize) -> Option<u64> {
            let (v, n) = varint::decode_u64(&w[*p..]).ok()?;
            *p += n;
            Some(v)
        }
        if kind == RecordKind::Repeat {
            let count = u32::try_from(next(w, &mut p)?).ok()?;
            if self.src.is_complete() {
                let max = (w.len() - p) as u64 / 2;
                if count as u64 > max {
                    return None;
                }
            }
            let slot = self
                .thread_slot(thread_id, interpreter_id, self.base + record_at as u64)
                .ok()?;
            self.mix.records[kind as usize] += 1;
            self.pos = record_at + p;
            if count == 0 {
                return Some(InWindow::EmptyRepeat);
            }
            self.repeat_left = count;
            self.repeat_thread = slot;
            self.repeat_first = true;
            return Some(InWindow::Repeat);
        }
        let delta = next(w, &mut p)?;
        let status = w[p];
        p += 1;
        let first = u32::try_from(next(w, &mut p)?).ok()?;
        let second = match kind {
            RecordKind::Full => 0,
            _ => u32::try_from(next(w, &mut p)?).ok()?,
        };
        let slot = self
            .thread_slot(thread_id, interpreter_id, self.base + record_at as u64)
            .ok()?;
        self.pos = record_at + p;
        let mut stack = std::mem::take(&mut self.threads[slot as usize].stack);
        let written = self.rebuild_in_window(&mut stack, kind, first, second);
        self.threads[slot as usize].stack = stack;
        let Some(written) = written else {
            self.pos = record_at;
            return None;
        };
        self.mix.records[kind as usize] += 1;
        Some(InWindow::Change(Change {
            slot,
            kind,
            delta,
            status,
            written,
        }))
    }

    /// The body of a FULL / SUFFIX / POP_PUSH record after its counts (`first`,
    /// `second`: depth; shared and new; pop and push), read from the window. Leaves
    /// `stack` untouched and returns None on anything the checked path must report.
    #[inline(always)]
    fn rebuild_in_window(
        &mut self,
        stack: &mut Vec<u32>,
        kind: RecordKind,
        first: u32,
        second: u32,
    ) -> Option<u32> {
        let (keep_from, count) = match kind {
            RecordKind::Full => {
                if first as usize > MAX_STACK_DEPTH {
                    return None;
                }
                (stack.len(), first)
            }
            RecordKind::Suffix => {
                if first as usize > stack.len()
                    || first as u64 + second as u64 > MAX_STACK_DEPTH as u64
                {
                    return None;
                }
                (stack.len() - first as usize, second)
            }
            RecordKind::PopPush => {
                let keep_from = (first as usize).min(stack.len());
                if (stack.len() - keep_from) as u64 + second as u64 > MAX_STACK_DEPTH as u64 {
                    return None;
                }
                (keep_from, second)
            }
            RecordKind::Repeat => return None,
        };
        // count <= MAX_STACK_DEPTH: every kind's final depth was checked above.
        let fresh = &mut self.fresh[..count as usize];
        let end = frames_in_window(
            self.src.window(),
            self.pos,
            &self.frames,
            self.strings_valid,
            fresh,
        )?;
        self.pos = end;
        splice_top(stack, keep_from, fresh);
        Some(count)
    }

    /// Applies a FULL / SUFFIX / POP_PUSH body to `stack`; returns frames read.
    fn rebuild_stack(&mut self, stack: &mut Vec<u32>, kind: RecordKind) -> Result<u32, Located> {
        match kind {
            RecordKind::Full => {
                let at = self.here();
                let depth = self.varint_u32("a FULL stack depth")?;
                if depth as usize > MAX_STACK_DEPTH {
                    return Err(self.err(at, FormatError::StackDepth(depth)));
                }
                stack.clear();
                self.read_frames(stack, depth)?;
                Ok(depth)
            }
            RecordKind::Suffix => {
                let at = self.here();
                let shared = self.varint_u32("a SUFFIX shared count")?;
                let new_count = self.varint_u32("a SUFFIX frame count")?;
                if shared as usize > stack.len() {
                    return Err(self.err(
                        at,
                        FormatError::SharedExceedsDepth {
                            shared,
                            depth: stack.len(),
                        },
                    ));
                }
                let final_depth = shared as u64 + new_count as u64;
                if final_depth > MAX_STACK_DEPTH as u64 {
                    return Err(self.err(at, FormatError::FinalStackDepth(final_depth)));
                }
                let keep_from = stack.len() - shared as usize;
                self.replace_top(stack, keep_from, new_count)?;
                Ok(new_count)
            }
            RecordKind::PopPush => {
                let at = self.here();
                let pop = self.varint_u32("a POP_PUSH pop count")?;
                let push = self.varint_u32("a POP_PUSH push count")?;
                // A pop beyond the depth is clamped, as in CPython.
                let keep_from = (pop as usize).min(stack.len());
                let final_depth = (stack.len() - keep_from) as u64 + push as u64;
                if final_depth > MAX_STACK_DEPTH as u64 {
                    return Err(self.err(at, FormatError::FinalStackDepth(final_depth)));
                }
                self.replace_top(stack, keep_from, push)?;
                Ok(push)
            }
            RecordKind::Repeat => unreachable!("REPEAT records are decoded elsewhere"),
        }
    }

    /// Replaces `stack[..keep_from]` (the innermost frames) with `count` frames read
    /// from the stream.
    fn replace_top(
        &mut self,
        stack: &mut Vec<u32>,
        keep_from: usize,
        count: u32,
    ) -> Result<(), Located> {
        let mut fresh = std::mem::take(&mut self.scratch);
        fresh.clear();
        let read = self.read_frames(&mut fresh, count);
        if read.is_ok() {
            splice_top(stack, keep_from, &fresh);
        }
        self.scratch = fresh;
        read
    }
}

/// Fills `out` with frame indices read from `window` at `pos` when the window surely
/// holds that many varints: returns the position after them, or None on any defect (an
/// index out of range, or naming a bad string unless `strings_valid`) or when the
/// window may be short, for the checked path to report.
#[inline(always)]
fn frames_in_window(
    window: &[u8],
    mut pos: usize,
    frames: &FrameCheck<'_>,
    strings_valid: bool,
    out: &mut [u32],
) -> Option<usize> {
    if window.len() - pos < out.len() * MAX_VARINT_LEN {
        return None;
    }
    for slot in out {
        let (idx, n) = varint::decode_u32(&window[pos..]).ok()?;
        if idx >= frames.frame_count
            || (!strings_valid && frames.bad_string[idx as usize].is_some())
        {
            return None;
        }
        *slot = idx;
        pos += n;
    }
    Some(pos)
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

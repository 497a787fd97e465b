//! A streaming TACH writer that makes CPython 3.15's encoding choices, so that for the
//! same samples the uncompressed sample region is byte-identical to CPython's.
//!
//! CPython's rules, which this writer follows:
//! - strings, then frames, are interned in first-seen order (for each frame of each
//!   sample, innermost first: filename, funcname, then the frame);
//! - each (thread_id, interpreter_id) keeps its previous stack and timestamp (starting
//!   at the header's start time; deltas wrap);
//! - a stack equal to the previous one is buffered for a REPEAT record, flushed when the
//!   stack changes, at finalize, or when the next entry could overflow CPython's 16 KiB
//!   per-thread buffer;
//! - a changed stack is FULL when it shares no outer frames with the previous one,
//!   SUFFIX when it only adds frames, FULL when it shares fewer than half of its own
//!   frames, and POP_PUSH otherwise;
//! - only the innermost 256 frames are kept.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::{Result, TachError};
use super::header::{
    ByteOrder, CaptureFeatures, Compression, Config, Footer, Header, ProfilingMode, Stats,
    FORMAT_VERSION, HEADER_SIZE, MAX_STACK_DEPTH,
};
use super::journal::{JournalFile, JournalSettings, Sync};
use super::records::{RecordKind, RecordMix};
use super::tables::{FrameEntry, Location, OPCODE_NONE};
use super::varint;

/// CPython's per-thread RLE buffer and the largest entry it holds.
const RLE_BUFFER_SIZE: usize = 16 * 1024;
const RLE_ENTRY_MAX: usize = 11;
/// CPython feeds its compressor (and the file) in chunks of this size.
const WRITE_CHUNK: usize = 512 * 1024;
/// Default zstd level (CPython's).
pub const DEFAULT_ZSTD_LEVEL: i32 = 5;
/// CPython's zstd window: 2 MiB.
const ZSTD_WINDOW_LOG: u32 = 21;

/// Settings for a new file. Build with [`Writer::builder`].
#[derive(Debug, Clone)]
pub struct WriterBuilder {
    sample_interval_us: u64,
    start_time_us: u64,
    compression: Compression,
    level: i32,
    config: Config,
    python_version: (u8, u8, u8),
    stats: Option<Stats>,
    journal: Option<PathBuf>,
    wall_origin_us: Option<i64>,
}

impl WriterBuilder {
    /// Timestamps are deltas from this (monotonic clock, µs). Default 0.
    pub fn start_time_us(mut self, v: u64) -> Self {
        self.start_time_us = v;
        self
    }
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }
    /// zstd level (1-22); ignored without compression. Default 5.
    pub fn level(mut self, level: i32) -> Self {
        self.level = level;
        self
    }
    pub fn mode(mut self, mode: ProfilingMode) -> Self {
        self.config = Config::new(mode, self.config.features);
        self
    }
    pub fn features(mut self, features: Option<CaptureFeatures>) -> Self {
        self.config = Config::new(self.config.mode, features);
        self
    }
    /// The raw config word, as read from another file.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }
    /// The Python version recorded in the header (the profiled interpreter's).
    pub fn python_version(mut self, v: (u8, u8, u8)) -> Self {
        self.python_version = v;
        self
    }
    /// The wall-clock time (UTC, Unix epoch µs) of `start_time_us`, kept in the footer
    /// (see [`Footer::wall_origin_us`]). Default none.
    pub fn wall_origin_us(mut self, origin: Option<i64>) -> Self {
        self.wall_origin_us = origin;
        self
    }
    /// The stats block written before the footer.
    pub fn stats(mut self, stats: Option<Stats>) -> Self {
        self.stats = stats;
        self
    }

    /// Keeps a crash journal at `path` (see `journal`): the file is created
    /// now, appended to by [`Writer::sync_journal`] and deleted once the output file is
    /// complete. Without it (the default) the writer writes only its output.
    pub fn journal(mut self, path: Option<PathBuf>) -> Self {
        self.journal = path;
        self
    }

    /// Creates `path` and writes to it.
    pub fn create(self, path: impl AsRef<Path>) -> Result<Writer<BufWriter<File>>> {
        let path = path.as_ref();
        let file = File::create(path).map_err(|e| TachError::io(path, e))?;
        self.to_writer(path, BufWriter::with_capacity(WRITE_CHUNK, file))
    }

    /// Writes to any seekable sink; `name` is used in error messages.
    pub fn to_writer<W: Write + Seek>(
        self,
        name: impl Into<PathBuf>,
        mut out: W,
    ) -> Result<Writer<W>> {
        let name = name.into();
        if !(1..=22).contains(&self.level) && self.compression == Compression::Zstd {
            return Err(TachError::Usage(format!(
                "zstd level {} is out of range 1-22",
                self.level
            )));
        }
        out.write_all(&[0u8; HEADER_SIZE])
            .map_err(|e| TachError::io(&name, e))?;
        let journal = match &self.journal {
            Some(path) => {
                let settings = JournalSettings {
                    byte_order: ByteOrder::NATIVE,
                    python_version: self.python_version,
                    start_time_us: self.start_time_us,
                    sample_interval_us: self.sample_interval_us,
                    compression: self.compression,
                    config: self.config.raw,
                    wall_origin_us: self.wall_origin_us,
                };
                let file = JournalFile::create(path.clone(), &settings)
                    .map_err(|e| TachError::io(path, e))?;
                Some(Journal {
                    file,
                    unsynced: Vec::new(),
                    buffer_synced: 0,
                    strings_synced: 0,
                    frames_synced: 0,
                })
            }
            None => None,
        };
        let sink = match self.compression {
            Compression::None => Sink::Raw(out),
            Compression::Zstd => {
                let mut enc = zstd::stream::write::Encoder::new(out, self.level)
                    .map_err(|e| TachError::io(&name, e))?;
                // Content size stays at zstd's default, as in CPython: streamed data has
                // no known size, and an empty region gets a one-byte size of 0.
                (|| {
                    enc.include_checksum(false)?;
                    enc.window_log(ZSTD_WINDOW_LOG)
                })()
                .map_err(|e| TachError::io(&name, e))?;
                Sink::Zstd(Box::new(enc))
            }
        };
        Ok(Writer {
            name,
            settings: self,
            sink: Some(sink),
            buffer: Vec::with_capacity(WRITE_CHUNK),
            strings: Vec::new(),
            string_index: HashMap::new(),
            frames: Vec::new(),
            frame_index: HashMap::new(),
            threads: Vec::new(),
            thread_index: HashMap::new(),
            total_samples: 0,
            mix: RecordMix::default(),
            finished: false,
            journal,
            abandoned_journal: None,
        })
    }
}

enum Sink<W: Write> {
    Raw(W),
    Zstd(Box<zstd::stream::write::Encoder<'static, W>>),
}

struct WriterThread {
    thread_id: u64,
    interpreter_id: u32,
    prev_timestamp: u64,
    prev_stack: Vec<u32>,
    pending_rle: Vec<u8>,
    pending_samples: u32,
}

/// The writer's side of its crash journal: what has been journaled so far.
struct Journal {
    file: JournalFile,
    /// Records flushed from `buffer` to the output since the last sync.
    unsynced: Vec<u8>,
    /// Bytes at the start of `buffer` already in `unsynced` or a sync.
    buffer_synced: usize,
    strings_synced: usize,
    frames_synced: usize,
}

/// A TACH file being written. Call [`Writer::finish`]; dropping an unfinished writer
/// finishes it too, ignoring errors.
pub struct Writer<W: Write + Seek> {
    name: PathBuf,
    settings: WriterBuilder,
    sink: Option<Sink<W>>,
    buffer: Vec<u8>,
    strings: Vec<Box<[u8]>>,
    string_index: HashMap<Box<[u8]>, u32>,
    frames: Vec<FrameEntry>,
    frame_index: HashMap<FrameEntry, u32>,
    threads: Vec<WriterThread>,
    thread_index: HashMap<(u64, u32), usize>,
    total_samples: u64,
    mix: RecordMix,
    finished: bool,
    journal: Option<Journal>,
    /// A journal given up after a failed sync (a full disk): removed all the same once
    /// the file is finished, so that no stale journal stays beside a complete file.
    abandoned_journal: Option<PathBuf>,
}

/// What [`Writer::finish`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteSummary {
    pub samples: u64,
    pub threads: u32,
    pub strings: u32,
    pub frames: u32,
    pub file_size: u64,
    pub mix: RecordMix,
}

impl Writer<BufWriter<File>> {
    /// Starts settings for a file sampled every `sample_interval_us`.
    pub fn builder(sample_interval_us: u64) -> WriterBuilder {
        WriterBuilder {
            sample_interval_us,
            start_time_us: 0,
            compression: Compression::Zstd,
            level: DEFAULT_ZSTD_LEVEL,
            config: Config::new(ProfilingMode::Wall, None),
            python_version: (0, 0, 0),
            stats: None,
            journal: None,
            wall_origin_us: None,
        }
    }
}

impl<W: Write + Seek> Writer<W> {
    /// Interns a string (by its bytes) and returns its index.
    pub fn intern_string(&mut self, s: &[u8]) -> u32 {
        if let Some(&i) = self.string_index.get(s) {
            return i;
        }
        let i = self.strings.len() as u32;
        let owned: Box<[u8]> = s.into();
        self.strings.push(owned.clone());
        self.string_index.insert(owned, i);
        i
    }

    /// Interns a frame whose string indices came from [`Writer::intern_string`].
    pub fn intern_frame(&mut self, frame: FrameEntry) -> u32 {
        if let Some(&i) = self.frame_index.get(&frame) {
            return i;
        }
        let i = self.frames.len() as u32;
        self.frames.push(frame);
        self.frame_index.insert(frame, i);
        i
    }

    /// Interns a frame by its strings, in CPython's order (filename, then funcname).
    /// `location` `None` stores -1 for all four fields, as CPython does.
    pub fn frame(
        &mut self,
        filename: &str,
        funcname: &str,
        location: Option<Location>,
        opcode: Option<u8>,
    ) -> u32 {
        let filename = self.intern_string(filename.as_bytes());
        let funcname = self.intern_string(funcname.as_bytes());
        let loc = location.unwrap_or(Location {
            lineno: -1,
            end_lineno: -1,
            column: -1,
            end_column: -1,
        });
        self.intern_frame(FrameEntry {
            filename,
            funcname,
            lineno: loc.lineno,
            end_lineno: loc.end_lineno,
            column: loc.column,
            end_column: loc.end_column,
            opcode: opcode.unwrap_or(OPCODE_NONE),
        })
    }

    /// Frames interned so far.
    pub fn frames(&self) -> &[FrameEntry] {
        &self.frames
    }

    /// Strings interned so far (what [`FrameEntry`]'s indices name).
    pub fn strings(&self) -> &[Box<[u8]>] {
        &self.strings
    }

    /// Records one thread's sample. `stack` holds indices from [`Writer::frame`] or
    /// [`Writer::intern_frame`], innermost first; frames past the 256th are dropped.
    pub fn write_sample(
        &mut self,
        thread_id: u64,
        interpreter_id: u32,
        timestamp_us: u64,
        status: u8,
        stack: &[u32],
    ) -> Result<()> {
        if let Some(&bad) = stack
            .iter()
            .take(MAX_STACK_DEPTH)
            .find(|&&f| f as usize >= self.frames.len())
        {
            return Err(TachError::Usage(format!(
                "frame index {bad} was not interned (the writer has {} frames)",
                self.frames.len()
            )));
        }
        let stack = &stack[..stack.len().min(MAX_STACK_DEPTH)];
        let slot = self.register_thread(thread_id, interpreter_id);
        let delta = timestamp_us.wrapping_sub(self.threads[slot].prev_timestamp);
        let t = &self.threads[slot];
        let encoding = choose_encoding(&t.prev_stack, stack);
        match encoding {
            Encoding::Repeat => {
                if self.threads[slot].pending_rle.len() + RLE_ENTRY_MAX > RLE_BUFFER_SIZE {
                    self.flush_rle(slot)?;
                }
                let t = &mut self.threads[slot];
                varint::encode_u64(&mut t.pending_rle, delta);
                t.pending_rle.push(status);
                t.pending_samples += 1;
            }
            other => {
                self.flush_rle(slot)?;
                self.write_change(slot, delta, status, other, stack)?;
                let t = &mut self.threads[slot];
                t.prev_stack.clear();
                t.prev_stack.extend_from_slice(stack);
            }
        }
        self.threads[slot].prev_timestamp = timestamp_us;
        self.total_samples += 1;
        Ok(())
    }

    /// Creates the thread's state now if it has none, and returns its slot.
    ///
    /// Threads are otherwise registered by their first sample. The order matters in one
    /// place: at finish, pending REPEAT records are flushed in registration order.
    pub fn register_thread(&mut self, thread_id: u64, interpreter_id: u32) -> usize {
        if let Some(&s) = self.thread_index.get(&(thread_id, interpreter_id)) {
            return s;
        }
        let s = self.threads.len();
        self.threads.push(WriterThread {
            thread_id,
            interpreter_id,
            prev_timestamp: self.settings.start_time_us,
            prev_stack: Vec::with_capacity(16),
            pending_rle: Vec::new(),
            pending_samples: 0,
        });
        self.thread_index.insert((thread_id, interpreter_id), s);
        s
    }

    fn record_header(&mut self, slot: usize, kind: RecordKind) {
        let t = &self.threads[slot];
        push_record_header(&mut self.buffer, t, kind);
    }

    fn flush_rle(&mut self, slot: usize) -> Result<()> {
        let samples = self.threads[slot].pending_samples;
        if samples == 0 {
            return Ok(());
        }
        self.record_header(slot, RecordKind::Repeat);
        varint::encode_u32(&mut self.buffer, samples);
        let t = &mut self.threads[slot];
        self.buffer.extend_from_slice(&t.pending_rle);
        t.pending_rle.clear();
        t.pending_samples = 0;
        self.mix.records[RecordKind::Repeat as usize] += 1;
        self.mix.samples[RecordKind::Repeat as usize] += samples as u64;
        self.mix.frames_in_samples += samples as u64 * t.prev_stack.len() as u64;
        self.maybe_flush()
    }

    fn write_change(
        &mut self,
        slot: usize,
        delta: u64,
        status: u8,
        encoding: Encoding,
        stack: &[u32],
    ) -> Result<()> {
        let (kind, a, b, new) = match encoding {
            Encoding::Full => (RecordKind::Full, stack.len(), None, stack.len()),
            Encoding::Suffix { shared, push } => (RecordKind::Suffix, shared, Some(push), push),
            Encoding::PopPush { pop, push } => (RecordKind::PopPush, pop, Some(push), push),
            Encoding::Repeat => unreachable!("REPEAT samples are buffered"),
        };
        self.record_header(slot, kind);
        varint::encode_u64(&mut self.buffer, delta);
        self.buffer.push(status);
        varint::encode_u32(&mut self.buffer, a as u32);
        if let Some(b) = b {
            varint::encode_u32(&mut self.buffer, b as u32);
        }
        for &f in &stack[..new] {
            varint::encode_u32(&mut self.buffer, f);
        }
        self.mix.records[kind as usize] += 1;
        self.mix.samples[kind as usize] += 1;
        self.mix.frames_written += new as u64;
        self.mix.frames_in_samples += stack.len() as u64;
        self.maybe_flush()
    }

    #[inline]
    fn maybe_flush(&mut self) -> Result<()> {
        if self.buffer.len() >= WRITE_CHUNK {
            self.flush_buffer()?;
        }
        Ok(())
    }

    fn flush_buffer(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        if let Some(j) = self.journal.as_mut() {
            j.unsynced
                .extend_from_slice(&self.buffer[j.buffer_synced..]);
            j.buffer_synced = 0;
        }
        let res = match self.sink.as_mut() {
            Some(Sink::Raw(w)) => w.write_all(&self.buffer),
            Some(Sink::Zstd(enc)) => enc.write_all(&self.buffer),
            None => Err(io::Error::other("writer already finished")),
        };
        self.buffer.clear();
        res.map_err(|e| TachError::io(&self.name, e))
    }

    /// Appends to the crash journal everything written since the last sync: new
    /// strings and frames, finished sample records, and the REPEAT runs still pending
    /// (as the records they would be flushed as). One write(2); no fsync. Does nothing
    /// without a journal. After an error the journal is abandoned (left as it is, valid
    /// up to its last complete sync) and the recording goes on without it.
    pub fn sync_journal(&mut self, timestamp_us: u64) -> Result<()> {
        let Some(j) = self.journal.as_mut() else {
            return Ok(());
        };
        let mut strings = Vec::new();
        for s in &self.strings[j.strings_synced..] {
            varint::encode_u32(&mut strings, s.len() as u32);
            strings.extend_from_slice(s);
        }
        let mut frames = Vec::new();
        for f in &self.frames[j.frames_synced..] {
            f.encode(&mut frames);
        }
        j.unsynced
            .extend_from_slice(&self.buffer[j.buffer_synced..]);
        j.buffer_synced = self.buffer.len();
        let mut pending = Vec::new();
        for t in self.threads.iter().filter(|t| t.pending_samples > 0) {
            push_record_header(&mut pending, t, RecordKind::Repeat);
            varint::encode_u32(&mut pending, t.pending_samples);
            pending.extend_from_slice(&t.pending_rle);
        }
        let sync = Sync {
            timestamp_us,
            samples: self.total_samples,
            threads: self.threads.len() as u32,
            string_count: (self.strings.len() - j.strings_synced) as u32,
            strings: &strings,
            frame_count: (self.frames.len() - j.frames_synced) as u32,
            frames: &frames,
            committed: &j.unsynced,
            pending: &pending,
        };
        match j.file.append_sync(&sync) {
            Ok(()) => {
                j.unsynced.clear();
                j.strings_synced = self.strings.len();
                j.frames_synced = self.frames.len();
                Ok(())
            }
            Err(e) => {
                let path = j.file.path().to_path_buf();
                self.journal = None;
                self.abandoned_journal = Some(path.clone());
                Err(TachError::io(path, e))
            }
        }
    }

    /// The crash journal's path, while there is one.
    pub fn journal_path(&self) -> Option<&Path> {
        self.journal.as_ref().map(|j| j.file.path())
    }

    /// Sets the stats block (duration, achieved rate, error and missed percentages).
    pub fn set_stats(&mut self, stats: Stats) {
        self.settings.stats = Some(stats);
    }

    /// Samples written so far.
    pub fn sample_count(&self) -> u64 {
        self.total_samples
    }

    /// Flushes pending records and writes the tables, stats block, footer and header.
    pub fn finish(mut self) -> Result<WriteSummary> {
        self.finish_inner()
    }

    fn finish_inner(&mut self) -> Result<WriteSummary> {
        if self.finished {
            return Err(TachError::Usage("writer already finished".into()));
        }
        self.finished = true;
        for slot in 0..self.threads.len() {
            self.flush_rle(slot)?;
        }
        self.flush_buffer()?;
        let name = self.name.clone();
        let io_err = |e: io::Error| TachError::io(&name, e);
        let mut out = match self.sink.take() {
            Some(Sink::Raw(w)) => w,
            Some(Sink::Zstd(enc)) => enc.finish().map_err(io_err)?,
            None => return Err(TachError::Usage("writer already finished".into())),
        };
        let string_table_offset = out.stream_position().map_err(io_err)?;
        let mut tables = Vec::new();
        for s in &self.strings {
            varint::encode_u32(&mut tables, s.len() as u32);
            tables.extend_from_slice(s);
        }
        let frame_table_offset = string_table_offset + tables.len() as u64;
        for f in &self.frames {
            f.encode(&mut tables);
        }
        let bo = ByteOrder::NATIVE;
        if let Some(stats) = &self.settings.stats {
            tables.extend_from_slice(&stats.encode(bo));
        }
        let file_size = string_table_offset + tables.len() as u64 + 32;
        let footer = Footer {
            string_count: self.strings.len() as u32,
            frame_count: self.frames.len() as u32,
            file_size,
            wall_origin_us: self.settings.wall_origin_us,
        };
        tables.extend_from_slice(&footer.encode(bo));
        out.write_all(&tables).map_err(io_err)?;
        let header = Header {
            byte_order: bo,
            version: FORMAT_VERSION,
            python_version: self.settings.python_version,
            start_time_us: self.settings.start_time_us,
            sample_interval_us: self.settings.sample_interval_us,
            sample_count: self.total_samples,
            thread_count: self.threads.len() as u32,
            string_table_offset,
            frame_table_offset,
            compression_code: self.settings.compression.code(),
            compression: self.settings.compression,
            config: self.settings.config,
        };
        out.seek(SeekFrom::Start(0)).map_err(io_err)?;
        out.write_all(&header.encode()).map_err(io_err)?;
        out.flush().map_err(io_err)?;
        // The file is complete: its journal is of no more use.
        if let Some(j) = self.journal.take() {
            let path = j.file.path().to_path_buf();
            j.file.remove().map_err(|e| TachError::io(path, e))?;
        }
        if let Some(path) = self.abandoned_journal.take() {
            let _ = std::fs::remove_file(path);
        }
        Ok(WriteSummary {
            samples: self.total_samples,
            threads: self.threads.len() as u32,
            strings: self.strings.len() as u32,
            frames: self.frames.len() as u32,
            file_size,
            mix: self.mix,
        })
    }
}

impl<W: Write + Seek> Drop for Writer<W> {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.finish_inner();
        }
    }
}

/// A record's thread id, interpreter id (fixed width, native order, as CPython's writer
/// memcpy's them) and kind.
fn push_record_header(out: &mut Vec<u8>, t: &WriterThread, kind: RecordKind) {
    out.extend_from_slice(&t.thread_id.to_ne_bytes());
    out.extend_from_slice(&t.interpreter_id.to_ne_bytes());
    out.push(kind as u8);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Repeat,
    Full,
    Suffix { shared: usize, push: usize },
    PopPush { pop: usize, push: usize },
}

/// CPython's `compare_stacks`: which record encodes `curr` after `prev`.
fn choose_encoding(prev: &[u32], curr: &[u32]) -> Encoding {
    if prev == curr {
        return Encoding::Repeat;
    }
    let shared = prev
        .iter()
        .rev()
        .zip(curr.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let pop = prev.len() - shared;
    let push = curr.len() - shared;
    if shared == 0 {
        Encoding::Full
    } else if pop == 0 && push > 0 {
        Encoding::Suffix { shared, push }
    } else if shared < curr.len() / 2 {
        Encoding::Full
    } else {
        Encoding::PopPush { pop, push }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_choice_follows_cpython() {
        assert_eq!(choose_encoding(&[], &[]), Encoding::Repeat);
        assert_eq!(choose_encoding(&[1, 2], &[1, 2]), Encoding::Repeat);
        assert_eq!(choose_encoding(&[], &[1]), Encoding::Full);
        assert_eq!(choose_encoding(&[1, 2], &[3, 4]), Encoding::Full);
        assert_eq!(
            choose_encoding(&[2], &[1, 2]),
            Encoding::Suffix { shared: 1, push: 1 }
        );
        // Pure pop: shared 1 of curr depth 1 -> POP_PUSH.
        assert_eq!(
            choose_encoding(&[1, 2], &[2]),
            Encoding::PopPush { pop: 1, push: 0 }
        );
        // Shares 1 of 4: fewer than half -> FULL.
        assert_eq!(choose_encoding(&[9, 5], &[1, 2, 3, 5]), Encoding::Full);
        assert_eq!(
            choose_encoding(&[9, 4, 5], &[1, 4, 5]),
            Encoding::PopPush { pop: 1, push: 1 }
        );
    }
}

//! The sampling thread: every interval, read each thread's Python stack through the
//! [`MemoryReader`] and the [`InterpreterLayout`], and stream it to a TACH [`Writer`].
//!
//! It is a plain native thread. It never takes the GIL, never runs Python code and never
//! calls into the C API; everything it knows comes from fault-tolerant reads, validated
//! before use. A sample that does not validate is dropped and counted.
//!
//! By concern, each a set of the [`Sampler`]'s methods: `threads` (one tick over every
//! interpreter and thread, and the pause of the GIL holder), `unwind` (the frame walk),
//! `resolution` (code objects to frame indices), `async_stacks` (`--async-aware`),
//! `native` (`--native`) and `run_loop` (the sampling loop, on the thread a
//! [`Session`](super::Session) starts).
//!
//! The state is a handful of owned parts, each in a file of its own that imports none of
//! the methods' files (so no file here imports one that imports it): `ReadBuffers`
//! (`read_buffers`), `GcState` (`gc_state`), `SampleStack` (`stack`, the sample being
//! made), `CodeBatch` (`code_batch`), `Window` (`window`), `ThreadMemo` (`thread_memo`,
//! what is remembered of each thread between ticks), `Diagnostics` (`diagnostics`, why
//! samples were dropped or read again), `Pausing` (`pausing`, the pauser and the thread
//! paused this tick), `AsyncTasks` (`async_tasks`) and `NativeSide` (`native_side`).

mod async_stacks;
mod async_tasks;
mod code_batch;
mod diagnostics;
mod gc_state;
mod native;
mod native_side;
mod pausing;
mod read_buffers;
mod resolution;
mod run_loop;
mod stack;
#[cfg(test)]
mod tests;
mod thread_memo;
mod threads;
mod unwind;
mod window;

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::tach::{
    CaptureFeatures, Compression, FrameEntry, ProfilingMode, Stats, TachError, Writer,
};

use super::clock::{monotonic_us, thread_cpu_sec};
use crate::record::discovery::Target;
use crate::record::interpreter::asyncio::AsyncMode;
use crate::record::interpreter::resolve::CodeCache;
use crate::record::segments::{self, FinishedSegment, Finisher, SegmentPolicy};

/// Status byte bits, with CPython's meanings.
pub use crate::tach::filter::status::{GIL_REQUESTED, HAS_EXCEPTION, HAS_GIL, MAIN_THREAD, ON_CPU};

use async_tasks::AsyncTasks;
use code_batch::CodeBatch;
use diagnostics::Diagnostics;
use gc_state::GcState;
use native_side::NativeSide;
use pausing::Pausing;
use read_buffers::ReadBuffers;
use stack::SampleStack;
use thread_memo::ThreadMemo;
use window::Window;

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
    /// Also hands every sample to this, as it is written (`tach top --pid`'s live view).
    pub sink: Option<Arc<dyn SampleSink>>,
    /// Async-aware stacks (`--async-aware`, `--async-mode`): threads running an asyncio
    /// loop are shown by task, as CPython 3.15's sampler shows them (see `asyncio`).
    pub async_mode: Option<AsyncMode>,
    /// Each thread's native stack with its Python frames spliced in (`--native`; every
    /// sampled thread is stopped while it is read: by ptrace from outside, by the pause
    /// signal in-process).
    pub native: bool,
    /// `--rotate`: `path` is a directory, written as a series of segments.
    pub segments: Option<SegmentPolicy>,
}

/// Sees every sample the sampler writes, when it writes it: the live view of `tach top
/// --pid` keeps its in-memory aggregate this way. Called on the sampling thread, so it
/// must be quick.
pub trait SampleSink: Send + Sync + std::fmt::Debug {
    /// A sample of thread `thread_id`: `stack` (innermost first) indexes `frames`, whose
    /// string indices index `strings` (the writer's tables so far).
    fn sample(
        &self,
        thread_id: u64,
        status: u8,
        stack: &[u32],
        frames: &[FrameEntry],
        strings: &[Box<[u8]>],
    );
    /// A tick ended; `ok` is false when it had errors.
    fn tick(&self, ok: bool);
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
            sink: None,
            async_mode: None,
            native: false,
            segments: None,
        }
    }

    /// The capture features written in the header's config word.
    pub fn features(&self) -> CaptureFeatures {
        CaptureFeatures {
            all_threads: self.all_threads,
            opcodes: self.opcodes,
            gc: self.gc,
            native: self.native,
            ..CaptureFeatures::default()
        }
    }
}

/// What a recording did, returned by [`Session::stop`](super::Session::stop).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
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
    /// `--rotate`: segments finished (0 without rotation).
    pub segments: u64,
    /// `--native`: the walks, and what went wrong in them.
    #[serde(skip)]
    pub native: Option<crate::record::native::NativeStats>,
    /// Set when the file could not be written or the sampler failed.
    pub error: Option<String>,
}

/// The sampler's state, owned by its thread: what it samples and writes to, and its
/// parts (see the module's documentation).
pub struct Sampler {
    target: Target,
    opts: RecordOptions,
    writer: Writer<BufWriter<File>>,
    /// Code objects resolved so far, by address.
    cache: CodeCache,
    start_us: u64,
    stats: RecordStats,
    /// The first error writing the file; sampling stops when set.
    write_error: Option<String>,
    /// Samples written so far, for [`Session::samples_written`](super::Session::samples_written).
    progress: Arc<AtomicU64>,
    /// The images of thread states and frames a tick reads.
    bufs: ReadBuffers,
    /// The pages of a thread's data stack read with its frame pointer.
    window: Window,
    /// The stack of the sample being made.
    stack: SampleStack,
    /// The batched read of that stack's code objects.
    code_batch: CodeBatch,
    /// What is remembered of each thread between ticks.
    memo: ThreadMemo,
    /// Why samples were dropped and reads taken again (`TACH_RECORD_DEBUG`).
    diagnostics: Diagnostics,
    /// The current interpreter's garbage collector, and the `<GC>` frame.
    gc: GcState,
    /// The pauser and the thread it paused this tick.
    pausing: Pausing,
    /// `--async-aware`: the target's asyncio tasks.
    tasks: AsyncTasks,
    /// `--native`: the unwinder, and what splicing reuses from one thread to the next.
    native: Option<Box<NativeSide>>,
    /// `--rotate`: the segment being written, and the thread that finishes the others.
    rotation: Option<Rotation>,
}

/// The segment being written (`--rotate`; see `segments`).
struct Rotation {
    policy: SegmentPolicy,
    /// The current segment's file, its number and when it started.
    path: PathBuf,
    seq: u64,
    start_us: u64,
    /// The recording's ticks and error ticks when it started (its stats block's).
    ticks_before: u64,
    error_ticks_before: u64,
    /// Samples in the segments before it.
    samples_before: u64,
    /// Its file reached `--rotate SIZE` (looked at with each journal sync).
    full: bool,
    finisher: Finisher,
    /// Switches made, and the longest (microseconds on the sampling thread), for
    /// `TACH_RECORD_DEBUG`.
    switches: u64,
    longest_switch_us: u64,
}

/// Creates the TACH file of a recording, or of one of its segments, starting at
/// `start_us`: the one place a recording's writer is made.
fn create_writer(
    opts: &RecordOptions,
    python_version: (u8, u8, u8),
    path: &Path,
    start_us: u64,
) -> Result<Writer<BufWriter<File>>, TachError> {
    Writer::builder(opts.interval_us)
        .start_time_us(start_us)
        // Measured for each segment: the wall clock may be stepped during a long recording.
        .wall_origin_us(Some(super::clock::wall_time_at(start_us)))
        .compression(opts.compression)
        .mode(opts.mode)
        .features(Some(opts.features()))
        .python_version(python_version)
        .journal(Some(crate::tach::journal::journal_path(path)))
        .create(path)
}

/// A stats block's figures for `ticks` (of which `error_ticks` had errors) over
/// `duration` seconds: (achieved rate, error %, expected ticks, missed %).
fn tick_figures(
    ticks: u64,
    error_ticks: u64,
    duration: f64,
    interval_us: u64,
) -> (f64, f64, u64, f64) {
    let interval = interval_us.max(1) as f64 / 1e6;
    let rate = if duration > 0.0 {
        ticks as f64 / duration
    } else {
        0.0
    };
    let errors = if ticks > 0 {
        error_ticks as f64 / ticks as f64 * 100.0
    } else {
        0.0
    };
    let expected = (duration / interval) as u64;
    let missed = if expected > ticks {
        (expected - ticks) as f64 / expected as f64 * 100.0
    } else {
        0.0
    };
    (rate, errors, expected, missed)
}

/// Reads of one thread's stack before its sample is dropped.
const READ_ATTEMPTS: u32 = 4;

impl Sampler {
    /// The count of samples written so far, shared with the [`Session`](super::Session)
    /// that runs this sampler (updated after each tick).
    pub fn progress(&self) -> Arc<AtomicU64> {
        self.progress.clone()
    }

    /// The file (or, `--rotate`, the directory) being written.
    pub fn path(&self) -> &Path {
        &self.opts.path
    }

    /// Creates the output file (so that a bad path fails at start, in the caller).
    pub fn new(target: Target, opts: RecordOptions) -> Result<Sampler, TachError> {
        let pausing = Pausing::new(target.pid, opts.blocking, opts.native);
        if opts.native && !pausing.enabled() {
            // In-process, threads are held by a real-time signal's handler; a program
            // that handles every one leaves no way to stop a thread for its stack.
            return Err(TachError::Usage(
                "--native in-process needs a free real-time signal to hold each thread, \
                 and this program handles every one (SIGRTMIN+2 to SIGRTMAX-1): record it \
                 from outside with `tach record --native --pid PID`"
                    .into(),
            ));
        }
        let start_us = monotonic_us();
        let version = target.layout.version();
        let (writer, rotation) = match &opts.segments {
            None => (create_writer(&opts, version, &opts.path, start_us)?, None),
            Some(policy) => {
                segments::prepare_dir(&opts.path)?;
                let name = segments::segment_name(SystemTime::now(), 0, policy.pid_suffix);
                let path = opts.path.join(name);
                let writer = create_writer(&opts, version, &path, start_us)?;
                let rotation = Rotation {
                    policy: policy.clone(),
                    path,
                    seq: 0,
                    start_us,
                    ticks_before: 0,
                    error_ticks_before: 0,
                    samples_before: 0,
                    full: false,
                    finisher: Finisher::start(policy.clone())?,
                    switches: 0,
                    longest_switch_us: 0,
                };
                (writer, Some(rotation))
            }
        };
        let tasks = AsyncTasks::new(&target, opts.async_mode)?;
        let bufs = ReadBuffers::new(target.layout.offsets());
        let stats = RecordStats {
            path: opts.path.clone(),
            ..RecordStats::default()
        };
        let target_pid = target.pid;
        // In-process too: the sampler is a thread of its own, and pauses the others.
        let native = if opts.native {
            Some(Box::new(NativeSide::new(target_pid)?))
        } else {
            None
        };
        Ok(Sampler {
            target,
            opts,
            writer,
            cache: CodeCache::new(),
            start_us,
            stats,
            write_error: None,
            progress: Arc::new(AtomicU64::new(0)),
            bufs,
            window: Window::default(),
            stack: SampleStack::default(),
            code_batch: CodeBatch::default(),
            memo: ThreadMemo::default(),
            diagnostics: Diagnostics::new(std::env::var_os("TACH_RECORD_DEBUG").is_some()),
            gc: GcState::default(),
            pausing,
            tasks,
            native,
            rotation,
        })
    }

    /// Samples every thread once, at `now_us`. Returns false if the tick had errors.
    pub fn tick(&mut self, now_us: u64) -> bool {
        self.stats.ticks += 1;
        let ok = self.sample_all(now_us).unwrap_or(false);
        let native_error = self
            .native
            .as_deref_mut()
            .is_some_and(NativeSide::take_tick_error);
        let ok = !native_error && ok;
        self.pausing.settle();
        if !ok {
            self.stats.error_ticks += 1;
        }
        if let Some(sink) = &self.opts.sink {
            sink.tick(ok);
        }
        ok
    }

    /// Finishes the file: stats block, tables, footer, header.
    pub fn finish(mut self, end_us: u64) -> RecordStats {
        // TACH_RECORD_DEBUG=1: why samples were dropped, for diagnosing a recorder.
        if self.diagnostics.debug() {
            let mut lines = self.diagnostics.report().into_iter();
            if let Some(retries) = lines.next() {
                eprintln!("tach: {retries}");
            }
            if let Some((paused, timeouts)) = self.pausing.counts() {
                eprintln!("tach: {paused} pauses, {timeouts} timed out");
            }
            for line in lines {
                eprintln!("tach: {line}");
            }
            if let Some(n) = &self.native {
                eprintln!("tach: native: {:?}", n.stats());
            }
        }
        self.stats.native = self.native.as_ref().map(|n| n.stats().clone());
        let s = &mut self.stats;
        let duration = end_us.saturating_sub(self.start_us) as f64 / 1e6;
        s.duration_sec = duration;
        (
            s.sample_rate,
            s.error_rate,
            s.expected_ticks,
            s.missed_samples,
        ) = tick_figures(s.ticks, s.error_ticks, duration, self.opts.interval_us);
        s.code_objects = self.cache.resolved;
        s.reused_addresses = self.cache.reused;
        s.sampler_cpu_sec = thread_cpu_sec();
        if let Some((paused, timeouts)) = self.pausing.counts() {
            s.paused_ticks = paused;
            s.pause_timeouts = timeouts;
        }
        if let Some(rotation) = self.rotation.take() {
            return self.finish_segments(rotation, end_us);
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
}

impl Sampler {
    /// Samples written so far, in every segment.
    fn samples_so_far(&self) -> u64 {
        let before = self.rotation.as_ref().map_or(0, |r| r.samples_before);
        before + self.writer.sample_count()
    }

    /// `--rotate`: whether the current segment is due to end at `now_us` (its age), or
    /// its file reached the size (looked at with each journal sync: a `stat`).
    fn segment_due(&mut self, now_us: u64, look_at_size: bool) -> bool {
        let Some(r) = self.rotation.as_mut() else {
            return false;
        };
        if look_at_size {
            if let Some(max) = r.policy.max_bytes {
                r.full = std::fs::metadata(&r.path).is_ok_and(|m| m.len() >= max);
            }
        }
        r.full
            || r.policy
                .max_age
                .is_some_and(|age| now_us.saturating_sub(r.start_us) >= age.as_micros() as u64)
    }

    /// Ends the current segment after the tick at `now_us` and starts the next one: its
    /// writer is created here, between two ticks, and the old one goes to the finisher's
    /// thread, so that sampling goes on at once and every sample is in one segment. What
    /// refers to the old writer's tables (the code objects' frame indices, the `<GC>`,
    /// `<task>` and native frames) is forgotten: each segment's tables are its own, and
    /// what the recorder keeps does not grow with the recording. On an error (a full
    /// disk), the current segment stays the one written.
    fn switch_segment(&mut self, now_us: u64) -> Result<(), String> {
        let began = monotonic_us();
        let version = self.target.layout.version();
        let Some(r) = self.rotation.as_mut() else {
            return Ok(());
        };
        let seq = r.seq + 1;
        let name = segments::segment_name(SystemTime::now(), seq, r.policy.pid_suffix);
        let path = self.opts.path.join(name);
        let next = create_writer(&self.opts, version, &path, now_us).map_err(|e| {
            format!("cannot start the next segment: {e}; the finished segments are kept")
        })?;
        let mut old = std::mem::replace(&mut self.writer, next);
        let ticks = self.stats.ticks - r.ticks_before;
        let error_ticks = self.stats.error_ticks - r.error_ticks_before;
        let duration = now_us.saturating_sub(r.start_us) as f64 / 1e6;
        let (rate, errors, _, missed) =
            tick_figures(ticks, error_ticks, duration, self.opts.interval_us);
        old.set_stats(Stats::new(duration, rate, Some(errors), Some(missed)));
        r.samples_before += old.sample_count();
        let old_path = std::mem::replace(&mut r.path, path);
        r.finisher.send(FinishedSegment {
            writer: old,
            path: old_path,
        });
        r.seq = seq;
        r.start_us = now_us;
        r.ticks_before = self.stats.ticks;
        r.error_ticks_before = self.stats.error_ticks;
        r.full = false;
        self.forget_frames();
        if let Some(r) = self.rotation.as_mut() {
            r.switches += 1;
            r.longest_switch_us = r.longest_switch_us.max(monotonic_us() - began);
        }
        Ok(())
    }

    /// Forgets every writer frame index kept between ticks (a new segment's writer has
    /// tables of its own).
    fn forget_frames(&mut self) {
        let (resolved, reused) = (self.cache.resolved, self.cache.reused);
        self.cache = CodeCache::new();
        self.cache.resolved = resolved;
        self.cache.reused = reused;
        self.gc.forget_frame();
        self.tasks.forget_frames();
        if let Some(n) = self.native.as_deref_mut() {
            n.forget_frames();
        }
    }

    /// The end of a rotated recording: the last segment goes to the finisher, which
    /// is waited for (with the hooks it started); the totals are the recording's.
    fn finish_segments(mut self, r: Rotation, end_us: u64) -> RecordStats {
        if self.diagnostics.debug() {
            eprintln!(
                "tach: {} segment switches, the longest {} us",
                r.switches, r.longest_switch_us
            );
        }
        let ticks = self.stats.ticks - r.ticks_before;
        let error_ticks = self.stats.error_ticks - r.error_ticks_before;
        let duration = end_us.saturating_sub(r.start_us) as f64 / 1e6;
        let (rate, errors, _, missed) =
            tick_figures(ticks, error_ticks, duration, self.opts.interval_us);
        self.writer
            .set_stats(Stats::new(duration, rate, Some(errors), Some(missed)));
        r.finisher.send(FinishedSegment {
            writer: self.writer,
            path: r.path,
        });
        let totals = r.finisher.close();
        let mut stats = self.stats;
        stats.samples = totals.samples;
        stats.file_size = totals.bytes;
        stats.segments = totals.segments;
        stats.error = totals.error.or(stats.error);
        stats
    }
}

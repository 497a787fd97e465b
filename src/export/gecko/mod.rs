//! Gecko: a Firefox Profiler "processed" profile with the content of CPython's
//! `replay --gecko` (`GeckoCollector` in `profiling/sampling/gecko_collector.py`).
//!
//! One thread per thread id (`"Thread-<tid>"`; two interpreters' threads with the same
//! id are one thread, as in CPython), each with its samples (stack, time in ms from
//! the first sample), stack / frame / func / resource tables, and interval markers
//! built from status changes: Has/No GIL, On/Off CPU, Python/Native Code, Waiting for
//! GIL, Has/No Exception, and GC Collecting (a `<GC>` frame on the stack). One shared
//! string array. `meta` follows CPython's field for field (version 32, processed
//! version 57, the nine categories). One departure, for files CPython writes none of:
//! a native frame of a `--native` recording ([`FrameEntry::is_native`]) is in the
//! Native category and not JS, where CPython's rule (by file name only) would call a
//! module's path Python.
//!
//! [`FrameEntry::is_native`]: crate::tach::FrameEntry::is_native
//!
//! ## Why hand-written and not `fxprof-processed-profile`
//! The crate models a profile through its own builder: it writes processed version
//! 55, assigns its own string, frame and func indices, requires a marker schema for
//! every marker type, and has no way to express CPython's per-thread resource table,
//! the `isJS`/`relevantForJS` flags per function, or schema-less marker data
//! (`{"type", "duration", "tid"}`). Matching CPython's content is the requirement,
//! so this module writes the version-57 JSON directly, streaming, in the same order
//! CPython builds it. Firefox Profiler upgrades older processed versions on load,
//! but it cannot downgrade, and 57 is what CPython users' files already are.
//!
//! ## How it is built
//! CPython builds every thread's tables in one pass over the samples. Here one
//! sequential pass does only what depends on the order of all samples (times, the
//! reader batches behind `meta.interval`, the order of threads) and hands each kept
//! sample to its thread; every [`REPLAY_EVERY`] samples the threads build their tables
//! from what they were handed, on all cores. The one thing the threads share is the
//! string array: each numbers its strings by first use and notes the sample that first
//! used each, and the arrays are merged by that sample, which is CPython's order.
//!
//! ## Differences from CPython (all deliberate, for deterministic output)
//! - `meta.startTime`: CPython writes the replaying process's `time.monotonic()` in
//!   ms; we write the first sample's timestamp in ms (the recording's own monotonic
//!   clock), or the header's start time when there are no samples.
//! - thread `pid`: CPython writes the replaying process's pid; we write "0".
//! - `meta.interval`: as CPython, last sample time / sample count. Only when the last
//!   sample time is <= 0 does CPython keep a value that depends on how its C reader
//!   batched samples; we model its batches (one per record, REPEAT records split by
//!   status) except that we cannot see where its writer split a long REPEAT run.
//! - Strings are written as UTF-8 JSON with Python's escaping of non-ASCII
//!   (`ensure_ascii`), floats as Python's `repr`: the text is CPython's, not only
//!   the parsed content.

//!
//! ## Where things are
//! `mod.rs` the exporter and the sequential pass; `event.rs` what the pass hands a
//! thread and the numbers all parts share; `thread.rs` one thread's tables (one
//! struct per table, as the processed format has them) and its replay of samples;
//! `strings.rs` the threads' strings and their merge into the shared array;
//! `write.rs` the JSON text.

use std::io::Write;

use rayon::prelude::*;

use super::exporter::{write_error, ExportInput, Exporter, Result};
use crate::tach::{RecordKind, TachFile};

mod event;
mod strings;
mod thread;
mod write;

use super::pyjson::{push_float, push_str};
use crate::tach::filter::status;
use event::*;
use strings::{LocalStrings, StringFacts, Strings};
use thread::*;
use write::{platform_system, push_list, push_thread};

pub struct Gecko;

/// `meta` up to (not including) `interval` is not needed; these are CPython's
/// constant members after `startTime`, split around the host-dependent ones.
const CATEGORIES: &str = r#"[{"name":"Other","color":"grey","subcategories":["Other"]},{"name":"Python","color":"yellow","subcategories":["Other"]},{"name":"Native","color":"blue","subcategories":["Other"]},{"name":"GC","color":"orange","subcategories":["Other"]},{"name":"GIL","color":"green","subcategories":["Other"]},{"name":"CPU","color":"purple","subcategories":["Other"]},{"name":"Code Type","color":"red","subcategories":["Other"]},{"name":"Opcodes","color":"magenta","subcategories":["Other"]},{"name":"Exception","color":"lightblue","subcategories":["Other"]}]"#;

/// Kept samples handed to the threads before they are replayed (on all cores): this
/// bounds the memory the hand-over holds.
const REPLAY_EVERY: usize = 1 << 16;

/// Threads with more samples than this are written out as they are serialised rather
/// than in parallel into a buffer of their own.
const STREAM_SAMPLES: usize = 1 << 16;

/// The samples of the threads serialised in parallel at once (see `thread_groups`).
const GROUP_SAMPLES: usize = 1 << 18;

/// Consecutive runs of threads to serialise in parallel: up to 64 threads, and up to
/// about GROUP_SAMPLES samples of buffered text (a streamed thread buffers none).
fn thread_groups(threads: &[Thread]) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut samples) = (0, 0);
    for (i, th) in threads.iter().enumerate() {
        if th.samples.len() <= STREAM_SAMPLES {
            samples += th.samples.len();
        }
        if i + 1 - start == 64 || samples >= GROUP_SAMPLES {
            groups.push(start..i + 1);
            (start, samples) = (i + 1, 0);
        }
    }
    if start < threads.len() {
        groups.push(start..threads.len());
    }
    groups
}

struct Batch {
    slot: u32,
    status: u8,
    samples: u64,
    last: f64,
}

/// A decoder slot as the sequential pass sees it.
struct SlotSeen {
    /// Index into `Builder::threads`.
    thread: usize,
    /// The slot's previous sample's stack, as decoded.
    last: Vec<u32>,
}

/// The profile, built from the kept samples: one sequential pass does what depends on
/// the order of all samples (times, CPython's reader batches, thread order) and hands
/// each sample to its thread; the threads then build their tables on all cores.
struct Builder<'a> {
    file: &'a TachFile,
    facts: StringFacts,
    threads: Vec<Thread>,
    by_tid: Map<u64, usize>,
    slots: Vec<Option<SlotSeen>>,
    base_us: Option<u64>,
    last_time: f64,
    sample_count: u64,
    interval: f64,
    /// The batch (one `collect` call) CPython's reader would be building; see the
    /// module docs on `meta.interval`.
    batch: Option<Batch>,
    /// Kept samples so far, those handed over and not yet replayed, and how many may
    /// wait ([`REPLAY_EVERY`]; less in tests).
    seq: u64,
    pending: usize,
    replay_every: usize,
}

impl<'a> Builder<'a> {
    fn new(file: &'a TachFile, replay_every: usize) -> Self {
        Builder {
            file,
            facts: StringFacts::new(file),
            threads: Vec::new(),
            by_tid: Map::default(),
            slots: Vec::new(),
            base_us: None,
            last_time: 0.0,
            sample_count: 0,
            interval: 1.0,
            batch: None,
            seq: 0,
            pending: 0,
            replay_every,
        }
    }

    /// Closes the pending reader batch, doing what CPython's `collect` does with a
    /// call's `times`: `if sample_count > 0 and last_sample_time > 0: interval =
    /// (times[-1] - last_sample_time) / sample_count`, then `last_sample_time =
    /// times[-1]` and `sample_count += len(times)`.
    fn close_batch(&mut self) {
        if let Some(batch) = self.batch.take() {
            if self.sample_count > 0 && self.last_time > 0.0 {
                self.interval = (batch.last - self.last_time) / self.sample_count as f64;
            }
            self.last_time = batch.last;
            self.sample_count += batch.samples;
        }
    }

    fn sample(&mut self, slot: u32, tid: u64, ts: u64, st: u8, stack: &[u32], kind: RecordKind) {
        let base = *self.base_us.get_or_insert(ts);
        // Two u64 readings differ by less than 2^64; wrapping keeps that difference
        // exact in i64 when it is within ±2^63 µs (292,000 years).
        let delta_us = ts.wrapping_sub(base) as i64;
        let now = ms(delta_us);

        // Reader batches: a non-REPEAT record is one call; a REPEAT record's samples
        // are grouped while the status stays the same.
        match self.batch.as_mut() {
            Some(b) if kind == RecordKind::Repeat && b.slot == slot && b.status == st => {
                b.samples += 1;
                b.last = now;
            }
            _ => {
                self.close_batch();
                self.batch = Some(Batch {
                    slot,
                    status: st,
                    samples: 1,
                    last: now,
                });
            }
        }

        let slot_i = slot as usize;
        if slot_i >= self.slots.len() {
            self.slots.resize_with(slot_i + 1, || None);
        }
        let (seen, same) = match &mut self.slots[slot_i] {
            Some(seen) => {
                let same = seen.last.as_slice() == stack;
                (seen, same)
            }
            empty => {
                let threads = &mut self.threads;
                let thread = *self.by_tid.entry(tid).or_insert_with(|| {
                    threads.push(Thread::new(tid, st & status::MAIN_THREAD != 0));
                    threads.len() - 1
                });
                (
                    empty.insert(SlotSeen {
                        thread,
                        last: Vec::new(),
                    }),
                    false,
                )
            }
        };
        let th = &mut self.threads[seen.thread];
        if !same {
            seen.last.clear();
            seen.last.extend_from_slice(stack);
            th.pending_frames.extend_from_slice(stack);
        }
        th.pending.push(Event {
            seq: self.seq,
            delta_us,
            slot,
            frames: if same { SAME } else { stack.len() as u32 },
            status: st,
        });
        self.seq += 1;
        self.pending += 1;
        if self.pending >= self.replay_every {
            self.replay();
        }
    }

    /// Has every thread build from the samples handed to it, on all cores.
    fn replay(&mut self) {
        let (file, facts) = (self.file, &self.facts);
        self.threads
            .par_iter_mut()
            .for_each(|th| th.replay(file, facts));
        self.pending = 0;
    }

    /// Replays what is left, merges the strings, and does CPython's
    /// `_finalize_markers`: closes every open interval at the last sample's time,
    /// marker type by marker type. Returns the shared string array.
    fn finish(&mut self) -> Strings<'a> {
        self.replay();
        let locals: Vec<&LocalStrings> = self.threads.iter().map(|t| &t.strings).collect();
        let (mut strings, shared) = Strings::merge(self.file, &locals);
        self.threads
            .par_iter_mut()
            .zip(shared)
            .for_each(|(th, shared)| th.use_shared_strings(&shared));
        self.close_batch();
        let end = self.last_time;
        type Pick = fn(&mut States) -> &mut Option<f64>;
        let kinds: [(Pick, MarkerName, u8); 10] = [
            (|s| &mut s.has_gil, GIL[0], CATEGORY_GIL),
            (|s| &mut s.no_gil, GIL[1], CATEGORY_GIL),
            (|s| &mut s.on_cpu, CPU[0], CATEGORY_CPU),
            (|s| &mut s.off_cpu, CPU[1], CATEGORY_CPU),
            (|s| &mut s.python_code, PYTHON_NATIVE[0], CATEGORY_CODE_TYPE),
            (|s| &mut s.native_code, PYTHON_NATIVE[1], CATEGORY_CODE_TYPE),
            (|s| &mut s.gil_wait, GIL_WAIT, CATEGORY_GIL),
            (|s| &mut s.gc, GC_COLLECTING, CATEGORY_GC),
            (|s| &mut s.exception, EXCEPTION[0], CATEGORY_EXCEPTION),
            (|s| &mut s.no_exception, EXCEPTION[1], CATEGORY_EXCEPTION),
        ];
        for (pick, (name, kind), category) in kinds {
            for th in &mut self.threads {
                if let Some(start) = pick(&mut th.states).take() {
                    let name = strings.intern(name);
                    th.markers.push(Marker {
                        name,
                        kind,
                        start,
                        end,
                        category,
                    });
                }
            }
        }
        if self.sample_count > 0 && self.last_time > 0.0 {
            self.interval = self.last_time / self.sample_count as f64;
        }
        strings
    }
}

impl Exporter for Gecko {
    fn name(&self) -> &'static str {
        "gecko"
    }
    fn description(&self) -> &'static str {
        "Firefox Profiler processed profile with status markers (as CPython's replay --gecko)"
    }
    fn extension(&self) -> &'static str {
        ".gecko.json"
    }
    fn export(&self, input: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        export_gecko(input, out, REPLAY_EVERY)
    }
}

/// The export, with samples handed to the threads `replay_every` at a time.
fn export_gecko(input: &ExportInput<'_>, out: &mut dyn Write, replay_every: usize) -> Result<()> {
    let file = input.file;
    let mut b = Builder::new(file, replay_every);
    input.for_each_sample(|s| {
        b.sample(
            s.thread,
            s.thread_id,
            s.timestamp_us,
            s.status,
            s.stack,
            s.kind,
        )
    })?;
    let strings = b.finish();

    let err = write_error("output");
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let start_ms = b.base_us.unwrap_or(file.header().start_time_us) as f64 / 1000.0;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let arch = std::env::consts::ARCH;
    buf.extend_from_slice(b"{\"meta\":{\"interval\":");
    push_float(&mut buf, b.interval);
    buf.extend_from_slice(b",\"startTime\":");
    push_float(&mut buf, start_ms);
    buf.extend_from_slice(b",\"abi\":");
    push_str(&mut buf, arch);
    buf.extend_from_slice(b",\"misc\":\"Python profiler\",\"oscpu\":");
    push_str(&mut buf, arch);
    buf.extend_from_slice(b",\"platform\":");
    push_str(&mut buf, platform_system());
    let _ = write!(
        buf,
        ",\"processType\":0,\"categories\":{CATEGORIES},\"stackwalk\":0,\"toolkit\":\"\",\
         \"version\":32,\"preprocessedProfileVersion\":57,\"appBuildID\":\"\",\
         \"physicalCPUs\":{cpus},\"logicalCPUs\":{cpus},\"CPUName\":\"\",\"product\":\"Python\",\
         \"symbolicated\":true,\"markerSchema\":[],\"importedFrom\":\"Tachyon Sampling Profiler\",\
         \"extensions\":{{\"id\":[],\"name\":[],\"baseURL\":[],\"length\":0}}}},\"libs\":[],\"threads\":["
    );
    // Threads are serialised independently on all cores, then written in order;
    // groups of at most 64 threads and GROUP_SAMPLES samples bound the text held at
    // once (about 20 bytes a sample). A thread with more samples than
    // STREAM_SAMPLES is instead written straight out in its turn, block by block: its
    // text would otherwise be held whole (tens of megabytes for a busy thread of a long
    // recording).
    let mut first = true;
    let mut failed: Option<std::io::Error> = None;
    for group in thread_groups(&b.threads) {
        let group = &b.threads[group];
        let parts: Vec<Option<Vec<u8>>> = group
            .par_iter()
            .map(|th| {
                (th.samples.len() <= STREAM_SAMPLES).then(|| {
                    let mut part = Vec::with_capacity(64 * 1024);
                    push_thread(&mut part, th, &mut |_| {});
                    part
                })
            })
            .collect();
        for (th, part) in group.iter().zip(parts) {
            if !first {
                buf.push(b',');
            }
            first = false;
            match part {
                Some(part) => buf.extend_from_slice(&part),
                None => push_thread(&mut buf, th, &mut |buf| {
                    if buf.len() >= 1 << 20 && failed.is_none() {
                        failed = out.write_all(buf).err();
                        buf.clear();
                    }
                }),
            }
            if let Some(e) = failed.take() {
                return Err(err(e));
            }
            if buf.len() >= 1 << 20 {
                out.write_all(&buf).map_err(&err)?;
                buf.clear();
            }
        }
    }
    buf.extend_from_slice(b"],\"pages\":[],\"shared\":{\"stringArray\":");
    push_list(&mut buf, &strings.list, |buf, s| push_str(buf, s));
    buf.extend_from_slice(b",\"sources\":{\"length\":0,\"uuid\":[],\"filename\":[]}}}");
    out.write_all(&buf).map_err(&err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::ExportOptions;
    use crate::tach::SampleFilter;

    /// The threads keep their state from one replay to the next: handing samples over
    /// in small batches (down to one sample) writes the same bytes as all at once.
    #[test]
    fn replaying_in_small_batches_changes_nothing() {
        let dir = crate::golden_corpus::golden_dir();
        let filters = [
            SampleFilter::default(),
            SampleFilter {
                status_set: status::HAS_GIL,
                ..SampleFilter::default()
            },
        ];
        for name in [
            "threads_mixed.bin",
            "cpu_recursive.bin",
            "synthetic_deep_stacks.bin",
            "stdlib_tests_large.bin",
        ] {
            let file = TachFile::open(dir.join(name)).unwrap();
            for filter in &filters {
                let options = ExportOptions::default();
                let input = ExportInput::new(&file, filter, &options);
                let mut whole = Vec::new();
                export_gecko(&input, &mut whole, REPLAY_EVERY).unwrap();
                for every in [1, 7, 1000] {
                    let mut batched = Vec::new();
                    export_gecko(&input, &mut batched, every).unwrap();
                    assert!(batched == whole, "{name}: batches of {every}");
                }
            }
        }
    }
}

//! The live view's aggregate (`tach top --pid`): every sample of a recording in
//! progress, counted by (thread, status, stack) as the sampler writes it, and the
//! `tach top` table of it at any moment, built by the same code as the printed table
//! ([`super::top::report`]).
//!
//! The sampling thread adds to a [`LiveProfile`] under a mutex (a map update per
//! sample; the recorder's side of the feed is in `crate::live`, so that reports know
//! nothing of the recorder); the view copies what is new into its own [`LiveData`] about once a second
//! and builds its tables from that copy, so that building a table never holds up a
//! tick.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use crate::tach::filter::status::{
    GIL_REQUESTED, HAS_EXCEPTION, HAS_GIL, MAIN_THREAD, ON_CPU, UNKNOWN,
};
use crate::tach::{FrameEntry, MAX_STACK_DEPTH};

use super::keys::{FrameKeys, FrameNames, Keys};
use super::top::{report, Counted, Tally, TopOptions, TopReport};

/// A frame's names, copied out of the recorder's writer.
#[derive(Debug, Clone)]
struct LiveFrame {
    filename: String,
    funcname: String,
    /// 0 without a location, as pstats.
    lineno: i32,
}

/// (thread id, status byte, stack id).
type CountKey = (u64, u8, u32);

#[derive(Debug, Default)]
struct Shared {
    frames: Vec<LiveFrame>,
    stack_ids: FxHashMap<Vec<u32>, u32>,
    /// Stacks by id (frame indices, innermost first).
    stacks: Vec<Vec<u32>>,
    counts: FxHashMap<CountKey, u64>,
    samples: u64,
    ticks: u64,
    error_ticks: u64,
}

/// The samples of a recording in progress, fed by the sampler.
#[derive(Debug)]
pub struct LiveProfile {
    shared: Mutex<Shared>,
    interval_us: u64,
}

impl LiveProfile {
    /// An empty aggregate of a recording sampled every `interval_us`.
    pub fn new(interval_us: u64) -> Self {
        LiveProfile {
            shared: Mutex::new(Shared::default()),
            interval_us,
        }
    }

    /// (samples, ticks, ticks with errors) so far: the header's counters, cheap enough
    /// to read on every redraw.
    pub fn counters(&self) -> (u64, u64, u64) {
        let s = self.lock();
        (s.samples, s.ticks, s.error_ticks)
    }

    /// Brings `data` up to date: frames and stacks it has not seen yet, and every count.
    pub fn snapshot(&self, data: &mut LiveData) {
        let s = self.lock();
        data.frames
            .extend_from_slice(&s.frames[data.frames.len().min(s.frames.len())..]);
        data.stacks
            .extend_from_slice(&s.stacks[data.stacks.len().min(s.stacks.len())..]);
        data.counts.clear();
        data.counts.extend(s.counts.iter().map(|(&k, &v)| (k, v)));
        data.interval_us = self.interval_us;
        data.samples = s.samples;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves counts that are still counts.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LiveProfile {
    /// Counts a sample of thread `thread_id`: `stack` (innermost first) indexes `frames`,
    /// whose string indices index `strings` (the recorder's tables so far, which only
    /// grow).
    pub fn add_sample(
        &self,
        thread_id: u64,
        status: u8,
        stack: &[u32],
        frames: &[FrameEntry],
        strings: &[Box<[u8]>],
    ) {
        let mut s = self.lock();
        // Frames are interned in order: the ones past ours are new.
        while s.frames.len() < frames.len() {
            let f = &frames[s.frames.len()];
            let name = |i: u32| {
                strings
                    .get(i as usize)
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default()
            };
            let frame = LiveFrame {
                filename: name(f.filename),
                funcname: name(f.funcname),
                lineno: f.lineno.max(0),
            };
            s.frames.push(frame);
        }
        // As the file keeps them: the innermost MAX_STACK_DEPTH frames.
        let stack = &stack[..stack.len().min(MAX_STACK_DEPTH)];
        let id = match s.stack_ids.get(stack) {
            Some(&id) => id,
            None => {
                let id = s.stacks.len() as u32;
                s.stacks.push(stack.to_vec());
                s.stack_ids.insert(stack.to_vec(), id);
                id
            }
        };
        *s.counts.entry((thread_id, status, id)).or_insert(0) += 1;
        s.samples += 1;
    }

    /// Counts a tick; `ok` is false when it had errors.
    pub fn add_tick(&self, ok: bool) {
        let mut s = self.lock();
        s.ticks += 1;
        if !ok {
            s.error_ticks += 1;
        }
    }
}

/// Which samples a live table counts: every thread's, or one thread's.
pub type ThreadChoice = Option<u64>;

/// The view's copy of a [`LiveProfile`] (see [`LiveProfile::snapshot`]).
#[derive(Debug, Default, Clone)]
pub struct LiveData {
    frames: Vec<LiveFrame>,
    stacks: Vec<Vec<u32>>,
    counts: Vec<(CountKey, u64)>,
    interval_us: u64,
    samples: u64,
}

impl FrameNames for LiveData {
    fn filename(&self, frame: u32) -> &str {
        self.frames
            .get(frame as usize)
            .map_or("", |f| f.filename.as_str())
    }
    fn funcname(&self, frame: u32) -> &str {
        self.frames
            .get(frame as usize)
            .map_or("", |f| f.funcname.as_str())
    }
    fn lineno(&self, frame: u32) -> i32 {
        self.frames.get(frame as usize).map_or(0, |f| f.lineno)
    }
}

/// Shares of a set of samples by status: what the view's status line shows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatusMix {
    pub samples: u64,
    pub has_gil: u64,
    pub gil_requested: u64,
    pub on_cpu: u64,
    /// Samples whose CPU state was not looked up (wall, gil and exception modes).
    pub cpu_unknown: u64,
    pub has_exception: u64,
}

impl StatusMix {
    /// `n` as a percentage of the samples.
    pub fn pct(&self, n: u64) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            100.0 * n as f64 / self.samples as f64
        }
    }

    /// Counts `n` samples of status `status`.
    fn add(&mut self, status: u8, n: u64) {
        self.samples += n;
        let bit = |b: u8| if status & b != 0 { n } else { 0 };
        self.has_gil += bit(HAS_GIL);
        self.gil_requested += bit(GIL_REQUESTED);
        self.on_cpu += bit(ON_CPU);
        self.cpu_unknown += bit(UNKNOWN);
        self.has_exception += bit(HAS_EXCEPTION);
    }

    /// Adds another set's counts.
    pub fn merge(&mut self, o: &StatusMix) {
        self.samples += o.samples;
        self.has_gil += o.has_gil;
        self.gil_requested += o.gil_requested;
        self.on_cpu += o.on_cpu;
        self.cpu_unknown += o.cpu_unknown;
        self.has_exception += o.has_exception;
    }
}

/// One thread seen so far, and the status mix of its samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveThread {
    pub id: u64,
    pub main: bool,
    pub mix: StatusMix,
}

impl LiveData {
    fn counts_of(&self, thread: ThreadChoice) -> impl Iterator<Item = &(CountKey, u64)> {
        self.counts
            .iter()
            .filter(move |((tid, _, _), _)| thread.is_none_or(|t| t == *tid))
    }

    /// The `tach top` table of the chosen thread's samples (every thread's: None).
    pub fn report(&self, thread: ThreadChoice, options: &TopOptions, name: &str) -> TopReport {
        // Samples per stack, whatever their thread and status.
        let mut per_stack = vec![0u64; self.stacks.len()];
        for &((_, _, stack), n) in self.counts_of(thread) {
            if let Some(c) = per_stack.get_mut(stack as usize) {
                *c += n;
            }
        }
        let mut keys = Keys::default();
        let mut frames = FrameKeys::new(self, options.by);
        let mut tally = Tally::default();
        let mut stack_keys = Vec::new();
        for (id, &count) in per_stack.iter().enumerate() {
            if count > 0 {
                frames.stack_keys(&mut keys, &self.stacks[id], &mut stack_keys);
                tally.add(&stack_keys, count);
            }
        }
        let counted = [Counted {
            name: name.to_string(),
            interval_us: self.interval_us,
            tally,
        }];
        report(&keys, &counted, options)
    }

    /// Every thread sampled so far with its status mix (in one pass over the counts):
    /// the main thread first, then by id.
    pub fn threads(&self) -> Vec<LiveThread> {
        let mut by_id: FxHashMap<u64, LiveThread> = FxHashMap::default();
        for &((tid, status, _), n) in &self.counts {
            let t = by_id.entry(tid).or_insert(LiveThread {
                id: tid,
                main: false,
                mix: StatusMix::default(),
            });
            t.main |= status & MAIN_THREAD != 0;
            t.mix.add(status, n);
        }
        let mut threads: Vec<LiveThread> = by_id.into_values().collect();
        threads.sort_by_key(|t| (!t.main, t.id));
        threads
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{top, SortBy};
    use crate::tach::{SampleFilter, TachFile};

    /// Feeds every sample of a golden file to a LiveProfile, as the sampler would.
    fn replay(file: &TachFile) -> LiveProfile {
        let live = LiveProfile::new(file.header().sample_interval_us);
        let strings: Vec<Box<[u8]>> = (0..file.strings().len())
            .map(|i| file.string(i as u32).as_bytes().into())
            .collect();
        let frames = file.frames().to_vec();
        file.for_each_sample(|s| {
            live.add_sample(s.thread_id, s.status, s.stack, &frames, &strings);
        })
        .unwrap();
        live
    }

    #[test]
    fn the_live_table_is_the_printed_table() {
        for name in ["cpu_recursive.bin", "threads_mixed.bin"] {
            let path = crate::golden_corpus::golden_path(name);
            let file = TachFile::open(&path).unwrap();
            let live = replay(&file);
            let mut data = LiveData::default();
            live.snapshot(&mut data);
            for sort in [SortBy::SelfTime, SortBy::TotalTime, SortBy::Name] {
                let options = TopOptions {
                    sort,
                    ..Default::default()
                };
                let printed = top(
                    &[TachFile::open(&path).unwrap()],
                    &SampleFilter::default(),
                    &options,
                )
                .unwrap();
                let shown = data.report(None, &options, &printed.files[0]);
                assert_eq!(shown.samples, printed.samples, "{name}");
                assert_eq!(shown.rows, printed.rows, "{name} {sort:?}");
            }
            // One thread's table is the printed table filtered to that thread.
            let threads = data.threads();
            let t = threads.last().unwrap();
            let filter = SampleFilter::from_options::<&str>(&[t.id], None, None, &[]).unwrap();
            let printed = top(&[file], &filter, &TopOptions::default()).unwrap();
            let shown = data.report(Some(t.id), &TopOptions::default(), &printed.files[0]);
            assert_eq!(shown.rows, printed.rows, "{name} thread {}", t.id);
            assert_eq!(t.mix.samples, printed.samples);
        }
    }

    #[test]
    fn status_mix_and_threads_count_what_was_fed() {
        let live = LiveProfile::new(1000);
        let strings: Vec<Box<[u8]>> = vec![b"a.py".as_slice().into(), b"f".as_slice().into()];
        let frames = [FrameEntry {
            filename: 0,
            funcname: 1,
            lineno: 3,
            end_lineno: 3,
            column: -1,
            end_column: -1,
            opcode: crate::tach::tables::OPCODE_NONE,
        }];
        live.add_sample(7, HAS_GIL | MAIN_THREAD, &[0], &frames, &strings);
        live.add_sample(7, HAS_GIL | ON_CPU | MAIN_THREAD, &[0], &frames, &strings);
        live.add_sample(9, GIL_REQUESTED | HAS_EXCEPTION, &[], &frames, &strings);
        live.add_tick(true);
        live.add_tick(false);
        assert_eq!(live.counters(), (3, 2, 1));
        let mut data = LiveData::default();
        live.snapshot(&mut data);
        let threads = data.threads();
        assert_eq!(threads.iter().map(|t| t.id).collect::<Vec<_>>(), [7, 9]);
        assert!(threads[0].main && !threads[1].main);
        let mut all = StatusMix::default();
        for t in &threads {
            all.merge(&t.mix);
        }
        assert_eq!(
            (all.samples, all.has_gil, all.gil_requested, all.on_cpu),
            (3, 2, 1, 1)
        );
        assert_eq!(all.has_exception, 1);
        assert!((all.pct(all.has_gil) - 66.666).abs() < 0.01);
        assert_eq!(threads[1].mix.samples, 1);
        let r = data.report(Some(7), &TopOptions::default(), "pid 1");
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0].key.funcname, "f");
        assert_eq!((r.rows[0].self_samples, r.samples), (2, 2));
        // The empty stack counts in the denominator, as in a file.
        assert_eq!(data.report(None, &TopOptions::default(), "x").samples, 3);
    }
}

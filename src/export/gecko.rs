//! Gecko: a Firefox Profiler "processed" profile with the content of CPython's
//! `replay --gecko` (`GeckoCollector` in `profiling/sampling/gecko_collector.py`).
//!
//! One thread per thread id ("Thread-<tid>"; two interpreters' threads with the same
//! id are one thread, as in CPython), each with its samples (stack, time in ms from
//! the first sample), stack / frame / func / resource tables, and interval markers
//! built from status changes: Has/No GIL, On/Off CPU, Python/Native Code, Waiting for
//! GIL, Has/No Exception, and GC Collecting (a `<GC>` frame on the stack). One shared
//! string array. `meta` follows CPython's field for field (version 32, processed
//! version 57, the nine categories).
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

use std::io::Write;

use rayon::prelude::*;

use super::pyjson::{push_float, push_i64, push_str, push_u64};
use super::render::basename;
use super::{write_error, ExportInput, Exporter, Result};
use crate::tach::filter::status;
use crate::tach::{RecordKind, TachFile};

pub struct Gecko;

/// Maps keyed by small integers: Fx hashing (rustc's), because SipHash's flood
/// resistance buys nothing here and cost most of the export time.
type Map<K, V> = rustc_hash::FxHashMap<K, V>;

const CATEGORY_PYTHON: u8 = 1;
const CATEGORY_NATIVE: u8 = 2;
const CATEGORY_GC: u8 = 3;
const CATEGORY_GIL: u8 = 4;
const CATEGORY_CPU: u8 = 5;
const CATEGORY_CODE_TYPE: u8 = 6;
const CATEGORY_EXCEPTION: u8 = 8;

const NONE: u32 = u32::MAX;

/// `meta` up to (not including) `interval` is not needed; these are CPython's
/// constant members after `startTime`, split around the host-dependent ones.
const CATEGORIES: &str = r#"[{"name":"Other","color":"grey","subcategories":["Other"]},{"name":"Python","color":"yellow","subcategories":["Other"]},{"name":"Native","color":"blue","subcategories":["Other"]},{"name":"GC","color":"orange","subcategories":["Other"]},{"name":"GIL","color":"green","subcategories":["Other"]},{"name":"CPU","color":"purple","subcategories":["Other"]},{"name":"Code Type","color":"red","subcategories":["Other"]},{"name":"Opcodes","color":"magenta","subcategories":["Other"]},{"name":"Exception","color":"lightblue","subcategories":["Other"]}]"#;

/// The open/closed marker states of one thread: start times of open intervals.
#[derive(Default)]
struct States {
    has_gil: Option<f64>,
    no_gil: Option<f64>,
    on_cpu: Option<f64>,
    off_cpu: Option<f64>,
    python_code: Option<f64>,
    native_code: Option<f64>,
    gil_wait: Option<f64>,
    gc: Option<f64>,
    exception: Option<f64>,
    no_exception: Option<f64>,
}

struct Marker {
    /// The thread's own string id (see [`LocalStrings`]) until the threads' strings
    /// are merged, an id in the shared array after.
    name: u32,
    /// The name without spaces, CPython's `data.type`.
    kind: &'static str,
    start: f64,
    end: f64,
    category: u8,
}

/// A kept sample as the sequential pass hands it to its thread.
struct Event {
    /// The sample's place among all kept samples: strings are ordered by first use.
    seq: u64,
    now: f64,
    /// The decoder slot (one per thread and interpreter).
    slot: u32,
    /// How many frames this sample appended to the thread's `pending_frames`, or
    /// [`SAME`] when the slot's stack did not change since its previous sample.
    frames: u32,
    status: u8,
}

const SAME: u32 = u32::MAX;

/// Kept samples handed to the threads before they are replayed (on all cores): this
/// bounds the memory the hand-over holds.
const REPLAY_EVERY: usize = 1 << 16;

/// A string a thread uses, named before the shared array exists.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum StrKey {
    /// A canonical TACH string.
    Tach(u32),
    /// The basename of a canonical TACH filename.
    Basename(u32),
    Marker(&'static str),
}

/// A thread's strings, numbered in the order it first used them, each with the sample
/// that first used it. CPython interns into one array while it walks the samples in
/// file order; merging all threads' strings by that sample gives the same order.
#[derive(Default)]
struct LocalStrings {
    ids: Map<StrKey, u32>,
    first_use: Vec<(u64, StrKey)>,
}

impl LocalStrings {
    fn intern(&mut self, key: StrKey, seq: u64) -> u32 {
        let first_use = &mut self.first_use;
        *self.ids.entry(key).or_insert_with(|| {
            first_use.push((seq, key));
            first_use.len() as u32 - 1
        })
    }
}

/// What a decoder slot's previous sample left in its thread, so the next one redoes
/// only what changed.
struct SlotState {
    slot: u32,
    /// The previous sample's gecko stack index (NONE: no kept frames) and GC flag.
    index: u32,
    has_gc: bool,
    /// The last processed stack's kept frames (innermost first) and, root first, the
    /// gecko stack index of each of its prefixes: a new stack sharing the outer frames
    /// starts from the deepest shared prefix instead of the root.
    kept: Vec<u32>,
    prefixes: Vec<u32>,
}

struct Thread {
    tid: u64,
    is_main: bool,
    initialized: bool,
    states: States,

    stack_frame: Vec<u32>,
    stack_prefix: Vec<u32>,
    stack_category: Vec<u8>,
    stack_cache: Map<(u32, u32), u32>,

    frame_func: Vec<u32>,
    frame_category: Vec<u8>,
    frame_line: Vec<Option<i32>>,
    frame_column: Vec<Option<i32>>,
    frame_cache: Map<(u32, Option<i32>, Option<i32>), u32>,
    /// TACH frame index -> this thread's frame index.
    tach_frames: Map<u32, u32>,

    func_name: Vec<u32>,
    func_is_js: Vec<bool>,
    func_resource: Vec<u32>,
    func_file: Vec<u32>,
    func_line: Vec<Option<i32>>,
    /// Keyed by canonical (filename, funcname) string ids.
    func_cache: Map<(u32, u32), u32>,

    resource_name: Vec<u32>,
    /// Keyed by canonical filename string id.
    resource_cache: Map<u32, u32>,

    samples_stack: Vec<u32>,
    samples_time: Vec<f64>,
    markers: Vec<Marker>,

    /// String ids in the tables above are this thread's own until
    /// [`Thread::use_shared_strings`].
    strings: LocalStrings,
    /// Samples handed over and not yet replayed, and their changed stacks, back to back.
    pending: Vec<Event>,
    pending_frames: Vec<u32>,
    slots: Vec<SlotState>,
    /// The sample being replayed: its frames without the profiler's own.
    kept: Vec<u32>,
}

impl Thread {
    fn new(tid: u64, is_main: bool) -> Self {
        Thread {
            tid,
            is_main,
            initialized: false,
            states: States::default(),
            stack_frame: Vec::new(),
            stack_prefix: Vec::new(),
            stack_category: Vec::new(),
            stack_cache: Map::default(),
            frame_func: Vec::new(),
            frame_category: Vec::new(),
            frame_line: Vec::new(),
            frame_column: Vec::new(),
            frame_cache: Map::default(),
            tach_frames: Map::default(),
            func_name: Vec::new(),
            func_is_js: Vec::new(),
            func_resource: Vec::new(),
            func_file: Vec::new(),
            func_line: Vec::new(),
            func_cache: Map::default(),
            resource_name: Vec::new(),
            resource_cache: Map::default(),
            samples_stack: Vec::new(),
            samples_time: Vec::new(),
            markers: Vec::new(),
            strings: LocalStrings::default(),
            pending: Vec::new(),
            pending_frames: Vec::new(),
            slots: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Builds this thread's part of the profile from the samples handed to it, in
    /// their order: CPython's `_process_stack` and marker tracking, per sample.
    fn replay(&mut self, file: &TachFile, facts: &StringFacts) {
        let events = std::mem::take(&mut self.pending);
        let frames = std::mem::take(&mut self.pending_frames);
        let mut at = 0;
        for e in &events {
            let stack = (e.frames != SAME).then(|| {
                let s = &frames[at..at + e.frames as usize];
                at += e.frames as usize;
                s
            });
            self.sample(file, facts, e, stack);
        }
        // The buffers are handed over again, with their capacity.
        self.pending = events;
        self.pending.clear();
        self.pending_frames = frames;
        self.pending_frames.clear();
    }

    /// One sample; `stack` is None when its slot's stack did not change.
    fn sample(&mut self, file: &TachFile, facts: &StringFacts, e: &Event, stack: Option<&[u32]>) {
        let (now, st, seq) = (e.now, e.status, e.seq);
        let slot = match self.slots.iter().position(|s| s.slot == e.slot) {
            Some(i) => i,
            None => {
                self.slots.push(SlotState {
                    slot: e.slot,
                    index: NONE,
                    has_gc: false,
                    kept: Vec::new(),
                    prefixes: Vec::new(),
                });
                self.slots.len() - 1
            }
        };
        let frames = file.frames();
        let has_gc = match stack {
            Some(stack) => {
                self.kept.clear();
                self.kept.extend(
                    stack
                        .iter()
                        .copied()
                        .filter(|&f| !facts.internal[frames[f as usize].filename as usize]),
                );
                self.kept
                    .iter()
                    .any(|&f| facts.gc[frames[f as usize].funcname as usize])
            }
            None => self.slots[slot].has_gc,
        };

        let strings = &mut self.strings;
        let markers = &mut self.markers;
        let init = self.initialized;
        let s = &mut self.states;
        let mut m = Markers {
            strings,
            markers,
            seq,
            now,
        };
        let has_gil = st & status::HAS_GIL != 0;
        let on_cpu = st & status::ON_CPU != 0;
        let gil_requested = st & status::GIL_REQUESTED != 0;
        let has_exception = st & status::HAS_EXCEPTION != 0;
        m.track(
            init,
            has_gil,
            &mut s.has_gil,
            &mut s.no_gil,
            GIL,
            CATEGORY_GIL,
        );
        m.track(
            init,
            on_cpu,
            &mut s.on_cpu,
            &mut s.off_cpu,
            CPU,
            CATEGORY_CPU,
        );
        if has_gil {
            m.track(
                init,
                true,
                &mut s.python_code,
                &mut s.native_code,
                PYTHON_NATIVE,
                CATEGORY_CODE_TYPE,
            );
        } else if on_cpu {
            m.track(
                init,
                true,
                &mut s.native_code,
                &mut s.python_code,
                NATIVE_PYTHON,
                CATEGORY_CODE_TYPE,
            );
        } else if init {
            m.close(&mut s.python_code, PYTHON_NATIVE[0], CATEGORY_CODE_TYPE);
            m.close(&mut s.native_code, NATIVE_PYTHON[0], CATEGORY_CODE_TYPE);
        }
        if gil_requested {
            s.gil_wait.get_or_insert(now);
        } else {
            m.close(&mut s.gil_wait, GIL_WAIT, CATEGORY_GIL);
        }
        m.track(
            init,
            has_exception,
            &mut s.exception,
            &mut s.no_exception,
            EXCEPTION,
            CATEGORY_EXCEPTION,
        );
        if has_gc {
            s.gc.get_or_insert(now);
        } else {
            m.close(&mut s.gc, GC_COLLECTING, CATEGORY_GC);
        }
        self.initialized = true;

        // The same stack as this slot's previous sample reuses its stack index.
        let index = match stack {
            None => self.slots[slot].index,
            Some(_) if self.kept.is_empty() => NONE,
            Some(_) => self.process_stack(file, facts, slot, seq),
        };
        let state = &mut self.slots[slot];
        state.index = index;
        state.has_gc = has_gc;
        if index != NONE {
            self.samples_stack.push(index);
            self.samples_time.push(now);
        }
    }

    /// CPython's `_process_stack`: root to leaf, func, frame, then stack entries.
    /// The outer frames this slot's previous stack shares are not looked up again:
    /// they gave these same prefixes, and created nothing new then.
    fn process_stack(
        &mut self,
        file: &TachFile,
        facts: &StringFacts,
        slot: usize,
        seq: u64,
    ) -> u32 {
        let mut last = std::mem::take(&mut self.slots[slot].kept);
        let mut prefixes = std::mem::take(&mut self.slots[slot].prefixes);
        let kept = std::mem::take(&mut self.kept);
        let shared = kept
            .iter()
            .rev()
            .zip(last.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        prefixes.truncate(shared);
        let mut prefix = prefixes.last().copied().unwrap_or(NONE);
        let fresh = kept.len() - shared;
        for &f in kept[..fresh].iter().rev() {
            let frame_idx = match self.tach_frames.get(&f) {
                Some(&i) => i,
                None => {
                    let i = self.create_frame(file, facts, f, seq);
                    self.tach_frames.insert(f, i);
                    i
                }
            };
            prefix = match self.stack_cache.get(&(frame_idx, prefix)) {
                Some(&s) => s,
                None => {
                    let s = self.stack_frame.len() as u32;
                    self.stack_frame.push(frame_idx);
                    self.stack_prefix.push(prefix);
                    let fname = file.frames()[f as usize].filename;
                    let cat = if facts.python[fname as usize] {
                        CATEGORY_PYTHON
                    } else {
                        CATEGORY_NATIVE
                    };
                    self.stack_category.push(cat);
                    self.stack_cache.insert((frame_idx, prefix), s);
                    s
                }
            };
            prefixes.push(prefix);
        }
        last.clear();
        last.extend_from_slice(&kept);
        self.slots[slot].kept = last;
        self.slots[slot].prefixes = prefixes;
        self.kept = kept;
        prefix
    }

    /// CPython's `_get_or_create_func` + `_get_or_create_frame` for one TACH frame.
    fn create_frame(&mut self, file: &TachFile, facts: &StringFacts, f: u32, seq: u64) -> u32 {
        let entry = file.frames()[f as usize];
        let filename = facts.canon[entry.filename as usize];
        let funcname = facts.canon[entry.funcname as usize];
        // CPython sees `location` None (no line) or a tuple; a missing column is -1.
        let (lineno, col) = match entry.location() {
            None => (None, None),
            Some(l) => (Some(l.lineno), (l.column >= 0).then_some(l.column)),
        };
        let func = match self.func_cache.get(&(filename, funcname)) {
            Some(&i) => i,
            None => {
                let i = self.func_name.len() as u32;
                let name = self.strings.intern(StrKey::Tach(funcname), seq);
                self.func_name.push(name);
                let py = facts.python[filename as usize];
                let resource = match self.resource_cache.get(&filename) {
                    Some(&r) => r,
                    None => {
                        // CPython: basename if "/" in the name, else the name: the same.
                        let r = self.resource_name.len() as u32;
                        let name = self.strings.intern(StrKey::Basename(filename), seq);
                        self.resource_name.push(name);
                        self.resource_cache.insert(filename, r);
                        r
                    }
                };
                self.func_is_js.push(py);
                self.func_resource.push(resource);
                if py {
                    let name = self.strings.intern(StrKey::Basename(filename), seq);
                    self.func_file.push(name);
                    self.func_line.push(lineno);
                } else {
                    self.func_file.push(NONE);
                    self.func_line.push(None);
                }
                self.func_cache.insert((filename, funcname), i);
                i
            }
        };
        let key = (func, lineno, col);
        if let Some(&i) = self.frame_cache.get(&key) {
            return i;
        }
        let i = self.frame_func.len() as u32;
        self.frame_func.push(func);
        self.frame_category.push(if self.func_is_js[func as usize] {
            CATEGORY_PYTHON
        } else {
            CATEGORY_NATIVE
        });
        // `lineno if lineno else None`: line 0 is written as null too.
        self.frame_line.push(lineno.filter(|&l| l != 0));
        self.frame_column.push(col);
        self.frame_cache.insert(key, i);
        i
    }

    /// Replaces this thread's own string ids by the shared array's (`shared[own]`).
    fn use_shared_strings(&mut self, shared: &[u32]) {
        let map = |v: &mut u32| {
            if *v != NONE {
                *v = shared[*v as usize];
            }
        };
        self.func_name.iter_mut().for_each(map);
        self.func_file.iter_mut().for_each(map);
        self.resource_name.iter_mut().for_each(map);
        self.markers.iter_mut().for_each(|m| map(&mut m.name));
        self.strings = LocalStrings::default();
    }
}

/// The shared string array, interned in CPython's order.
struct Strings<'a> {
    list: Vec<&'a str>,
    ids: Map<&'a str, u32>,
}

impl<'a> Strings<'a> {
    fn intern(&mut self, s: &'a str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s);
        self.ids.insert(s, i);
        i
    }

    /// The array of all threads' strings in the order of first use ("(root)" first,
    /// as CPython's collector starts with it), and each thread's ids changed to it.
    fn merge(file: &'a TachFile, threads: &mut [Thread]) -> Self {
        let mut strings = Strings {
            list: Vec::new(),
            ids: Map::default(),
        };
        strings.intern("(root)");
        // One sample belongs to one thread, so (sample, thread, own id) orders every
        // first use as CPython made them.
        let mut order: Vec<(u64, u32, u32)> = threads
            .iter()
            .enumerate()
            .flat_map(|(t, th)| {
                th.strings
                    .first_use
                    .iter()
                    .enumerate()
                    .map(move |(i, &(seq, _))| (seq, t as u32, i as u32))
            })
            .collect();
        order.sort_unstable();
        let mut shared: Vec<Vec<u32>> = threads
            .iter()
            .map(|th| vec![NONE; th.strings.first_use.len()])
            .collect();
        for (_, t, i) in order {
            let text = match threads[t as usize].strings.first_use[i as usize].1 {
                StrKey::Tach(s) => file.string(s),
                StrKey::Basename(s) => basename(file.string(s)),
                StrKey::Marker(name) => name,
            };
            shared[t as usize][i as usize] = strings.intern(text);
        }
        threads
            .par_iter_mut()
            .zip(shared)
            .for_each(|(th, shared)| th.use_shared_strings(&shared));
        strings
    }
}

/// Per-string facts computed once, with duplicate strings mapped to their first
/// occurrence so that keys built from string ids compare like CPython's string keys.
struct StringFacts {
    canon: Vec<u32>,
    internal: Vec<bool>,
    gc: Vec<bool>,
    python: Vec<bool>,
}

impl StringFacts {
    fn new(file: &TachFile) -> Self {
        let strings = file.strings();
        let mut first: Map<&str, u32> = Map::default();
        let canon = strings
            .iter()
            .enumerate()
            .map(|(i, s)| *first.entry(&**s).or_insert(i as u32))
            .collect();
        StringFacts {
            canon,
            internal: strings
                .iter()
                .map(|s| s.ends_with("_sync_coordinator.py"))
                .collect(),
            gc: strings.iter().map(|s| &**s == "<GC>").collect(),
            python: strings.iter().map(|s| is_python(s)).collect(),
        }
    }
}

/// CPython's `_is_python`: not a `<...>` pseudo-file, except `<stdin>`/`<string>`.
fn is_python(filename: &str) -> bool {
    !filename.starts_with('<') || filename == "<stdin>" || filename == "<string>"
}

/// A marker's name and its `data.type` (the name without spaces).
type MarkerName = (&'static str, &'static str);

const GIL: [MarkerName; 2] = [("Has GIL", "HasGIL"), ("No GIL", "NoGIL")];
const CPU: [MarkerName; 2] = [("On CPU", "OnCPU"), ("Off CPU", "OffCPU")];
const PYTHON_NATIVE: [MarkerName; 2] =
    [("Python Code", "PythonCode"), ("Native Code", "NativeCode")];
const NATIVE_PYTHON: [MarkerName; 2] =
    [("Native Code", "NativeCode"), ("Python Code", "PythonCode")];
const EXCEPTION: [MarkerName; 2] = [
    ("Has Exception", "HasException"),
    ("No Exception", "NoException"),
];
const GIL_WAIT: MarkerName = ("Waiting for GIL", "WaitingforGIL");
const GC_COLLECTING: MarkerName = ("GC Collecting", "GCCollecting");

/// Where one sample's markers go: its thread's markers and strings.
struct Markers<'t> {
    strings: &'t mut LocalStrings,
    markers: &'t mut Vec<Marker>,
    seq: u64,
    now: f64,
}

impl Markers<'_> {
    /// Ends the interval open in `open` (if any) at this sample.
    fn close(&mut self, open: &mut Option<f64>, (name, kind): MarkerName, category: u8) {
        if let Some(start) = open.take() {
            let name = self.strings.intern(StrKey::Marker(name), self.seq);
            self.markers.push(Marker {
                name,
                kind,
                start,
                end: self.now,
                category,
            });
        }
    }

    /// A two-state marker pair, CPython's `_track_state_transition`.
    fn track(
        &mut self,
        initialized: bool,
        condition: bool,
        active: &mut Option<f64>,
        inactive: &mut Option<f64>,
        names: [MarkerName; 2],
        category: u8,
    ) {
        if !initialized {
            if condition {
                *active = Some(self.now);
            } else {
                *inactive = Some(self.now);
            }
            return;
        }
        let (open, close, name) = if condition {
            (active, inactive, names[1])
        } else {
            (inactive, active, names[0])
        };
        open.get_or_insert(self.now);
        self.close(close, name, category);
    }
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
        let now = (ts as i128 - base as i128) as f64 / 1000.0;

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
            now,
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
        let mut strings = Strings::merge(self.file, &mut self.threads);
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

/// Python's `platform.system()` for this build's OS.
fn platform_system() -> &'static str {
    match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        "windows" => "Windows",
        "freebsd" => "FreeBSD",
        other => other,
    }
}

fn push_list<T>(buf: &mut Vec<u8>, items: &[T], mut each: impl FnMut(&mut Vec<u8>, &T)) {
    buf.push(b'[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        each(buf, x);
    }
    buf.push(b']');
}

/// `[item,item,...]` with `n` items, copied in blocks (a thread's null columns are as
/// long as its frame table).
fn push_repeat(buf: &mut Vec<u8>, item: &str, n: usize) {
    buf.push(b'[');
    if n > 0 {
        buf.extend_from_slice(item.as_bytes());
        let unit = item.len() + 1;
        let mut block = Vec::with_capacity(unit * n.min(256));
        for _ in 0..n.min(256) {
            block.push(b',');
            block.extend_from_slice(item.as_bytes());
        }
        let mut left = n - 1;
        while left > 0 {
            let take = left.min(256);
            buf.extend_from_slice(&block[..take * unit]);
            left -= take;
        }
    }
    buf.push(b']');
}

fn push_opt_u32(buf: &mut Vec<u8>, v: u32) {
    if v == NONE {
        buf.extend_from_slice(b"null");
    } else {
        push_u64(buf, v as u64);
    }
}

fn push_opt_i32(buf: &mut Vec<u8>, v: Option<i32>) {
    match v {
        Some(v) => push_i64(buf, v as i64),
        None => buf.extend_from_slice(b"null"),
    }
}

fn push_thread(buf: &mut Vec<u8>, th: &Thread) {
    let tid = th.tid;
    let _ = write!(
        buf,
        "{{\"name\":\"Thread-{tid}\",\"isMainThread\":{},\"processStartupTime\":0,\
         \"processShutdownTime\":null,\"registerTime\":0,\"unregisterTime\":null,\
         \"pausedRanges\":[],\"pid\":\"0\",\"tid\":{tid},\"processType\":\"default\",\
         \"processName\":\"Python Process\",\"samples\":{{\"stack\":",
        th.is_main
    );
    push_list(buf, &th.samples_stack, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"time\":");
    push_list(buf, &th.samples_time, |b, &v| push_float(b, v));
    buf.extend_from_slice(b",\"eventDelay\":");
    let n = th.samples_stack.len();
    push_repeat(buf, "null", n);
    let _ = write!(
        buf,
        ",\"weight\":null,\"weightType\":\"samples\",\"length\":{n}}},\"stackTable\":{{\"frame\":"
    );
    push_list(buf, &th.stack_frame, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"category\":");
    push_list(buf, &th.stack_category, |b, &v| push_u64(b, v as u64));
    buf.extend_from_slice(b",\"subcategory\":");
    push_repeat(buf, "0", th.stack_frame.len());
    buf.extend_from_slice(b",\"prefix\":");
    push_list(buf, &th.stack_prefix, |b, &v| push_opt_u32(b, v));
    let nf = th.frame_func.len();
    let _ = write!(
        buf,
        ",\"length\":{}}},\"frameTable\":{{\"address\":",
        th.stack_frame.len()
    );
    push_repeat(buf, "-1", nf);
    buf.extend_from_slice(b",\"category\":");
    push_list(buf, &th.frame_category, |b, &v| push_u64(b, v as u64));
    buf.extend_from_slice(b",\"subcategory\":");
    push_repeat(buf, "0", nf);
    buf.extend_from_slice(b",\"func\":");
    push_list(buf, &th.frame_func, |b, &v| push_opt_u32(b, v));
    for key in ["innerWindowID", "implementation", "optimizations"] {
        let _ = write!(buf, ",\"{key}\":");
        push_repeat(buf, "null", nf);
    }
    buf.extend_from_slice(b",\"line\":");
    push_list(buf, &th.frame_line, |b, &v| push_opt_i32(b, v));
    buf.extend_from_slice(b",\"column\":");
    push_list(buf, &th.frame_column, |b, &v| push_opt_i32(b, v));
    buf.extend_from_slice(b",\"inlineDepth\":");
    push_repeat(buf, "0", nf);
    buf.extend_from_slice(b",\"nativeSymbol\":");
    push_repeat(buf, "null", nf);
    let nfunc = th.func_name.len();
    let _ = write!(buf, ",\"length\":{nf}}},\"funcTable\":{{\"name\":");
    push_list(buf, &th.func_name, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"isJS\":");
    push_list(buf, &th.func_is_js, |b, &v| {
        b.extend_from_slice(if v { b"true" } else { b"false" })
    });
    buf.extend_from_slice(b",\"relevantForJS\":");
    push_list(buf, &th.func_is_js, |b, &v| {
        b.extend_from_slice(if v { b"true" } else { b"false" })
    });
    buf.extend_from_slice(b",\"resource\":");
    push_list(buf, &th.func_resource, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"fileName\":");
    push_list(buf, &th.func_file, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"lineNumber\":");
    push_list(buf, &th.func_line, |b, &v| push_opt_i32(b, v));
    buf.extend_from_slice(b",\"columnNumber\":");
    push_repeat(buf, "null", nfunc);
    let nr = th.resource_name.len();
    let _ = write!(buf, ",\"length\":{nfunc}}},\"resourceTable\":{{\"lib\":");
    push_repeat(buf, "null", nr);
    buf.extend_from_slice(b",\"name\":");
    push_list(buf, &th.resource_name, |b, &v| push_opt_u32(b, v));
    buf.extend_from_slice(b",\"host\":");
    push_repeat(buf, "null", nr);
    buf.extend_from_slice(b",\"type\":");
    push_repeat(buf, "1", nr);
    let _ = write!(
        buf,
        ",\"length\":{nr}}},\"nativeSymbols\":{{\"libIndex\":[],\"address\":[],\"name\":[],\
         \"functionSize\":[],\"length\":0}},\"markers\":{{\"data\":"
    );
    push_list(buf, &th.markers, |b, m| {
        b.extend_from_slice(b"{\"type\":\"");
        b.extend_from_slice(m.kind.as_bytes());
        b.extend_from_slice(b"\",\"duration\":");
        push_float(b, m.end - m.start);
        b.extend_from_slice(b",\"tid\":");
        push_u64(b, tid);
        b.push(b'}');
    });
    buf.extend_from_slice(b",\"name\":");
    push_list(buf, &th.markers, |b, m| push_opt_u32(b, m.name));
    buf.extend_from_slice(b",\"startTime\":");
    push_list(buf, &th.markers, |b, m| push_float(b, m.start));
    buf.extend_from_slice(b",\"endTime\":");
    push_list(buf, &th.markers, |b, m| push_float(b, m.end));
    buf.extend_from_slice(b",\"phase\":");
    push_repeat(buf, "1", th.markers.len());
    buf.extend_from_slice(b",\"category\":");
    push_list(buf, &th.markers, |b, m| push_u64(b, m.category as u64));
    let _ = write!(buf, ",\"length\":{}}}}}", th.markers.len());
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
    // groups of 64 bound the memory held at once.
    let mut first = true;
    for group in b.threads.chunks(64) {
        let parts: Vec<Vec<u8>> = group
            .par_iter()
            .map(|th| {
                let mut part = Vec::with_capacity(64 * 1024);
                push_thread(&mut part, th);
                part
            })
            .collect();
        for part in parts {
            if !first {
                buf.push(b',');
            }
            first = false;
            buf.extend_from_slice(&part);
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
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/cpython-3.15.2");
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

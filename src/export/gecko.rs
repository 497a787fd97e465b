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
    name: u32,
    /// The name without spaces, CPython's `data.type`.
    kind: &'static str,
    start: f64,
    end: f64,
    category: u8,
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
        }
    }
}

/// The shared string array, interned in CPython's order.
struct Strings<'a> {
    list: Vec<&'a str>,
    ids: Map<&'a str, u32>,
    /// Canonical TACH string id -> its id here, or NONE.
    of_tach: Vec<u32>,
    /// Canonical TACH filename id -> the id here of its basename, or NONE.
    of_basename: Vec<u32>,
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

    fn tach(&mut self, file: &'a TachFile, canon: u32) -> u32 {
        let cached = self.of_tach[canon as usize];
        if cached != NONE {
            return cached;
        }
        let i = self.intern(file.string(canon));
        self.of_tach[canon as usize] = i;
        i
    }

    fn basename(&mut self, file: &'a TachFile, canon: u32) -> u32 {
        let cached = self.of_basename[canon as usize];
        if cached != NONE {
            return cached;
        }
        let i = self.intern(basename(file.string(canon)));
        self.of_basename[canon as usize] = i;
        i
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

fn add_marker<'a>(
    strings: &mut Strings<'a>,
    markers: &mut Vec<Marker>,
    name: &'static str,
    kind: &'static str,
    start: f64,
    end: f64,
    category: u8,
) {
    let name = strings.intern(name);
    markers.push(Marker {
        name,
        kind,
        start,
        end,
        category,
    });
}

/// A two-state marker pair, CPython's `_track_state_transition`.
#[allow(clippy::too_many_arguments)]
fn track<'a>(
    strings: &mut Strings<'a>,
    markers: &mut Vec<Marker>,
    initialized: bool,
    condition: bool,
    active: &mut Option<f64>,
    inactive: &mut Option<f64>,
    names: [(&'static str, &'static str); 2],
    category: u8,
    now: f64,
) {
    if !initialized {
        if condition {
            *active = Some(now);
        } else {
            *inactive = Some(now);
        }
        return;
    }
    let (open, close, (name, kind)) = if condition {
        (active, inactive, names[1])
    } else {
        (inactive, active, names[0])
    };
    open.get_or_insert(now);
    if let Some(start) = close.take() {
        add_marker(strings, markers, name, kind, start, now, category);
    }
}

const GIL: [(&str, &str); 2] = [("Has GIL", "HasGIL"), ("No GIL", "NoGIL")];
const CPU: [(&str, &str); 2] = [("On CPU", "OnCPU"), ("Off CPU", "OffCPU")];
const PYTHON_NATIVE: [(&str, &str); 2] =
    [("Python Code", "PythonCode"), ("Native Code", "NativeCode")];
const NATIVE_PYTHON: [(&str, &str); 2] =
    [("Native Code", "NativeCode"), ("Python Code", "PythonCode")];
const EXCEPTION: [(&str, &str); 2] = [
    ("Has Exception", "HasException"),
    ("No Exception", "NoException"),
];

struct Batch {
    slot: u32,
    status: u8,
    samples: u64,
    last: f64,
}

/// What a decoder slot's previous sample left, so the next one redoes only what
/// changed.
struct SlotState {
    /// Index into `Builder::threads`.
    thread: usize,
    /// The last stack as decoded, and its gecko stack index (NONE before any).
    last: Vec<u32>,
    index: u32,
    /// The last stack's kept frames (innermost first) and, root first, the gecko stack
    /// index of each of its prefixes: a new stack sharing the outer frames starts
    /// from the deepest shared prefix instead of the root.
    kept: Vec<u32>,
    prefixes: Vec<u32>,
}

/// The profile, built in one pass over the kept samples.
struct Builder<'a> {
    file: &'a TachFile,
    strings: Strings<'a>,
    facts: StringFacts,
    threads: Vec<Thread>,
    by_tid: Map<u64, usize>,
    /// Per decoder slot: its thread and what its last stack left.
    slots: Vec<Option<SlotState>>,
    base_us: Option<u64>,
    last_time: f64,
    sample_count: u64,
    interval: f64,
    /// The batch (one `collect` call) CPython's reader would be building; see the
    /// module docs on `meta.interval`.
    batch: Option<Batch>,
    kept: Vec<u32>,
}

impl<'a> Builder<'a> {
    fn new(file: &'a TachFile) -> Self {
        let n = file.strings().len();
        let mut strings = Strings {
            list: Vec::new(),
            ids: Map::default(),
            of_tach: vec![NONE; n],
            of_basename: vec![NONE; n],
        };
        strings.intern("(root)");
        Builder {
            file,
            strings,
            facts: StringFacts::new(file),
            threads: Vec::new(),
            by_tid: Map::default(),
            slots: Vec::new(),
            base_us: None,
            last_time: 0.0,
            sample_count: 0,
            interval: 1.0,
            batch: None,
            kept: Vec::with_capacity(256),
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

        let file = self.file;
        let slot_i = slot as usize;
        if slot_i >= self.slots.len() {
            self.slots.resize_with(slot_i + 1, || None);
        }
        let t = match &self.slots[slot_i] {
            Some(state) => state.thread,
            None => {
                let t = *self.by_tid.entry(tid).or_insert_with(|| {
                    self.threads
                        .push(Thread::new(tid, st & status::MAIN_THREAD != 0));
                    self.threads.len() - 1
                });
                self.slots[slot_i] = Some(SlotState {
                    thread: t,
                    last: Vec::new(),
                    index: NONE,
                    kept: Vec::new(),
                    prefixes: Vec::new(),
                });
                t
            }
        };

        self.kept.clear();
        let frames = file.frames();
        let facts = &self.facts;
        self.kept.extend(
            stack
                .iter()
                .copied()
                .filter(|&f| !facts.internal[frames[f as usize].filename as usize]),
        );

        let th = &mut self.threads[t];
        let strings = &mut self.strings;
        let markers = &mut th.markers;
        let init = th.initialized;
        let s = &mut th.states;
        let has_gil = st & status::HAS_GIL != 0;
        let on_cpu = st & status::ON_CPU != 0;
        let gil_requested = st & status::GIL_REQUESTED != 0;
        let has_exception = st & status::HAS_EXCEPTION != 0;
        track(
            strings,
            markers,
            init,
            has_gil,
            &mut s.has_gil,
            &mut s.no_gil,
            GIL,
            CATEGORY_GIL,
            now,
        );
        track(
            strings,
            markers,
            init,
            on_cpu,
            &mut s.on_cpu,
            &mut s.off_cpu,
            CPU,
            CATEGORY_CPU,
            now,
        );
        if has_gil {
            track(
                strings,
                markers,
                init,
                true,
                &mut s.python_code,
                &mut s.native_code,
                PYTHON_NATIVE,
                CATEGORY_CODE_TYPE,
                now,
            );
        } else if on_cpu {
            track(
                strings,
                markers,
                init,
                true,
                &mut s.native_code,
                &mut s.python_code,
                NATIVE_PYTHON,
                CATEGORY_CODE_TYPE,
                now,
            );
        } else if init {
            if let Some(start) = s.python_code.take() {
                add_marker(
                    strings,
                    markers,
                    "Python Code",
                    "PythonCode",
                    start,
                    now,
                    CATEGORY_CODE_TYPE,
                );
            }
            if let Some(start) = s.native_code.take() {
                add_marker(
                    strings,
                    markers,
                    "Native Code",
                    "NativeCode",
                    start,
                    now,
                    CATEGORY_CODE_TYPE,
                );
            }
        }
        if gil_requested {
            s.gil_wait.get_or_insert(now);
        } else if let Some(start) = s.gil_wait.take() {
            add_marker(
                strings,
                markers,
                "Waiting for GIL",
                "WaitingforGIL",
                start,
                now,
                CATEGORY_GIL,
            );
        }
        track(
            strings,
            markers,
            init,
            has_exception,
            &mut s.exception,
            &mut s.no_exception,
            EXCEPTION,
            CATEGORY_EXCEPTION,
            now,
        );
        let has_gc = self
            .kept
            .iter()
            .any(|&f| facts.gc[frames[f as usize].funcname as usize]);
        if has_gc {
            s.gc.get_or_insert(now);
        } else if let Some(start) = s.gc.take() {
            add_marker(
                strings,
                markers,
                "GC Collecting",
                "GCCollecting",
                start,
                now,
                CATEGORY_GC,
            );
        }
        th.initialized = true;

        if self.kept.is_empty() {
            return;
        }
        // The same stack as this slot's previous sample reuses its stack index.
        let stack_index = match &self.slots[slot_i] {
            Some(state) if state.index != NONE && state.last.as_slice() == stack => state.index,
            _ => {
                let idx = self.process_stack(t, slot_i);
                if let Some(state) = self.slots[slot_i].as_mut() {
                    state.last.clear();
                    state.last.extend_from_slice(stack);
                    state.index = idx;
                }
                idx
            }
        };
        let th = &mut self.threads[t];
        th.samples_stack.push(stack_index);
        th.samples_time.push(now);
    }

    /// CPython's `_process_stack`: root to leaf, func, frame, then stack entries.
    /// The outer frames this slot's previous stack shares are not looked up again:
    /// they gave these same prefixes, and created nothing new then.
    fn process_stack(&mut self, t: usize, slot: usize) -> u32 {
        let file = self.file;
        let th = &mut self.threads[t];
        let strings = &mut self.strings;
        let Some(state) = self.slots[slot].as_mut() else {
            return NONE;
        };
        let shared = self
            .kept
            .iter()
            .rev()
            .zip(state.kept.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        state.prefixes.truncate(shared);
        let mut prefix = state.prefixes.last().copied().unwrap_or(NONE);
        let fresh = self.kept.len() - shared;
        for &f in self.kept[..fresh].iter().rev() {
            let frame_idx = match th.tach_frames.get(&f) {
                Some(&i) => i,
                None => {
                    let i = create_frame(file, &self.facts, th, strings, f);
                    th.tach_frames.insert(f, i);
                    i
                }
            };
            prefix = match th.stack_cache.get(&(frame_idx, prefix)) {
                Some(&s) => s,
                None => {
                    let s = th.stack_frame.len() as u32;
                    th.stack_frame.push(frame_idx);
                    th.stack_prefix.push(prefix);
                    let fname = file.frames()[f as usize].filename;
                    let cat = if self.facts.python[fname as usize] {
                        CATEGORY_PYTHON
                    } else {
                        CATEGORY_NATIVE
                    };
                    th.stack_category.push(cat);
                    th.stack_cache.insert((frame_idx, prefix), s);
                    s
                }
            };
            state.prefixes.push(prefix);
        }
        state.kept.clear();
        state.kept.extend_from_slice(&self.kept);
        prefix
    }

    /// CPython's `_finalize_markers`: closes every open interval at the last
    /// sample's time, marker type by marker type.
    fn finish(&mut self) {
        self.close_batch();
        let end = self.last_time;
        type Pick = fn(&mut States) -> &mut Option<f64>;
        let kinds: [(Pick, &'static str, &'static str, u8); 10] = [
            (|s| &mut s.has_gil, "Has GIL", "HasGIL", CATEGORY_GIL),
            (|s| &mut s.no_gil, "No GIL", "NoGIL", CATEGORY_GIL),
            (|s| &mut s.on_cpu, "On CPU", "OnCPU", CATEGORY_CPU),
            (|s| &mut s.off_cpu, "Off CPU", "OffCPU", CATEGORY_CPU),
            (
                |s| &mut s.python_code,
                "Python Code",
                "PythonCode",
                CATEGORY_CODE_TYPE,
            ),
            (
                |s| &mut s.native_code,
                "Native Code",
                "NativeCode",
                CATEGORY_CODE_TYPE,
            ),
            (
                |s| &mut s.gil_wait,
                "Waiting for GIL",
                "WaitingforGIL",
                CATEGORY_GIL,
            ),
            (|s| &mut s.gc, "GC Collecting", "GCCollecting", CATEGORY_GC),
            (
                |s| &mut s.exception,
                "Has Exception",
                "HasException",
                CATEGORY_EXCEPTION,
            ),
            (
                |s| &mut s.no_exception,
                "No Exception",
                "NoException",
                CATEGORY_EXCEPTION,
            ),
        ];
        for (pick, name, kind, category) in kinds {
            for th in &mut self.threads {
                if let Some(start) = pick(&mut th.states).take() {
                    add_marker(
                        &mut self.strings,
                        &mut th.markers,
                        name,
                        kind,
                        start,
                        end,
                        category,
                    );
                }
            }
        }
        if self.sample_count > 0 && self.last_time > 0.0 {
            self.interval = self.last_time / self.sample_count as f64;
        }
    }
}

/// CPython's `_get_or_create_func` + `_get_or_create_frame` for one TACH frame.
fn create_frame<'a>(
    file: &'a TachFile,
    facts: &StringFacts,
    th: &mut Thread,
    strings: &mut Strings<'a>,
    f: u32,
) -> u32 {
    let entry = file.frames()[f as usize];
    let filename = facts.canon[entry.filename as usize];
    let funcname = facts.canon[entry.funcname as usize];
    // CPython sees `location` None (no line) or a tuple; a missing column is -1.
    let (lineno, col) = match entry.location() {
        None => (None, None),
        Some(l) => (Some(l.lineno), (l.column >= 0).then_some(l.column)),
    };
    let func = match th.func_cache.get(&(filename, funcname)) {
        Some(&i) => i,
        None => {
            let i = th.func_name.len() as u32;
            th.func_name.push(strings.tach(file, funcname));
            let py = facts.python[filename as usize];
            let resource = match th.resource_cache.get(&filename) {
                Some(&r) => r,
                None => {
                    // CPython: basename if "/" in the name, else the name: the same.
                    let r = th.resource_name.len() as u32;
                    th.resource_name.push(strings.basename(file, filename));
                    th.resource_cache.insert(filename, r);
                    r
                }
            };
            th.func_is_js.push(py);
            th.func_resource.push(resource);
            if py {
                th.func_file.push(strings.basename(file, filename));
                th.func_line.push(lineno);
            } else {
                th.func_file.push(NONE);
                th.func_line.push(None);
            }
            th.func_cache.insert((filename, funcname), i);
            i
        }
    };
    let key = (func, lineno, col);
    if let Some(&i) = th.frame_cache.get(&key) {
        return i;
    }
    let i = th.frame_func.len() as u32;
    th.frame_func.push(func);
    th.frame_category.push(if th.func_is_js[func as usize] {
        CATEGORY_PYTHON
    } else {
        CATEGORY_NATIVE
    });
    // `lineno if lineno else None`: line 0 is written as null too.
    th.frame_line.push(lineno.filter(|&l| l != 0));
    th.frame_column.push(col);
    th.frame_cache.insert(key, i);
    i
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
        let file = input.file;
        let mut b = Builder::new(file);
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
        b.finish();

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
        push_list(&mut buf, &b.strings.list, |buf, s| push_str(buf, s));
        buf.extend_from_slice(b",\"sources\":{\"length\":0,\"uuid\":[],\"filename\":[]}}}");
        out.write_all(&buf).map_err(&err)
    }
}

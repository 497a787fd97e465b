//! One thread of the Gecko profile: its tables, one struct per table of the processed
//! format, and the replay of its samples into them (CPython's `_process_stack` and
//! marker tracking).

use super::event::*;
use super::strings::{LocalStrings, StrKey, StringFacts};
use crate::tach::filter::status;
use crate::tach::TachFile;

/// The open/closed marker states of one thread: start times of open intervals.
#[derive(Default)]
pub(super) struct States {
    pub(super) has_gil: Option<f64>,
    pub(super) no_gil: Option<f64>,
    pub(super) on_cpu: Option<f64>,
    pub(super) off_cpu: Option<f64>,
    pub(super) python_code: Option<f64>,
    pub(super) native_code: Option<f64>,
    pub(super) gil_wait: Option<f64>,
    pub(super) gc: Option<f64>,
    pub(super) exception: Option<f64>,
    pub(super) no_exception: Option<f64>,
}

pub(super) struct Marker {
    /// The thread's own string id (see [`LocalStrings`]) until the threads' strings
    /// are merged, an id in the shared array after.
    pub(super) name: u32,
    /// The name without spaces, CPython's `data.type`.
    pub(super) kind: &'static str,
    pub(super) start: f64,
    pub(super) end: f64,
    pub(super) category: u8,
}

/// What a decoder slot's previous sample left in its thread, so the next one redoes
/// only what changed.
pub(super) struct SlotState {
    pub(super) slot: u32,
    /// The previous sample's gecko stack index (NONE: no kept frames) and GC flag.
    pub(super) index: u32,
    pub(super) has_gc: bool,
    /// The last processed stack's kept frames (innermost first) and, root first, the
    /// gecko stack index of each of its prefixes: a new stack sharing the outer frames
    /// starts from the deepest shared prefix instead of the root.
    pub(super) kept: Vec<u32>,
    pub(super) prefixes: Vec<u32>,
}

/// The thread's stack table: each stack is a frame on top of a prefix stack.
#[derive(Default)]
pub(super) struct StackTable {
    pub(super) frame: Vec<u32>,
    pub(super) prefix: Vec<u32>,
    pub(super) category: Vec<u8>,
    /// Keyed by (frame, prefix).
    pub(super) cache: Map<(u32, u32), u32>,
}

/// The thread's frame table: a function at a line and column.
#[derive(Default)]
pub(super) struct FrameTable {
    pub(super) func: Vec<u32>,
    pub(super) category: Vec<u8>,
    pub(super) line: Vec<Option<i32>>,
    pub(super) column: Vec<Option<i32>>,
    pub(super) cache: Map<(u32, Option<i32>, Option<i32>), u32>,
    /// TACH frame index -> this thread's frame index.
    pub(super) of_tach: Map<u32, u32>,
}

/// The thread's function table.
#[derive(Default)]
pub(super) struct FuncTable {
    pub(super) name: Vec<u32>,
    pub(super) is_js: Vec<bool>,
    pub(super) resource: Vec<u32>,
    pub(super) file: Vec<u32>,
    pub(super) line: Vec<Option<i32>>,
    /// Keyed by canonical (filename, funcname) string ids.
    pub(super) cache: Map<(u32, u32), u32>,
}

/// The thread's resource table: one per source file.
#[derive(Default)]
pub(super) struct ResourceTable {
    pub(super) name: Vec<u32>,
    /// Keyed by canonical filename string id.
    pub(super) cache: Map<u32, u32>,
}

/// Capacity a thread's hand-over buffers keep from one replay to the next.
const KEEP_PENDING: usize = 4096;

/// The thread's samples table: a stack index and a time per sample, held compactly
/// because every sample of the profile is kept until its thread is written (this was
/// most of the export's memory: 8 bytes a sample, 19 MB on a 2.4 M-sample recording).
/// - stacks as runs: a stack held across samples (a REPEAT record) is one entry;
/// - times as the zigzag varint of each one's difference from the previous (µs): one
///   or two bytes at the usual rates, exact for any i64.
#[derive(Default)]
pub(super) struct SamplesTable {
    runs: Vec<(u32, u32)>,
    time_deltas: Vec<u8>,
    last_us: i64,
    len: usize,
}

impl SamplesTable {
    pub(super) fn push(&mut self, stack: u32, time_us: i64) {
        match self.runs.last_mut() {
            Some((s, n)) if *s == stack && *n < u32::MAX => *n += 1,
            _ => self.runs.push((stack, 1)),
        }
        let diff = time_us.wrapping_sub(self.last_us);
        self.last_us = time_us;
        let mut zz = ((diff << 1) ^ (diff >> 63)) as u64;
        while zz >= 0x80 {
            self.time_deltas.push((zz as u8) | 0x80);
            zz >>= 7;
        }
        self.time_deltas.push(zz as u8);
        self.len += 1;
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The stack index of every sample, in order.
    pub(super) fn stacks(&self) -> impl Iterator<Item = u32> + '_ {
        self.runs
            .iter()
            .flat_map(|&(s, n)| std::iter::repeat_n(s, n as usize))
    }

    /// The time of every sample in ms from the first kept sample, in order.
    pub(super) fn times_ms(&self) -> impl Iterator<Item = f64> + '_ {
        let mut bytes = self.time_deltas.iter();
        let mut at = 0i64;
        std::iter::from_fn(move || {
            let (mut zz, mut shift) = (0u64, 0u32);
            loop {
                let b = *bytes.next()?;
                zz |= u64::from(b & 0x7f) << shift;
                if b < 0x80 {
                    break;
                }
                shift += 7;
            }
            let diff = ((zz >> 1) as i64) ^ -((zz & 1) as i64);
            at = at.wrapping_add(diff);
            Some(ms(at))
        })
    }
}

pub(super) struct Thread {
    pub(super) tid: u64,
    pub(super) is_main: bool,
    pub(super) initialized: bool,
    pub(super) states: States,

    pub(super) stacks: StackTable,
    pub(super) frames: FrameTable,
    pub(super) funcs: FuncTable,
    pub(super) resources: ResourceTable,
    pub(super) samples: SamplesTable,
    pub(super) markers: Vec<Marker>,

    /// String ids in the tables above are this thread's own until
    /// [`Thread::use_shared_strings`].
    pub(super) strings: LocalStrings,
    /// Samples handed over and not yet replayed, and their changed stacks, back to back.
    pub(super) pending: Vec<Event>,
    pub(super) pending_frames: Vec<u32>,
    pub(super) slots: Vec<SlotState>,
    /// The sample being replayed: its frames without the profiler's own.
    pub(super) kept: Vec<u32>,
}

impl Thread {
    pub(super) fn new(tid: u64, is_main: bool) -> Self {
        Thread {
            tid,
            is_main,
            initialized: false,
            states: States::default(),
            stacks: StackTable::default(),
            frames: FrameTable::default(),
            funcs: FuncTable::default(),
            resources: ResourceTable::default(),
            samples: SamplesTable::default(),
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
    pub(super) fn replay(&mut self, file: &TachFile, facts: &StringFacts) {
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
        // The buffers are handed over again, with their capacity, unless that is large:
        // every thread keeping the most it was ever handed added up to 43 MB on a
        // 408-thread recording, more than its samples table.
        if events.capacity() <= KEEP_PENDING {
            self.pending = events;
            self.pending.clear();
        }
        if frames.capacity() <= KEEP_PENDING {
            self.pending_frames = frames;
            self.pending_frames.clear();
        }
    }

    /// One sample; `stack` is None when its slot's stack did not change.
    pub(super) fn sample(
        &mut self,
        file: &TachFile,
        facts: &StringFacts,
        e: &Event,
        stack: Option<&[u32]>,
    ) {
        let (delta_us, st, seq) = (e.delta_us, e.status, e.seq);
        let now = ms(delta_us);
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
            self.samples.push(index, delta_us);
        }
    }

    /// CPython's `_process_stack`: root to leaf, func, frame, then stack entries.
    /// The outer frames this slot's previous stack shares are not looked up again:
    /// they gave these same prefixes, and created nothing new then.
    pub(super) fn process_stack(
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
            let frame_idx = match self.frames.of_tach.get(&f) {
                Some(&i) => i,
                None => {
                    let i = self.create_frame(file, facts, f, seq);
                    self.frames.of_tach.insert(f, i);
                    i
                }
            };
            prefix = match self.stacks.cache.get(&(frame_idx, prefix)) {
                Some(&s) => s,
                None => {
                    let s = self.stacks.frame.len() as u32;
                    self.stacks.frame.push(frame_idx);
                    self.stacks.prefix.push(prefix);
                    // The frame's own category (its function's).
                    let cat = self.frames.category[frame_idx as usize];
                    self.stacks.category.push(cat);
                    self.stacks.cache.insert((frame_idx, prefix), s);
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
    pub(super) fn create_frame(
        &mut self,
        file: &TachFile,
        facts: &StringFacts,
        f: u32,
        seq: u64,
    ) -> u32 {
        let entry = file.frames()[f as usize];
        let filename = facts.canon[entry.filename as usize];
        let funcname = facts.canon[entry.funcname as usize];
        // CPython sees `location` None (no line) or a tuple; a missing column is -1.
        let (lineno, col) = match entry.location() {
            None => (None, None),
            Some(l) => (Some(l.lineno), (l.column >= 0).then_some(l.column)),
        };
        let func = match self.funcs.cache.get(&(filename, funcname)) {
            Some(&i) => i,
            None => {
                let i = self.funcs.name.len() as u32;
                let name = self.strings.intern(StrKey::Tach(funcname), seq);
                self.funcs.name.push(name);
                let py = facts.python[filename as usize] && !facts.native_frame[f as usize];
                let resource = match self.resources.cache.get(&filename) {
                    Some(&r) => r,
                    None => {
                        // CPython: basename if "/" in the name, else the name: the same.
                        let r = self.resources.name.len() as u32;
                        let name = self.strings.intern(StrKey::Basename(filename), seq);
                        self.resources.name.push(name);
                        self.resources.cache.insert(filename, r);
                        r
                    }
                };
                self.funcs.is_js.push(py);
                self.funcs.resource.push(resource);
                if py {
                    let name = self.strings.intern(StrKey::Basename(filename), seq);
                    self.funcs.file.push(name);
                    self.funcs.line.push(lineno);
                } else {
                    self.funcs.file.push(NONE);
                    self.funcs.line.push(None);
                }
                self.funcs.cache.insert((filename, funcname), i);
                i
            }
        };
        let key = (func, lineno, col);
        if let Some(&i) = self.frames.cache.get(&key) {
            return i;
        }
        let i = self.frames.func.len() as u32;
        self.frames.func.push(func);
        self.frames
            .category
            .push(if self.funcs.is_js[func as usize] {
                CATEGORY_PYTHON
            } else {
                CATEGORY_NATIVE
            });
        // `lineno if lineno else None`: line 0 is written as null too.
        self.frames.line.push(lineno.filter(|&l| l != 0));
        self.frames.column.push(col);
        self.frames.cache.insert(key, i);
        i
    }

    /// Replaces this thread's own string ids by the shared array's (`shared[own]`).
    pub(super) fn use_shared_strings(&mut self, shared: &[u32]) {
        let map = |v: &mut u32| {
            if *v != NONE {
                *v = shared[*v as usize];
            }
        };
        self.funcs.name.iter_mut().for_each(map);
        self.funcs.file.iter_mut().for_each(map);
        self.resources.name.iter_mut().for_each(map);
        self.markers.iter_mut().for_each(|m| map(&mut m.name));
        self.strings = LocalStrings::default();
    }
}

/// A marker's name and its `data.type` (the name without spaces).
pub(super) type MarkerName = (&'static str, &'static str);

pub(super) const GIL: [MarkerName; 2] = [("Has GIL", "HasGIL"), ("No GIL", "NoGIL")];
pub(super) const CPU: [MarkerName; 2] = [("On CPU", "OnCPU"), ("Off CPU", "OffCPU")];
pub(super) const PYTHON_NATIVE: [MarkerName; 2] =
    [("Python Code", "PythonCode"), ("Native Code", "NativeCode")];
pub(super) const NATIVE_PYTHON: [MarkerName; 2] =
    [("Native Code", "NativeCode"), ("Python Code", "PythonCode")];
pub(super) const EXCEPTION: [MarkerName; 2] = [
    ("Has Exception", "HasException"),
    ("No Exception", "NoException"),
];
pub(super) const GIL_WAIT: MarkerName = ("Waiting for GIL", "WaitingforGIL");
pub(super) const GC_COLLECTING: MarkerName = ("GC Collecting", "GCCollecting");

/// Where one sample's markers go: its thread's markers and strings.
pub(super) struct Markers<'t> {
    pub(super) strings: &'t mut LocalStrings,
    pub(super) markers: &'t mut Vec<Marker>,
    pub(super) seq: u64,
    pub(super) now: f64,
}

impl Markers<'_> {
    /// Ends the interval open in `open` (if any) at this sample.
    pub(super) fn close(&mut self, open: &mut Option<f64>, (name, kind): MarkerName, category: u8) {
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
    pub(super) fn track(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The compact table gives back every stack and time it was given, in order:
    /// runs, changes, times that go back, and jumps beyond i32 (a long recording).
    #[test]
    fn samples_table_gives_back_what_it_was_given() {
        let stacks = [3u32, 3, 3, 7, 3, NONE, NONE, 0, u32::MAX - 1];
        let times = [
            0i64,
            50,
            100,
            -20,
            1 << 40,
            (1 << 40) + 1,
            i64::MIN / 2,
            0,
            127,
        ];
        let mut table = SamplesTable::default();
        for (&s, &t) in stacks.iter().zip(&times) {
            table.push(s, t);
        }
        assert_eq!(table.len(), stacks.len());
        assert_eq!(table.stacks().collect::<Vec<_>>(), stacks);
        let ms: Vec<f64> = times.iter().map(|&t| ms(t)).collect();
        assert_eq!(table.times_ms().collect::<Vec<_>>(), ms);
        assert_eq!(table.runs.len(), 6);
    }
}

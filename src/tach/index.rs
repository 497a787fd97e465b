//! The aggregated view of a profile: unique stacks, and per thread the samples of each
//! stack and of each status byte. Exporters and reports that only need counts
//! (collapsed, pstats and jsonl through `totals`, `tach top`, the differential
//! flamegraph) read this instead of every sample, and its memory grows with unique
//! stacks, not with samples. It is built from the decoder's runs: a REPEAT run is one
//! stack lookup, and with no status or time filter one addition. (The flamegraph
//! exporter builds its call tree straight from the runs instead; see its module.)

use std::hash::Hasher;

use rustc_hash::FxHashMap as HashMap;

use super::error::Result;
use super::filter::SampleFilter;
use super::reader::TachFile;
use super::records::RecordMix;

/// Unique stacks (frame indices, innermost first), deduplicated across threads.
///
/// The lookup table holds only stack ids: a stack's frames are stored once, in
/// `frames`, and hashed a word (two frames) at a time.
#[derive(Default, Clone)]
pub struct StackTable {
    frames: Vec<u32>,
    spans: Vec<(u32, u32)>,
    lookup: hashbrown::HashTable<u32>,
}

impl std::fmt::Debug for StackTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackTable")
            .field("stacks", &self.spans.len())
            .field("frames", &self.frames.len())
            .finish()
    }
}

fn stack_hash(stack: &[u32]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    let mut pairs = stack.chunks_exact(2);
    for p in &mut pairs {
        h.write_u64(p[0] as u64 | (p[1] as u64) << 32);
    }
    for &f in pairs.remainder() {
        h.write_u32(f);
    }
    h.write_usize(stack.len());
    h.finish()
}

fn span_of<'a>(frames: &'a [u32], spans: &[(u32, u32)], id: u32) -> &'a [u32] {
    let (start, len) = spans[id as usize];
    &frames[start as usize..(start + len) as usize]
}

/// Equal when they hold the same stacks under the same ids (the lookup table is how
/// they were found, not what they hold).
impl PartialEq for StackTable {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && (0..self.len() as u32).all(|id| self.get(id) == other.get(id))
    }
}

impl Eq for StackTable {}

impl StackTable {
    pub fn intern(&mut self, stack: &[u32]) -> u32 {
        let hash = stack_hash(stack);
        let (frames, spans) = (&self.frames, &self.spans);
        if let Some(&id) = self
            .lookup
            .find(hash, |&id| span_of(frames, spans, id) == stack)
        {
            return id;
        }
        let id = self.spans.len() as u32;
        self.spans
            .push((self.frames.len() as u32, stack.len() as u32));
        self.frames.extend_from_slice(stack);
        let (frames, spans) = (&self.frames, &self.spans);
        self.lookup
            .insert_unique(hash, id, |&id| stack_hash(span_of(frames, spans, id)));
        id
    }
    /// The stack with this id, innermost first.
    pub fn get(&self, id: u32) -> &[u32] {
        span_of(&self.frames, &self.spans, id)
    }
    pub fn len(&self) -> usize {
        self.spans.len()
    }
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

#[derive(Debug, Clone)]
pub struct ThreadProfile {
    pub thread_id: u64,
    pub interpreter_id: u32,
    pub samples: u64,
    pub first_us: u64,
    pub last_us: u64,
    /// (stack id, samples), in the order the stacks were first seen on this thread.
    pub stacks: Vec<(u32, u64)>,
    /// Samples per status byte value.
    pub status_counts: Box<[u64; 256]>,
}

/// The aggregated profile.
#[derive(Debug, Clone)]
pub struct ProfileIndex {
    pub stacks: StackTable,
    /// Threads in first-seen order (of the kept samples).
    pub threads: Vec<ThreadProfile>,
    pub total_samples: u64,
    pub mix: RecordMix,
    /// The first timestamp of the whole profile (before filtering), if any sample.
    pub origin_us: Option<u64>,
}

/// The smallest timestamp in the file, the origin of `--start/--end` and `time_s`.
pub fn first_timestamp(file: &TachFile) -> Result<Option<u64>> {
    let mut min: Option<u64> = None;
    let mut stream = file.samples();
    while let Some(run) = stream.next_run()? {
        if let Some(&t) = run.timestamps_us.iter().min() {
            min = Some(min.map_or(t, |m| m.min(t)));
        }
    }
    Ok(min)
}

impl ProfileIndex {
    /// Samples per unique stack, over all threads (indexed by stack id).
    pub fn stack_totals(&self) -> Vec<u64> {
        let mut counts = vec![0u64; self.stacks.len()];
        for t in &self.threads {
            for &(id, c) in &t.stacks {
                counts[id as usize] += c;
            }
        }
        counts
    }

    pub fn build(file: &TachFile, filter: &SampleFilter) -> Result<Self> {
        let origin = if filter.needs_origin() {
            first_timestamp(file)?
        } else {
            None
        };
        let bound = filter.bind(origin.unwrap_or(0));
        let mut stacks = StackTable::default();
        let mut threads: Vec<ThreadProfile> = Vec::new();
        // Per decoder thread slot: our thread index, and the entry of its current stack in
        // that thread's `stacks` list.
        let mut slots: Vec<Option<usize>> = Vec::new();
        let mut current: Vec<Option<usize>> = Vec::new();
        let mut per_thread_stack: Vec<HashMap<u32, usize>> = Vec::new();
        let mut total = 0u64;
        let mut first_seen: Option<u64> = None;
        // With no status or time terms a run is kept whole: no per-sample test.
        let keep_all = bound.keeps_every_status_and_time();
        let mut stream = file.samples();
        while let Some(run) = stream.next_run()? {
            // A run's samples share a thread and a stack: only times and statuses vary.
            let times = run.timestamps_us;
            let earliest = times.iter().copied().min().unwrap_or(u64::MAX);
            first_seen = Some(first_seen.map_or(earliest, |m: u64| m.min(earliest)));
            let slot = run.thread as usize;
            if slot >= current.len() {
                current.resize(slot + 1, None);
                slots.resize(slot + 1, None);
            }
            if run.stack_changed {
                current[slot] = None;
            }
            if !bound.keeps_thread(run.thread_id) {
                continue;
            }
            let (mut kept, mut first_us, mut last_us) = (0u64, u64::MAX, 0u64);
            if keep_all {
                kept = times.len() as u64;
                first_us = earliest;
                last_us = times.iter().copied().max().unwrap_or(0);
            } else {
                for (&ts, &status) in times.iter().zip(run.statuses) {
                    if bound.keeps(status, ts) {
                        kept += 1;
                        first_us = first_us.min(ts);
                        last_us = last_us.max(ts);
                    }
                }
            }
            if kept == 0 {
                continue;
            }
            let t = *slots[slot].get_or_insert_with(|| {
                threads.push(ThreadProfile {
                    thread_id: run.thread_id,
                    interpreter_id: run.interpreter_id,
                    samples: 0,
                    first_us,
                    last_us,
                    stacks: Vec::new(),
                    status_counts: Box::new([0; 256]),
                });
                per_thread_stack.push(HashMap::default());
                threads.len() - 1
            });
            let entry = match current[slot] {
                Some(entry) => entry,
                None => {
                    let id = stacks.intern(run.stack);
                    let list = &mut threads[t].stacks;
                    let entry = *per_thread_stack[t].entry(id).or_insert_with(|| {
                        list.push((id, 0));
                        list.len() - 1
                    });
                    current[slot] = Some(entry);
                    entry
                }
            };
            let tp = &mut threads[t];
            tp.stacks[entry].1 += kept;
            tp.samples += kept;
            if keep_all {
                for &status in run.statuses {
                    tp.status_counts[status as usize] += 1;
                }
            } else {
                for (&ts, &status) in times.iter().zip(run.statuses) {
                    if bound.keeps(status, ts) {
                        tp.status_counts[status as usize] += 1;
                    }
                }
            }
            tp.first_us = tp.first_us.min(first_us);
            tp.last_us = tp.last_us.max(last_us);
            total += kept;
        }
        Ok(ProfileIndex {
            stacks,
            threads,
            total_samples: total,
            mix: *stream.mix(),
            origin_us: origin.or(first_seen),
        })
    }
}

//! The aggregated view of a profile: unique stacks, and per thread the samples of each
//! stack and of each status byte. Exporters and reports that only need counts
//! (collapsed, pstats and jsonl through `totals`, the flamegraph, the heatmap, `tach
//! top`, the differential flamegraph) read this instead of every sample, and its memory
//! grows with unique stacks, not with samples. Without a time window it is made from
//! the file's [`StackCounts`] (counted in chunks on all cores when the region is large
//! and uncompressed); with one, from the decoder's runs: a REPEAT run is one stack
//! lookup.

use rustc_hash::FxHashMap as HashMap;

use super::counts::{GroupCount, StackCounts};
use super::error::Result;
use super::filter::SampleFilter;
use super::reader::TachFile;
// Re-exported where the crate root and other modules have always named them.
pub use super::stack_table::StackTable;
pub use super::walk::first_timestamp;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadProfile {
    pub thread_id: u64,
    pub interpreter_id: u32,
    pub samples: u64,
    /// (stack id, samples), in the order the stacks were first seen on this thread.
    pub stacks: Vec<(u32, u64)>,
    /// Samples per status byte value.
    pub status_counts: Box<[u64; 256]>,
}

/// The aggregated profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileIndex {
    pub stacks: StackTable,
    /// Threads in first-seen order (of the kept samples).
    pub threads: Vec<ThreadProfile>,
    pub total_samples: u64,
}

/// The threads of the groups of `counts` that `keep` keeps (given the thread id), with
/// each group's stack named by `stack_id`, in first-kept order; and their samples.
fn thread_profiles(
    counts: &StackCounts,
    keep: impl Fn(u64, &GroupCount) -> bool,
    mut stack_id: impl FnMut(u32) -> u32,
) -> (Vec<ThreadProfile>, u64) {
    // The counts' thread indices, renumbered in kept order.
    let mut thread_at: Vec<Option<usize>> = vec![None; counts.threads.len()];
    let mut per_thread_stack: Vec<HashMap<u32, usize>> = Vec::new();
    let mut threads: Vec<ThreadProfile> = Vec::new();
    let mut total = 0u64;
    for g in &counts.groups {
        let Some(&(thread_id, interpreter_id)) = counts.threads.get(g.thread as usize) else {
            continue;
        };
        if !keep(thread_id, g) {
            continue;
        }
        let id = stack_id(g.stack);
        let t = *thread_at[g.thread as usize].get_or_insert_with(|| {
            threads.push(ThreadProfile {
                thread_id,
                interpreter_id,
                samples: 0,
                stacks: Vec::new(),
                status_counts: Box::new([0; 256]),
            });
            per_thread_stack.push(HashMap::default());
            threads.len() - 1
        });
        let tp = &mut threads[t];
        let list = &mut tp.stacks;
        let entry = *per_thread_stack[t].entry(id).or_insert_with(|| {
            list.push((id, 0));
            list.len() - 1
        });
        tp.stacks[entry].1 += g.samples;
        tp.samples += g.samples;
        tp.status_counts[g.status as usize] += g.samples;
        total += g.samples;
    }
    (threads, total)
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

    /// The index of the samples `filter` keeps. With no time window (which needs each
    /// sample's time) it is made from the file's [`StackCounts`] (see
    /// [`StackCounts::count`] for when that uses all cores); otherwise from one pass
    /// over the decoder's runs. Both
    /// give the same index, down to the order of stack ids and threads.
    pub fn build(file: &TachFile, filter: &SampleFilter) -> Result<Self> {
        if filter.needs_origin() {
            return Self::build_sequential(file, filter);
        }
        let counts = StackCounts::count(file)?;
        if filter.is_empty() {
            return Ok(Self::from_all_counts(counts));
        }
        Ok(Self::from_counts(&counts, filter))
    }

    /// The index of every group of `counts`: the same as [`Self::from_counts`] with an
    /// empty filter, without interning each stack a second time. The counts' stack ids
    /// are already the ones that pass would give: each stack is interned where its first
    /// group is made, so stack ids follow the groups' order.
    fn from_all_counts(counts: StackCounts) -> Self {
        let (threads, total) = thread_profiles(&counts, |_, _| true, |stack| stack);
        ProfileIndex {
            stacks: counts.stacks,
            threads,
            total_samples: total,
        }
    }

    /// The index of the groups of `counts` that `filter`'s threads and statuses keep
    /// (its time window, if any, is not applied: counts have no times).
    ///
    /// Groups are in the order of their first sample, so the first kept group of a
    /// stack, a thread or a (thread, stack) pair is where the sequential pass first
    /// meets it: ids and orders come out as that pass gives them.
    pub fn from_counts(counts: &StackCounts, filter: &SampleFilter) -> Self {
        let bound = filter.bind(0);
        let mut stacks = StackTable::default();
        // The counts' stack ids, renumbered in kept order.
        let mut stack_id: Vec<Option<u32>> = vec![None; counts.stacks.len()];
        let (threads, total) = thread_profiles(
            counts,
            |thread_id, g| bound.keeps_thread(thread_id) && bound.keeps(g.status, 0),
            |stack| {
                *stack_id[stack as usize]
                    .get_or_insert_with(|| stacks.intern(counts.stacks.get(stack)))
            },
        );
        ProfileIndex {
            stacks,
            threads,
            total_samples: total,
        }
    }

    /// One pass over the decoder's runs, for filters with a time window.
    pub fn build_sequential(file: &TachFile, filter: &SampleFilter) -> Result<Self> {
        let mut stacks = StackTable::default();
        let mut threads: Vec<ThreadProfile> = Vec::new();
        // Per decoder thread slot: our thread index. The walk's memo is the entry of the
        // slot's current stack in that thread's `stacks` list.
        let mut slots: Vec<Option<usize>> = Vec::new();
        let mut per_thread_stack: Vec<HashMap<u32, usize>> = Vec::new();
        let mut total = 0u64;
        let mut runs = file.kept_runs::<usize>(filter)?;
        while let Some(mut r) = runs.next_run()? {
            // A run's samples share a thread and a stack: only times and statuses vary.
            let kept = r.kept_count() as u64;
            if kept == 0 {
                continue;
            }
            let slot = r.run.thread as usize;
            if slot >= slots.len() {
                slots.resize(slot + 1, None);
            }
            let t = *slots[slot].get_or_insert_with(|| {
                threads.push(ThreadProfile {
                    thread_id: r.run.thread_id,
                    interpreter_id: r.run.interpreter_id,
                    samples: 0,
                    stacks: Vec::new(),
                    status_counts: Box::new([0; 256]),
                });
                per_thread_stack.push(HashMap::default());
                threads.len() - 1
            });
            let entry = *r.memo_or_insert_with(|run| {
                let id = stacks.intern(run.stack);
                let list = &mut threads[t].stacks;
                *per_thread_stack[t].entry(id).or_insert_with(|| {
                    list.push((id, 0));
                    list.len() - 1
                })
            });
            let tp = &mut threads[t];
            tp.stacks[entry].1 += kept;
            tp.samples += kept;
            if r.keeps_whole() {
                for &status in r.run.statuses {
                    tp.status_counts[status as usize] += 1;
                }
            } else {
                for (_, _, status) in r.kept() {
                    tp.status_counts[status as usize] += 1;
                }
            }
            total += kept;
        }
        Ok(ProfileIndex {
            stacks,
            threads,
            total_samples: total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tach::counts::Chunking;

    /// The index made from the chunked counter equals the one pass over the runs, for
    /// every golden file and thread/status filter, with chunks small enough that every
    /// file is cut into many of them (the route a large file takes).
    #[test]
    fn counted_index_equals_the_sequential_pass() {
        let mut files = 0;
        for path in crate::golden_corpus::golden_bins() {
            let file = TachFile::open(&path).unwrap();
            let Ok(sequential_counts) = StackCounts::count_sequential(&file) else {
                continue; // a broken file: both routes fail (the counts tests check how)
            };
            let chunking = Chunking {
                chunk: 4096,
                overlap: 2048,
                search: 256,
                workers: 2,
            };
            let (chunked, _) = StackCounts::count_with(&file, chunking).unwrap();
            assert_eq!(chunked, sequential_counts, "{}", path.display());
            let some_thread = sequential_counts.threads.first().map(|t| t.0);
            let mut filters = vec![
                SampleFilter::default(),
                SampleFilter::from_options::<&str>(&[], None, None, &["has-gil"]).unwrap(),
                SampleFilter::from_options::<&str>(&[], None, None, &["no-on-cpu", "main-thread"])
                    .unwrap(),
            ];
            if let Some(t) = some_thread {
                filters
                    .push(SampleFilter::from_options(&[t], None, None, &["no-has-gil"]).unwrap());
            }
            for filter in &filters {
                let want = ProfileIndex::build_sequential(&file, filter).unwrap();
                let got = ProfileIndex::from_counts(&chunked, filter);
                assert_eq!(got, want, "{} {filter:?}", path.display());
                assert_eq!(ProfileIndex::build(&file, filter).unwrap(), want);
            }
            files += 1;
        }
        assert!(files >= 15, "only {files} golden files decoded");
    }
}

//! Self and cumulative samples per key (a function, a line, a file: whatever the caller
//! maps frames to), with CPython's pstats semantics: a sample counts once as *self* for
//! the key of its innermost kept frame, and once as *cumulative* for every distinct key
//! on its stack, however often recursion repeats it. Optionally, per key, the keys that
//! called it (the next kept frame outward) with their counts.
//!
//! pstats, jsonl and the summary tables all read this one walk, so they agree on what a
//! sample counts for. It works on the aggregated index (one step per unique stack, not
//! per sample), visiting stacks in first-seen order, so keys are numbered in the order
//! CPython's collectors meet them.

use std::collections::HashMap;
use std::hash::Hash;

use super::index::ProfileIndex;

/// The totals of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTotals<K> {
    pub key: K,
    /// Samples whose innermost kept frame has this key.
    pub self_samples: u64,
    /// Samples with this key anywhere on their stack (once per sample).
    pub cumulative: u64,
    /// Callers (key ids) in first-seen order, with the samples each call edge carried.
    /// Empty unless asked for.
    pub callers: Vec<(u32, u64)>,
}

/// Totals per key, keys numbered (ids) in first-seen order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Totals<K> {
    pub keys: Vec<KeyTotals<K>>,
    /// Samples with at least one kept frame.
    pub samples: u64,
}

const UNSEEN: u32 = u32::MAX;
const SKIPPED: u32 = u32::MAX - 1;

/// Walks `index`'s stacks (innermost first), mapping each frame index once through
/// `key_of` (`None` leaves the frame out, as CPython's collectors leave out the
/// profiler's own frames). `frame_count` is the number of frames in the file's frame
/// table. With `callers`, each key's callers are collected too.
pub fn totals<K, F>(
    index: &ProfileIndex,
    frame_count: usize,
    callers: bool,
    mut key_of: F,
) -> Totals<K>
where
    K: Hash + Eq + Clone,
    F: FnMut(u32) -> Option<K>,
{
    let counts = index.stack_totals();
    // Per frame index: its key id, UNSEEN or SKIPPED.
    let mut frame_key: Vec<u32> = vec![UNSEEN; frame_count];
    let mut ids: HashMap<K, u32> = HashMap::new();
    let mut keys: Vec<KeyTotals<K>> = Vec::new();
    let mut caller_slots: Vec<HashMap<u32, usize>> = Vec::new();
    // The stack id that last counted each key's cumulative, so recursion counts once.
    let mut seen: Vec<u32> = Vec::new();
    let mut kept: Vec<u32> = Vec::with_capacity(256);
    let mut samples = 0u64;
    for (stack, &count) in counts.iter().enumerate() {
        if count == 0 {
            continue;
        }
        kept.clear();
        for &frame in index.stacks.get(stack as u32) {
            let slot = &mut frame_key[frame as usize];
            if *slot == UNSEEN {
                *slot = match key_of(frame) {
                    None => SKIPPED,
                    Some(k) => *ids.entry(k.clone()).or_insert_with(|| {
                        keys.push(KeyTotals {
                            key: k,
                            self_samples: 0,
                            cumulative: 0,
                            callers: Vec::new(),
                        });
                        caller_slots.push(HashMap::new());
                        seen.push(UNSEEN);
                        (keys.len() - 1) as u32
                    }),
                };
            }
            if *slot != SKIPPED {
                kept.push(*slot);
            }
        }
        let Some(&innermost) = kept.first() else {
            continue;
        };
        samples += count;
        keys[innermost as usize].self_samples += count;
        for &k in &kept {
            if seen[k as usize] != stack as u32 {
                seen[k as usize] = stack as u32;
                keys[k as usize].cumulative += count;
            }
        }
        if callers {
            for pair in kept.windows(2) {
                let (callee, caller) = (pair[0] as usize, pair[1]);
                let list = &mut keys[callee].callers;
                let slot = *caller_slots[callee].entry(caller).or_insert_with(|| {
                    list.push((caller, 0));
                    list.len() - 1
                });
                list[slot].1 += count;
            }
        }
    }
    Totals { keys, samples }
}

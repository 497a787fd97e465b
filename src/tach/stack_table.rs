//! The table of unique stacks every aggregator interns into.

use std::hash::Hasher;

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
    /// The frames of all stacks together.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}
